"""MIG slices as NVIDIA's device plugin publishes them (issue 31): the mixed strategy's per-profile resources
(`nvidia.com/mig-1g.10gb`) and the single strategy's (`nvidia.com/gpu` on nodes whose product label names the
profile). Pods land only on nodes that carry their profile; quotas and fair shares count each profile exactly."""

from __future__ import annotations

from pathlib import Path

from federation.cli.jobdocs import jobs_from_documents
from federation.cli.yamldoc import load_documents
from federation.scheduling.cycle import PendingJob, QueueInfo, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, JobView, TierFree
from member_agent import clusters
from member_agent.gang import gang_request
from member_agent.placement import GangRequest, Placement, Rejection, TaskRequest, place
from member_agent.state import ClusterState
from member_agent.topology import build, load_objects

GPU = "nvidia.com/gpu"
SLICE = "nvidia.com/mig-1g.10gb"
PRODUCT = "nvidia.com/gpu.product"


def agent_cluster() -> ClusterState:
    objs = [clusters.node("mixed", {SLICE: "14", "nvidia.com/mig-3g.40gb": "2", "cpu": "64", "memory": "512Gi"}),
            clusters.node("whole", {GPU: "8", "cpu": "64", "memory": "512Gi"}),
            clusters.node("single", {GPU: "14", "cpu": "64", "memory": "512Gi"},
                          {"nvidia.com/mig.strategy": "single", PRODUCT: "H100-80GB-HBM3-MIG-1g.10gb"})]
    objs.append(clusters.hypernode("rack", 1, "rack", ["mixed", "whole", "single"], "Node"))
    nodes, hypernodes, _ = load_objects(objs)
    return ClusterState(build(nodes, hypernodes))


def test_mig_pods_land_on_the_nodes_that_carry_their_profile() -> None:
    state = agent_cluster()
    mixed = place(state, GangRequest((TaskRequest("infer", 3, {SLICE: 1, "cpu": 1000}),)))
    assert isinstance(mixed, Placement) and {p.node for p in mixed.pods} == {"mixed"}
    single = place(state, GangRequest((TaskRequest("infer", 2, {GPU: 1}, {PRODUCT: "H100-80GB-HBM3-MIG-1g.10gb"}),)))
    assert isinstance(single, Placement) and {p.node for p in single.pods} == {"single"}
    # more slices of a profile than any node carries: refused, whatever whole GPUs are free
    assert isinstance(place(state, GangRequest((TaskRequest("big", 1, {"nvidia.com/mig-3g.40gb": 3}),))), Rejection)


def _snapshot(tenants: list[TenantInfo], queues: list[QueueInfo], pending: list[PendingJob], slices: int
              ) -> Snapshot:
    free = {SLICE: slices, GPU: 8}
    view = ClusterView("c1", {}, free, [TierFree(0, "node", free), TierFree(1, "rack", free)])
    return Snapshot(tenants, queues, pending, [], [view], dict(free))


def _job(job_id: str, queue: str, slices: int, seq: int) -> PendingJob:
    return PendingJob(JobView(job_id, {SLICE: slices}, {SLICE: 1}), queue, 0, seq)


def test_a_queue_limit_per_profile_holds_its_jobs() -> None:
    pending = [_job(f"j{i}", "q", 2, i) for i in range(4)]
    d = schedule(_snapshot([TenantInfo("t")], [QueueInfo("q", "t", limit={SLICE: 4})], pending, 14))
    assert set(d.assign) == {"j0", "j1"}
    assert d.waiting["j2"] == f"queue at limit {SLICE}=4"


def test_fair_shares_of_a_profile_follow_the_weights() -> None:
    pending = [_job(f"a{i}", "qa", 1, i) for i in range(20)] + [_job(f"b{i}", "qb", 1, 100 + i) for i in range(20)]
    d = schedule(_snapshot([TenantInfo("ta", 1), TenantInfo("tb", 1)], [QueueInfo("qa", "ta"), QueueInfo("qb", "tb")],
                           pending, 14))
    assert sum(j.startswith("a") for j in d.assign) == 7 and sum(j.startswith("b") for j in d.assign) == 7
    assert d.shares is not None and d.shares.tenants["ta"][SLICE] == 7


def test_the_example_s_slices_land_on_the_nodes_of_their_strategy() -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "mig" / "mig-slices.yaml"
    (converted,) = jobs_from_documents(load_documents(example.read_text(), str(example)))
    state = agent_cluster()
    placement = place(state, gang_request(converted.message, state.topology))
    assert isinstance(placement, Placement)
    assert {(p.task, p.node) for p in placement.pods} == {("embed", "mixed"), ("rerank", "single")}
