"""Ready or requeued (issue 46, 5) with real processes: a server whose jobs must have their pods running within
`--ready-timeout`, a simulated member cluster where one job's pods never start (an image that never arrives). The
agent gives that gang back, the federation requeues it after its backoff, counted, and fails it past
`--requeue-limit`; a job whose pods start keeps running past the timeout."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.clusters import tree
from tests.processes import fedctl
from tests.test_e2e_agents import wait_for
from tests.test_e2e_health import events

pytestmark = pytest.mark.e2e
GPU = "nvidia.com/gpu"


def spec(name: str, start_delay: str = "") -> common_pb2.JobSpec:
    annotations = {"federation.dev/sim-duration": "600s"}
    if start_delay:
        annotations["federation.dev/sim-start-delay"] = start_delay
    return common_pb2.JobSpec(name=name, queue="train", annotations=annotations,
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=2, resources={GPU: "8"})])


def test_a_gang_that_never_starts_is_requeued_with_backoff_then_fails(db_url: URL, tmp_path: Path) -> None:
    cluster = tmp_path / "a.yaml"
    cluster.write_text(yaml.safe_dump_all(tree("a", [1, 4], {GPU: "8", "cpu": "64"})))  # one leaf of four nodes
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), "--ready-timeout", "2",
                           "--requeue-backoff", "1.5", "--requeue-limit", "1", "--ui-listen", "127.0.0.1:0")
    agent = None
    try:
        agent = AgentProcess("a", server.address, "--simulate", str(cluster), "--heartbeat", "0.5")
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        wait_for("cluster a Ready", lambda: [c for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                                             if c.status == admin_pb2.READY])
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))

        def job(job_id: str) -> common_pb2.Job:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))

        runs = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("runs"))).job.id
        stuck = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("stuck", start_delay="600s"))).job.id
        # The server's default, written on the job as it was accepted.
        assert job(stuck).spec.annotations["federation.dev/ready-timeout"] == "2s"
        wait_for("stuck failed", lambda: job(stuck).status.phase == common_pb2.FAILED, timeout=120)
        status = job(stuck).status
        assert status.requeues == 1
        assert status.reason == ("not ready in cluster a: its pods were not all running 2s after it was sent here "
                                 "(worker 0 of 2 running; federation.dev/ready-timeout); requeued 1 time(s) already, "
                                 "the most allowed")
        seen = [e for e in events(jobs, stuck) if e.type in ("Dispatched", "NotReady")]
        assert [(e.type, e.phase) for e in seen] == [
            ("Dispatched", common_pb2.DISPATCHED), ("NotReady", common_pb2.PENDING),
            ("Dispatched", common_pb2.DISPATCHED), ("NotReady", common_pb2.FAILED)]
        assert seen[1].message.endswith("requeued (requeue 1), back in its queue after 1.5 s")
        # Dispatched again only once the backoff was over, and given back a ready timeout after each dispatch.
        times = [e.time.ToDatetime() for e in seen]
        assert (times[2] - times[1]).total_seconds() >= 1.5
        assert (times[1] - times[0]).total_seconds() >= 2 and (times[3] - times[2]).total_seconds() >= 2
        # Where people read it: fedctl's wide listing and describe, the dashboard's job page.
        wide = fedctl(server.address, "get", "jobs", "-o", "wide").stdout.splitlines()
        columns = wide[0].split()
        row = next(line.split() for line in wide if line.startswith(stuck))
        assert row[columns.index("REQUEUES")] == "1"
        assert "Requeues:" in fedctl(server.address, "describe", "job", stuck).stdout
        page = urllib.request.urlopen(f"{server.dashboard}/jobs/{stuck}", timeout=10).read().decode()
        assert '<dd id="requeues">1</dd>' in page
        # The job whose pods started runs on, long past its timeout, never requeued; only its GPUs are held.
        assert job(runs).status.phase == common_pb2.RUNNING and job(runs).status.requeues == 0
        wait_for("only the running gang's GPUs used", lambda: admin.ListClusters(
            admin_pb2.ListClustersRequest()).clusters[0].used.get(GPU) == "16")
    finally:
        if agent is not None:
            agent.stop()
        server.stop()
