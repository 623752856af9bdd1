"""What an agent reports its gangs hold (Inventory.managed, the server's drift alarm) is kept as a running total as
gangs are bound, restart pods, move and leave, rather than summed over every gang at every inventory (a burst of
10,000 bindings sent 10,000 inventories, each summing every gang: most of the agent's CPU). The total must stay the
sum it replaced through each of those changes."""

from __future__ import annotations

import asyncio

from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.test_agent_drain import until

GPU = "nvidia.com/gpu"


def summed(agent: Agent) -> dict[str, int]:
    total: dict[str, int] = {}
    for job in agent.jobs.values():
        for resource, amount in job.held().items():
            total[resource] = total.get(resource, 0) + amount
    return {r: a for r, a in total.items() if a}


def reported(agent: Agent) -> dict[str, int]:
    return dict(agent.inventory().inventory.managed.amounts)


def job(name: str, pods: int) -> common_pb2.Job:
    task = common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "4", "cpu": "8"})
    task.policies.add(events=["PodFailed"], action="RestartPod")
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(name=name, queue="q", tasks=[task]))


async def test_the_gangs_total_stays_their_sum_as_they_bind_restart_move_and_leave() -> None:
    agent = Agent("h", {}, SimulatedBackend(load_cluster(tree("h", [1, 4], {GPU: "8", "cpu": "64"})),
                                            default_duration=3600))
    seen: list[agent_pb2.JobUpdate] = []
    for name, pods in (("a", 2), ("b", 3), ("c", 1)):
        await agent.assign(job(name, pods), attempt=1)
    assert reported(agent) == summed(agent) == {GPU: 24, "cpu": 48_000}
    # A pod of a restarts by its policy: off its node, onto another, the gang's total the same.
    failed = agent.jobs["a-1"].pods[0]
    assert agent.pod_failed("a-1", failed.task, failed.index, "OOMKilled")
    await until(agent, agent_pb2.POD_RESTARTED, seen)
    assert reported(agent) == summed(agent) == {GPU: 24, "cpu": 48_000}
    # An operator drains b's nodes with no room left for it here: it leaves the cluster.
    for node in sorted({p.node for p in agent.jobs["b-1"].pods}):
        done = await agent.order_node(agent_pb2.NodeOrder(action="drain", kind="node", name=node, grace_seconds=0.1,
                                                          order_id=node))
        assert done.done, done.message
    await until(agent, agent_pb2.EVACUATED, seen)
    await asyncio.sleep(0.2)
    assert "b-1" not in agent.jobs
    assert reported(agent) == summed(agent) == {GPU: 12, "cpu": 24_000}
    # Cancelled: c goes, a alone is left.
    await agent.remove("c-1", 1, "cancelled")
    assert reported(agent) == summed(agent) == {GPU: 8, "cpu": 16_000}
    for job_id in list(agent.jobs):
        await agent.remove(job_id, 1, "cancelled")
    assert reported(agent) == summed(agent) == {}
