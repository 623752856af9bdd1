"""Metrics operators expect: per-RPC counts and latency, cluster readiness and heartbeat age, series gone
with their objects, and a Grafana dashboard whose every query names metrics the server exports."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select
from sqlalchemy.engine import URL

from federation import metrics
from federation.cli.dev import BIN, ServerProcess
from federation.metrics import TENANTS
from federation.scheduling.fairshare import dominant_share
from federation.store.models import JobEvent
from federation.v1 import admin_pb2, admin_pb2_grpc
from member_agent.agent import Agent
from tests.conftest import REPO, Api, make_queue
from tests.test_api_admin import rpc_error
from tests.test_api_admission import h100  # noqa: F401  (a fixture: one member cluster with its agent)

DASHBOARD = REPO / "deploy" / "grafana" / "federation-dashboard.json"


def sample(name: str, **labels: str) -> float | None:
    found = REGISTRY.get_sample_value(name, labels)
    return found if found is not None else TENANTS.get_sample_value(name, labels)


async def until(what: str, check: Callable[[], bool], timeout: float = 20) -> None:
    for _ in range(int(timeout * 10)):
        if check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


async def test_rpcs_clusters_and_deleted_queues_in_the_metrics(api: Api, h100: Agent) -> None:  # noqa: F811
    service = "federation.v1.AdminService"

    def handled() -> float | None:
        return sample("grpc_server_handled_total", grpc_type="unary", grpc_service=service, grpc_method="GetQueue",
                      grpc_code="NOT_FOUND")

    before = handled() or 0
    await rpc_error(api.admin.GetQueue(admin_pb2.GetQueueRequest(name="nope")))
    # An abort sends its status before the handler's frame unwinds, so the client can hold the error a moment
    # before the server has counted it: wait for the count, then hold it to exactly one more.
    await until("the NOT_FOUND to be counted", lambda: (handled() or 0) > before)
    await asyncio.sleep(0.2)
    assert handled() == before + 1
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
    for family in [*REGISTRY.collect(), *TENANTS.collect()]:
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


def test_queue_series_only_for_an_admins_scrape(empty_db_url: URL) -> None:
    """Issue 27 (5): the API hides a queue from other tenants; so must /metrics. Without a token, or with a
    tenant's, the scrape has the federation-wide series and names no queue; with an admin's, every queue's;
    with a token that does not authenticate, 401."""
    url = empty_db_url.render_as_string(hide_password=False)
    server = ServerProcess("--database-url", url, "--auto-migrate", secure=True)
    try:
        made = subprocess.run([str(BIN / "federation-server"), "token", "create", "--admin", "--database-url", url],
                              capture_output=True, text=True, timeout=60)
        admin_token = made.stdout.strip()
        with grpc.insecure_channel(server.address) as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            root = (("authorization", f"Bearer {admin_token}"),)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="acme")), metadata=root)
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="acme-secret-launch",
                                                                                 tenant="acme")), metadata=root)
            tenant_token = admin.CreateToken(admin_pb2.CreateTokenRequest(tenant="acme"),
                                             metadata=root).bearer_token

        def scrape(token: str | None) -> str:
            headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
            request = urllib.request.Request(f"http://{server.metrics}/metrics", headers=headers)
            return urllib.request.urlopen(request, timeout=10).read().decode()

        deadline = time.monotonic() + 60
        while 'queue="acme-secret-launch"' not in scrape(admin_token):
            assert time.monotonic() < deadline, "the queue's series never appeared for the admin"
            time.sleep(0.2)
        for who, token in (("anyone", None), ("a tenant", tenant_token)):
            body = scrape(token)
            assert "acme-secret-launch" not in body and "acme" not in body, who
            assert "federation_pending_jobs " in body and "grpc_server_handled_total" in body, who
        with pytest.raises(urllib.error.HTTPError) as refused:
            scrape("fed_0000000000000000_" + "x" * 43)
        assert refused.value.code == 401
    finally:
        server.stop()


async def test_wait_times_outcomes_and_rejections_in_the_metrics(api: Api, h100: Agent) -> None:  # noqa: F811
    """Issue 42 (9): how long jobs waited (per queue, an admin's scrape), how they ended, and what clusters sent
    back, as Kueue's admission wait time and Armada's outcomes are."""
    from federation.v1 import common_pb2, jobs_pb2

    def counts() -> tuple[float, ...]:
        return (sample("federation_job_wait_seconds_count", queue="train") or 0,
                sample("federation_jobs_finished_total", outcome="succeeded") or 0,
                sample("federation_jobs_finished_total", outcome="cancelled") or 0,
                sample("federation_rejections_total", cluster="h100") or 0)

    before = counts()

    def job(name: str, **task: object) -> common_pb2.JobSpec:
        return common_pb2.JobSpec(name=name, queue="train", annotations={"federation.dev/sim-duration": "1s"},
                                  tasks=[common_pb2.TaskSpec(name="w", replicas=1, resources={"cpu": "1"}, **task)])

    quick = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=job("quick")))).job.id
    # No agent reports each node's own name: sent, and the agent says no node has it.
    pinned = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=job(
        "pinned", node_selector={"kubernetes.io/hostname": "elsewhere"})))).job.id
    await until("the quick job to succeed and the pinned one to be sent back", lambda: counts()[1] > before[1] and
                counts()[3] > before[3])
    assert counts()[0] >= before[0] + 1
    # What the cluster said, on its Rejected event (the job's reason moves on: it is offered again once the
    # cluster's inventory changes, as the quick job's end changes it).
    async with api.server.engine.connect() as conn:
        said = (await conn.execute(select(JobEvent.message).where(
            JobEvent.job_id == pinned, JobEvent.type == "Rejected").order_by(JobEvent.seq))).scalars().all()
    assert said and "no node matches task w's nodeSelector kubernetes.io/hostname=elsewhere" in said[0], said
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=pinned))
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=pinned))  # again: ended once
    assert counts()[2] == before[2] + 1
    assert (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=quick))).status.phase == common_pb2.SUCCEEDED


def test_queue_series_are_what_the_last_cycle_published() -> None:
    series = metrics.QueueSeries()
    assert {f.name: f.samples for f in series.collect()} == {
        "federation_queue_pending_jobs": [], "federation_queue_dominant_share": [], "federation_queue_usage": [],
        "federation_queue_deserved": []}
    usage = {"a": {"nvidia.com/gpu": 4}, "b": {"cpu": 2000}}
    series.publish({"a": 3, "b": 0}, usage, {"a": {"nvidia.com/gpu": 8.0}}, dominant_share)
    usage["a"]["nvidia.com/gpu"] = 99  # the cycle's own figures change after; the published ones do not
    got = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in series.collect() for s in f.samples}
    assert got == {
        ("federation_queue_pending_jobs", (("queue", "a"),)): 3,
        ("federation_queue_pending_jobs", (("queue", "b"),)): 0,
        ("federation_queue_dominant_share", (("queue", "a"),)): 0.5,
        ("federation_queue_dominant_share", (("queue", "b"),)): -1,  # uses what it does not deserve
        ("federation_queue_usage", (("queue", "a"), ("resource", "nvidia.com/gpu"))): 4,
        ("federation_queue_deserved", (("queue", "a"), ("resource", "nvidia.com/gpu"))): 8.0,
        ("federation_queue_usage", (("queue", "b"), ("resource", "cpu"))): 2000,
        ("federation_queue_deserved", (("queue", "b"), ("resource", "cpu"))): 0}
    series.publish({"a": 1}, {"a": {}}, {}, dominant_share)  # b deleted: its series go
    assert {s.labels["queue"] for f in series.collect() for s in f.samples} == {"a"}
