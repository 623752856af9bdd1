"""Dynamic MIG partitioning, its pure parts (issue 31): which idle MIG-capable nodes the agent asks NVIDIA's MIG
manager to cut for a gang's missing slices, what it tells the federation it could cut, and how the federation
counts that when it picks a cluster."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from federation.cli.jobdocs import jobs_from_documents
from federation.cli.yamldoc import load_documents
from federation.control.scheduler import cluster_view
from federation.kernel import gangs
from federation.scheduling.fit import JobView, cannot_run, check
from federation.v1 import agent_pb2, common_pb2
from federation.validation import inventory_problem
from member_agent import clusters, mig
from member_agent.agent import Agent
from member_agent.gang import gang_request
from member_agent.placement import Rejection, place
from member_agent.simulated import SimulatedBackend
from member_agent.state import ClusterState
from member_agent.topology import ROOT, build, load_objects
from tests.kubehelp import drain

GPU = "nvidia.com/gpu"
SLICE = "nvidia.com/mig-1g.10gb"
H100 = {"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.memory": "81559"}
BASE = {"cpu": "64", "memory": "512Gi"}


def cluster(*nodes: tuple[str, dict[str, str], dict[str, str]], racks: int = 1) -> ClusterState:
    objs = [clusters.node(name, {**BASE, **allocatable}, labels) for name, allocatable, labels in nodes]
    names = [n for n, _, _ in nodes]
    per = -(-len(names) // racks)
    objs += [clusters.hypernode(f"rack{i}", 1, "rack", names[i * per:(i + 1) * per], "Node") for i in range(racks)]
    parsed, hypernodes, _ = load_objects(objs)
    return ClusterState(build(parsed, hypernodes))


def test_profiles_follow_the_gpus_memory() -> None:
    assert mig.slices_per_gpu(81559)["1g.10gb"] == 7  # H100 80GB
    assert mig.slices_per_gpu(40960)["1g.5gb"] == 7 and "1g.10gb" in mig.slices_per_gpu(40960)  # A100 40GB (4 of)
    assert mig.slices_per_gpu(143771)["3g.71gb"] == 2  # H200
    assert mig.slices_per_gpu(0) == {}


def test_only_idle_mig_capable_mixed_strategy_nodes_are_candidates() -> None:
    state = cluster(("idle", {GPU: "8"}, H100),
                    ("busy", {GPU: "8"}, H100),
                    ("single", {GPU: "8"}, {**H100, "nvidia.com/mig.strategy": "single"}),
                    ("incapable", {GPU: "8"}, {**H100, "nvidia.com/mig.capable": "false"}),
                    ("cutting", {GPU: "8"}, {**H100, mig.STATE_LABEL: "pending"}),
                    ("cut", {"nvidia.com/mig-3g.40gb": "16", GPU: "0"}, {**H100, mig.CONFIG_LABEL: "all-3g.40gb"}))
    state.allocate("busy", {GPU: 1})
    found = {c.node: c for c in mig.candidates(state)}
    assert sorted(found) == ["cut", "idle"]
    assert found["cut"].gpus == 8 and not found["cut"].whole  # eight GPUs, from two 3g.40gb slices each
    assert found["idle"].yields("1g.10gb") == 56 and found["idle"].whole


def test_the_plan_cuts_the_least_it_can_and_already_cut_gpus_first() -> None:
    nodes = [mig.Candidate("a-whole", 8, 81559, ""), mig.Candidate("b-cut", 8, 81559, "all-3g.40gb"),
             mig.Candidate("c-small", 2, 81559, "all-disabled")]
    # 10 slices: c-small gives 14, the least that covers them
    assert mig.plan({SLICE: 10}, nodes) == {"c-small": "all-1g.10gb"}
    # 40 slices: an 8-GPU node covers them; the one already cut goes before the whole one
    assert mig.plan({SLICE: 40}, nodes) == {"b-cut": "all-1g.10gb"}
    # 100: no one node does, the largest first, then the least that covers the rest
    assert mig.plan({SLICE: 100}, nodes) == {"b-cut": "all-1g.10gb", "a-whole": "all-1g.10gb"}
    assert mig.plan({SLICE: 200}, nodes) is None  # 126 at most
    assert mig.plan({"nvidia.com/mig-9g.99gb": 1}, nodes) is None  # no such profile on these GPUs
    # two profiles take different nodes
    assert mig.plan({SLICE: 7, "nvidia.com/mig-3g.40gb": 4}, nodes) == {"b-cut": "all-3g.40gb",
                                                                        "c-small": "all-1g.10gb"}


def test_nodes_being_cut_into_the_profile_already_are_counted_first() -> None:
    nodes = [mig.Candidate("a-whole", 8, 81559, "")]
    cutting = [mig.Candidate("z-cutting", 2, 81559, "all-1g.10gb"), mig.Candidate("y-other", 8, 81559, "all-7g.80gb")]
    assert mig.plan({SLICE: 10}, nodes, cutting) == {"z-cutting": "all-1g.10gb"}  # 14 coming
    assert mig.plan({SLICE: 20}, nodes, cutting) == {"z-cutting": "all-1g.10gb", "a-whole": "all-1g.10gb"}
    state = cluster(("cut", {GPU: "2"}, {**H100, mig.STATE_LABEL: "pending", mig.CONFIG_LABEL: "all-1g.10gb"}),
                    ("idle", {GPU: "8"}, H100))
    assert [(c.node, c.config) for c in mig.underway(state)] == [("cut", "all-1g.10gb")]


def test_the_shortfall_is_what_the_published_slices_do_not_cover() -> None:
    assert mig.shortfall({SLICE: 10, GPU: 4, "cpu": 8000}, {SLICE: 4, GPU: 0}) == {SLICE: 6}
    assert mig.shortfall({SLICE: 4}, {SLICE: 4}) == {}


def test_the_agent_reports_what_it_could_cut_per_tier() -> None:
    state = cluster(("n1", {GPU: "8"}, H100), ("n2", {GPU: "4"}, H100), ("n3", {GPU: "8"}, {}), racks=2)
    tiers = {t.tier: t for t in mig.partitionable(state)}
    assert tiers[0].max_free[SLICE] == 56  # one node at most
    assert tiers[1].max_free[SLICE] == 56 + 28  # rack0 holds n1 and n2
    assert tiers[max(tiers)].max_free["nvidia.com/mig-7g.80gb"] == 12  # the whole cluster, one per GPU
    state.allocate("n1", {GPU: 1})
    assert {t.tier: t for t in mig.partitionable(state)}[1].max_free[SLICE] == 28


def test_the_federation_counts_what_a_cluster_could_cut_as_free_not_as_capacity() -> None:
    tier = {"tier": 1, "tier_name": "rack", "max_free": {GPU: 8}, "max_capacity": {GPU: 8}}
    cut = {"tier": 1, "tier_name": "rack", "max_free": {SLICE: 56}, "max_capacity": {SLICE: 56}}
    node = {"tier": 0, "tier_name": "node", "max_free": {GPU: 8}, "max_capacity": {GPU: 8}}
    row = {"name": "east", "labels": {}, "inventory": {
        "allocatable": {GPU: 8}, "used": {}, "topology": [node, tier],
        "partitionable": [{**node, "max_free": {SLICE: 56}, "max_capacity": {SLICE: 56}}, cut]}}
    view = cluster_view(row, {})
    job = JobView("j", {SLICE: 12}, largest_pod={SLICE: 2})
    assert check(job, view) is None
    assert view.free[SLICE] == 56 and SLICE not in view.capacity
    without = cluster_view({**row, "inventory": {**row["inventory"], "partitionable": []}}, {})
    assert check(job, without) is not None
    # nor is it a job no cluster could ever run
    assert cannot_run(job, [view]) is None and "mig-1g.10gb" in (cannot_run(job, [without]) or "")


def test_a_cluster_claiming_it_could_cut_anything_but_mig_slices_is_left_out() -> None:
    def tier(amounts: dict[str, int], number: int = 1) -> agent_pb2.TierFree:
        return agent_pb2.TierFree(tier=number, max_free=agent_pb2.ResourceAmounts(amounts=amounts),
                                  max_capacity=agent_pb2.ResourceAmounts(amounts=amounts))

    assert inventory_problem(agent_pb2.Inventory(partitionable=[tier({SLICE: 56})])) == ""
    assert inventory_problem(agent_pb2.Inventory(partitionable=[tier({GPU: 1_000})])) == (
        "partitionable[0] names a resource that is not a MIG profile (nvidia.com/mig-<profile>)")
    assert inventory_problem(agent_pb2.Inventory(partitionable=[tier({SLICE: 1}, 99)])).startswith(
        "partitionable[0].tier 99 is out of range")


def test_the_example_asks_for_one_idle_node_cut_into_its_profile() -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "mig" / "repartition.yaml"
    (converted,) = jobs_from_documents(load_documents(example.read_text(), str(example)))
    state = cluster(("gpu-6", {GPU: "8"}, H100), ("gpu-7", {GPU: "8"}, H100), ("gpu-8", {GPU: "4"}, H100))
    state.allocate("gpu-6", {GPU: 1})  # not idle
    assert isinstance(place(state, gang_request(converted.message, state.topology)), Rejection)
    wanted = gangs.minimum(converted.message)
    assert mig.plan(mig.shortfall(wanted, state.domain_free[ROOT]), mig.candidates(state)) == {
        "gpu-8": "all-3g.40gb"}  # 4 GPUs make 8, 8 make 16: the 4-GPU node is the least that covers 6


def test_a_hard_gang_s_cut_stays_under_one_hypernode_of_its_tier() -> None:
    state = cluster(("n1", {GPU: "8"}, H100), ("n2", {GPU: "4"}, H100), ("n3", {GPU: "8"}, H100),
                    ("n4", {GPU: "8"}, H100), racks=2)
    wanted = {SLICE: 100, "cpu": 8000}
    # the cluster as a whole: the largest first, then the least that covers the rest, across racks
    assert mig.plan_for(wanted, state) == {"n1": "all-1g.10gb", "n3": "all-1g.10gb"}
    # under one rack: rack0 makes 84 at most, rack1 112
    assert mig.plan_for(wanted, state, highest_tier=1) == {"n3": "all-1g.10gb", "n4": "all-1g.10gb"}
    assert mig.plan_for({SLICE: 120}, state, highest_tier=1) is None
    assert mig.plan_for({SLICE: 20}, state, highest_tier=1) == {"n2": "all-1g.10gb"}  # rack0: one node, by name


class _RecordingBackend(SimulatedBackend):
    """A simulated cluster whose MIG manager requests are recorded (and left unanswered)."""

    def __init__(self, state: ClusterState) -> None:
        super().__init__(state)
        self.asked: list[dict[str, str]] = []

    async def repartition(self, layouts: Mapping[str, str]) -> None:
        self.asked.append(dict(layouts))


async def test_the_agent_waits_for_a_node_being_cut_already_and_relabels_only_the_rest() -> None:
    cutting = {**H100, mig.STATE_LABEL: "pending", mig.CONFIG_LABEL: "all-1g.10gb", "nvidia.com/gpu.count": "2"}
    backend = _RecordingBackend(cluster(("a-cut", {GPU: "2"}, cutting), ("b-idle", {GPU: "8"}, H100)))
    backend.state.set_ready("a-cut", False)  # as the Kubernetes backend keeps a node being cut
    agent = Agent("east", {}, backend)
    spec = common_pb2.JobSpec(name="slices", queue="q", tasks=[
        common_pb2.TaskSpec(name="infer", replicas=10, resources={SLICE: "2", "cpu": "1"})])
    await agent.assign(common_pb2.Job(id="slices-1", spec=spec), attempt=1)
    (update,) = drain(agent)
    assert update.type == agent_pb2.PREPARING, update.reason
    assert "node a-cut to all-1g.10gb, node b-idle to all-1g.10gb" in update.reason  # 14 coming, 6 more needed
    assert backend.asked == [{"b-idle": "all-1g.10gb"}]  # a-cut's label is left as it is
    assert "b-idle" not in backend.state.ready  # nothing else goes on a node being cut
