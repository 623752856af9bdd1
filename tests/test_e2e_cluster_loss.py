"""Cluster loss with real processes: a server and two simulated H100 agents; one agent is killed or
frozen (issue 5 (d) and the reconciliation of a returning agent)."""

import signal
import time
from collections.abc import Iterator

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.test_e2e_agents import CLUSTERS, GPU, wait_for

pytestmark = pytest.mark.e2e
TIMEOUT, GRACE = 3, 3  # seconds: --heartbeat-timeout and --lost-grace


class TwoClusters:
    def __init__(self, db_url: URL) -> None:
        self.server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False),
                                    "--heartbeat-timeout", str(TIMEOUT), "--lost-grace", str(GRACE))
        self.agents = {name: AgentProcess(name, self.server.address, "--simulate",
                                          str(CLUSTERS / "h100-spine-leaf.yaml"), "--heartbeat", "0.5")
                       for name in ("east", "west")}
        channel = grpc.insecure_channel(self.server.address)
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)

    def job(self, job_id: str) -> common_pb2.Job:
        return self.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))

    def submit(self, pods: int) -> str:
        spec = common_pb2.JobSpec(
            name="train", queue="train", annotations={"federation.dev/sim-duration": "300s"},
            network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=1),
            tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "8", "cpu": "8"})])
        return self.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job.id

    def in_phase(self, job_id: str, phase: int) -> common_pb2.JobStatus:
        return wait_for(f"{job_id} in phase {phase}", lambda: (s := self.job(job_id).status).phase == phase and s)

    def used_gpus(self, cluster: str) -> int:
        clusters = self.admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
        return int(next(c for c in clusters if c.name == cluster).used.get(GPU, "0"))

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        self.server.stop()


@pytest.fixture
def fed(db_url: URL) -> Iterator[TwoClusters]:
    fed = TwoClusters(db_url)
    try:
        wait_for("both Ready", lambda: {c.name for c in fed.admin.ListClusters(admin_pb2.ListClustersRequest(
        )).clusters if c.status == admin_pb2.READY and c.nodes} == {"east", "west"})
        fed.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        fed.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        yield fed
    finally:
        fed.close()


def test_a_killed_agents_work_moves_queued_at_once_and_running_after_the_grace(fed: TwoClusters) -> None:
    running = fed.submit(4)
    first = fed.in_phase(running, common_pb2.RUNNING).cluster
    other = ({"east", "west"} - {first}).pop()
    frozen = fed.agents[first]
    frozen.proc.send_signal(signal.SIGSTOP)  # silent, its stream still open: work sent to it waits
    queued = fed.submit(4)  # the busier cluster is the tighter fit: it goes there and is not placed
    assert fed.in_phase(queued, common_pb2.DISPATCHED).cluster == first
    frozen.kill()
    killed = time.monotonic()
    assert fed.in_phase(queued, common_pb2.RUNNING).cluster == other
    moved_queued = time.monotonic() - killed
    status = wait_for("the running job moved", lambda: (s := fed.job(running).status).cluster == other
                      and s.phase == common_pb2.RUNNING and s)
    assert status.retries == 1 and status.attempt == 2
    moved_running = time.monotonic() - killed
    assert moved_queued < moved_running  # the running job waited for the grace as well


def test_a_returning_agent_stops_what_was_moved_elsewhere(fed: TwoClusters) -> None:
    job_id = fed.submit(4)
    first = fed.in_phase(job_id, common_pb2.RUNNING).cluster
    fed.agents[first].proc.send_signal(signal.SIGSTOP)
    wait_for("the job moved", lambda: (s := fed.job(job_id).status).phase == common_pb2.RUNNING
             and s.cluster != first, timeout=60)
    assert fed.used_gpus(first) == 32  # its last word, from before it froze
    fed.agents[first].proc.send_signal(signal.SIGCONT)  # back, still running attempt 1
    wait_for("the stale pods stopped", lambda: fed.used_gpus(first) == 0, timeout=30)
    assert fed.job(job_id).status.cluster != first
