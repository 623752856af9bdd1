"""Property: a flood of equal jobs on random tenant/queue trees (two and three levels: queues may have child
queues) lands on the water-filling oracle's shares.

The oracle is written here independently of `federation.scheduling.fairshare`: at each level a member gets
min(cap, guarantee + level x weight), with the one water level that hands out exactly what there is
(found by bisection), caps being limits and demands. One cycle from an empty federation must leave every
queue within one job of its oracle share, and so must every cycle of a churn that ends random jobs and
floods the queues again.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling.cycle import PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, JobView, TierFree

GPU = "nvidia.com/gpu"
JOB = 4  # GPUs per job
CAPACITY = 64


def oracle_level(total: float, members: list[tuple[float, float, float]]) -> list[float]:
    """(weight, guarantee, cap) members: each gets min(cap, guarantee + level x weight), summing to total."""
    floors = [min(g, c) for _, g, c in members]
    if sum(floors) >= total:
        return [f * total / sum(floors) if sum(floors) else 0.0 for f in floors]
    if sum(c for _, _, c in members) <= total:
        return [c for _, _, c in members]
    low, high = 0.0, total / min(w for w, _, _ in members)
    for _ in range(200):
        level = (low + high) / 2
        given_out = sum(min(c, max(f, f + level * w)) for (w, _, c), f in zip(members, floors, strict=True))
        low, high = (level, high) if given_out < total else (low, level)
    return [min(c, f + low * w) for (w, _, c), f in zip(members, floors, strict=True)]


def oracle(tenants: list[TenantInfo], queues: list[QueueInfo], demand: dict[str, int]) -> dict[str, float]:
    """Every queue's share, parents' included: a member's cap is its limit and what its children may use."""
    def cap(limit: Mapping[str, int], wanted: float) -> float:
        return min(wanted, limit.get(GPU, wanted))

    def children(parent: str, tenant: str) -> list[QueueInfo]:
        return [q for q in queues if q.tenant == tenant and q.parent == parent]

    def wants(q: QueueInfo) -> float:
        below = children(q.name, q.tenant)
        return cap(q.limit, sum(wants(c) for c in below) if below else demand[q.name])

    out: dict[str, float] = {}

    def share_out(total: float, members: list[QueueInfo]) -> None:
        for q, s in zip(members, oracle_level(round(total), [(q.weight, q.guarantee.get(GPU, 0), wants(q))
                                                              for q in members]), strict=True):
            out[q.name] = s
            share_out(s, children(q.name, q.tenant))

    tenant_shares = oracle_level(CAPACITY, [(t.weight, t.guarantee.get(GPU, 0),
                                             cap(t.limit, sum(wants(q) for q in children("", t.name))))
                                            for t in tenants])
    for t, share in zip(tenants, tenant_shares, strict=True):
        share_out(share, children("", t.name))
    return out


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[TenantInfo], list[QueueInfo], dict[str, int]]:
    """Two levels (tenants, queues) and, where a queue has children, three."""
    tenants, queues, demand = [], [], {}

    def queue(name: str, tenant: str, parent: str = "") -> QueueInfo:
        qlimit = draw(st.sampled_from([{}, {}, {GPU: 12}, {GPU: 28}]))
        return QueueInfo(name, tenant, draw(st.integers(1, 4)), guarantee={GPU: draw(st.sampled_from([0, 0, 8]))},
                         limit=qlimit, parent=parent)

    for t in range(draw(st.integers(1, 4))):
        guarantee = {GPU: draw(st.sampled_from([0, 8, 16]))}
        limit = draw(st.sampled_from([{}, {GPU: 24}, {GPU: 40}]))
        if limit and guarantee[GPU] > limit[GPU]:
            guarantee = {}
        tenants.append(TenantInfo(f"t{t}", draw(st.integers(1, 4)), guarantee, limit))
        for q in range(draw(st.integers(1, 3))):
            name = f"t{t}q{q}"
            queues.append(queue(name, f"t{t}"))
            below = [f"{name}c{c}" for c in range(draw(st.sampled_from([0, 0, 2, 3])))]
            queues += [queue(child, f"t{t}", name) for child in below]
            for leaf in below or [name]:
                demand[leaf] = JOB * draw(st.sampled_from([2, 6, 40]))  # some queues want little, most flood
    return tenants, queues, demand


def cycle(tenants: list[TenantInfo], queues: list[QueueInfo], demand: dict[str, int],
          running: list[RunningJob], seq: int) -> tuple[list[RunningJob], int]:
    """One cycle with every queue's unmet demand pending; the jobs running after it."""
    pending = []
    for q in queues:
        if q.name not in demand:
            continue  # a parent queue: jobs go to its leaves
        held = sum(r.request[GPU] for r in running if r.queue == q.name)
        for _ in range((demand[q.name] - held) // JOB):
            seq += 1
            pending.append(PendingJob(JobView(f"{q.name}-{seq}", {GPU: JOB}, {GPU: JOB}), q.name, 0, seq))
    free = CAPACITY - sum(r.request[GPU] for r in running)
    view = ClusterView("c", {}, {GPU: free}, [TierFree(0, "node", {GPU: min(free, 8)})], capacity={GPU: CAPACITY})
    d = schedule(Snapshot(tenants, queues, pending, running, [view], {GPU: CAPACITY}))
    by_id = {p.id: p for p in pending}
    started = [RunningJob(i, by_id[i].queue, "c", 0, by_id[i].seq, {GPU: JOB}, preemptible=False) for i in d.assign]
    return running + started, seq


def assert_near_oracle(tenants: list[TenantInfo], queues: list[QueueInfo], demand: dict[str, int],
                       running: list[RunningJob]) -> None:
    want = oracle(tenants, queues, demand)
    parent = {q.name: q.parent for q in queues}
    held = {q.name: 0 for q in queues}
    for r in running:
        queue = r.queue
        while queue:
            held[queue] += r.request[GPU]
            queue = parent[queue]
    off = {q: (held[q], round(w, 2)) for q, w in want.items() if abs(held[q] - w) > JOB + 1e-6}
    assert not off, f"queues more than one job from the oracle (held, oracle): {off}; held {held}, demand {demand}"


@settings(max_examples=150, deadline=None, print_blob=True, derandomize=True)
@given(trees(), st.integers(0, 2**32 - 1))
def test_a_flood_converges_to_the_water_filling_oracle_in_one_cycle_and_under_churn(
        tree: tuple[list[TenantInfo], list[QueueInfo], dict[str, int]], seed: int) -> None:
    tenants, queues, demand = tree
    running, seq = cycle(tenants, queues, demand, [], 0)
    assert_near_oracle(tenants, queues, demand, running)
    rng = random.Random(seed)
    for _ in range(5):  # churn: a random third of the jobs end, the floods refill the queues
        running = [r for r in running if rng.random() > 1 / 3]
        running, seq = cycle(tenants, queues, demand, running, seq)
        assert_near_oracle(tenants, queues, demand, running)


def test_two_levels_from_the_issue_land_on_8_24_32() -> None:
    """t1 (queues 1:3) and t2 (one queue), equal weights, flooded with 4-GPU jobs on 64 GPUs."""
    tenants = [TenantInfo("t1"), TenantInfo("t2")]
    queues = [QueueInfo("a", "t1", 1), QueueInfo("b", "t1", 3), QueueInfo("c", "t2")]
    demand = {"a": 400, "b": 400, "c": 400}
    running, _ = cycle(tenants, queues, demand, [], 0)
    held = {q.name: sum(r.request[GPU] for r in running if r.queue == q.name) for q in queues}
    assert held == {"a": 8, "b": 24, "c": 32}


def test_a_queue_deserving_three_jobs_among_siblings_deserving_less_than_one_gets_within_one_job() -> None:
    """Found by the property above on a random seed: t2's third queue deserves 12.7 GPUs and holds 8."""
    tenants = [TenantInfo("t0"), TenantInfo("t1", 3), TenantInfo("t2", 1, {GPU: 8}), TenantInfo("t3")]
    queues = [QueueInfo("t0q0", "t0"), QueueInfo("t0q1", "t0"), QueueInfo("t1q0", "t1"), QueueInfo("t2q0", "t2", 2),
              QueueInfo("t2q1", "t2", 2), QueueInfo("t2q2", "t2", 3, guarantee={GPU: 8}), QueueInfo("t3q0", "t3")]
    demand = {"t0q0": 8, "t0q1": 8, "t1q0": 24, "t2q0": 8, "t2q1": 8, "t2q2": 24, "t3q0": 24}
    running, _ = cycle(tenants, queues, demand, [], 0)
    assert_near_oracle(tenants, queues, demand, running)


def test_a_queue_deserving_little_is_served_before_a_larger_one_would_overshoot_by_more() -> None:
    """Found by the property above under churn: t0q1 (5.25 deserved) and t0q2 (15.75) tie in Sainte-Laguë's
    order at 4 and 16 held; the fifth job must go where it overshoots least, not make t0q2 20."""
    tenants = [TenantInfo("t0", 4, {GPU: 16}), TenantInfo("t1", 2), TenantInfo("t2", 2), TenantInfo("t3", 3)]
    queues = [QueueInfo("t0q0", "t0", 3, limit={GPU: 12}), QueueInfo("t0q1", "t0", 1), QueueInfo("t0q2", "t0", 3),
              QueueInfo("t1q0", "t1"), QueueInfo("t2q0", "t2"), QueueInfo("t2q1", "t2"), QueueInfo("t3q0", "t3")]
    demand = {"t0q0": 24, "t0q1": 8, "t0q2": 24, "t1q0": 24, "t2q0": 8, "t2q1": 8, "t3q0": 24}
    test_a_flood_converges_to_the_water_filling_oracle_in_one_cycle_and_under_churn.hypothesis.inner_test(  # type: ignore[attr-defined]
        (tenants, queues, demand), 0)
