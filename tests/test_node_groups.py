"""The agent's nodes by kind and by free GPUs (`nodegroups.NodeGroups`), kept up to date change by change, and each
domain's least fragmentation remembered until a node under it changes, against looking at every node and scoring
every domain each time: the same placements, pod for pod and device for device, and the same nodes kept for held
gangs, over random runs of bindings, releases, nodes going not ready and back, taints and holds."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

import member_agent.placement as placement
from federation.kernel.gpuask import GPU, WHOLE, GpuAsk
from federation.kernel.resources import SHARE, Resources
from member_agent import clusters
from member_agent.holds import Hold, kept
from member_agent.nodegroups import NodeGroups
from member_agent.placement import GangRequest, Placement, TaskRequest, place
from member_agent.state import ClusterState
from member_agent.topology import Node, Taint, build, load_objects


def every_node(self: placement._Trial, domain: str, task: TaskRequest, wanted: int) -> list[tuple[str, int]]:
    """The oracle of `_Trial.of_each_kind`: every node of the domain looked at, the first of each kind kept."""
    first: dict[tuple[object, ...], tuple[str, int]] = {}
    for n in sorted(self.topology.domains[domain].nodes):
        if (count := self.fit(n, task)) >= wanted and self.alike(n) not in first:
            first[self.alike(n)] = (n, count)
    return list(first.values())


def kept_oracle(state: ClusterState, holds: list[Hold], placing: str = "") -> dict[str, Resources]:
    """`holds.kept` as it was: every ready GPU node sorted, most free first, for each placement."""
    ordered = sorted((n for n in state.ready if state.topology.nodes[n].allocatable.get(GPU, 0) > 0),
                     key=lambda n: (-state.free[n].get(GPU, 0), n))
    out: dict[str, Resources] = {}
    taken: set[str] = set()
    for hold in holds:
        left = hold.pods
        for node in ordered:
            if left <= 0:
                break
            if node in taken or state.topology.nodes[node].allocatable.get(GPU, 0) < hold.gpus_per_pod:
                continue
            pods = min(state.topology.nodes[node].allocatable.get(GPU, 0) // hold.gpus_per_pod, left)
            left -= pods
            taken.add(node)
            if hold.job_id == placing:
                continue
            if (keep := min(state.free[node].get(GPU, 0), pods * hold.gpus_per_pod)) > 0:
                out[node] = {GPU: keep}
                if (shares := min(state.free[node].get(SHARE, 0), keep * WHOLE)) > 0:
                    out[node][SHARE] = shares
    return out


SHAPES = [({GPU: 1}, None), ({GPU: 2}, None), ({GPU: 8}, None), ({SHARE: 500}, GpuAsk(1, 500)),
          ({GPU: 1, "cpu": 40}, None)]
STEP = st.one_of(
    st.tuples(st.just("place"), st.integers(1, 4), st.integers(0, len(SHAPES) - 1), st.booleans()),
    st.tuples(st.just("release"), st.integers(0, 50)),
    st.tuples(st.just("ready"), st.integers(0, 23), st.booleans()),
    st.tuples(st.just("taint"), st.integers(0, 23)),
    st.tuples(st.just("holds"), st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 4, 8])), max_size=3)),
)


@settings(max_examples=120, deadline=None)
@given(st.sampled_from([[1, 24], [4, 6], [2, 3, 4]]), st.lists(STEP, min_size=1, max_size=40),
       st.sampled_from([0, 1, 8]))
@example([4, 6], [("place", 1, 0, False)] * 6, 1)  # lone pods scoring HyperNodes by what they would fragment
@example([2, 3, 4], [("place", 1, 0, False), ("place", 1, 1, False), ("release", 0), ("place", 1, 0, False)], 8)
def test_nodes_by_kind_and_by_free_gpus_decide_as_looking_at_every_node(fanout: list[int], steps: list[tuple],
                                                                        learnt: int) -> None:
    nodes, hypernodes, _ = load_objects(clusters.tree("n", fanout, {GPU: "8", "cpu": "64"}))
    state = ClusterState(build(nodes, hypernodes))
    for i in range(18 if learnt else 0):  # a pod mix learnt (lone pods, which spread, or gangs): what a node has
        state.fragmentation.mix.add({GPU: (1, 4, 8)[i % 3], "cpu": 1000}, gang=learnt)  # left free scores
    names = sorted(state.free)
    holds: list[Hold] = []
    bound: list[tuple[str, Resources, tuple[int, ...], int]] = []
    for step in steps:
        if step[0] == "place":
            _, replicas, shape, hard = step
            request, ask = SHAPES[shape]
            gang = GangRequest(tasks=(TaskRequest("w", replicas, request, gpu=ask),),
                               mode="hard" if hard else "", highest_tier=1 if hard else None)
            assert kept(state, holds, "j") == kept_oracle(state, holds, "j")
            decided = []
            for oracle in (True, False):
                original = (placement._Trial.of_each_kind, ClusterState.least_fragmenting,
                            ClusterState.remember_least_fragmenting)
                if oracle:  # every node looked at, every domain scored afresh (and nothing left remembered)
                    placement._Trial.of_each_kind = every_node  # type: ignore[method-assign]
                    ClusterState.least_fragmenting = lambda self, domain, shape: None  # type: ignore[method-assign]
                    ClusterState.remember_least_fragmenting = lambda self, d, s, v: None  # type: ignore[method-assign]
                try:
                    with state.lowered(kept(state, holds, "j")):
                        decided.append(place(state, gang))
                finally:
                    (placement._Trial.of_each_kind, ClusterState.least_fragmenting,  # type: ignore[method-assign]
                     ClusterState.remember_least_fragmenting) = original
            by_oracle, by_kinds = decided
            assert type(by_kinds) is type(by_oracle)
            if isinstance(by_kinds, Placement):
                assert isinstance(by_oracle, Placement)
                assert [(p.node, p.devices, p.share) for p in by_kinds.pods] == \
                    [(p.node, p.devices, p.share) for p in by_oracle.pods]
                for pod in by_kinds.pods:
                    bound.append((pod.node, request, pod.devices, pod.share))
                    state.allocate(pod.node, request, devices=pod.devices, share=pod.share, gang=replicas)
            else:
                assert by_kinds == by_oracle
        elif step[0] == "release" and bound:
            node, request, devices, share = bound.pop(step[1] % len(bound))
            state.release(node, request, devices, share)
        elif step[0] == "ready":
            state.set_ready(names[step[1] % len(names)], step[2])
        elif step[0] == "taint":
            node = state.topology.nodes[names[step[1] % len(names)]]
            taints = () if node.taints else (Taint("maintenance", "", "NoSchedule"),)
            state.replace_node(Node(node.name, node.labels, node.allocatable, taints))
        elif step[0] == "holds":
            holds = [Hold(f"held-{i}", pods, gpus) for i, (pods, gpus) in enumerate(step[1])]
        assert kept(state, holds) == kept_oracle(state, holds)


def test_a_node_moves_to_the_group_its_key_now_names_and_an_empty_group_goes() -> None:
    key = {"a": 1, "b": 1, "c": 2}
    groups = NodeGroups(key.get, ["c", "b", "a"])
    assert {k: list(v) for k, v in groups.groups().items()} == {1: ["a", "b"], 2: ["c"]}
    key["c"], key["a"] = 1, None  # type: ignore[assignment]
    groups.changed("c")
    assert {k: list(v) for k, v in groups.groups().items()} == {1: ["a", "b", "c"]}  # "a" not marked: as it was
    groups.changed("a")
    assert {k: list(v) for k, v in groups.groups().items()} == {1: ["b", "c"]}
