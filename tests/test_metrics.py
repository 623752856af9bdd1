"""Metrics operators expect: per-RPC counts and latency, cluster readiness and heartbeat age, series gone
with their objects, and a Grafana dashboard whose every query names metrics the server exports."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable

from prometheus_client import REGISTRY

from federation.v1 import admin_pb2
from member_agent.agent import Agent
from tests.conftest import REPO, Api, make_queue
from tests.test_api_admin import rpc_error
from tests.test_api_admission import h100  # noqa: F401  (a fixture: one member cluster with its agent)

DASHBOARD = REPO / "deploy" / "grafana" / "federation-dashboard.json"


def sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def until(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    for _ in range(int(timeout * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_rpcs_clusters_and_deleted_queues_in_the_metrics(api: Api, h100: Agent) -> None:  # noqa: F811
    service = "federation.v1.AdminService"
    before = sample("grpc_server_handled_total", grpc_type="unary", grpc_service=service, grpc_method="GetQueue",
                    grpc_code="NOT_FOUND") or 0
    await rpc_error(api.admin.GetQueue(admin_pb2.GetQueueRequest(name="nope")))
    assert sample("grpc_server_handled_total", grpc_type="unary", grpc_service=service, grpc_method="GetQueue",
                  grpc_code="NOT_FOUND") == before + 1
    assert (sample("grpc_server_handling_seconds_count", grpc_type="unary", grpc_service=service,
                   grpc_method="GetQueue") or 0) >= 1
    assert (sample("grpc_server_started_total", grpc_type="bidi_stream", grpc_service="federation.v1.AgentService",
                   grpc_method="Connect") or 0) >= 1  # the agent's stream

    await until("the cluster Ready gauge", lambda: sample("federation_cluster_ready", cluster="h100") == 1)
    assert (sample("federation_cluster_heartbeat_age_seconds", cluster="h100") or 0) >= 0
    await make_queue(api, "brief", "ml")
    await until("the new queue's series", lambda: sample("federation_queue_pending_jobs", queue="brief") == 0)
    status = await api.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="brief"))
    assert [s.dominant_share for s in status.history][-1:] == [0.0]  # the dashboard's last hour of it
    await api.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="brief"))
    api.server.scheduler.wake()
    await until("the deleted queue's series to go", lambda: sample("federation_queue_pending_jobs",
                                                                   queue="brief") is None)


def test_every_dashboard_query_names_an_exported_metric() -> None:
    exported = set()
    for family in REGISTRY.collect():
        exported.add(family.name)
        exported.update(s.name for s in family.samples)
        if family.type == "counter":
            exported.add(f"{family.name}_total")
        if family.type == "histogram":
            exported.update(f"{family.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) == len(dashboard["panels"]) >= 10
    named = {m for expr in exprs for m in re.findall(r"\b(?:federation|grpc_server)_[a-z_]+\b", expr)}
    assert named and named <= exported, named - exported
