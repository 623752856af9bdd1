"""Deployment files: the compose file as `docker-compose config` reads it, the image's Dockerfile, and
the Kubernetes manifests rendered by kustomize and validated against the Kubernetes API schemas.

No Docker engine or API server runs here, so these read and render the files with the real tools
and check what a deployment depends on: services, their order and health checks; objects that pass
the schema and refer to each other correctly.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from federation.cli.dev import DEMO_CLUSTERS
from member_agent.kube import ACCESS
from tests.conftest import REPO

KUBERNETES_VERSION = "1.29.0"  # the oldest we claim: native gRPC probes are GA since 1.27


def tool(name: str) -> str:
    """The tool's path; CI installs it (.ci/run), elsewhere its absence skips the test."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("FEDERATION_DEPLOY_TOOLS") == "required":
            pytest.fail(f"{name} is not installed")
        pytest.skip(f"{name} is not installed (Debian: apt-get install {name})")
    return path


# -- docker-compose ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    done = subprocess.run([tool("docker-compose"), "-f", str(REPO / "docker-compose.yml"), "config"],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def _after(service: dict[str, Any]) -> dict[str, str]:
    return {name: dep["condition"] for name, dep in (service.get("depends_on") or {}).items()}


def test_compose_runs_the_whole_local_federation_in_order(compose: dict[str, Any]) -> None:
    services = compose["services"]
    agents = {f"agent-{name}" for name, _, _ in DEMO_CLUSTERS}
    assert set(services) == {"postgres", "migrate", "certs", "federation-server", "fedctl"} | agents
    pg = services["postgres"]
    assert pg["image"].startswith("postgres:") and "pg_isready" in " ".join(pg["healthcheck"]["test"])
    assert any(v.startswith("pgdata:") or v.get("source") == "pgdata" if isinstance(v, dict) else
               v.startswith("pgdata:") for v in pg["volumes"]) and "pgdata" in compose["volumes"]
    assert _after(services["migrate"]) == {"postgres": "service_healthy"}
    assert services["migrate"]["command"] == ["federation-server", "db", "upgrade"]
    server = services["federation-server"]
    assert _after(server) == {"postgres": "service_healthy", "migrate": "service_completed_successfully",
                              "certs": "service_completed_successfully"}
    # Tokens on the API (no --insecure-dev); agents only on the mTLS listener, with the certs service's files.
    argv = server["command"]
    assert "--insecure-dev" not in argv and argv[argv.index("--agent-listen") + 1] == "0.0.0.0:50052"
    made = services["certs"]["command"][-1]
    for flag, file in (("--tls-cert", "server.crt"), ("--tls-key", "server.key"), ("--agent-ca", "ca.crt")):
        assert argv[argv.index(flag) + 1] == f"/etc/federation/certs/{file}"
    assert all(f"--cluster {name}" in made for name, _, _ in DEMO_CLUSTERS)
    assert "--server-name federation-server" in made
    # The API speaks TLS with the server's certificate: the health check and fedctl trust its CA.
    assert server["healthcheck"]["test"][-4:] == ["-m", "federation.healthcheck", "localhost:50051",
                                                  "/etc/federation/certs/ca.crt"]
    published = [p if isinstance(p, str) else f"{p.get('host_ip', '')}:{p.get('published')}" for p in server["ports"]]
    assert [p for p in published if "9464" in p] == ["127.0.0.1:9464:9464/tcp"]  # metrics: this host only
    for service in ("migrate", "federation-server"):
        url = services[service]["environment"]["FEDERATION_DATABASE_URL"]
        assert url.startswith("postgresql://") and "@postgres:5432/" in url
    built = {name for name, s in services.items() if s.get("build")}
    assert built == set(services) - {"postgres"}  # one image for every Python service
    assert {s["image"] for name, s in services.items() if name in built} == {"gpu-federation:dev"}
    assert {s["build"]["dockerfile"] for s in services.values() if s.get("build")} == {"deploy/Dockerfile"}


def test_compose_agents_are_the_example_clusters(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, file, label in DEMO_CLUSTERS:
        agent = services[f"agent-{name}"]
        argv = agent["command"]
        assert argv[0] == "member-agent" and argv[argv.index("--cluster") + 1] == name
        assert argv[argv.index("--label") + 1] == label
        simulated = argv[argv.index("--simulate") + 1]
        assert simulated == f"/opt/federation/examples/clusters/{file}.yaml"
        assert (REPO / simulated.removeprefix("/opt/federation/")).is_file()  # the image copies examples/
        assert _after(agent) == {"federation-server": "service_healthy"}
        assert agent["environment"]["FEDERATION_SERVER"] == "federation-server:50052"  # the mTLS listener
        assert agent["environment"]["MEMBER_TLS_CA"] == "/etc/federation/certs/ca.crt"
        assert argv[argv.index("--tls-cert") + 1] == f"/etc/federation/certs/{name}.crt"  # its own cluster's
        assert argv[argv.index("--tls-key") + 1] == f"/etc/federation/certs/{name}.key"
    tools = services["fedctl"]
    assert tools["profiles"] == ["tools"] and tools["entrypoint"] == ["fedctl"]
    assert tools["environment"]["FEDERATION_SERVER"] == "federation-server:50051"
    assert "FEDERATION_TOKEN" in tools["environment"]
    assert tools["environment"]["FEDERATION_CA"] == "/etc/federation/certs/ca.crt"


def test_the_image_is_multi_stage_and_runs_unprivileged() -> None:
    text = (REPO / "deploy" / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert [stage.split()[2] for stage in stages[:-1]] == ["native", "build"]
    assert "COPY --from=native /wheels /wheels" in stages[1]  # the compiled victim search is installed
    final = stages[-1]
    assert "COPY --from=build /opt/venv /opt/venv" in final
    user = re.findall(r"^USER (\S+)", final, flags=re.M)
    assert user and user[-1] not in ("root", "0")
    assert not re.search(r"apt-get|gcc|build-essential|pip install", final)  # nothing is built there
    for copied in re.findall(r"^COPY (?!--from)(\S+) ", text, flags=re.M):
        assert (REPO / copied).exists(), copied
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


# -- Kubernetes manifests ------------------------------------------------------------------------

MANIFESTS = REPO / "deploy" / "kubernetes"


def render(directory: Path) -> list[dict[str, Any]]:
    done = subprocess.run([tool("kubectl"), "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


@pytest.mark.parametrize("directory", ["server", "agent", "overlays/control-plane", "overlays/member-east"])
def test_every_rendered_object_passes_the_kubernetes_schema(directory: str) -> None:
    objects = render(MANIFESTS / directory)
    assert objects
    for obj in objects:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(f"{directory}: {obj['kind']}/{obj['metadata']['name']}: {err.message} at {list(err.path)}")


def test_the_control_plane_runs_two_replicas_on_an_external_database() -> None:
    objects = render(MANIFESTS / "overlays" / "control-plane")
    (deployment,) = by_kind(objects, "Deployment")
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    service, scraped = services["federation-server"], services["federation-server-metrics"]
    (budget,) = by_kind(objects, "PodDisruptionBudget")
    (policy,) = by_kind(objects, "NetworkPolicy")
    pod = deployment["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert service["spec"]["selector"].items() <= labels.items() and service["spec"]["type"] == "LoadBalancer"
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["minAvailable"] == 1
    containers = pod["spec"]["initContainers"] + pod["spec"]["containers"]
    for container in containers:  # the migration and the server read the URL from the Secret
        env = {e["name"]: e for e in container["env"]}
        assert env["FEDERATION_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "federation-database",
                                                                              "key": "url"}
        assert container["image"] == "ghcr.io/example/gpu-federation:0.1.0"
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    (server,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    listen = server["args"][server["args"].index("--listen") + 1]
    probe = server["readinessProbe"]["exec"]["command"]  # TLS, which the kubelet's gRPC probe cannot speak
    assert listen.endswith(f":{ports['grpc']}") and probe[-2] == f"localhost:{ports['grpc']}"
    # The load balancer carries the API and the agents, never the (unauthenticated) metrics.
    assert {p["targetPort"] for p in service["spec"]["ports"]} == {"grpc", "agents"}
    assert scraped["spec"].get("type", "ClusterIP") == "ClusterIP" and [
        p["targetPort"] for p in scraped["spec"]["ports"]] == ["metrics"]
    rules = {tuple(sorted(p["port"] for p in rule["ports"])): rule.get("from") for rule in policy["spec"]["ingress"]}
    assert rules[(ports["grpc"], ports["agents"])] is None and rules[(ports["metrics"],)]
    args = server["args"]
    assert args[args.index("--agent-listen") + 1].endswith(f":{ports['agents']}") and "--insecure-dev" not in args
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["spec"]["volumes"] if "secret" in v}
    assert secrets == {"tls": "federation-server-tls"}
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"), ("--agent-ca", "ca.crt")):
        assert args[args.index(flag) + 1] == f"{mounts['tls']}/{key}"
    assert probe[-1] == f"{mounts['tls']}/ca.crt"
    assert pod["spec"]["initContainers"][0]["command"] == ["federation-server", "db", "upgrade"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_a_member_cluster_runs_one_agent_with_its_role() -> None:
    objects = render(MANIFESTS / "overlays" / "member-east")
    (deployment,) = by_kind(objects, "Deployment")
    (account,) = by_kind(objects, "ServiceAccount")
    (cluster_role,) = by_kind(objects, "ClusterRole")
    (cluster_binding,) = by_kind(objects, "ClusterRoleBinding")
    (role,) = by_kind(objects, "Role")
    (binding,) = by_kind(objects, "RoleBinding")
    (config,) = by_kind(objects, "ConfigMap")
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"  # never two agents binding
    pod = spec["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    subjects = [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                 "namespace": account["metadata"]["namespace"]}]
    for r, b in ((cluster_role, cluster_binding), (role, binding)):
        assert b["roleRef"]["name"] == r["metadata"]["name"] and b["subjects"] == subjects
    assert config["data"] == {"cluster": "east", "server": "federation.example.com:50052",
                              "namespace": "federation-jobs"}
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == config["data"]["namespace"]
    (agent,) = pod["containers"]
    assert agent["command"] == ["member-agent", "--in-cluster"]
    tls = {e["name"]: e["value"] for e in agent["env"] if "value" in e and e["name"].startswith("MEMBER_TLS")}
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert tls == {"MEMBER_TLS_CA": f"{mounts['tls']}/ca.crt", "MEMBER_TLS_CERT": f"{mounts['tls']}/tls.crt",
                   "MEMBER_TLS_KEY": f"{mounts['tls']}/tls.key"}
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"tls": "member-agent-tls"}
    health = {e["name"]: e["value"] for e in agent["env"] if "value" in e}["MEMBER_HEALTH_LISTEN"]
    (port,) = agent["ports"]
    assert health.endswith(f":{port['containerPort']}")
    assert agent["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert agent["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    env = {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in agent["env"] if "valueFrom" in e}
    assert {ref["name"] for ref in env.values()} == {config["metadata"]["name"]}  # the generated, hashed name
    assert {name: ref["key"] for name, ref in env.items()} == {
        "MEMBER_CLUSTER": "cluster", "FEDERATION_SERVER": "server", "MEMBER_NAMESPACE": "namespace"}
    namespaces = {n["metadata"]["name"] for n in by_kind(objects, "Namespace")}
    assert {"federation-jobs", deployment["metadata"]["namespace"]} <= namespaces
    def grants(r: dict) -> set[tuple[str, str, str]]:
        return {(g, res, v) for rule in r["rules"] for g in rule["apiGroups"] for res in rule["resources"]
                for v in rule["verbs"]}

    # Exactly what the agent checks at start, cluster-wide and in the gangs' namespace.
    assert grants(cluster_role) == {(g, r, v) for v, g, r, namespaced in ACCESS if not namespaced}
    assert grants(role) == {(g, r, v) for v, g, r, namespaced in ACCESS if namespaced}
