"""The pure placement core: every rule of docs/architecture.md (Placement), on small trees built like real
HyperNodes."""

import re
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from member_agent import clusters
from member_agent.placement import GangRequest, Placement, PodPlacement, Rejection, TaskRequest, place
from member_agent.state import ClusterState
from member_agent.topology import ROOT, TopologyError, build, discover_from_labels, load_objects, parse_hypernode

GPU = "nvidia.com/gpu"


def cluster(fanout: list[int], allocatable: Mapping[str, str] | None = None, **kw: object) -> ClusterState:
    nodes, hypernodes, _ = load_objects(clusters.tree("n", fanout, allocatable or {GPU: "8", "cpu": "64"}, **kw))
    return ClusterState(build(nodes, hypernodes))


def gang(replicas: int, gpus: int = 8, **kw: object) -> GangRequest:
    tasks = (TaskRequest("worker", replicas, {GPU: gpus}),)
    return GangRequest(tasks=tasks, **kw)  # type: ignore[arg-type]


def placed(result: Placement | Rejection) -> Placement:
    assert isinstance(result, Placement), result
    return result


def nodes_of(result: Placement) -> list[str]:
    return [p.node for p in result.pods]


def test_tier_walk_takes_the_lowest_tier_that_fits() -> None:
    state = cluster([2, 4, 4])  # 2 spines x 4 leaves x 4 nodes of 8 GPUs
    small = placed(place(state, gang(4, mode="hard", highest_tier=2)))
    assert (small.tier, small.hypernode) == (1, "n0-0")
    big = placed(place(state, gang(8, mode="hard", highest_tier=2)))
    assert (big.tier, big.hypernode) == (2, "n0")
    assert len(set(nodes_of(big))) == 8


def test_best_fit_takes_the_fullest_domain_that_fits() -> None:
    state = cluster([2, 4, 4])
    for node in ("n1-2-0", "n1-2-1"):  # leaf n1-2 is half full
        state.allocate(node, {GPU: 8})
    state.allocate("n0-3-0", {GPU: 8})  # leaf n0-3 is a quarter full
    result = placed(place(state, gang(2, mode="hard", highest_tier=1)))
    assert result.hypernode == "n1-2"  # fullest after placing: 4 of 4 nodes busy
    result = placed(place(state, gang(3, mode="hard", highest_tier=1)))
    assert result.hypernode == "n0-3"  # n1-2 cannot take 3 more; n0-3 is the fullest that can


def test_hard_limit_rejects_with_the_reason_and_never_splits() -> None:
    state = cluster([2, 4, 4])
    result = place(state, gang(5, mode="hard", highest_tier=1))
    assert isinstance(result, Rejection)
    assert result.reason == "no HyperNode of tier 1 or below can hold 5 pods needing nvidia.com/gpu=40"
    too_big = place(state, gang(40))
    assert isinstance(too_big, Rejection) and "cannot hold 40 pods" in too_big.reason


def test_soft_widens_tier_by_tier_and_is_never_rejected_for_topology() -> None:
    state = cluster([2, 4, 4])
    wide = placed(place(state, gang(12, mode="soft", highest_tier=1)))
    assert wide.tier == 2
    whole = placed(place(state, gang(32, mode="soft", highest_tier=1)))
    assert whole.hypernode == ROOT and whole.tier == 3


def test_fill_nodes_before_opening_new_ones_and_fragmented_domains_first() -> None:
    state = cluster([2, 4, 4])
    state.allocate("n1-1-2", {GPU: 4})
    result = placed(place(state, gang(3, gpus=4)))  # no constraint: start at the root, best fit down
    # the half-used node is filled, and one more node holds the other two: two nodes, one leaf
    assert sorted(nodes_of(result)) == ["n1-1-0", "n1-1-0", "n1-1-2"]
    assert result.hypernode == "n1-1"


def test_partitions_stay_inside_their_tier_and_min_partitions_are_all_or_nothing() -> None:
    state = cluster([1, 3, 4])  # three leaves of 4 nodes
    task = TaskRequest("replica", 8, {GPU: 8}, partition_size=4, min_partitions=1, partition_tier=1)
    result = placed(place(state, GangRequest(tasks=(task,), min_available=4)))
    leaves = {}
    for p in result.pods:
        leaves.setdefault(p.index // 4, set()).add(p.node.rsplit("-", 1)[0])
    assert len(result.pods) == 8  # the optional partition fitted too
    assert all(len(v) == 1 for v in leaves.values()) and leaves[0] != leaves[1]
    for node in ("n0-0-0", "n0-1-1", "n0-2-2"):
        state.allocate(node, {GPU: 8})  # every leaf has 3 free nodes: no partition of 4 fits
    assert isinstance(place(state, GangRequest(tasks=(task,), min_available=4)), Rejection)


def test_min_available_pods_first_extra_replicas_when_they_fit() -> None:
    state = cluster([1, 2, 2])  # 4 nodes
    result = placed(place(state, gang(6, min_available=3)))
    assert len(result.pods) == 4  # 3 required + 1 extra that fitted
    assert [p.index for p in result.pods] == [0, 1, 2, 3]
    assert isinstance(place(state, gang(6, min_available=5)), Rejection)


def test_running_pods_anchor_the_rest_within_the_tier_limit() -> None:
    state = cluster([2, 4, 4])
    running = tuple(PodPlacement("worker", i, f"n1-2-{i}") for i in range(3))
    for p in running:
        state.allocate(p.node, {GPU: 8})
    result = placed(place(state, gang(4, mode="hard", highest_tier=1, running=running)))
    assert nodes_of(result) == ["n1-2-3"] and result.hypernode == "n1-2"
    state.allocate("n1-2-3", {GPU: 8})  # the leaf is now full
    assert isinstance(place(state, gang(4, mode="hard", highest_tier=1, running=running)), Rejection)
    widened = placed(place(state, gang(4, mode="hard", highest_tier=2, running=running)))
    assert nodes_of(widened)[0].startswith("n1-") and widened.hypernode == "n1"


def test_node_selectors() -> None:
    objs = clusters.tree("a", [1, 2], {GPU: "8"}, {"pool": "a"}) + clusters.tree("b", [1, 2], {GPU: "8"}, {"pool": "b"})
    nodes, hypernodes, _ = load_objects(objs)
    state = ClusterState(build(nodes, hypernodes))
    task = TaskRequest("w", 2, {GPU: 8}, node_selector={"pool": "b"})
    assert {p.node for p in placed(place(state, GangRequest(tasks=(task,)))).pods} == {"b0-0", "b0-1"}
    nowhere = TaskRequest("w", 1, {GPU: 8}, node_selector={"pool": "c"})
    refused = place(state, GangRequest(tasks=(nowhere,)))
    assert isinstance(refused, Rejection)
    assert refused.reason == "no node matches task w's nodeSelector pool=c"  # the cause, not room


def test_a_blocked_greedy_choice_tries_the_next_candidate() -> None:
    """The fullest leaf passes every cheap check, but its trial fails; the next leaf is used."""
    objs = [clusters.node("a1", {GPU: "8", "cpu": "100"}), clusters.node("a2", {"cpu": "20"}),
            clusters.node("b1", {GPU: "8", "cpu": "200"}), clusters.node("b2", {GPU: "8", "cpu": "200"}),
            clusters.hypernode("leaf-a", 1, "leaf", ["a1", "a2"], "Node"),
            clusters.hypernode("leaf-b", 1, "leaf", ["b1", "b2"], "Node")]
    nodes, hypernodes, _ = load_objects(objs)
    state = ClusterState(build(nodes, hypernodes))
    tasks = (TaskRequest("big", 1, {GPU: 8, "cpu": 10_000}), TaskRequest("small", 1, {"cpu": 100_000}))
    result = placed(place(state, GangRequest(tasks=tasks, mode="hard", highest_tier=1)))
    assert result.hypernode == "leaf-b"


def test_same_input_same_placement() -> None:
    results = []
    for _ in range(2):
        state = cluster([2, 4, 4])
        state.allocate("n0-1-1", {GPU: 3})
        tasks = (TaskRequest("a", 5, {GPU: 2}), TaskRequest("b", 3, {GPU: 8}))
        results.append(place(state, GangRequest(tasks=tasks, mode="soft", highest_tier=1)))
    assert results[0] == results[1]


def test_placement_does_not_change_the_state() -> None:
    state = cluster([1, 2, 2])
    before = ({n: dict(f) for n, f in state.free.items()}, {d: dict(f) for d, f in state.domain_free.items()})
    placed(place(state, gang(3)))
    assert before == ({n: dict(f) for n, f in state.free.items()}, {d: dict(f) for d, f in state.domain_free.items()})


def test_summary_and_node_loss() -> None:
    state = cluster([2, 4, 4])
    assert [(t.tier, t.max_free[GPU]) for t in state.summary()] == [(0, 8), (1, 32), (2, 128), (3, 256)]
    for i in range(4):
        state.allocate(f"n0-0-{i}", {GPU: 8})
    for leaf in range(1, 4):
        for i in range(4):
            state.allocate(f"n0-{leaf}-{i}", {GPU: 8})
    state.set_ready("n1-0-0", False)
    assert [(t.tier, t.max_free[GPU]) for t in state.summary()] == [(0, 8), (1, 32), (2, 120), (3, 120)]
    state.allocate("n1-0-1", {GPU: 5})
    assert state.summary()[0].max_free[GPU] == 8  # other nodes are still whole
    state.set_ready("n1-0-0", True)
    assert state.summary()[-1].max_free[GPU] == 128 - 5
    capacity, allocatable, used = state.totals()
    assert (capacity[GPU], allocatable[GPU], used[GPU]) == (256, 256, 128 + 5)


@pytest.mark.parametrize(("objs", "message"), [
    ([clusters.node("a", {}), clusters.hypernode("h1", 1, "leaf", ["a"], "Node"),
      clusters.hypernode("h2", 1, "leaf", ["a"], "Node")], "Node 'a' is under two HyperNodes: 'h1' and 'h2'"),
    ([clusters.node("a", {}), clusters.hypernode("h1", 2, "spine", ["h2"], "HyperNode"),
      clusters.hypernode("h2", 2, "spine", ["h1"], "HyperNode")], "members must be of a lower tier"),
    ([clusters.node("a", {}), clusters.hypernode("h1", 1, "x", ["a"], "Node"),
      clusters.hypernode("h2", 2, "x", ["h1"], "HyperNode")], "tierName 'x' is used for tiers"),
])
def test_bad_trees_are_reported_naming_the_hypernode(objs: list[dict], message: str) -> None:
    nodes, hypernodes, _ = load_objects(objs)
    with pytest.raises(TopologyError, match=re.escape(message)):
        build(nodes, hypernodes)


def test_a_member_that_matches_nothing_is_noted_not_fatal_as_in_volcano() -> None:
    """A HyperNode may name a node that has not joined yet, or has left: the rest of the tree is used."""
    nodes, hypernodes, _ = load_objects([clusters.node("a", {}), clusters.hypernode("h1", 1, "leaf", ["a", "ghost"],
                                                                                   "Node")])
    topology = build(nodes, hypernodes)
    assert topology.domains["h1"].nodes == ["a"]
    assert topology.notes == ["HyperNode 'h1': members[1] (Node) matches nothing (yet)"]


def test_hypernode_manifest_selectors() -> None:
    spec = parse_hypernode({"kind": "HyperNode", "metadata": {"name": "rack1"}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"regexMatch": {"pattern": "gpu-1[0-9]"}}},
        {"type": "Node", "selector": {"labelMatch": {"matchLabels": {"rack": "1"}}}}]}})
    nodes, _, _ = load_objects([clusters.node("gpu-12", {}), clusters.node("gpu-2", {}, {"rack": "1"}),
                                clusters.node("cpu-1", {})])
    topology = build(nodes, [spec])
    assert topology.domains["rack1"].nodes == ["gpu-12", "gpu-2"]
    # Not anchored, as Go's MatchString in Volcano: node-[01] takes node-10 too.
    unanchored = parse_hypernode({"kind": "HyperNode", "metadata": {"name": "r"}, "spec": {"tier": 1, "members": [
        {"type": "Node", "selector": {"regexMatch": {"pattern": "node-[01]"}}}]}})
    nodes, _, _ = load_objects([{"kind": "List", "items": [clusters.node(n, {}) for n in ("node-0", "node-10",
                                                                                          "node-2")]}, None])
    assert build(nodes, [unanchored]).domains["r"].nodes == ["node-0", "node-10"]
    assert topology.domains[ROOT].nodes == ["cpu-1"]  # listed by no HyperNode: hangs off the root
    with pytest.raises(TopologyError, match=r"spec\.tier must be a positive integer"):
        parse_hypernode({"metadata": {"name": "x"}, "spec": {"tier": 0, "members": []}})


def test_label_discovery_builds_the_tree() -> None:
    labels = lambda zone, spine, leaf: {"topology.kubernetes.io/zone": zone, "net/spine": spine,  # noqa: E731
                                        "net/leaf": leaf}
    nodes, _, _ = load_objects([clusters.node(name, {GPU: "8"}, labels("z1", spine, leaf)) for name, spine, leaf in (
        ("a", "s1", "l1"), ("b", "s1", "l1"), ("c", "s1", "l2"), ("d", "s2", "l3"))])
    topology = discover_from_labels(nodes, ["topology.kubernetes.io/zone", "net/spine", "net/leaf"])
    assert topology.tiers() == [1, 2, 3, 4]
    assert topology.domains["leaf-l1"].nodes == ["a", "b"]
    assert topology.domains["spine-s1"].children == ["leaf-l1", "leaf-l2"]
    assert topology.tier_names["leaf"] == 1 and topology.tier_names["zone"] == 3
    state = ClusterState(topology)
    assert placed(place(state, gang(2, mode="hard", highest_tier=1))).hypernode == "leaf-l1"


def test_example_cluster_files_are_current_and_valid() -> None:
    import yaml

    from member_agent.simulated import read_cluster_file
    from tests.conftest import REPO

    for name, objs in clusters.examples().items():
        path = REPO / "examples" / "clusters" / f"{name}.yaml"
        assert list(yaml.safe_load_all(path.read_text())) == objs, f"regenerate {path}"
        state = read_cluster_file(path)
        assert state.ready and state.summary()
    h100 = read_cluster_file(REPO / "examples" / "clusters" / "h100-spine-leaf.yaml")
    assert h100.free["h100-0-0-0"]["cpu"] == 184_000  # the file's monitoring pod holds 8 cores


def mixed_rack() -> ClusterState:
    """One rack: two 8-GPU nodes and two CPU-only nodes (the shape of a heterogeneous cluster)."""
    objs = [clusters.node("gpu-a", {GPU: "8", "cpu": "128"}), clusters.node("gpu-b", {GPU: "8", "cpu": "128"}),
            clusters.node("cpu-a", {"cpu": "128"}), clusters.node("cpu-b", {"cpu": "128"}),
            clusters.hypernode("rack", 1, "rack", ["gpu-a", "gpu-b", "cpu-a", "cpu-b"], "Node")]
    nodes, hypernodes, _ = load_objects(objs)
    return ClusterState(build(nodes, hypernodes))


def test_fullness_is_measured_in_the_device_asked_for() -> None:
    state = mixed_rack()
    state.allocate("gpu-a", {GPU: 6, "cpu": 8_000})  # fullest in GPUs
    state.allocate("gpu-b", {GPU: 1, "cpu": 56_000})  # fullest in CPU
    # The pod takes a larger share of the CPUs (64 of 512) than of the GPUs (1 of 16), yet packing the
    # CPU would leave gpu-b 8 CPUs for its 7 free GPUs.
    pod = GangRequest((TaskRequest("worker", 1, {GPU: 1, "cpu": 64_000}),))
    assert nodes_of(placed(place(state, pod))) == ["gpu-a"]


def test_pods_asking_for_no_gpu_keep_off_gpu_nodes_while_others_will_do() -> None:
    state = mixed_rack()
    state.allocate("gpu-a", {"cpu": 100_000})  # the fullest in CPU: best fit alone would take it
    state.allocate("cpu-b", {"cpu": 64_000})
    pod = GangRequest((TaskRequest("web", 1, {"cpu": 8_000}),))
    assert nodes_of(placed(place(state, pod))) == ["cpu-b"]
    state.allocate("cpu-a", {"cpu": 128_000})
    state.allocate("cpu-b", {"cpu": 64_000})  # the CPU-only nodes are full: a GPU node it must be
    assert nodes_of(placed(place(state, pod))) == ["gpu-a"]


def test_a_pod_goes_where_it_leaves_no_gpus_without_the_cpu_to_use_them() -> None:
    state = mixed_rack()
    state.allocate("gpu-a", {GPU: 6, "cpu": 88_000})  # fullest in GPUs: 2 free, with 40 CPUs
    state.allocate("gpu-b", {GPU: 2, "cpu": 8_000})
    # Best fit alone would take gpu-a and leave it 1 GPU with 8 CPUs: a GPU that pods like this one,
    # or like the 16-CPU ones gpu-a could still take two of, can no longer use.
    pod = GangRequest((TaskRequest("worker", 1, {GPU: 1, "cpu": 32_000}),))
    assert nodes_of(placed(place(state, pod))) == ["gpu-b"]
    # Where no node is left unbalanced by it, fullness still decides.
    small = GangRequest((TaskRequest("worker", 1, {GPU: 1, "cpu": 16_000}),))
    assert nodes_of(placed(place(state, small))) == ["gpu-a"]


def test_a_pod_goes_where_it_leaves_free_gpus_the_usual_pods_can_use() -> None:
    """FGD: best fit would leave one GPU on a node where the cluster's usual 2-GPU pods cannot use it; once
    the agent has seen those pods, the 1-GPU pod goes where it leaves two free instead."""
    state = cluster([1, 2])
    state.allocate("n0-0", {GPU: 6})  # 2 free
    state.allocate("n0-1", {GPU: 5})  # 3 free
    one = gang(1, gpus=1)
    assert nodes_of(placed(place(state, one))) == ["n0-0"]  # nothing learnt yet: the fullest node
    for _ in range(16):
        state.fragmentation.mix.add({GPU: 2, "cpu": 1})
    assert nodes_of(placed(place(state, one))) == ["n0-1"]
    state.allocate("n0-1", {GPU: 1})  # the node changed: what was remembered of it is not used again
    assert nodes_of(placed(place(state, one))) == ["n0-0"]  # 2 free either side (not 3, as remembered): by name


def test_where_pods_come_on_their_own_a_lone_pod_takes_the_emptiest_of_the_nodes_it_fragments_alike() -> None:
    """Three nodes of one leaf with 2, 4 and 6 GPUs free, the usual pods 1-GPU ones (no free GPU is fragmented for
    them anywhere): once that is learnt, a one-pod job goes to the emptiest, keeping cpu beside every node's GPUs; a
    gang of pods still packs, fullest first; and where the pods placed came in gangs, a lone pod packs too."""
    state = cluster([1, 3])
    for node, used in (("n0-0", 6), ("n0-1", 4), ("n0-2", 2)):
        for _ in range(used):
            state.allocate(node, {GPU: 1, "cpu": 1})
    one = GangRequest((TaskRequest("infer", 1, {GPU: 1, "cpu": 1}),))
    assert state.fragmentation.mix.total == 12 and not state.fragmentation.mix.weights
    assert nodes_of(placed(place(state, one))) == ["n0-0"]  # nothing learnt yet: the fullest
    for _ in range(4):
        state.fragmentation.mix.add({GPU: 1, "cpu": 1})
    assert nodes_of(placed(place(state, one))) == ["n0-2"]
    pair = GangRequest((TaskRequest("infer", 2, {GPU: 1, "cpu": 1}),))
    assert nodes_of(placed(place(state, pair))) == ["n0-0", "n0-0"]
    for _ in range(24):
        state.fragmentation.mix.add({GPU: 1, "cpu": 1})
    state.fragmentation.mix.add({GPU: 2, "cpu": 1}, gang=2)  # 2 of 42 GPUs asked in gangs: at most a twentieth
    assert nodes_of(placed(place(state, one))) == ["n0-2"]
    state.fragmentation.mix.add({GPU: 1, "cpu": 1}, gang=2)  # 3 of 43: gangs to keep room for
    assert nodes_of(placed(place(state, one))) == ["n0-0"]


def test_fragmentation_counts_the_free_gpus_each_usual_shape_could_not_use() -> None:
    from member_agent.fragmentation import PodMix, fragmented

    mix = PodMix()
    for _ in range(12):
        mix.add({GPU: 1, "cpu": 4})
    for _ in range(4):
        mix.add({GPU: 4, "cpu": 4})
    mix.add({"cpu": 4})  # no device: not part of the mix
    assert mix.total == 16 and dict(mix.weights) == {(("cpu", 4), (GPU, 1)): 0.75, (("cpu", 4), (GPU, 4)): 0.25}
    assert fragmented({GPU: 2, "cpu": 64}, mix.weights) == 2 * 0.25  # the 4-GPU pods cannot use 2
    assert fragmented({GPU: 2, "cpu": 2}, mix.weights) == 2 * 1.0  # no cpu beside them: nobody can
    assert fragmented({GPU: 4, "cpu": 64}, mix.weights) == 0.0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_counting_every_node_at_once_matches_counting_node_by_node(data: st.DataObject) -> None:
    """A shape a state has not counted yet is counted on all nodes in one pass (`count_everywhere`); the
    numbers under every domain are those the node-by-node rule gives, whatever is busy, not ready, tainted
    or labelled otherwise."""
    from dataclasses import replace as replaced

    from member_agent.placement import _Trial
    from member_agent.topology import Taint, Toleration

    state = cluster([2, 2, 3])
    for name in sorted(state.free):
        state.allocate(name, {GPU: data.draw(st.integers(0, 8), label=f"busy {name}")})
        taints = (Taint("gpu", "x", "NoSchedule"),) if data.draw(st.booleans(), label=f"taint {name}") else ()
        zone = data.draw(st.sampled_from(["a", "b"]), label=f"zone {name}")
        state.replace_node(replaced(state.topology.nodes[name], labels={"zone": zone}, taints=taints))
        if data.draw(st.integers(0, 5), label=f"down {name}") == 0:
            state.set_ready(name, False)
    request = {GPU: data.draw(st.integers(1, 8), label="gpus")}
    if data.draw(st.booleans(), label="cpu"):
        request["cpu"] = data.draw(st.integers(1, 64_000), label="millicores")
    tolerations = (Toleration("gpu", "Exists"),) if data.draw(st.booleans(), label="tolerates") else ()
    selector = data.draw(st.sampled_from([{}, {"zone": "a"}]), label="selector")
    task = TaskRequest("w", 1, request, selector, tolerations)

    by_node = _Trial(state)
    state.counts.remember(task.shape)  # counted: the node-by-node rule answers
    expected = {d: by_node.capacity(d, task) for d in state.topology.domains}
    state.counts.cap.clear()
    state.counts.fit.clear()
    state.counts.shapes.clear()
    counted = {d: _Trial(state).capacity(d, task) for d in state.topology.domains}
    assert counted == expected


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=12, max_size=12), st.lists(st.tuples(st.integers(1, 3), st.sampled_from(
    [1, 2, 4, 8]), st.booleans()), min_size=1, max_size=25), st.booleans())
def test_nodes_alike_scored_once_choose_exactly_as_each_scored(used: list[int], pods: list[tuple[int, int, bool]],
                                                               single: bool) -> None:
    """The placement scores a kind of node once per pod (`_Trial.alike`, `ClusterState.kind`): the same choices, pod
    for pod, as scoring every node on its own (the oracle: every node its own kind)."""
    import member_agent.placement as placement

    def run(oracle: bool) -> list[tuple[str, ...]]:
        state = cluster([2, 6], {GPU: "8", "cpu": "64"})
        for node, gpus in zip(sorted(state.free), used, strict=True):  # a few kinds of node: 0 to 6 GPUs used
            if gpus:
                state.allocate(node, {GPU: 2 * gpus})
        for _ in range(3 if single else 0):  # a pod mix of lone pods: spread, and scored by fragmentation
            state.fragmentation.mix.add({GPU: 1, "cpu": 1000})
        original, kind = placement._Trial.alike, ClusterState.kind
        if oracle:
            placement._Trial.alike = lambda self, node: (node,)  # type: ignore[method-assign]
            ClusterState.kind = lambda self, node: (node,)  # type: ignore[method-assign]
        try:
            out = []
            for replicas, gpus, hard in pods:
                result = place(state, gang(replicas, gpus, mode="hard" if hard else "", highest_tier=1 if hard
                                           else None))
                out.append(tuple(p.node for p in result.pods) if isinstance(result, Placement) else ())
                if isinstance(result, Placement):
                    for pod in result.pods:
                        state.allocate(pod.node, {GPU: gpus})
            return out
        finally:
            placement._Trial.alike, ClusterState.kind = original, kind  # type: ignore[method-assign]

    assert run(oracle=False) == run(oracle=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), st.booleans(), st.booleans()),
                min_size=1, max_size=30))
def test_domains_owed_their_changed_nodes_count_exactly_as_counted_afresh(steps: list[tuple[int, int, bool, bool]]
                                                                         ) -> None:
    """A node that changes leaves each domain above it owing the node's new count (`PodCounts.changed`) instead of
    having every node under it counted again: the same placements, pod for pod, and the same counts under every
    domain, as counting afresh (the oracle: every domain above a changed node forgotten)."""
    from member_agent.placement import _Trial
    from member_agent.state import PodCounts

    def forget(self: PodCounts, node: str, domains: list[str]) -> None:
        for where in (node, *domains):
            for shape in self.shapes:
                self.fit.pop((where, shape), None)
                self.cap.pop((where, shape), None)

    def run(oracle: bool) -> list[object]:
        state = cluster([2, 3, 4], {GPU: "8", "cpu": "64"})
        original = PodCounts.changed
        if oracle:
            PodCounts.changed = forget  # type: ignore[method-assign]
        try:
            out: list[object] = []
            placed_pods: list[tuple[str, int]] = []
            for replicas, gpus, hard, free in steps:
                if free and placed_pods:  # a gang ends: its node's room comes back
                    node, amount = placed_pods.pop(0)
                    state.allocate(node, {GPU: amount}, sign=-1)
                result = place(state, gang(replicas, gpus, mode="hard" if hard else "", highest_tier=1 if hard
                                           else None))
                out.append(tuple(p.node for p in result.pods) if isinstance(result, Placement) else ())
                if isinstance(result, Placement):
                    for pod in result.pods:
                        state.allocate(pod.node, {GPU: gpus})
                        placed_pods.append((pod.node, gpus))
                counts = _Trial(state)
                out.append({(d, g): counts.capacity(d, TaskRequest("w", 1, {GPU: g}))
                            for d in sorted(state.topology.domains) for g in (1, 8)})
            return out
        finally:
            PodCounts.changed = original  # type: ignore[method-assign]

    assert run(oracle=False) == run(oracle=True)


def test_narrowed_devices_steer_pods_to_nodes_with_matching_ones_and_leave_the_state_as_it_was() -> None:
    """Issue 42 (6): a pod's DRA claim narrower than its class takes only the devices counted for it per node
    (`ClusterState.narrowed`); the state is the same afterwards, every domain total included."""
    dev = "deviceclass.resource.kubernetes.io/gpu.example.com"
    state = cluster([1, 2], allocatable={"nvidia.com/gpu": "8", dev: "2"})
    before = ({n: dict(f) for n, f in state.free.items()}, {d: dict(f) for d, f in state.domain_free.items()})
    pair = GangRequest(tasks=(TaskRequest("w", 2, {dev: 1}),))
    assert len(set(nodes_of(placed(place(state, pair))))) == 1  # by the class's count: both on one node
    first, second = sorted(state.free)
    with state.narrowed({dev}, {first: {dev: 1}, second: {dev: 1}}):
        assert sorted(nodes_of(placed(place(state, pair)))) == [first, second]
        assert isinstance(place(state, GangRequest(tasks=(TaskRequest("w", 3, {dev: 1}),))), Rejection)
    with state.narrowed({dev}, {}):  # no node has a matching device free
        assert isinstance(place(state, GangRequest(tasks=(TaskRequest("w", 1, {dev: 1}),))), Rejection)
    assert ({n: dict(f) for n, f in state.free.items()}, {d: dict(f) for d, f in state.domain_free.items()}) == before


def test_nodes_are_kept_for_held_gangs_most_free_first_and_small_pods_go_elsewhere() -> None:
    """Issue 42 (3): a gang the federation holds room for here gets the nodes closest to holding its pods; other
    jobs' pods are placed around them, the held gang's own pods on them."""
    from member_agent.holds import Hold, kept

    state = cluster([1, 4])  # four 8-GPU nodes
    first, second, third, fourth = sorted(state.free)
    for node, used in ((first, 5), (second, 2), (third, 5), (fourth, 5)):
        state.allocate(node, {GPU: used})
    holds = [Hold("big", 1, 8)]
    gpus = {n: a[GPU] for n, a in kept(state, holds).items()}
    assert gpus == {second: 6}  # the most free: 6 of its 8 kept for the gang (their shares with them)
    with state.lowered(kept(state, holds, placing="small")):
        assert nodes_of(placed(place(state, gang(3, gpus=1)))) == [first] * 3  # around the kept node
    with state.lowered(kept(state, holds, placing="big")):
        assert nodes_of(placed(place(state, gang(1, gpus=6)))) == [second]  # the held gang is not kept from it
    # two held gangs take two nodes; one of two pods of 8 takes two
    assert {n: a[GPU] for n, a in kept(state, [Hold("a", 1, 8), Hold("b", 2, 8)]).items()} == {
        second: 6, first: 3, third: 3}
