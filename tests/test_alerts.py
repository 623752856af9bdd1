"""The charts' Prometheus alerts (deploy/helm/*/files/alerts.yaml): valid rule files (`promtool check rules`), each
alert firing on the series it is for, with the labels and summary written here, and not before its time (`promtool
test rules`, Prometheus' own rule unit tests), and every metric they name one the program exports.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from federation import metrics as server_metrics
from federation.testbed.build import REPO, Tools
from member_agent import metrics as agent_metrics
from tests.test_helm import render

SERVER = REPO / "deploy" / "helm" / "federation-server" / "files" / "alerts.yaml"
AGENT = REPO / "deploy" / "helm" / "member-agent" / "files" / "alerts.yaml"


@dataclass
class Case:
    """An alert, the series it watches (promtool's expanding notation, one sample a minute), a minute at which it
    must not fire yet and one at which it fires with these labels and summary."""

    alert: str
    series: dict[str, str]
    quiet: int
    fires: int
    alerts: list[tuple[dict[str, str], str]] = field(default_factory=list)


def _histogram(name: str, labels: str, counts: dict[str, str]) -> dict[str, str]:
    return {f'{name}_bucket{{{labels}{"," if labels else ""}le="{le}"}}': values for le, values in counts.items()}


CASES = {SERVER: [
    Case("FederationClusterNotSchedulable",
         {'federation_cluster_ready{cluster="east"}': "0x20", 'federation_cluster_ready{cluster="west"}': "1x20"},
         quiet=5, fires=15, alerts=[({"cluster": "east", "severity": "warning"},
                                     "Member cluster east gets no new work")]),
    Case("FederationClusterSilent",
         {'federation_cluster_heartbeat_age_seconds{cluster="east"}': "0+60x20",
          'federation_cluster_heartbeat_age_seconds{cluster="west"}': "5x20"},
         quiet=3, fires=6, alerts=[({"cluster": "east", "severity": "critical"},
                                    "The agent of east has not been heard from for 6m 0s")]),
    Case("FederationClusterDrift",
         {'federation_cluster_drift{cluster="east",resource="nvidia.com/gpu"}': "8x30",
          'federation_cluster_drift{cluster="west",resource="nvidia.com/gpu"}': "0x30"},
         quiet=10, fires=20, alerts=[({"cluster": "east", "resource": "nvidia.com/gpu", "severity": "warning"},
                                      "east: its agent and the federation disagree on nvidia.com/gpu in use by 8")]),
    Case("FederationSchedulingCycleSlow",  # every cycle between 5 and 10 s
         _histogram("federation_scheduler_cycle_seconds", "", {"5": "0x40", "10": "0+10x40", "+Inf": "0+10x40"}),
         quiet=10, fires=20, alerts=[({"severity": "warning"}, "Scheduling cycles take 9.95s (99th percentile)")]),
    Case("FederationEventLoopStalled",  # one replica's loop late by 0.5-1 s, the other's on time
         {**_histogram("federation_event_loop_lag_seconds", 'instance="a"',
                       {"0.001": "0x30", "0.5": "0x30", "1": "0+10x30", "+Inf": "0+10x30"}),
          **_histogram("federation_event_loop_lag_seconds", 'instance="b"',
                       {"0.001": "0+10x30", "0.5": "0+10x30", "1": "0+10x30", "+Inf": "0+10x30"})},
         quiet=5, fires=15, alerts=[({"instance": "a", "severity": "warning"},
                                     "The event loop of a runs 995ms late (99th percentile)")]),
    Case("FederationClusterRejecting",
         {'federation_rejections_total{cluster="east"}': "0+1x30",
          'federation_rejections_total{cluster="west"}': "0x30"},
         quiet=2, fires=20, alerts=[({"cluster": "east", "severity": "warning"},
                                     "east keeps sending dispatched jobs back")]),
    Case("FederationDuplicateAgent",
         {'federation_agents_refused_total{cluster="east"}': "0 0 0 0 1 1 1 1", 'federation_agents_refused_total'
          '{cluster="west"}': "0x7"},
         quiet=2, fires=6, alerts=[({"cluster": "east", "severity": "warning"},
                                    "A second agent process tried to register east")]),
    Case("FederationAPIFailing",
         {'grpc_server_handled_total{grpc_service="federation.v1.JobService",grpc_method="GetJob",grpc_code="INTERNAL"}':
          "0+1x20",
          'grpc_server_handled_total{grpc_service="federation.v1.JobService",grpc_method="ListJobs",grpc_code="NOT_FOUND"}':
          "0+5x20"},
         quiet=3, fires=10, alerts=[({"grpc_service": "federation.v1.JobService", "grpc_method": "GetJob",
                                      "severity": "critical"},
                                     "federation.v1.JobService/GetJob answers with internal errors")]),
], AGENT: [
    Case("MemberAgentInventoryStale",
         {'member_agent_inventory_age_seconds{instance="a"}': "0+60x20",
          'member_agent_inventory_age_seconds{instance="b"}': "10x20"},
         quiet=4, fires=10, alerts=[({"instance": "a", "severity": "warning"},
                                     "The agent a has not sent its inventory for 10m 0s")]),
    Case("MemberAgentFencedGangs",
         {'member_agent_fenced_gangs_total{instance="a"}': "0 0 0 0 3 3 3 3", 'member_agent_fenced_gangs_total'
          '{instance="b"}': "0x7"},
         quiet=2, fires=6, alerts=[({"instance": "a", "severity": "critical"},
                                    "The agent a stopped its gangs: cut off from the federation")]),
    Case("MemberAgentBindsRejected",
         {'member_agent_placements_total{instance="a",result="rejected"}': "0+1x30",
          'member_agent_placements_total{instance="a",result="bound"}': "0+10x30"},
         quiet=2, fires=20, alerts=[({"instance": "a", "result": "rejected", "severity": "warning"},
                                     "The agent a keeps rejecting the gangs it is sent")]),
    Case("MemberAgentWatchesRestarting",
         {'member_agent_watch_restarts_total{instance="a",resource="pods",cause="gone"}': "0+2x40",
          'member_agent_watch_restarts_total{instance="b",resource="pods",cause="gone"}': "0x40"},
         quiet=3, fires=25, alerts=[({"instance": "a", "severity": "warning"},
                                     "The agent a's watches of the API server keep restarting")]),
]}


def rules(path: Path) -> dict[str, dict]:
    return {rule["alert"]: rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]}


def unit_tests(path: Path) -> dict:
    """Prometheus' rule unit test file for the cases of one rule file; the descriptions are the rules' own (they are
    plain text, no template)."""
    written = rules(path)
    tests = []
    for case in CASES[path]:
        description = written[case.alert]["annotations"]["description"]
        assert "{{" not in description, case.alert
        tests.append({
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in case.series.items()],
            "alert_rule_test": [
                {"eval_time": f"{case.quiet}m", "alertname": case.alert, "exp_alerts": []},
                {"eval_time": f"{case.fires}m", "alertname": case.alert, "exp_alerts": [
                    {"exp_labels": labels, "exp_annotations": {"summary": summary, "description": description}}
                    for labels, summary in case.alerts]}]})
    return {"rule_files": [str(path)], "evaluation_interval": "1m", "tests": tests}


@pytest.mark.parametrize("path", [SERVER, AGENT], ids=["federation-server", "member-agent"])
def test_the_alerts_are_valid_rules_and_fire_on_what_they_are_for(promtool: Path, path: Path, tmp_path: Path) -> None:
    assert {case.alert for case in CASES[path]} == set(rules(path)), "every alert has its case here"
    checked = subprocess.run([str(promtool), "check", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    spec = tmp_path / "alerts_test.yaml"
    spec.write_text(yaml.safe_dump(unit_tests(path), sort_keys=False))
    tested = subprocess.run([str(promtool), "test", "rules", str(spec)], capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def exported() -> set[str]:
    """Every series name the programs' metrics expose: a gauge's name, a counter's with _total, a histogram's
    buckets, sum and count (the agent's are in the default registry beside the server's, both imported here)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {family.name + suffix for registry in (REGISTRY, server_metrics.TENANTS) for family in registry.collect()
            for suffix in suffixes.get(family.type, ("",))}


@pytest.mark.parametrize("path", [SERVER, AGENT], ids=["federation-server", "member-agent"])
def test_every_metric_an_alert_names_is_one_the_program_exports(path: Path) -> None:
    names = exported()
    assert agent_metrics.PLACEMENTS and "member_agent_placements_total" in names
    prefix = "member_agent_" if path == AGENT else ("federation_", "grpc_server_")
    for alert, rule in rules(path).items():
        named = {n for n in re.findall(r"[a-z_:][a-z0-9_:]*", rule["expr"]) if n.startswith(prefix)}
        assert named, alert
        assert named <= names, (alert, named - names)


@pytest.mark.parametrize(("path", "values"), [
    (SERVER, {"database": {"url": "postgresql://f:s@db/f"}}), (AGENT, {"cluster": "east", "server": "f:50052"})],
    ids=["federation-server", "member-agent"])
def test_each_chart_installs_its_rule_file_as_a_prometheus_rule(testbed_tools: Tools, path: Path,
                                                                  values: dict[str, Any], tmp_path: Path) -> None:
    chart = path.parent.parent
    assert not [o for o in render(testbed_tools, chart, values, tmp_path) if o["kind"] == "PrometheusRule"]
    enabled = {**values, "metrics": {"prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus"}}}}
    (rule,) = [o for o in render(testbed_tools, chart, enabled, tmp_path) if o["kind"] == "PrometheusRule"]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert rule["spec"] == yaml.safe_load(path.read_text())
