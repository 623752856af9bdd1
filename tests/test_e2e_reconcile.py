"""One truth about what runs where (issue 26), with real processes: a server, a member agent on the test bed's
real API server (KWOK running the pods) and simulated agents. A restarted agent deletes the gangs the
federation moved away while it was gone; a second agent with a taken name is refused; a job the member
cluster forbids is sent there once and holds nothing there."""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.control.rejections import FLOOR
from federation.testbed.cluster import Testbed
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.kubehelp import GPU, JOBS, gpu_cluster, pods
from tests.netproxy import Proxy
from tests.test_e2e_agents import CLUSTERS, wait_for

pytestmark = pytest.mark.e2e
TIMEOUT, GRACE = 3, 3  # the server's --heartbeat-timeout and --lost-grace: a killed agent's gangs move soon


def metric(address: str, name: str) -> float:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


class Federation:
    def __init__(self, db_url: URL, *serve: str) -> None:
        self.server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), *serve)
        self.agents: dict[str, AgentProcess] = {}
        channel = grpc.insecure_channel(self.server.address)
        self.jobs, self.admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)

    def setup_queue(self) -> None:
        self.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        self.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))

    def cluster(self, name: str) -> admin_pb2.Cluster | None:
        return next((c for c in self.admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                     if c.name == name), None)

    def ready(self, name: str, gpus: int) -> admin_pb2.Cluster:
        return wait_for(f"{name} Ready", lambda: (c := self.cluster(name)) is not None and c.status == admin_pb2.READY
                        and c.allocatable.get(GPU) == str(gpus) and c)

    def submit(self, replicas: int, namespace: str = "", duration: str = "600s") -> str:
        spec = common_pb2.JobSpec(name="gang", queue="train", namespace=namespace,
                                  annotations={"federation.dev/sim-duration": duration},
                                  tasks=[common_pb2.TaskSpec(name="worker", replicas=replicas,
                                                             resources={GPU: "8", "cpu": "8"})])
        return self.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job.id

    def job(self, job_id: str) -> common_pb2.Job:
        return self.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))

    def events(self, job_id: str) -> list[common_pb2.JobEvent]:
        stream = self.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(job_id=job_id, after_sequence=0), timeout=1)
        out = []
        try:
            out.extend(stream)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                raise
        return out

    def stop(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        self.server.stop()


@pytest.fixture
def kube_fed(db_url: URL, kube: Testbed, tmp_path: Path) -> Iterator[tuple[Federation, list[str]]]:
    fed = Federation(db_url, "--heartbeat-timeout", str(TIMEOUT), "--lost-grace", str(GRACE))
    config = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig")
    # The kube agent's own fence is long: this test kills it rather than cutting it off.
    agent_args = ["--kubeconfig", str(config), "--namespace", JOBS, "--heartbeat", "0.5", "--fence-after", "600",
                  "--health-listen", "127.0.0.1:0"]
    try:
        yield fed, agent_args
    finally:
        fed.stop()


def test_a_restarted_agent_deletes_the_gangs_the_federation_ran_elsewhere(
        kube_fed: tuple[Federation, list[str]], kube: Testbed) -> None:
    fed, agent_args = kube_fed
    gpu_cluster(kube, (1, 2, 4))  # 8 nodes, 64 GPUs
    fed.agents["k8s"] = AgentProcess("k8s", fed.server.address, *agent_args)
    fed.ready("k8s", 64)
    fed.setup_queue()
    gangs = [fed.submit(2) for _ in range(4)]  # 8 pods, 64 GPUs
    for job_id in gangs:
        wait_for(f"{job_id} Running in k8s", lambda j=job_id: fed.job(j).status.phase == common_pb2.RUNNING)
    assert len(pods(kube)) == 8
    fed.agents.pop("k8s").kill()  # dead: its pods keep running in the cluster
    fed.agents["west"] = AgentProcess("west", fed.server.address, "--simulate", str(CLUSTERS / "h100-spine-leaf.yaml"),
                                      "--heartbeat", "0.5")
    for job_id in gangs:  # lost with k8s after its grace, requeued and run again in west
        wait_for(f"{job_id} moved to west", lambda j=job_id: (s := fed.job(j).status).phase == common_pb2.RUNNING
                 and s.cluster == "west" and s.attempt == 2, timeout=90)
    assert len(pods(kube)) == 8  # the superseded attempts still run: the federation runs these gangs twice

    fed.agents["k8s"] = agent = AgentProcess("k8s", fed.server.address, *agent_args)
    restarted = time.monotonic()
    wait_for("no pod of a superseded attempt left", lambda: not pods(kube), timeout=30)
    took = time.monotonic() - restarted
    status = fed.ready("k8s", 64)
    wait_for("k8s reporting its GPUs free", lambda: fed.cluster("k8s").used.get(GPU, "0") == "0", timeout=30)
    for job_id in gangs:
        orphans = [e for e in fed.events(job_id) if e.type == "OrphansDeleted"]
        assert [(e.cluster, e.attempt) for e in orphans] == [("k8s", 1)], fed.events(job_id)
        assert "deleted 2 pod(s) of attempt 1" in orphans[0].message
        assert fed.job(job_id).status.cluster == "west"  # untouched where it runs now
    assert metric(fed.server.metrics, 'federation_orphan_pods_deleted_total{cluster="k8s"}') == 8
    health = agent.log.decode().split("health on ", 1)[1].split()[0]
    assert metric(health, "member_agent_orphan_pods_deleted_total") == 8
    assert status.status == admin_pb2.READY and took < 30


def test_a_job_the_cluster_forbids_is_sent_there_once_and_holds_no_room_there(
        kube_fed: tuple[Federation, list[str]], kube: Testbed) -> None:
    fed, agent_args = kube_fed
    gpu_cluster(kube)  # 4 nodes, 32 GPUs
    fed.agents["k8s"] = AgentProcess("k8s", fed.server.address, *agent_args)
    fed.ready("k8s", 32)
    fed.setup_queue()
    # The agent's role creates pods in federation-jobs only (deploy/kubernetes/agent/rbac.yaml).
    forbidden = fed.submit(4, namespace="research")
    # The refusal's own reason ("cluster k8s refused it for good: ...") comes first; the cycle after it gives the
    # waiting job's reason per cluster ("k8s: refused it for good: ...").
    reason = wait_for("the cycle's reason naming the refusal",
                      lambda: "k8s: refused it for good" in (r := fed.job(forbidden).status.reason) and r)
    assert "k8s: refused it for good: creating pod research/gang-" in reason, reason  # cluster, step, message
    assert "403 Forbidden" in reason and "forbidden" in reason.split("403 Forbidden", 1)[1], reason
    # Had the refused job kept a reservation of the whole cluster, this one would wait behind it.
    small = fed.submit(1)
    wait_for("the next job Running in k8s", lambda: fed.job(small).status.phase == common_pb2.RUNNING)
    # A transient refusal would have lifted by now: its floor (FLOOR) passed and the cluster's inventory changed
    # (the small job runs there).
    time.sleep(10 * FLOOR)
    dispatched = [e for e in fed.events(forbidden) if e.type == "Dispatched"]
    assert len(dispatched) == 1 and dispatched[0].cluster == "k8s"
    status = fed.job(forbidden).status
    assert status.phase == common_pb2.PENDING and "refused it for good" in status.reason


@pytest.fixture
def sim_fed(db_url: URL) -> Iterator[Federation]:
    fed = Federation(db_url)
    try:
        yield fed
    finally:
        fed.stop()


def test_a_second_agent_with_a_taken_name_is_refused_and_the_first_keeps_its_stream(sim_fed: Federation) -> None:
    fed = sim_fed
    fed.agents["first"] = first = AgentProcess("east", fed.server.address, "--simulate",
                                                str(CLUSTERS / "h100-spine-leaf.yaml"), "--heartbeat", "0.5")
    fed.ready("east", 256)
    fed.setup_queue()
    fed.agents["second"] = second = AgentProcess("east", fed.server.address, "--simulate",
                                                 str(CLUSTERS / "cpu-small.yaml"), "--heartbeat", "0.5")
    wait_for("the second agent refused", lambda: b"already has a live agent" in second.log)
    wait_for("the refusal counted", lambda: metric(fed.server.metrics,
                                                   'federation_agents_refused_total{cluster="east"}') >= 1)
    assert b"refused an agent" in fed.server.log
    time.sleep(3)  # several of the second's retries: each is refused, none replaces the first
    cluster = fed.cluster("east")
    assert cluster.status == admin_pb2.READY and cluster.allocatable.get(GPU) == "256"  # the first's inventory
    assert b"stream to" not in first.log  # its stream was never ended
    job_id = fed.submit(2)  # only the first (the H100 cluster) has GPUs: it places the gang
    wait_for("the gang Running", lambda: fed.job(job_id).status.phase == common_pb2.RUNNING)
    assert fed.job(job_id).status.placements[0].node.startswith("h100-")
    first.stop()  # the first goes: the second is admitted on its next try
    fed.agents.pop("first")
    wait_for("the second agent holding east", lambda: (c := fed.cluster("east")) is not None
             and c.status == admin_pb2.READY and c.allocatable.get(GPU, "0") == "0", timeout=60)


def _logged_at(log: bytes, text: bytes) -> datetime:
    """When a process logged the line holding `text` (its logging format starts with the local time)."""
    line = next(line for line in log.splitlines() if text in line)
    return datetime.strptime(line[:23].decode(), "%Y-%m-%d %H:%M:%S,%f").astimezone(UTC)


def test_an_agent_cut_off_from_the_federation_stops_its_gangs_before_they_run_elsewhere(db_url: URL) -> None:
    """The strict guarantee while the agent lives: cut off (a partition: its stream stays open, nothing flows),
    it stops its gangs after its fence time (the server's lost grace), before the server, a heartbeat timeout
    later, runs them in another cluster."""
    fed = Federation(db_url, "--heartbeat-timeout", "5", "--lost-grace", "5")
    host, port = fed.server.address.rsplit(":", 1)
    proxy = Proxy(lambda: socket.create_connection((host, int(port))))
    try:
        fed.agents["east"] = east = AgentProcess("east", f"127.0.0.1:{proxy.port}", "--simulate",
                                                 str(CLUSTERS / "h100-spine-leaf.yaml"), "--heartbeat", "0.5")
        fed.ready("east", 256)
        fed.setup_queue()
        job_id = fed.submit(4)
        wait_for("Running in east", lambda: fed.job(job_id).status.phase == common_pb2.RUNNING)
        fed.agents["west"] = AgentProcess("west", fed.server.address, "--simulate",
                                          str(CLUSTERS / "h100-spine-leaf.yaml"), "--heartbeat", "0.5")
        fed.ready("west", 256)
        proxy.partition()
        moved = wait_for("the job running in west", lambda: (s := fed.job(job_id).status).cluster == "west"
                         and s.phase == common_pb2.RUNNING and s, timeout=90)
        assert moved.attempt == 2 and moved.retries == 1
        lost = next(e for e in fed.events(job_id) if e.type == "Lost")
        assert b"stopping the 1 gang(s) this cluster runs" in east.log, east.log.decode()[-3000:]
        stopped = _logged_at(east.log, b"stopping the 1 gang(s)")
        assert stopped < lost.time.ToDatetime(tzinfo=UTC)  # east had stopped it before it was moved
        proxy.heal()  # back: its FENCED report is stale by now; it runs nothing
        wait_for("east heard from again", lambda: (c := fed.cluster("east")) is not None
                 and c.status == admin_pb2.READY, timeout=60)
        wait_for("east reporting nothing used", lambda: fed.cluster("east").used.get(GPU, "0") == "0", timeout=30)
        assert fed.job(job_id).status.cluster == "west"
    finally:
        fed.stop()
        proxy.close()
