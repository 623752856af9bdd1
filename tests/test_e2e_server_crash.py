"""(e) The server killed with SIGKILL again and again while jobs are submitted and running: every accepted
job ends exactly once, none lost, none run twice."""

import socket
import threading
import time
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.test_e2e_agents import CLUSTERS, GPU, wait_for

pytestmark = pytest.mark.e2e
KILLS = 5
ACCEPTED_BETWEEN_KILLS = 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spec(n: int) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(name="crash", queue="train", request_id=f"crash-{n}",
                              annotations={"federation.dev/sim-duration": "1s"},
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=2, resources={GPU: "8", "cpu": "8"})])


def test_killing_the_server_loses_nothing_and_runs_nothing_twice(db_url: URL, tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    serve = ("--database-url", db_url.render_as_string(hide_password=False), "--listen", address)
    server = ServerProcess(*serve)
    agents = [AgentProcess(name, address, "--simulate", str(CLUSTERS / "h100-spine-leaf.yaml"), "--heartbeat", "0.5")
              for name in ("east", "west")]
    channel = grpc.insecure_channel(address, options=[("grpc.initial_reconnect_backoff_ms", 200),
                                                      ("grpc.max_reconnect_backoff_ms", 1000)])
    jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
    accepted: dict[int, str] = {}
    stop = threading.Event()

    def submit() -> None:
        n = 0
        unanswered = False
        # Resubmitted with the same request_id until the server answers, even once told to stop: a request
        # the server stored just before it was killed is only known as accepted when a resend is answered.
        while not stop.is_set() or unanswered:
            try:
                accepted[n] = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(n)), timeout=5).job.id
                n += 1
                unanswered = False
            except grpc.RpcError:
                unanswered = True
                time.sleep(0.2)
            time.sleep(0.05)

    try:
        wait_for("both clusters Ready", lambda: len([c for c in admin.ListClusters(
            admin_pb2.ListClustersRequest()).clusters if c.status == admin_pb2.READY and c.nodes]) == 2)
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        submitter = threading.Thread(target=submit, daemon=True)
        submitter.start()
        for kill in range(KILLS):
            # Killed once each server has taken a few submissions (its last ones' gangs dispatched or running as
            # it dies), however long a loaded machine takes to start it: a fixed clock once killed servers that
            # had barely answered.
            count = len(accepted)
            wait_for(f"submissions accepted before kill {kill + 1}",
                     lambda c=count: len(accepted) >= c + ACCEPTED_BETWEEN_KILLS, timeout=180)
            server.kill()
            time.sleep(0.5)
            server = ServerProcess(*serve)
        stop.set()
        submitter.join(60)
        assert not submitter.is_alive()
        ids = sorted(set(accepted.values()))
        assert len(ids) == len(accepted)  # one job per request, however often it was resent

        def ended() -> bool:
            try:
                listed = {j.id: j.status.phase for j in _all_jobs(jobs)}
            except grpc.RpcError:
                return False  # the last server is still starting
            return all(listed.get(i) == common_pb2.SUCCEEDED for i in ids)

        wait_for("every accepted job Succeeded", ended, timeout=180)
        engine = create_engine(db_url)
        with engine.connect() as conn:
            rows = conn.execute(text(
                "SELECT job_id, type, attempt, count(*) FROM job_events "
                "WHERE type IN ('Running', 'Succeeded', 'Failed', 'Cancelled') GROUP BY job_id, type, attempt"
            )).all()
            total = conn.execute(text("SELECT count(*) FROM jobs")).scalar_one()
        engine.dispose()
        assert total == len(ids)  # nothing stored beyond what was accepted
        assert all(count == 1 for *_, count in rows)  # no attempt started or ended twice
        ends = [job for job, kind, _, _ in rows if kind != "Running"]
        assert sorted(ends) == ids  # each job ended exactly once
    finally:
        stop.set()
        for agent in agents:
            agent.stop()
        server.stop()


def _all_jobs(jobs: jobs_pb2_grpc.JobServiceStub) -> list[common_pb2.Job]:
    out, token = [], ""
    while True:
        page = jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000, page_token=token))
        out += page.jobs
        if not page.next_page_token:
            return out
        token = page.next_page_token
