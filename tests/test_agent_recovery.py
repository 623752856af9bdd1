"""The agent applies lifecycle policies to the pods it runs: restarts in place, timeouts, maxRetry."""

import asyncio

import pytest
from google.protobuf.duration_pb2 import Duration

from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.placement import PodPlacement
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.kubehelp import drain as updates

GPU = "nvidia.com/gpu"


async def wait_for_update(agent: Agent, kind: int) -> list[agent_pb2.JobUpdate]:
    sent: list[agent_pb2.JobUpdate] = []
    for _ in range(100):
        sent += updates(agent)
        if any(u.type == kind for u in sent):
            return sent
        await asyncio.sleep(0.1)
    raise AssertionError(f"no update of type {kind} in {[u.type for u in sent]}")


def make_agent() -> Agent:
    # 2 spines (tier 2) x 4 leaves x 4 nodes of 8 GPUs
    state = load_cluster(tree("h", [2, 4, 4], {GPU: "8", "cpu": "64"}))
    return Agent("h100", {}, SimulatedBackend(state, default_duration=3600))


def gang(policies: list[common_pb2.LifecyclePolicy], max_retry: int | None = None, pods: int = 16) -> common_pb2.Job:
    spec = common_pb2.JobSpec(name="train", queue="q", policies=policies,
                              network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=2),
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "8"})])
    if max_retry is not None:
        spec.max_retry = max_retry
    return common_pb2.Job(id="train-1", spec=spec)


def restart_task(timeout: int | None = None, action: str = "RestartTask") -> common_pb2.LifecyclePolicy:
    p = common_pb2.LifecyclePolicy(events=["PodFailed", "Unknown"], action=action)
    if timeout is not None:
        p.timeout.CopyFrom(Duration(seconds=timeout))
    return p


async def settle(agent: Agent) -> None:
    while agent._acting:
        await asyncio.gather(*agent._acting)


@pytest.mark.parametrize("action", ["RestartPod", "RestartTask"])
async def test_a_restart_recreates_the_pods_volcano_names_under_the_same_hypernode(action: str) -> None:
    agent = make_agent()
    policy = common_pb2.LifecyclePolicy(events=["PodFailed", "Unknown"], action=action)
    await agent.assign(gang([policy], pods=12), attempt=1)  # one spine, with 4 nodes to spare
    bound = updates(agent)[-1]
    assert bound.type == agent_pb2.BOUND and bound.tier == 2
    before = {(p.task, p.index): p.node for p in bound.placements}
    lost = before[("worker", 3)]
    binds: list[int] = []
    bind = agent.backend.bind

    async def counted(job: object, pods: list[PodPlacement]) -> None:
        binds.append(len(pods))
        await bind(job, pods)  # type: ignore[arg-type]

    agent.backend.bind = counted  # type: ignore[method-assign]
    assert agent.node_ready(lost, False)  # the node goes: its pod is lost (event Unknown)
    await settle(agent)
    sent = updates(agent)
    assert [u.type for u in sent] == [agent_pb2.POD_FAILED, agent_pb2.POD_RESTARTED]
    restarted = sent[-1]
    after = {(p.task, p.index): p.node for p in restarted.placements}
    assert binds == [1 if action == "RestartPod" else 12] and len(after) == 12
    assert after[("worker", 3)] != lost and restarted.hypernode == bound.hypernode
    assert restarted.retries == 1 and f"{action} after Unknown on worker[3]" in restarted.reason
    assert agent.state.free[lost][GPU] == 8  # the lost pod's share was released
    if action == "RestartPod":  # the event's pod only: the other 11 never stopped
        assert {k: v for k, v in after.items() if k != ("worker", 3)} == {k: v for k, v in before.items()
                                                                           if k != ("worker", 3)}


async def test_a_pod_that_recovers_within_the_timeout_is_not_restarted() -> None:
    agent = make_agent()
    await agent.assign(gang([restart_task(timeout=1)], pods=12), attempt=1)
    node = updates(agent)[-1].placements[0].node
    agent.node_ready(node, False)
    agent.node_ready(node, True)  # back before the timeout
    await asyncio.sleep(1.3)
    assert [u.type for u in updates(agent)] == [agent_pb2.POD_FAILED]
    agent.node_ready(node, False)  # this time it stays lost past the timeout
    await asyncio.sleep(1.3)
    await settle(agent)
    assert [u.type for u in updates(agent)] == [agent_pb2.POD_FAILED, agent_pb2.POD_RESTARTED]


async def test_max_retry_exhausted_fails_the_job_with_the_reason() -> None:
    agent = make_agent()
    await agent.assign(gang([restart_task()], max_retry=2, pods=4), attempt=1)
    updates(agent)
    for _ in range(3):
        agent.pod_failed("train-1", "worker", 0, "exit code 137")
        await settle(agent)
    sent = [u for u in updates(agent) if u.type != agent_pb2.POD_FAILED]
    assert [u.type for u in sent] == [agent_pb2.POD_RESTARTED, agent_pb2.POD_RESTARTED, agent_pb2.JOB_FAILED]
    assert sent[-1].reason == "PodFailed on worker[0]: exit code 137; maxRetry 2 exhausted"
    assert "train-1" not in agent.jobs and all(f[GPU] == 8 for f in agent.state.free.values())


async def test_complete_job_and_no_policy_end_the_job() -> None:
    agent = make_agent()
    await agent.assign(gang([common_pb2.LifecyclePolicy(events=["PodFailed"], action="CompleteJob")], pods=2), 1)
    agent.pod_failed("train-1", "worker", 1, "done early")
    await settle(agent)
    assert updates(agent)[-1].type == agent_pb2.JOB_SUCCEEDED
    await agent.assign(gang([], pods=2), 2)
    agent.pod_failed("train-1", "worker", 0, "segfault")
    await settle(agent)
    last = updates(agent)[-1]
    assert last.type == agent_pb2.JOB_FAILED and "no lifecycle policy handles PodFailed" in last.reason


async def test_a_restart_with_no_room_within_the_tier_limit_fails_the_job() -> None:
    agent = make_agent()
    # 16 pods fill their spine; the lost pod alone must come back under it (a whole task could move)
    await agent.assign(gang([restart_task(action="RestartPod")]), attempt=1)
    lost = updates(agent)[-1].placements[0].node
    agent.node_ready(lost, False)
    await settle(agent)
    last = updates(agent)[-1]
    assert last.type == agent_pb2.JOB_FAILED
    assert last.reason.endswith("the restart failed: no HyperNode of tier 2 or below can hold 1 pods needing "
                                "nvidia.com/gpu=8")


class SlowBackend(SimulatedBackend):
    """Deleting takes a moment, as it does against an API server: other work interleaves."""

    async def delete(self, job, pods=None) -> None:  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.05)
        await super().delete(job, pods)


async def test_a_cancel_racing_a_policys_ending_releases_the_job_once() -> None:
    agent = Agent("h100", {}, SlowBackend(make_agent().state, default_duration=3600))
    await agent.assign(gang([], pods=4), attempt=1)  # no policy: a failure ends the job
    agent.pod_failed("train-1", "worker", 0, "segfault")
    await asyncio.gather(agent.remove("train-1", 1, "cancelled"), settle(agent))
    assert "train-1" not in agent.jobs
    assert all(f[GPU] == 8 for f in agent.state.free.values())  # released once, not twice


def policy(action: str, event: str, seconds: float | None = None) -> common_pb2.LifecyclePolicy:
    p = common_pb2.LifecyclePolicy(events=[event], action=action)
    if seconds is not None:
        p.timeout.CopyFrom(Duration(seconds=int(seconds), nanos=int(seconds % 1 * 1e9)))
    return p


def with_annotations(job: common_pb2.Job, **annotations: str) -> common_pb2.Job:
    job.spec.annotations.update({f"federation.dev/{k.replace('_', '-')}": v for k, v in annotations.items()})
    return job


async def until(agent: Agent, kind: int) -> list[agent_pb2.JobUpdate]:
    """The updates sent until one of `kind` (the job's end, a restart) is among them, and any the actions
    under way then add."""
    sent = await wait_for_update(agent, kind)
    await settle(agent)
    return sent + updates(agent)


async def test_pods_stuck_pending_past_the_timeout_are_restarted_until_max_retry() -> None:
    agent = make_agent()
    job = with_annotations(gang([policy("RestartTask", "PodPending", 0.2)], max_retry=2, pods=4),
                           sim_start_delay="1h")  # an image that never arrives
    await agent.assign(job, attempt=1)
    sent = await until(agent, agent_pb2.JOB_FAILED)
    kinds = [u.type for u in sent]
    assert kinds.count(agent_pb2.POD_RESTARTED) == 2  # retries count over the job, whichever pod is stuck
    assert kinds[-1] == agent_pb2.JOB_FAILED
    assert sent[-1].reason.startswith("PodPending on worker[")
    assert sent[-1].reason.endswith("created, not running (still Pending after 0.2s); maxRetry 2 exhausted")
    assert all(f[GPU] == 8 for f in agent.state.free.values())


async def test_pods_that_start_within_the_pending_timeout_run_to_the_end() -> None:
    agent = make_agent()
    job = with_annotations(gang([policy("RestartTask", "PodPending", 1)], pods=4),
                           sim_start_delay="0.2s", sim_duration="0.5s")
    await agent.assign(job, attempt=1)
    sent = await until(agent, agent_pb2.JOB_SUCCEEDED)
    assert [u.type for u in sent] == [agent_pb2.BOUND, agent_pb2.JOB_SUCCEEDED]
    assert sent[-1].reason == "all pods completed"


def driver_and_workers(policies: list[common_pb2.LifecyclePolicy]) -> common_pb2.Job:
    """An MPI-style job: the driver finishes when the work is done; the workers serve it until then."""
    job = gang(policies, pods=4)
    job.spec.tasks.insert(0, common_pb2.TaskSpec(
        name="driver", replicas=1, resources={"cpu": "4"},
        pod_template_json='{"metadata": {"annotations": {"federation.dev/sim-duration": "0.3s"}}}'))
    return job


async def test_a_completed_task_ends_the_job_under_complete_job() -> None:
    agent = make_agent()  # the workers would run for an hour
    await agent.assign(driver_and_workers([policy("CompleteJob", "TaskCompleted")]), attempt=1)
    sent = await until(agent, agent_pb2.JOB_SUCCEEDED)
    assert [u.type for u in sent] == [agent_pb2.BOUND, agent_pb2.JOB_SUCCEEDED]
    assert sent[-1].reason == "CompleteJob after TaskCompleted of driver: all its pods succeeded"
    assert "train-1" not in agent.jobs and all(f[GPU] == 8 for f in agent.state.free.values())


async def test_without_a_policy_a_completed_task_waits_for_the_rest_of_the_job() -> None:
    agent = make_agent()
    await agent.assign(driver_and_workers([]), attempt=1)
    updates(agent)
    agent.pod_phase("train-1", 1, "driver", 0, "Succeeded", "completed")
    await settle(agent)
    assert "train-1" in agent.jobs and updates(agent) == []
    for i in range(4):
        agent.pod_phase("train-1", 1, "worker", i, "Succeeded", "completed")
    await settle(agent)  # the job's end is reported once what it left is cleared away
    (done,) = updates(agent)
    assert (done.type, done.reason) == (agent_pb2.JOB_SUCCEEDED, "all pods completed")


async def test_a_restarted_task_after_completion_runs_again() -> None:
    agent = make_agent()
    await agent.assign(driver_and_workers([policy("RestartTask", "TaskCompleted")]), attempt=1)
    sent = await until(agent, agent_pb2.POD_RESTARTED)
    restarted = next(u for u in sent if u.type == agent_pb2.POD_RESTARTED)
    assert restarted.retries == 1 and len(restarted.placements) == 5
    assert restarted.reason == "RestartTask after TaskCompleted of driver: all its pods succeeded (retry 1 of 3)"
    assert agent.jobs["train-1"].done == set()  # the driver runs again, and will complete again


class Survivors(SimulatedBackend):
    """Pods of an earlier run of the agent, some of them gone while nobody watched."""

    def __init__(self, state, found) -> None:  # type: ignore[no-untyped-def]
        super().__init__(state, default_duration=3600)
        self.found = found
        self.deleted: list[list[tuple[str, int]] | None] = []

    async def adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        found, self.found = self.found, []
        return found

    async def delete(self, job, pods=None) -> None:  # type: ignore[no-untyped-def]
        self.deleted.append(None if pods is None else [(p.task, p.index) for p in pods])
        await super().delete(job, pods)


def survivors(pods: int, of: int) -> Survivors:
    """`pods` of a gang of `of` found on the first leaf's nodes and its neighbour's."""
    state = make_agent().state
    nodes = sorted(state.free)
    return Survivors(state, [PodPlacement("worker", i, nodes[i]) for i in range(of) if i < pods])


async def test_a_gang_found_in_pieces_keeps_its_survivors_under_a_job_unknown_policy() -> None:
    backend = survivors(3, of=4)
    agent = Agent("h100", {}, backend)
    await agent.assign(gang([policy("RestartPod", "JobUnknown")], pods=4), attempt=1)
    sent = await until(agent, agent_pb2.POD_RESTARTED)
    assert [u.type for u in sent] == [agent_pb2.BOUND, agent_pb2.POD_RESTARTED]
    assert sent[0].reason == "adopted 3 running pods after the agent restarted"
    before = {p.index: p.node for p in sent[0].placements}
    after = {p.index: p.node for p in sent[1].placements}
    assert sorted(after) == [0, 1, 2, 3] and {i: after[i] for i in before} == before  # the survivors stay
    assert sent[1].reason == ("RestartPod after JobUnknown: the agent restarted and found 3 of the gang's 4 pods "
                              "(retry 1 of 3)")
    assert backend.deleted == [[]]  # nothing of the survivors was deleted (only the missing pod, not there)


async def test_without_a_policy_a_gang_found_in_pieces_is_placed_again_whole() -> None:
    backend = survivors(3, of=4)
    agent = Agent("h100", {}, backend)
    await agent.assign(gang([], pods=4), attempt=1)
    (bound,) = updates(agent)
    assert bound.type == agent_pb2.BOUND and len(bound.placements) == 4 and "adopted" not in bound.reason
    assert backend.deleted == [None]  # the pieces went first
    assert sum(8 - f[GPU] for f in agent.state.free.values()) == 32  # counted once: the new gang's


async def test_a_gang_started_at_its_minimum_takes_its_other_replicas_when_room_comes() -> None:
    agent = make_agent()
    blocker = common_pb2.Job(id="blocker-1", spec=common_pb2.JobSpec(name="blocker", queue="q", tasks=[
        common_pb2.TaskSpec(name="w", replicas=30, resources={GPU: "8"})]))
    await agent.assign(blocker, attempt=1)  # 30 of the 32 nodes
    elastic = common_pb2.Job(id="elastic-1", spec=common_pb2.JobSpec(name="elastic", queue="q", min_available=2, tasks=[
        common_pb2.TaskSpec(name="worker", replicas=4, resources={GPU: "8"})]))
    await agent.assign(elastic, attempt=1)
    bound = updates(agent)[-1]
    assert bound.type == agent_pb2.BOUND and len(bound.placements) == 2  # the minimum, as Volcano binds it
    await agent.remove("blocker-1", 1, "done")
    while agent._inventory_due is not None:  # the room is looked at with the next inventory (a burst's one)
        await asyncio.sleep(0.01)
    await settle(agent)
    grown = [u for u in updates(agent) if u.type == agent_pb2.PODS_ADDED]
    assert len(grown) == 1 and sorted(p.index for p in grown[0].placements) == [0, 1, 2, 3]
    assert grown[0].reason == "2 more replicas joined (4 running)"
    for i in range(4):
        agent.pod_phase("elastic-1", 1, "worker", i, "Succeeded", "completed")
    await settle(agent)
    assert updates(agent)[-1].type == agent_pb2.JOB_SUCCEEDED
