"""Property (issue 26): a waiting job's reason, its per-cluster rows (ExplainJob) and its expected start come from
one truth and never contradict each other, over random federations: clusters of different node sizes and
labels, tenants and queues with limits, running gangs, waiting gangs of every shape, refusals.

For every job still waiting after a cycle:
- held by a limit (its reason says so): no cluster row says it fits now, and it is not expected to start now;
- unable to run anywhere: no expected start, and no row says it fits;
- expected to start in a cluster: that cluster has not refused it and could hold it (selector, capacity,
  largest node); expected to start now: that cluster's row says it fits now.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling import outlook
from federation.scheduling.cycle import PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterState, ClusterView, JobView, TierFree, could_hold, explain
from federation.scheduling.forecast import Holding, after_cycle

GPU = "nvidia.com/gpu"


def federation(rng: random.Random) -> tuple[Snapshot, dict[str, float]]:
    """A random federation, and when each running gang is expected to end (seconds from now)."""
    tenants, queues = [], []
    for t in range(rng.randint(1, 2)):
        tenants.append(TenantInfo(f"t{t}", rng.randint(1, 3), limit=rng.choice([{}, {}, {GPU: 16}, {GPU: 32}])))
        for q in range(rng.randint(1, 2)):
            queues.append(QueueInfo(f"t{t}q{q}", f"t{t}", rng.randint(1, 3),
                                    limit=rng.choice([{}, {}, {GPU: 8}, {GPU: 24}])))
    clusters, running, ends = [], [], {}
    seq = 0
    for c in range(rng.randint(1, 3)):
        node, nodes = rng.choice([4, 8]), rng.choice([2, 4, 8])
        capacity = node * nodes
        used = 0
        for _ in range(rng.randint(0, nodes)):
            size = rng.choice([2, 4, 8])
            if used + size > capacity:
                break
            seq += 1
            job_id = f"run-{seq}"
            running.append(RunningJob(job_id, rng.choice(queues).name, f"c{c}", 0, seq, {GPU: size}, False,
                                      started=-60.0))
            ends[job_id] = rng.choice([60.0, 600.0, 3600.0])
            used += size
        free = capacity - used
        tiers = [TierFree(0, "node", {GPU: min(node, free)}, {GPU: node})]
        clusters.append(ClusterView(f"c{c}", {"zone": rng.choice("ab")}, {GPU: free}, tiers, capacity={GPU: capacity}))
    pending = []
    for _ in range(rng.randint(3, 12)):
        seq += 1
        pods, per_pod = rng.choice([1, 2, 4]), rng.choice([2, 4, 8])
        selector = rng.choice([{}, {}, {"zone": "a"}])
        pending.append(PendingJob(JobView(f"wait-{seq}", {GPU: pods * per_pod}, {GPU: per_pod}, selector),
                                  rng.choice(queues).name, rng.randint(0, 1), seq))
    refused = {}
    for job in pending:
        if clusters and rng.random() < 0.2:
            refused[job.id] = {rng.choice(clusters).name: "refused it for good: 403 Forbidden"}
    return Snapshot(tenants, queues, pending, running, clusters, {GPU: sum(c.capacity[GPU] for c in clusters)},
                    refused=refused), ends


@settings(max_examples=300, deadline=None, print_blob=True, derandomize=True)
@given(st.integers(0, 2**32 - 1))
def test_reason_rows_and_forecast_never_contradict(seed: int) -> None:
    rng = random.Random(seed)
    snap, ends = federation(rng)
    d = schedule(snap)
    pending = {job.id: job for job in snap.pending}
    sent = [Holding(cluster, pending[j].view.request, 3600.0, pending[j].queue) for j, cluster in d.assign.items()]
    held = [Holding(r.cluster, r.request, ends[r.id], r.queue) for r in snap.running if r.id not in d.preempt]
    order = [job.id for job in sorted(snap.pending, key=lambda j: j.rank)]
    waiting = outlook.waiting(snap, d, order, lambda job: 3600.0, [*sent, *held])
    starts = after_cycle(snap.clusters, sent, held, waiting)
    states = [ClusterState(view, True, False) for view in outlook.after_dispatch(snap, d)]
    reserved = outlook.reserved_room(d, pending)
    by_name = {c.name: c for c in snap.clusters}
    for job_id in order:
        if job_id in d.assign:
            continue
        job = pending[job_id]
        refused = snap.refused.get(job_id, {})
        others = {}
        for cluster, (room, holders) in reserved.items():
            rest = [h for h in holders if h != job_id]
            if rest:
                own = job.view.request if job_id in holders else {}
                others[cluster] = ({r: a - own.get(r, 0) for r, a in room.items()}, rest[0])
        limit = d.limited.get(job_id)
        rows = dict(explain(job.view, states, refused, others, outlook.holds(d).get(job_id)))
        start = starts.get(job_id)
        reason = d.waiting.get(job_id, "")
        context = f"{job_id}: reason {reason!r}, rows {rows}, start {start}"
        if limit is not None:
            assert "at limit" in reason, context
            assert all(why is not None for why in rows.values()), context
            assert start is None or start.seconds > 0, context
        if job_id in d.cannot_run:
            assert start is None, context
            assert all(why is not None for why in rows.values()), context
        if start is not None:
            assert start.cluster not in refused, context
            assert could_hold(job.view, by_name[start.cluster]), context
            if start.seconds == 0:
                assert rows[start.cluster] is None, context


def test_a_job_at_its_tenants_limit_starts_when_its_own_gangs_end_not_now() -> None:
    """The issue's page: "tenant at limit", "starts now on gb300" and "h100 fits now" at once. Now the limit holds
    the rows and the forecast too: it starts when the tenant's own gang ends, where its largest pod fits."""
    tenants = [TenantInfo("ml", limit={GPU: 16})]
    queues = [QueueInfo("train", "ml")]
    h100 = ClusterView("h100", {}, {GPU: 48}, [TierFree(0, "node", {GPU: 8}, {GPU: 8})], capacity={GPU: 64})
    gb300 = ClusterView("gb300", {}, {GPU: 64}, [TierFree(0, "node", {GPU: 4}, {GPU: 4})], capacity={GPU: 64})
    running = [RunningJob("mine", "train", "h100", 0, 1, {GPU: 16}, False, started=-60.0)]
    job = PendingJob(JobView("big", {GPU: 16}, {GPU: 8}), "train", 0, 2)
    snap = Snapshot(tenants, queues, [job], running, [gb300, h100], {GPU: 128})
    d = schedule(snap)
    assert d.waiting["big"] == "tenant ml at limit nvidia.com/gpu=16"
    held = [Holding("h100", {GPU: 16}, 600.0, "train")]
    starts = after_cycle(snap.clusters, [], held, outlook.waiting(snap, d, ["big"], lambda _: 3600.0, held))
    rows = dict(explain(job.view, [ClusterState(c, True, False) for c in snap.clusters],
                        held_by=outlook.holds(d)["big"]))
    assert rows["h100"] == "room enough, but held by its limit: tenant ml at limit nvidia.com/gpu=16"
    assert rows["gb300"].startswith("no node can hold its largest pod")
    assert starts["big"].cluster == "h100" and starts["big"].seconds >= 600  # once its own gang has ended
