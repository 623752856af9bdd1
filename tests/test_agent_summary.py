"""What the agent reports of its cluster, kept as it changes rather than read off every domain for each inventory:
the tiers' summary (over arrays of the nodes' and domains' free resources) and the HyperNodes' messages (each made
again only when what is free under it may have changed), against reading every domain and node afresh, over random
runs of bindings, releases, nodes going not ready and back, and health."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.kernel.tiers import TierFree
from federation.v1 import agent_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.nodehealth import DEGRADED, NodeHealth
from member_agent.simulated import SimulatedBackend
from member_agent.state import ClusterState
from member_agent.topology import ROOT, build, load_objects

GPU = "nvidia.com/gpu"


def summary_oracle(state: ClusterState, healthy: bool = False) -> list[TierFree]:
    """Every ready node and every domain read afresh."""
    unhealthy = state.unhealthy() if healthy else set()
    counted = [n for n in state.ready if n not in unhealthy]
    most_on_node: dict[str, int] = {}
    for node in counted:
        for resource, amount in state.free[node].items():
            most_on_node[resource] = max(most_on_node.get(resource, amount), amount)
    capacity: dict[str, int] = {}
    for node in state.topology.nodes.values():
        for resource, amount in node.allocatable.items():
            capacity[resource] = max(capacity.get(resource, 0), amount)
    out = [TierFree(0, "node", {r: a for r, a in most_on_node.items() if a > 0}, capacity)]
    for tier in state.topology.tiers():
        domains = state.topology.of_tier(tier)
        most: dict[str, int] = {}
        largest: dict[str, int] = {}
        for d in domains:
            free: dict[str, int] = {}
            for node in state.nodes_under(d.name) if d.name != ROOT else state.topology.nodes:
                if node in counted:
                    for resource, amount in state.free[node].items():
                        free[resource] = free.get(resource, 0) + amount
            for resource, amount in free.items():
                most[resource] = max(most.get(resource, amount), amount)
            for resource, amount in state.domain_allocatable[d.name].items():
                largest[resource] = max(largest.get(resource, 0), amount)
        out.append(TierFree(tier, domains[0].tier_name if domains else "", {r: a for r, a in most.items() if a > 0},
                            largest))
    return out


STEP = st.one_of(st.tuples(st.just("bind"), st.integers(0, 23), st.integers(1, 8)),
                 st.tuples(st.just("release"), st.integers(0, 50)),
                 st.tuples(st.just("ready"), st.integers(0, 23), st.booleans()),
                 st.tuples(st.just("health"), st.lists(st.integers(0, 23), max_size=3), st.booleans()),
                 st.just(("inventory",)))


@settings(max_examples=80, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=40))
def test_the_summary_and_the_hypernodes_reported_are_as_read_afresh(steps: list[tuple]) -> None:
    nodes, hypernodes, _ = load_objects(clusters.tree("n", [2, 3, 4], {GPU: "8", "cpu": "64"}))
    state = ClusterState(build(nodes, hypernodes))
    agent = Agent("c", {}, SimulatedBackend(state))
    names = sorted(state.free)
    booked: list[tuple[str, int]] = []
    for step in steps:
        if step[0] == "bind":
            node, gpus = names[step[1]], min(step[2], state.free[names[step[1]]].get(GPU, 0))
            if gpus:
                state.allocate(node, {GPU: gpus, "cpu": 1000})
                booked.append((node, gpus))
        elif step[0] == "release" and booked:
            node, gpus = booked.pop(step[1] % len(booked))
            state.release(node, {GPU: gpus, "cpu": 1000})
        elif step[0] == "ready":
            state.set_ready(names[step[1]], step[2])
        elif step[0] == "health":
            state.set_health({names[i]: NodeHealth(DEGRADED, ("XID 79",), link=step[2]) for i in step[1]}, {})
        inventory = agent.inventory().inventory  # (read between changes, so kept parts have something to keep)
        assert state.summary() == summary_oracle(state)
        assert state.summary(healthy=True) == summary_oracle(state, healthy=True)
        afresh = [agent_pb2.HyperNodeFree(name=d.name, tier=d.tier, parent="" if d.parent in (None, ROOT) else d.parent,
                                          free=agent_pb2.ResourceAmounts(amounts=state.domain_free[d.name]),
                                          allocatable=agent_pb2.ResourceAmounts(
                                              amounts=state.domain_allocatable[d.name]))
                  for d in sorted((d for d in state.topology.domains.values() if d.name != ROOT),
                                  key=lambda d: (-d.tier, d.name))]
        assert list(inventory.hypernodes) == afresh
