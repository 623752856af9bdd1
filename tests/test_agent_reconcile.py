"""The agent's reconcile and fence on a simulated cluster, in process: desired against actual per job, stale
attempts named by the server, and the gangs it stops once cut off from the federation."""

from __future__ import annotations

import time

from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.kubehelp import drain

GPU = "nvidia.com/gpu"


def make_agent() -> Agent:
    state = load_cluster(tree("h", [2, 2, 2], {GPU: "8", "cpu": "64"}))  # 8 nodes, 64 GPUs
    return Agent("h100", {}, SimulatedBackend(state, default_duration=3600))


def job(name: str, pods: int = 2, **annotations: str) -> common_pb2.Job:
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations=annotations,
        tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "8"})]))


def free_gpus(agent: Agent) -> int:
    return sum(f.get(GPU, 0) for f in agent.state.free.values())


async def test_an_agent_cut_off_stops_its_gangs_except_those_that_wait_for_their_cluster() -> None:
    agent = make_agent()
    agent.fence_after = 5
    await agent.assign(job("train"), attempt=3)
    await agent.assign(job("patient", **{"federation.dev/on-cluster-lost": "wait"}), attempt=1)
    drain(agent)
    assert free_gpus(agent) == 32
    assert await agent.check_fence() == 0  # heard from just now
    agent.last_contact = time.monotonic() - 6  # no heartbeat acknowledged for longer than the fence time
    assert await agent.check_fence() == 1
    fenced = [u for u in drain(agent) if u.type == agent_pb2.FENCED]
    assert [(u.job_id, u.attempt) for u in fenced] == [("train-1", 3)]
    assert "cut off from the federation for over 5 s" in fenced[0].reason
    assert set(agent.jobs) == {"patient-1"} and free_gpus(agent) == 48
    last_word = {u.job_id: u.type for u in agent.register().register.jobs}
    assert last_word["train-1"] == agent_pb2.FENCED  # said again on the next connection
    assert await agent.check_fence() == 0  # once per cut
    agent.heartbeat_sent()
    agent.heartbeat_acknowledged()
    assert not agent.fenced


async def test_the_server_naming_an_attempt_not_live_releases_it_and_reports_the_pods() -> None:
    agent = make_agent()
    await agent.assign(job("train", pods=3), attempt=1)
    await agent.assign(job("kept"), attempt=2)
    drain(agent)
    reported = agent.reconcile_request().reconcile
    assert {(a.job_id, a.attempt, a.pods) for a in reported.running} == {("train-1", 1, 3), ("kept-1", 2, 2)}
    live = [a for a in reported.running if a.job_id == "kept-1"]
    assert await agent.reconcile(agent_pb2.Reconciled(round=reported.round, live=live)) == 3
    orphans = [u for u in drain(agent) if u.type == agent_pb2.ORPHANS_DELETED]
    assert [(u.job_id, u.attempt, u.pods) for u in orphans] == [("train-1", 1, 3)]
    assert set(agent.jobs) == {"kept-1"} and "train-1" not in agent.desired and free_gpus(agent) == 48
    # An answer for a round never asked about, or asked again, changes nothing.
    assert await agent.reconcile(agent_pb2.Reconciled(round=reported.round, live=[])) == 0
    assert set(agent.jobs) == {"kept-1"}


async def test_a_newer_attempt_replaces_the_old_one_and_a_cancel_of_the_old_one_changes_nothing() -> None:
    agent = make_agent()
    await agent.assign(job("train"), attempt=1)
    await agent.assign(job("train"), attempt=2)
    assert agent.jobs["train-1"].attempt == 2 and agent.desired["train-1"].attempt == 2
    assert free_gpus(agent) == 48  # the first attempt's pods released, not counted twice
    await agent.remove("train-1", 1, "stale cancel")
    assert agent.jobs["train-1"].attempt == 2
    await agent.remove("train-1", 2, "cancelled")
    assert not agent.jobs and not agent.desired and free_gpus(agent) == 64


def _inventories(agent: Agent) -> list[agent_pb2.Inventory]:
    out = []
    while not agent.outbox.empty():
        message = agent.outbox.get_nowait()
        if message.HasField("inventory"):
            out.append(message.inventory)
    return out


async def test_the_gangs_kept_for_are_in_the_inventory_and_a_change_of_them_is_reported() -> None:
    """A job sent back because it fits only on nodes kept for a held gang is offered again when the cluster's
    inventory changes: so the holds the agent keeps nodes for are part of it, and when the federation's holds
    change the agent says so at once, though nothing else in the cluster changed."""
    agent = make_agent()
    await agent.assign(job("big", pods=7), attempt=1)  # 56 of 64 GPUs: one node of 8 left
    _inventories(agent)
    held = [agent_pb2.Hold(job_id="gang-1", pods=1, gpus_per_pod=8)]
    agent.heartbeat_sent()
    agent.heartbeat_acknowledged(held)
    (said,) = _inventories(agent)
    assert list(said.held) == ["gang-1"]
    await agent.assign(job("small", pods=1), attempt=1)
    (rejected,) = [u for u in drain(agent) if u.job_id == "small-1"]
    assert rejected.type == agent_pb2.REJECTED and "kept for a gang the federation holds room for" in \
        rejected.reason
    agent.heartbeat_sent()
    agent.heartbeat_acknowledged(held)  # the same holds: nothing to say
    assert _inventories(agent) == []
    agent.heartbeat_sent()
    agent.heartbeat_acknowledged([])  # gang-1 no longer held (dispatched elsewhere)
    (said,) = _inventories(agent)
    assert list(said.held) == []
    await agent.assign(job("small", pods=1), attempt=2)  # offered again: it runs
    assert [u.type for u in drain(agent) if u.job_id == "small-1"] == [agent_pb2.BOUND]
