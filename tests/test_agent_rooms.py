"""The agent's half of a HyperJob's holds: a sub-job sent with its `hyperjob` check pending is placed and booked, not
bound (HELD); the Assign again with the check READY binds it where it was held; a cancel undoes the booking; a hold
not committed in time is undone and the sub-job given back. Another gang placed meanwhile sees the booked room."""

from __future__ import annotations

import asyncio

from federation.kernel.hyperjob import HELD, HOLD_CHECK
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.test_agent_drain import until, updates

GPU = "nvidia.com/gpu"


def sub_job(name: str, pods: int, check: str) -> common_pb2.Job:
    job = common_pb2.Job(id=name, spec=common_pb2.JobSpec(name=name, queue="q", tasks=[common_pb2.TaskSpec(
        name="worker", replicas=pods, resources={GPU: "8", "cpu": "8"})]))
    job.status.admission_checks.add(name=HOLD_CHECK, state=check)
    return job


def agent(hold_seconds: float = 60) -> Agent:
    return Agent("h", {}, SimulatedBackend(load_cluster(tree("h", [1, 4], {GPU: "8", "cpu": "64"})),
                                           default_duration=3600), hold_seconds=hold_seconds)


def free_gpus(a: Agent) -> int:
    return sum(free.get(GPU, 0) for free in a.state.free.values())


async def test_a_sub_job_is_held_then_bound_where_it_was_held() -> None:
    a, seen = agent(), []
    await a.assign(sub_job("s", 2, "PENDING"), attempt=1)
    report = await until(a, agent_pb2.HELD, seen)
    assert report.attempt == 1 and report.reason.startswith("2 pods placed under ")
    assert "s" not in a.jobs and free_gpus(a) == 16  # booked, not bound: the room is taken, no pod made
    assert not a.backend.managed()
    # A gang placed meanwhile sees the room as taken.
    await a.assign(common_pb2.Job(id="other", spec=common_pb2.JobSpec(name="other", queue="q", tasks=[
        common_pb2.TaskSpec(name="worker", replicas=3, resources={GPU: "8"})])), attempt=1)
    assert (await until(a, agent_pb2.REJECTED, seen)).job_id == "other"
    # The same order again (a resend) changes nothing; its HELD is said again.
    held_nodes = sorted(p.node for p in a._rooms["s"].placement.pods)
    await a.assign(sub_job("s", 2, HELD), attempt=1)
    assert sorted(p.node for p in a._rooms["s"].placement.pods) == held_nodes and "s" not in a.jobs
    # The commit: bound where it was held.
    await a.assign(sub_job("s", 2, "READY"), attempt=1)
    bound = await until(a, agent_pb2.BOUND, seen)
    assert sorted(p.node for p in bound.placements) == held_nodes
    assert "s" in a.jobs and not a._rooms and free_gpus(a) == 16


async def test_a_cancelled_or_expired_hold_gives_its_room_back() -> None:
    a, seen = agent(hold_seconds=0.3), []
    await a.assign(sub_job("s", 2, "PENDING"), attempt=1)
    await until(a, agent_pb2.HELD, seen)
    await a.remove("s", 1, "every hold released")
    assert not a._rooms and free_gpus(a) == 32
    await a.assign(sub_job("t", 4, "PENDING"), attempt=1)
    await until(a, agent_pb2.HELD, seen)
    assert free_gpus(a) == 0
    rejected = await until(a, agent_pb2.REJECTED, seen)  # nobody commits within 0.3 s
    assert rejected.job_id == "t" and rejected.reason == "its room was held 0.3 s and its HyperJob was not committed"
    assert not a._rooms and free_gpus(a) == 32 and "t" not in a.desired
    # A commit that comes after is answered with what was done: the attempt was given back (the federation runs the
    # sub-job again, another attempt), and nothing is bound.
    await a.assign(sub_job("t", 4, "READY"), attempt=1)
    await asyncio.sleep(0.1)
    again = updates(a)
    assert [(u.job_id, u.type) for u in again] == [("t", agent_pb2.REJECTED)] and "t" not in a.jobs
