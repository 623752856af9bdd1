"""Proactive drain in the agent: a gang on hardware that turns degraded moves at its checkpoint, within its tier
limit, in this cluster or (with no healthy room) asks the federation for healthier hardware and runs on meanwhile;
an operator's drain waits the same way, and with no room here sends the gang back to the federation."""

import asyncio
import time

import pytest

from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.drain import drain_timing
from member_agent.faults import Fault, FaultError, parse_faults
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.kubehelp import drain as updates
from tests.test_agent_recovery import settle

GPU = "nvidia.com/gpu"


def make_agent(fanout: list[int]) -> Agent:
    return Agent("h100", {}, SimulatedBackend(load_cluster(tree("h", fanout, {GPU: "8", "cpu": "64"})),
                                              default_duration=3600))


def job(pods: int, checkpoint: str = "", tier: int = 1, name: str = "train") -> common_pb2.Job:
    spec = common_pb2.JobSpec(name=name, queue="q",
                              network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=tier),
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "8"})])
    if checkpoint:
        spec.annotations["federation.dev/checkpoint-interval"] = checkpoint
    return common_pb2.Job(id=f"{name}-1", spec=spec)


async def until(agent: Agent, kind: int, seen: list[agent_pb2.JobUpdate], timeout: float = 20) -> agent_pb2.JobUpdate:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += updates(agent)
        found = [u for u in seen if u.type == kind]
        if found:
            return found[-1]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no update {kind} in {[u.type for u in seen]}")


def test_the_timing_rule_waits_for_the_checkpoint_unless_waiting_risks_more() -> None:
    # 25 minutes into a 30-minute interval at 0.1 failures per hour: wait 5 minutes for the checkpoint.
    wait = drain_timing(1500, 1800, 0.1)
    assert wait.delay == pytest.approx(300)
    # 1 minute after a checkpoint, at a high failure rate: the 29 minutes of waiting risk more than 60 s of work.
    assert drain_timing(60, 1800, 2.0).delay == 0
    # the same minute at a low rate: waiting is cheaper
    assert drain_timing(60, 1800, 0.01).delay == pytest.approx(1740)
    assert drain_timing(500, None, 0.1).delay == 0  # no checkpoint known: nothing to wait for
    assert drain_timing(700, 1800, 0.0).delay == pytest.approx(1100)  # an operator's drain: the checkpoint


def test_fault_schedules_parse_and_bad_ones_name_the_entry() -> None:
    faults = parse_faults("- {at: 2m, node: n1, state: degraded, reason: XID 79}\n- {at: 30s, hypernode: s0, "
                          "state: degraded}\n")
    assert faults == [Fault(30, "hypernode", "s0", "degraded"), Fault(120, "node", "n1", "degraded", "XID 79")]
    with pytest.raises(FaultError, match=r"faults\[0\]\.state"):
        parse_faults("- {at: 1s, hypernode: s0, state: failed}\n")
    with pytest.raises(FaultError, match=r"faults\[0\]: give exactly one of node or hypernode"):
        parse_faults("- {at: 1s, state: failed}\n")


async def test_a_gang_on_a_node_that_degrades_moves_at_its_checkpoint_inside_its_tier() -> None:
    agent = make_agent([2, 4])  # 2 leaves of 4 nodes
    await agent.assign(job(2, checkpoint="2s"), attempt=1)
    seen = updates(agent)
    bound = [u for u in seen if u.type == agent_pb2.BOUND][-1]
    leaf = bound.hypernode
    node = bound.placements[0].node
    await asyncio.sleep(0.5)  # half a second of work since it started: moving now would lose it
    started = time.monotonic()
    assert agent.inject(Fault(0, "node", node, "degraded", "XID 79", rate=0.01))
    planned = await until(agent, agent_pb2.DRAIN_PLANNED, seen)
    assert f"node {node} degraded (XID 79)" in planned.reason and "next checkpoint" in planned.reason
    moved = await until(agent, agent_pb2.DRAINED, seen)
    assert time.monotonic() - started >= 1.0  # it waited for the checkpoint (1.5 s on) rather than moving at once
    nodes = {p.node for p in moved.placements}
    assert node not in nodes and len(nodes) == 2
    assert moved.hypernode == leaf and moved.tier == 1  # still inside one leaf, as its hard tier limit says
    assert moved.retries == 0  # a move is not a retry
    await settle(agent)


async def test_with_no_healthy_room_here_a_degraded_gang_runs_on_and_asks_the_federation() -> None:
    """Issue 42 (5): sent back with nowhere healthy to go, it restarted on hardware as degraded (25 s down, attempt
    2, for nothing). It runs on, and the federation moves it only to healthy room (tests/test_e2e_drain.py)."""
    agent = make_agent([1, 2])  # one leaf of 2 nodes
    await agent.assign(job(2), attempt=1)
    seen = updates(agent)
    assert agent.inject(Fault(0, "node", "h0-0", "degraded", "XID 48"))
    wanted = await until(agent, agent_pb2.MOVE_WANTED, seen)
    assert wanted.reason == "node h0-0 degraded (XID 48); no healthy room in this cluster"
    assert "train-1" in agent.jobs and agent.state.used.get(GPU) == 16  # still running, nothing stopped
    assert not [u for u in seen if u.type in (agent_pb2.EVACUATED, agent_pb2.POD_RESTARTED)]
    # Said once while nothing changes; the node healing calls it off, once.
    agent.health_changed()
    await asyncio.sleep(0.3)
    assert not [u for u in updates(agent) if u.type == agent_pb2.MOVE_WANTED]
    assert agent.inject(Fault(0, "node", "h0-0", "healthy"))
    seen = []
    called_off = await until(agent, agent_pb2.MOVE_WANTED, seen)
    assert called_off.reason == "" and "train-1" in agent.jobs
    await settle(agent)


async def test_an_operator_drain_with_no_room_here_sends_the_gang_back_to_the_federation() -> None:
    """An operator's drain takes the node away: the gang leaves whatever the rest of the federation offers."""
    agent = make_agent([1, 2])
    await agent.assign(job(2), attempt=1)
    seen = updates(agent)
    done = await agent.order_node(agent_pb2.NodeOrder(action="drain", kind="node", name="h0-1", grace_seconds=0.1,
                                                      order_id="o"))
    assert done.done, done.message
    evacuated = await until(agent, agent_pb2.EVACUATED, seen)
    assert "node h0-1 drained by an operator" in evacuated.reason and "no healthy room" in evacuated.reason
    assert not agent.jobs and not agent.state.used.get(GPU)
    await settle(agent)


async def test_a_degraded_link_moves_the_gang_to_another_hypernode_and_recovery_calls_it_off() -> None:
    agent = make_agent([3, 2])
    await agent.assign(job(2, checkpoint="1h", name="a"), attempt=1)
    seen = updates(agent)
    leaf = [u for u in seen if u.type == agent_pb2.BOUND][-1].hypernode
    agent.inject(Fault(0, "hypernode", leaf, "degraded", "CableErrors", rate=0.0))
    planned = await until(agent, agent_pb2.DRAIN_PLANNED, seen)
    assert f"HyperNode {leaf} links degraded (CableErrors)" in planned.reason
    assert agent._drains
    agent.inject(Fault(0, "hypernode", leaf, "healthy"))  # repaired before the checkpoint: it stays
    assert not agent._drains


async def test_an_operator_drain_moves_gangs_off_a_hypernode_within_its_grace() -> None:
    agent = make_agent([2, 4])
    await agent.assign(job(2, checkpoint="1h"), attempt=1)
    seen = updates(agent)
    leaf = [u for u in seen if u.type == agent_pb2.BOUND][-1].hypernode
    said = await agent.order_node(agent_pb2.NodeOrder(action="drain", kind="hypernode", name=leaf,
                                                      grace_seconds=0.5))
    assert said.done and said.message == f"drain of hypernode {leaf} (4 nodes)"
    moved = await until(agent, agent_pb2.DRAINED, seen)
    assert {p.node for p in moved.placements}.isdisjoint(agent.state.nodes_under(leaf))
    assert moved.hypernode != leaf
    assert not set(agent.state.nodes_under(leaf)) & agent.state.ready  # cordoned
    await agent.order_node(agent_pb2.NodeOrder(action="uncordon", kind="hypernode", name=leaf))
    assert set(agent.state.nodes_under(leaf)) <= agent.state.ready and not agent.draining
    missing = await agent.order_node(agent_pb2.NodeOrder(action="cordon", kind="node", name="nope", order_id="7"))
    assert (missing.order_id, missing.done, missing.message) == ("7", False, "node nope is not in cluster h100")
    await settle(agent)


async def test_a_node_that_fails_fails_its_pods_and_the_policy_restarts_them_elsewhere() -> None:
    agent = make_agent([1, 4])
    gang = job(2)
    gang.spec.policies.append(common_pb2.LifecyclePolicy(events=["Unknown"], action="RestartPod"))
    await agent.assign(gang, attempt=1)
    seen = updates(agent)
    node = [u for u in seen if u.type == agent_pb2.BOUND][-1].placements[0].node
    assert agent.inject(Fault(0, "node", node, "failed", "XID 79"))
    failed = await until(agent, agent_pb2.POD_FAILED, seen)
    assert failed.reason == f"Unknown: node {node} failed (XID 79)"
    restarted = await until(agent, agent_pb2.POD_RESTARTED, seen)
    assert node not in {p.node for p in restarted.placements} and len(restarted.placements) == 2
    assert node not in agent.state.ready and agent.state.failed[node].reasons == ("XID 79",)
    agent.inject(Fault(0, "node", node, "healthy"))
    assert node in agent.state.ready and not agent.state.failed
    await settle(agent)


async def test_a_burst_of_node_orders_is_answered_one_by_one_and_reported_in_one_inventory() -> None:
    """Each order answers its own id; the cluster's change is reported once for the burst, as any burst of
    changes is (one inventory per order was a flood the federation had to read before the next assignment)."""
    agent = make_agent([2, 4])
    nodes = sorted(agent.state.free)
    orders = [agent_pb2.NodeOrder(action=("cordon", "uncordon")[i % 2], kind="node", name=nodes[i // 2 % len(nodes)],
                                  order_id=str(i)) for i in range(40)]
    for order in orders:
        agent.dispatch(agent_pb2.ControlMessage(node_order=order))
    await settle(agent)
    said: list[agent_pb2.AgentMessage] = []
    deadline = time.monotonic() + 60
    while not any(m.HasField("inventory") for m in said) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        while not agent.outbox.empty():
            said.append(agent.outbox.get_nowait())
    answers = [m.node_order_done for m in said if m.HasField("node_order_done")]
    assert [(a.order_id, a.done) for a in answers] == [(o.order_id, True) for o in orders]
    assert 1 <= sum(m.HasField("inventory") for m in said) < len(orders) // 4
