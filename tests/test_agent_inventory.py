"""The inventory waiting in the agent's outbox: bindings while it waits bring it up to date instead of queueing
more, and it is made when the stream takes it rather than once per binding; a job's end never shows in an
inventory ahead of the update that ends the job, and a job reported bound is never seen without its usage."""

from __future__ import annotations

from federation.v1 import agent_pb2, common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.simulated import SimulatedBackend
from member_agent.state import ClusterState
from member_agent.topology import build, load_objects

GPU = "nvidia.com/gpu"


def agent() -> Agent:
    nodes, hypernodes, _ = load_objects(clusters.tree("n", [2, 4], {GPU: "8", "cpu": "64"}))  # 64 GPUs
    return Agent("c", {}, SimulatedBackend(ClusterState(build(nodes, hypernodes)), default_duration=3600))


def job(name: str, gpus: int) -> common_pb2.Job:
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(name=name, queue="q", tasks=[
        common_pb2.TaskSpec(name="w", replicas=1, resources={GPU: str(gpus)})]))


def taken(a: Agent) -> list[agent_pb2.AgentMessage]:
    out = []
    while not a.outbox.empty():
        out.append(a.outbox.get_nowait())
    return out


def used_gpus(message: agent_pb2.AgentMessage) -> int:
    return message.inventory.used.amounts.get(GPU, 0)


async def test_bindings_while_an_inventory_waits_show_in_it_when_taken_and_it_is_made_once() -> None:
    a = agent()
    made = 0
    inventory = a.inventory

    def counted() -> agent_pb2.AgentMessage:
        nonlocal made
        made += 1
        return inventory()

    a.inventory = counted  # type: ignore[method-assign]
    for i in range(20):  # the stream takes nothing meanwhile
        await a.assign(job(f"j{i}", 2), attempt=1)
    assert made == 1  # the first binding's; the other 19 only said it was behind
    messages = taken(a)
    kinds = [m.WhichOneof("msg") for m in messages]
    assert kinds == ["inventory"] + ["job_update"] * 20  # one inventory, ahead of every update
    assert made == 2  # made again as it was taken
    assert used_gpus(messages[0]) == 40  # every gang reported bound after it, with its usage


async def test_a_jobs_end_is_not_shown_ahead_of_its_update_but_the_bindings_before_it_are() -> None:
    a = agent()
    await a.assign(job("first", 8), attempt=1)
    await a.assign(job("second", 4), attempt=1)  # the waiting inventory is behind by this binding
    await a.remove("first-1", 1, "cancelled")  # frees 8 GPUs
    messages = taken(a)
    first = messages[0]
    assert first.WhichOneof("msg") == "inventory"
    assert used_gpus(first) == 12  # both bindings, and not the end that came after
    ends = [i for i, m in enumerate(messages) if m.HasField("job_update") and m.job_update.job_id == "first-1"
            and m.job_update.type != agent_pb2.BOUND]
    later = [m for m in messages[1:] if m.HasField("inventory")]
    assert all(used_gpus(m) == 4 for m in later) and all(messages.index(m) > ends[0] for m in later)
