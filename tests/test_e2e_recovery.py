"""Fault recovery with real processes: a server and a simulated H100 member agent, faults injected
through `member-agent fault` (issue 5 (a)-(c))."""

import subprocess
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from sqlalchemy.engine import URL

from federation.cli.dev import BIN, AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.test_e2e_agents import CLUSTERS, GPU, wait_for

pytestmark = pytest.mark.e2e


class OneCluster:
    def __init__(self, db_url: URL) -> None:
        self.server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
        self.agent = AgentProcess("h100", self.server.address, "--simulate", str(CLUSTERS / "h100-spine-leaf.yaml"),
                                  "--heartbeat", "0.5")
        channel = grpc.insecure_channel(self.server.address)
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)

    def job(self, job_id: str) -> common_pb2.Job:
        return self.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))

    def running(self, job_id: str) -> common_pb2.Job:
        return wait_for(f"{job_id} Running", lambda: (j := self.job(job_id)).status.phase == common_pb2.RUNNING and j)

    def fault(self, *args: str) -> None:
        subprocess.run([str(BIN / "member-agent"), "fault", *args, "--agent", self.agent.admin], check=True,
                       capture_output=True)

    def events(self, job_id: str) -> list[common_pb2.JobEvent]:
        stream = self.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(job_id=job_id, after_sequence=0), timeout=1)
        out = []
        try:
            for event in stream:
                out.append(event)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        return out

    def close(self) -> None:
        self.agent.stop()
        self.server.stop()


@pytest.fixture
def fed(db_url: URL) -> Iterator[OneCluster]:
    fed = OneCluster(db_url)
    try:
        wait_for("h100 Ready", lambda: any(c.status == admin_pb2.READY and c.nodes for c in fed.admin.ListClusters(
            admin_pb2.ListClustersRequest()).clusters))
        fed.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        fed.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        yield fed
    finally:
        fed.close()


def training(pods: int, policy: common_pb2.LifecyclePolicy, max_retry: int | None = None) -> common_pb2.JobSpec:
    """A gang of 4-GPU pods within one spine (tier 2), running long enough for the faults."""
    spec = common_pb2.JobSpec(
        name="train", queue="train", annotations={"federation.dev/sim-duration": "120s"}, policies=[policy],
        network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=2),
        tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "4", "cpu": "8"})])
    if max_retry is not None:
        spec.max_retry = max_retry
    return spec


def restart_pod(timeout: int = 0) -> common_pb2.LifecyclePolicy:
    policy = common_pb2.LifecyclePolicy(events=["PodFailed", "Unknown"], action="RestartPod")
    if timeout:
        policy.timeout.CopyFrom(Duration(seconds=timeout))
    return policy


def spine(node: str) -> str:
    return node.rsplit("-", 2)[0]  # h100-<spine>-<leaf>-<n>


def test_restart_pod_restarts_only_the_failed_pod_in_the_same_hypernode(fed: OneCluster) -> None:
    job_id = fed.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=training(16, restart_pod()))).job.id
    before = fed.running(job_id).status
    nodes = {p.index: p.node for p in before.placements}
    fed.fault("fail-pod", job_id, "worker", "5")
    after = wait_for("the restart", lambda: (s := fed.job(job_id).status).retries == 1 and s)
    moved = {p.index: p.node for p in after.placements}
    assert after.phase == common_pb2.RUNNING and after.hypernode == before.hypernode
    assert {i: n for i, n in moved.items() if i != 5} == {i: n for i, n in nodes.items() if i != 5}  # 15 stay
    assert spine(moved[5]) == spine(nodes[5])
    events = [e for e in fed.events(job_id) if e.type == "PodRestarted"]
    assert len(events) == 1 and "RestartPod after PodFailed on worker[5]" in events[0].message
    assert "(retry 1 of 3)" in events[0].message


def test_a_lost_node_restarts_each_of_its_pods_elsewhere_under_the_same_hypernode(fed: OneCluster) -> None:
    job_id = fed.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=training(16, restart_pod()))).job.id
    nodes = {p.index: p.node for p in fed.running(job_id).status.placements}
    lost = nodes[5]
    fed.fault("fail-node", lost)  # event Unknown for each pod on it
    on_it = {i for i, n in nodes.items() if n == lost}
    after = wait_for("the restarts", lambda: (s := fed.job(job_id).status).retries == len(on_it) and s)
    moved = {p.index: p.node for p in after.placements}
    assert all(moved[i] != lost and spine(moved[i]) == spine(lost) for i in on_it)
    assert {i: n for i, n in moved.items() if i not in on_it} == {i: n for i, n in nodes.items() if i not in on_it}
    counts = sorted(e.message.rsplit("(", 1)[1] for e in fed.events(job_id) if e.type == "PodRestarted")
    assert counts == [f"retry {k + 1} of 3)" for k in range(len(on_it))]  # each restart counted once


def test_a_pod_that_recovers_within_the_timeout_is_not_restarted(fed: OneCluster) -> None:
    # The failure and the recovery go to the agent's fault endpoint from this process, one after the other:
    # no process has to start between them, so a loaded machine cannot stretch the gap past the timeout.
    job_id = fed.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=training(4, restart_pod(timeout=20)))).job.id
    fed.running(job_id)
    for action in ("fail", "recover"):
        urllib.request.urlopen(urllib.request.Request(
            f"http://{fed.agent.admin}/faults/pod/{job_id}/worker/2/{action}", method="POST"), timeout=30).close()
    wait_for("the failure reported", lambda: any(e.type == "PodFailed" for e in fed.events(job_id)))
    fed.fault("fail-pod", job_id, "worker", "3")  # this one stays failed: restarted after the timeout
    status = wait_for("the restart", lambda: (s := fed.job(job_id).status).retries >= 1 and s)
    restarts = [e for e in fed.events(job_id) if e.type == "PodRestarted"]
    assert status.retries == 1 and len(restarts) == 1 and "worker[3]" in restarts[0].message


def test_max_retry_exhausted_fails_the_job_with_the_reason(fed: OneCluster) -> None:
    job_id = fed.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=training(4, restart_pod(), max_retry=1))).job.id
    fed.running(job_id)
    fed.fault("fail-pod", job_id, "worker", "0")
    wait_for("the restart", lambda: fed.job(job_id).status.retries == 1)
    fed.fault("fail-pod", job_id, "worker", "0")
    status = wait_for("Failed", lambda: (s := fed.job(job_id).status).phase == common_pb2.FAILED and s)
    assert status.reason == "PodFailed on worker[0]: failed by fault injection; maxRetry 1 exhausted"
