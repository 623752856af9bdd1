"""Backup and restore as docs/operations/database.md says: `pg_dump -Fc` of the federation's database,
`pg_restore` into a new one, and a server on the restored database serves the same jobs (their phases, clusters,
attempts) and the same event log, and goes on from where it stopped: a new job's events come after the restored
ones."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import psycopg
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.store.database import conninfo
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent import clusters
from tests.conftest import fresh_database
from tests.pgpair import BIN
from tests.test_e2e_agents import wait_for

GPU = "nvidia.com/gpu"
QUIET = ("--heartbeat-timeout", "600")  # the agent is gone while the dump is read: its cluster stays as it was
Jobs = list[tuple[str, int, str, int]]
Events = list[tuple[int, str, str, int]]


def served(address: str, url: URL) -> tuple[Jobs, Events]:
    """What the server at `address` serves: every job (id, phase, cluster, attempt), and the event log replayed
    from the start (sequence, job, type, phase) up to the last event its database holds."""
    with psycopg.connect(conninfo(url)) as conn:
        (last,) = conn.execute("SELECT max(seq) FROM job_events").fetchone() or (0,)
    with grpc.insecure_channel(address) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        listed = stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000, include_history=True), timeout=30).jobs
        events: Events = []
        for event in stub.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0), timeout=60):
            events.append((event.sequence, event.job_id, event.type, event.phase))
            if event.sequence >= last:
                break
    return sorted((j.id, j.status.phase, j.status.cluster, j.status.attempt) for j in listed), events


def submit(address: str, name: str, duration: str) -> str:
    with grpc.insecure_channel(address) as channel:
        spec = common_pb2.JobSpec(name=name, queue="train", annotations={"federation.dev/sim-duration": duration},
                                  tasks=[common_pb2.TaskSpec(name="w", replicas=1, resources={GPU: "8"})])
        return jobs_pb2_grpc.JobServiceStub(channel).SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job.id


def phase(address: str, job_id: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return jobs_pb2_grpc.JobServiceStub(channel).GetJob(jobs_pb2.GetJobRequest(id=job_id)).status.phase


def test_a_restored_dump_serves_the_same_jobs_and_events(postgres_url: URL, db_url: URL, tmp_path: Path) -> None:
    east = tmp_path / "east.yaml"
    east.write_text(yaml.safe_dump_all(clusters.tree("e-", [1, 2], clusters.H100), sort_keys=False))  # 16 GPUs
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), *QUIET)
    agent = AgentProcess("east", server.address, "--simulate", str(east), "--heartbeat", "0.5")
    try:
        with grpc.insecure_channel(server.address) as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        done = [submit(server.address, f"short-{i}", "1s") for i in range(3)]
        running = submit(server.address, "long", "1h")
        waiting = [submit(server.address, f"later-{i}", "1h") for i in range(2)]  # 8 + 16 GPUs: one waits
        wait_for("the short jobs done and the long one running", lambda: all(
            phase(server.address, j) == common_pb2.SUCCEEDED for j in done)
            and phase(server.address, running) == common_pb2.RUNNING, timeout=120)
        agent.stop()
        server.stop()
        server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), *QUIET)
        before = served(server.address, db_url)
        server.stop()
        dump = tmp_path / "federation.dump"
        subprocess.run([str(BIN / "pg_dump"), "-Fc", "-f", str(dump), "-d", conninfo(db_url)], check=True,
                       capture_output=True, timeout=120)
    finally:
        agent.stop()
        server.stop()

    with fresh_database(postgres_url, None) as restored:
        subprocess.run([str(BIN / "pg_restore"), "--no-owner", "--exit-on-error", "-d", conninfo(restored), str(dump)],
                       check=True, capture_output=True, timeout=120)
        server = ServerProcess("--database-url", restored.render_as_string(hide_password=False), *QUIET)
        try:
            after = served(server.address, restored)
            assert after == before
            jobs, events = after
            assert {j[0] for j in jobs} == {*done, running, *waiting} and events
            assert {j[0]: j[1] for j in jobs}[running] == common_pb2.RUNNING
            new = submit(server.address, "after-restore", "1s")
            _, later = served(server.address, restored)
            assert later[:len(events)] == events  # the log goes on after the restored one
            assert [e for e in later[len(events):] if e[1] == new] and later[-1][0] > events[-1][0]
        finally:
            server.stop()
