"""The Helm charts (deploy/helm/): linted, rendered and checked against the Kubernetes 1.34 schemas, refusing bad
values with a message naming the value, installed on the test bed's real API server (a server-side dry run, then
for real, their Deployments becoming Pods on KWOK nodes), and the processes their Pods run started from the
installed manifests' own commands, arguments and environment, which must connect: the server on PostgreSQL, the
agent to the server over mTLS with the chart's RBAC as its only rights.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client
from sqlalchemy.engine import URL

from federation.cli.dev import BIN, _Child
from federation.security import certs
from federation.testbed.build import REPO, Tools
from federation.testbed.cluster import Testbed, free_port
from member_agent.kube import ACCESS
from tests.kubehelp import gpu_cluster
from tests.test_e2e_agents import wait_for

CHARTS = REPO / "deploy" / "helm"
SERVER, AGENT = CHARTS / "federation-server", CHARTS / "member-agent"
KUBE_VERSION = "1.34.4"  # the test bed's, for rendering without an API server
NAMESPACE = "federation-system"
CUSTOM = ("postgresql.cnpg.io/", "monitoring.coreos.com/")  # operators' kinds: no schema in Kubernetes'

AGENT_VALUES = {"cluster": "east", "server": "federation.example.com:50052"}
SERVER_VALUES: dict[str, dict[str, Any]] = {
    "url": {"database": {"url": "postgresql://federation:secret@db.example.com:5432/federation"}},
    "existing secret": {"database": {"existingSecret": "db-credentials", "secretKey": "dsn"}},
    "CloudNativePG": {"database": {"cloudnativepg": {"enabled": True, "instances": 3}},
                      "metrics": {"serviceMonitor": {"enabled": True}}},
    "OIDC and client certificates": {"database": {"url": "postgresql://f:s@db/f"}, "tls": {"clientCA": True},
                                     "oidc": {"issuer": "https://idp.example.com", "audience": "federation",
                                              "jwksConfigMap": "idp-jwks"}},
}


def helm(tools: Tools, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([tools.program("helm"), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HELM_CACHE_HOME": str(Path(os.environ.get("TMPDIR", "/tmp")) / "helm"),
                               "HELM_CONFIG_HOME": str(Path(os.environ.get("TMPDIR", "/tmp")) / "helm")})
    if check:
        assert done.returncode == 0, done.stderr
    return done


def values_file(path: Path, values: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(values))
    return str(path)


def render(tools: Tools, chart: Path, values: dict[str, Any], tmp_path: Path, release: str = "fed") -> list[dict]:
    out = helm(tools, "template", release, str(chart), "-n", NAMESPACE, "--kube-version", KUBE_VERSION,
               "-f", values_file(tmp_path / f"{chart.name}-values.yaml", values)).stdout
    return [o for o in yaml.safe_load_all(out) if o]


def one(objects: Sequence[dict], kind: str) -> dict:
    (found,) = [o for o in objects if o["kind"] == kind]
    return found


@pytest.mark.parametrize(("chart", "values"), [
    *((SERVER, v) for v in SERVER_VALUES.values()),
    (AGENT, AGENT_VALUES),
    (AGENT, {**AGENT_VALUES, "discover": "aws,nvlink", "labels": {"region": "eu-west"},
             "healthRules": {"configMap": "health-rules"}, "dcgmMetrics": "http://dcgm-exporter:9400/metrics"}),
], ids=[*SERVER_VALUES, "agent", "agent with discovery and health"])
def test_each_chart_lints_and_renders_objects_the_kubernetes_schemas_accept(
        testbed_tools: Tools, tmp_path: Path, chart: Path, values: dict[str, Any]) -> None:
    given = values_file(tmp_path / "values.yaml", values)
    lint = helm(testbed_tools, "lint", "--strict", str(chart), "--kube-version", KUBE_VERSION, "-f", given)
    assert "0 chart(s) failed" in lint.stdout
    objects = render(testbed_tools, chart, values, tmp_path)
    assert objects
    for obj in objects:
        if obj["apiVersion"].startswith(CUSTOM):
            continue
        try:
            kubernetes_validate.validate(obj, KUBE_VERSION.rsplit(".", 1)[0], strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {err.message} at {list(err.path)}")


@pytest.mark.parametrize(("chart", "values", "named"), [
    (SERVER, {}, "database"),
    (SERVER, {"database": {"url": "postgresql://f@db/f", "existingSecret": "mine"}}, "exactly one of"),
    (SERVER, {"database": {"url": "postgresql://f@db/f"}, "role": "scheduler"}, "role"),
    (SERVER, {"database": {"url": "postgresql://f@db/f"}, "oidc": {"issuer": "https://idp"}}, "oidc.audience"),
    (AGENT, {"server": "f:50052"}, "cluster"),
    (AGENT, {"server": "f:50052", "cluster": "East_1"}, "DNS-1123"),
    (AGENT, {"cluster": "east"}, "server"),
])
def test_bad_values_are_refused_naming_the_value(testbed_tools: Tools, tmp_path: Path, chart: Path,
                                                 values: dict[str, Any], named: str) -> None:
    done = helm(testbed_tools, "template", "fed", str(chart), "--kube-version", KUBE_VERSION,
                "-f", values_file(tmp_path / "values.yaml", values), check=False)
    assert done.returncode != 0 and named in done.stderr, done.stderr
    assert "goroutine" not in done.stderr and "panic" not in done.stderr


def test_the_database_url_comes_from_the_one_source_given(testbed_tools: Tools, tmp_path: Path) -> None:
    def url_from(values: dict[str, Any]) -> tuple[dict[str, str], list[dict]]:
        objects = render(testbed_tools, SERVER, values, tmp_path)
        pod = one(objects, "Deployment")["spec"]["template"]["spec"]
        refs = [{e["name"]: e for e in c["env"]}["FEDERATION_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
                for c in pod["initContainers"] + pod["containers"]]
        assert refs[0] == refs[1]  # the migration and the server read the same
        return refs[0], objects

    ref, objects = url_from(SERVER_VALUES["url"])
    secret = one(objects, "Secret")
    assert ref == {"name": secret["metadata"]["name"], "key": "url"}
    assert secret["stringData"]["url"] == SERVER_VALUES["url"]["database"]["url"]
    ref, objects = url_from(SERVER_VALUES["existing secret"])
    assert ref == {"name": "db-credentials", "key": "dsn"} and not [o for o in objects if o["kind"] == "Secret"]
    ref, objects = url_from(SERVER_VALUES["CloudNativePG"])
    cluster = one(objects, "Cluster")
    assert cluster["apiVersion"] == "postgresql.cnpg.io/v1" and cluster["spec"]["instances"] == 3
    # CloudNativePG keeps the application's connection URI in the Secret <cluster>-app, key uri.
    assert ref == {"name": f"{cluster['metadata']['name']}-app", "key": "uri"}
    monitor = one(objects, "ServiceMonitor")
    metrics = next(s for s in objects if s["kind"] == "Service" and s["metadata"]["name"].endswith("-metrics"))
    assert monitor["spec"]["selector"]["matchLabels"].items() <= metrics["metadata"]["labels"].items()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [p["name"] for p in metrics["spec"]["ports"]]


def test_the_agent_chart_grants_exactly_what_the_agent_checks(testbed_tools: Tools, tmp_path: Path) -> None:
    objects = render(testbed_tools, AGENT, {**AGENT_VALUES, "jobsNamespace": "gangs"}, tmp_path)

    def grants(r: dict) -> set[tuple[str, str, str]]:
        return {(g, res, v) for rule in r["rules"] for g in rule["apiGroups"] for res in rule["resources"]
                for v in rule["verbs"]}

    assert grants(one(objects, "ClusterRole")) == {(g, r, v) for v, g, r, namespaced in ACCESS if not namespaced}
    role = one(objects, "Role")
    assert grants(role) == {(g, r, v) for v, g, r, namespaced in ACCESS if namespaced}
    assert role["metadata"]["namespace"] == "gangs" == one(objects, "Namespace")["metadata"]["name"]
    env = {e["name"]: e.get("value") for e in one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
           ["env"]}
    assert env["MEMBER_NAMESPACE"] == "gangs" and env["MEMBER_CLUSTER"] == "east"


# -- installed on the real API server, and the processes its Pods run ---------------------------------------------


def containers(manifest: str, deployment: str) -> tuple[list[dict], list[dict]]:
    """The init containers and containers of the installed Deployment."""
    (found,) = [o for o in yaml.safe_load_all(manifest) if o and o["kind"] == "Deployment"
                and o["metadata"]["name"] == deployment]
    pod = found["spec"]["template"]["spec"]
    return pod.get("initContainers", []), pod["containers"]


class Pod:
    """What a container of the installed manifest runs, run here: its command and arguments, its environment with
    Secret references read from the installed Secrets, and its volume mounts mapped to local directories."""

    def __init__(self, container: dict[str, Any], secrets: dict[str, dict[str, str]], mounts: dict[str, Path],
                 replace: dict[str, list[str]] | None = None) -> None:
        argv = [a for arg in [*container["command"], *container.get("args", [])]
                for a in (replace or {}).get(arg, [arg])]
        self.argv = [str(BIN / argv[0]), *(self.local(a, container, mounts) for a in argv[1:])]
        self.env: dict[str, str] = {}
        for e in container.get("env", []):
            if "value" in e:
                self.env[e["name"]] = self.local(e["value"], container, mounts)
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                self.env[e["name"]] = secrets[ref["name"]][ref["key"]]

    @staticmethod
    def local(text: str, container: dict[str, Any], mounts: dict[str, Path]) -> str:
        for mount in container.get("volumeMounts", []):
            if mount["name"] in mounts:
                text = text.replace(mount["mountPath"], str(mounts[mount["name"]]))
        return text


def installed(tools: Tools, kube: Testbed, release: str, chart: Path, values: dict[str, Any],
              tmp_path: Path) -> str:
    """`helm install` on the test bed, after a server-side dry run of the same; the release's manifest."""
    common = ["install", release, str(chart), "-n", NAMESPACE, "--create-namespace", "--kubeconfig",
              str(kube.admin_kubeconfig), "-f", values_file(tmp_path / f"{release}.yaml", values)]
    dry = helm(tools, *common, "--dry-run=server")
    assert "STATUS: pending-install" in dry.stdout
    helm(tools, *common)
    return helm(tools, "get", "manifest", release, "-n", NAMESPACE, "--kubeconfig", str(kube.admin_kubeconfig)).stdout


def test_the_charts_install_on_a_real_api_server_and_what_their_pods_run_connects(
        testbed_tools: Tools, kube: Testbed, empty_db_url: URL, tmp_path: Path) -> None:
    kube.start_scheduler()
    nodes = set(gpu_cluster(kube))
    pki = tmp_path / "pki"
    certs.write_all(pki, ["east"])
    url = empty_db_url.render_as_string(hide_password=False)
    grpc_port, agents_port, metrics_port, health_port = (free_port() for _ in range(4))
    server_values = {"database": {"url": url}, "ports": {"grpc": grpc_port, "agents": agents_port,
                                                         "metrics": metrics_port}}
    agent_values = {"cluster": "east", "server": f"localhost:{agents_port}", "healthPort": health_port,
                    "labels": {"region": "eu-west"}}
    server_manifest = installed(testbed_tools, kube, "fed", SERVER, server_values, tmp_path)
    agent_manifest = installed(testbed_tools, kube, "east", AGENT, agent_values, tmp_path)

    core = client.CoreV1Api(kube.admin())

    def running() -> dict[str, list[str]]:
        pods = core.list_namespaced_pod(NAMESPACE).items
        return {name: [p.spec.node_name for p in pods if p.metadata.labels.get("app.kubernetes.io/name") == name
                       and p.status.phase == "Running"] for name in ("federation-server", "member-agent")}

    wait_for("the charts' Pods Running on KWOK nodes",
             lambda: len(running()["federation-server"]) == 2 and len(running()["member-agent"]) == 1, timeout=120)
    assert {node for placed in running().values() for node in placed} <= nodes

    # The server's Pod, run here: its migration first (an empty database), then the server.
    objects = [o for o in yaml.safe_load_all(server_manifest) if o]
    secrets = {o["metadata"]["name"]: o.get("stringData", {}) for o in objects if o["kind"] == "Secret"}
    tls = tmp_path / "server-tls"
    tls.mkdir()
    for key, name in (("tls.crt", "server.crt"), ("tls.key", "server.key"), ("ca.crt", "ca.crt")):
        (tls / key).write_bytes((pki / name).read_bytes())
    (init,), (server,) = containers(server_manifest, "federation-server")
    mounts = {"tls": tls}
    migrate = Pod(init, secrets, mounts)
    done = subprocess.run(migrate.argv, env={**os.environ, **migrate.env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    serve = Pod(server, secrets, mounts)
    processes: list[_Child] = []
    try:
        processes.append(_Child(serve.argv, b"federation-server listening", {**serve.env}, 120))
        token = subprocess.run([str(BIN / "federation-server"), "token", "create", "--admin", "--name", "ops"],
                               env={**os.environ, **serve.env}, capture_output=True, text=True,
                               timeout=60).stdout.strip()
        # The agent's Pod, run here: its ServiceAccount's token (the chart's RBAC, installed above) in place of the
        # in-cluster credentials, and this cluster's certificate as its TLS Secret.
        (agent,) = containers(agent_manifest, "member-agent")[1]
        rbac = [o for o in yaml.safe_load_all(agent_manifest) if o and o["kind"] in (
            "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
        kubeconfig = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig", rbac)
        agent_tls = tmp_path / "agent-tls"
        agent_tls.mkdir()
        for key, name in (("tls.crt", "east.crt"), ("tls.key", "east.key"), ("ca.crt", "ca.crt")):
            (agent_tls / key).write_bytes((pki / name).read_bytes())
        run = Pod(agent, {}, {"tls": agent_tls}, {"--in-cluster": ["--kubeconfig", str(kubeconfig)]})
        processes.append(_Child(run.argv, b"health on", run.env, 120))

        def east() -> dict[str, Any] | None:
            listed = subprocess.run([str(BIN / "fedctl"), "--server", f"localhost:{grpc_port}", "get", "clusters",
                                     "east", "-o", "json"], capture_output=True, text=True, timeout=60,
                                    env={**os.environ, "FEDERATION_TOKEN": token, "FEDERATION_CA": str(pki / "ca.crt")})
            if listed.returncode != 0:  # not registered yet: NOT_FOUND
                assert "Traceback" not in listed.stderr and "not found" in listed.stderr.lower(), listed.stderr
                return None
            found = json.loads(listed.stdout)
            return found if found["status"] == "Ready" else None

        cluster: Any = wait_for("the agent's cluster Ready at the server", east, timeout=120)
        assert cluster["labels"] == {"region": "eu-west"} and cluster["allocatable"]["nvidia.com/gpu"] == "32"
        ready = wait_for("the agent ready", lambda: ok(f"http://127.0.0.1:{health_port}/readyz"), timeout=60)
        assert ready
    finally:
        for process in reversed(processes):
            process.stop()


def ok(address: str) -> bool:
    try:
        return urllib.request.urlopen(address, timeout=5).status == 200
    except OSError:
        return False
