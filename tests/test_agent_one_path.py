"""Every pod the agent creates, deletes or stops goes through `reconcile_job`: a policy's restart, a drain's move, the
replicas a gang grows by, its end and a give-back only change the job's desired state, and reconciling it carries
the change out (one path for every change, as a controller-runtime Reconcile). The backend here notes, at each call,
whether `reconcile_job` is on the stack that made it."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.faults import Fault
from member_agent.model import AgentJob
from member_agent.placement import PodPlacement
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.kubehelp import drain as updates
from tests.test_agent_drain import until
from tests.test_agent_recovery import settle

GPU = "nvidia.com/gpu"


def _reconciling() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "reconcile_job":
            return True
        frame = frame.f_back
    return False


class Watched(SimulatedBackend):
    """A simulated cluster that notes, for each write, its kind and whether `reconcile_job` made it."""

    def __init__(self) -> None:
        super().__init__(load_cluster(tree("h", [2, 4], {GPU: "8", "cpu": "64"})), default_duration=3600)
        self.writes: list[tuple[str, str, bool]] = []

    async def bind(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        self.writes.append(("bind", job.job.id, _reconciling()))
        await super().bind(job, pods)

    async def delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None = None) -> None:
        self.writes.append(("delete", job.job.id, _reconciling()))
        await super().delete(job, pods)

    async def end(self, job: AgentJob) -> None:
        self.writes.append(("end", job.job.id, _reconciling()))
        await super().end(job)


def gang(name: str, replicas: int, minimum: int = 0, restart: bool = False) -> common_pb2.Job:
    task = common_pb2.TaskSpec(name="worker", replicas=replicas, resources={GPU: "8"})
    if restart:
        task.policies.add(events=["PodFailed"], action="RestartPod")
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(name=name, queue="q", min_available=minimum,
                                                                    tasks=[task]))


async def test_restarts_moves_growth_ends_and_cancels_all_go_through_reconcile_job() -> None:
    backend = Watched()
    agent = Agent("h", {}, backend)
    seen: list[agent_pb2.JobUpdate] = []
    await agent.assign(gang("train", 2, restart=True), attempt=1)  # 2 of the 8 nodes
    await agent.assign(gang("blocker", 4), attempt=1)  # 4 more
    await agent.assign(gang("elastic", 4, minimum=2), attempt=1)  # its minimum on the last 2
    assert len(agent.jobs["elastic-1"].pods) == 2
    await agent.remove("blocker-1", 1, "cancelled")
    await settle(agent)
    await until(agent, agent_pb2.PODS_ADDED, seen)  # the elastic gang grew into the room
    assert len(agent.jobs["elastic-1"].pods) == 4
    failed = agent.jobs["train-1"].pods[0]
    assert agent.pod_failed("train-1", failed.task, failed.index, "OOMKilled")
    await until(agent, agent_pb2.POD_RESTARTED, seen)
    node = agent.jobs["train-1"].pods[0].node
    assert agent.inject(Fault(0, "node", node, "degraded", "XID 79", rate=1.0))
    moved = await until(agent, agent_pb2.DRAINED, seen)
    assert node not in {p.node for p in moved.placements}
    for i in range(4):
        agent.pod_phase("elastic-1", 1, "worker", i, "Succeeded", "completed")
    await settle(agent)
    await until(agent, agent_pb2.JOB_SUCCEEDED, seen)
    await agent.remove("train-1", 1, "cancelled")
    await settle(agent)
    kinds = [(kind, job) for kind, job, _ in backend.writes]
    # Every kind of change happened: binds of three gangs, the growth, the restart and the move; deletes of the
    # cancelled, the restarted and the moved pods; the succeeded gang's end.
    assert kinds.count(("bind", "elastic-1")) == 2 and kinds.count(("bind", "train-1")) == 3
    assert kinds.count(("delete", "train-1")) == 3 and ("delete", "blocker-1") in kinds
    assert ("end", "elastic-1") in kinds
    assert [w for w in backend.writes if not w[2]] == []


async def test_the_cluster_s_word_on_a_pod_is_taken_once_and_only_for_the_gang_s_live_pod() -> None:
    """The agent, not the backend, knows which pods are its gangs' (`AgentJob.live`): a pod it replaced or deleted
    may still be heard of (its deletion looks like an eviction), and a phase is often said again."""
    agent = Agent("h", {}, Watched())
    seen: list[agent_pb2.JobUpdate] = []
    await agent.assign(gang("train", 2, restart=True), attempt=1)
    held = agent.jobs["train-1"]
    old = held.live[("worker", 0)][0]
    assert old == "train-1-a1-worker-0" and held.live[("worker", 1)] == ("train-1-a1-worker-1", "Pending")
    agent.pod_phase("train-1", 1, "worker", 0, "Running", "", name=old)
    agent.pod_phase("train-1", 1, "worker", 0, "Running", "", name=old)  # said again: nothing new
    assert held.live[("worker", 0)] == (old, "Running")
    agent.pod_phase("train-1", 1, "worker", 0, "Failed", "OOMKilled", name=old)
    agent.pod_phase("train-1", 1, "worker", 0, "Evicted", "the pod was deleted", name=old)  # its deletion after
    await until(agent, agent_pb2.POD_RESTARTED, seen)
    assert [u.type for u in seen].count(agent_pb2.POD_FAILED) == 1
    new = held.live[("worker", 0)][0]
    assert new == "train-1-a1-worker-0-r1" and held.retries == 1
    # The replaced pod's late word is not the new pod's: no failure, no second restart.
    agent.pod_phase("train-1", 1, "worker", 0, "Evicted", "the pod was deleted", name=old)
    agent.pod_phase("train-1", 1, "worker", 0, "Failed", "Error", name=new)
    await until(agent, agent_pb2.POD_FAILED, seen)
    await settle(agent)
    seen += updates(agent)
    assert [u.type for u in seen].count(agent_pb2.POD_FAILED) == 2 and held.retries == 2
    # Pods the agent deletes itself are no longer followed: their deletion is not an eviction.
    await agent.remove("train-1", 1, "cancelled")
    assert held.live == {}
