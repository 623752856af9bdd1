"""The Helm charts (deploy/helm/): linted, rendered and checked against the Kubernetes 1.34 schemas, refusing bad
values with a message naming the value, the agent's RBAC exactly what the agent checks. Installing them on the test
bed's real API server, and running what their Pods run, is the Kubernetes tutorial's test
(tests/test_tutorial_kubernetes.py).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from federation.testbed.build import REPO, Tools
from member_agent.kube import ACCESS

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
             "healthRules": {"configMap": "health-rules"}, "dcgmMetrics": "http://dcgm-exporter:9400/metrics",
             "nodeGroups": [{"name": "h100", "maxNodes": 4, "capacity": {"nvidia.com/gpu": 8}}]}),
], ids=[*SERVER_VALUES, "agent", "agent with discovery, health and node groups"])
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


def test_the_agent_charts_node_groups_reach_the_agent_as_it_reads_them(testbed_tools: Tools, tmp_path: Path) -> None:
    """Issue 46 (4): `nodeGroups` become a ConfigMap the agent's --node-groups reads, and it loads as written."""
    from member_agent import provisioning

    groups = [{"name": "h100", "maxNodes": 8, "capacity": {"nvidia.com/gpu": 8, "cpu": 96, "memory": "1Ti"},
               "labels": {"pool": "h100"}}]
    objects = render(testbed_tools, AGENT, {**AGENT_VALUES, "nodeGroups": groups, "provisionTimeout": 600}, tmp_path)
    config = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("node-groups"))
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert "--node-groups=/etc/federation/node-groups/groups.yaml" in args and "--provision-timeout=600" in args
    assert {v["name"]: v.get("configMap", {}).get("name") for v in pod["volumes"]}["node-groups"] == \
        config["metadata"]["name"]
    written = tmp_path / "groups.yaml"
    written.write_text(config["data"]["groups.yaml"])
    (loaded,) = provisioning.load(written)
    assert (loaded.name, loaded.max_nodes, loaded.capacity["nvidia.com/gpu"], dict(loaded.labels)) == (
        "h100", 8, 8, {"pool": "h100"})
    assert not [o for o in render(testbed_tools, AGENT, AGENT_VALUES, tmp_path) if o["kind"] == "ConfigMap"
                and o["metadata"]["name"].endswith("node-groups")]
