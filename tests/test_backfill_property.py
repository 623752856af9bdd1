"""Property: no job waits while a cluster could run it now without taking room reserved for another.

On random federations (clusters with leaves, running work, queues over and under their shares, gangs with
and without hard tier limits), after one cycle every waiting job either cannot run at all, is over a limit,
or fits no cluster in what the cycle left: free resources less what it started and less what it reserved
for the heads of queues. A reservation therefore never holds up anything it does not need.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling.cycle import PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, JobView, TierFree, check

GPU = "nvidia.com/gpu"


@st.composite
def federations(draw: st.DrawFn) -> tuple[Snapshot, dict[str, ClusterView]]:
    clusters = {}
    running = []
    for c in range(draw(st.integers(1, 3))):
        leaves, leaf = draw(st.integers(1, 4)), draw(st.sampled_from([16, 32]))
        capacity = leaves * leaf
        busy = draw(st.integers(0, leaves)) * leaf // 2
        name = f"c{c}"
        free = capacity - busy
        clusters[name] = ClusterView(name, {"zone": draw(st.sampled_from(["a", "b"]))}, {GPU: free}, [
            TierFree(0, "node", {GPU: min(free, 8)}, {GPU: 8}),
            TierFree(1, "leaf", {GPU: min(free, leaf)}, {GPU: leaf}),
            TierFree(2, "spine", {GPU: free}, {GPU: capacity})], capacity={GPU: capacity})
        if busy:
            running.append(RunningJob(f"r{c}", draw(st.sampled_from(["q0", "q1", "q2"])), name, 0, 0, {GPU: busy},
                                      preemptible=draw(st.booleans())))
    tenants = [TenantInfo("t0", draw(st.integers(1, 3))), TenantInfo("t1", draw(st.integers(1, 3)))]
    queues = [QueueInfo("q0", "t0"), QueueInfo("q1", "t0", priority=draw(st.integers(0, 1))),
              QueueInfo("q2", "t1", limit=draw(st.sampled_from([{}, {GPU: 48}])))]
    pending = []
    for i in range(draw(st.integers(1, 14))):
        gpus = draw(st.sampled_from([8, 16, 24, 32, 64]))
        hard = draw(st.booleans())
        selector = draw(st.sampled_from([{}, {}, {"zone": "a"}]))
        pending.append(PendingJob(JobView(f"j{i}", {GPU: gpus}, {GPU: 8}, selector, "hard" if hard else "",
                                          1 if hard else 0), draw(st.sampled_from(["q0", "q1", "q2"])), 0, i))
    capacity = sum(v.capacity[GPU] for v in clusters.values())
    return Snapshot(tenants, queues, pending, running, list(clusters.values()), {GPU: capacity}), clusters


def left_after(view: ClusterView, taken: int) -> ClusterView:
    free = view.free[GPU] - taken
    tiers = [TierFree(t.tier, t.tier_name, {GPU: max(min(t.max_free[GPU], free), 0)}, t.max_capacity)
             for t in view.tiers]
    return ClusterView(view.name, view.labels, {GPU: free}, tiers, view.capacity)


@settings(max_examples=300, deadline=None, print_blob=True, derandomize=True)
@given(federations())
def test_no_job_waits_where_it_could_run_without_taking_reserved_room(
        federation: tuple[Snapshot, dict[str, ClusterView]]) -> None:
    snap, clusters = federation
    d = schedule(snap)
    jobs = {j.id: j for j in snap.pending}
    taken = dict.fromkeys(clusters, 0)
    for job_id, cluster in [*d.assign.items(), *d.reserved.items()]:
        taken[cluster] += jobs[job_id].view.request[GPU]
    left = {name: left_after(view, taken[name]) for name, view in clusters.items()}
    for job_id, why in d.waiting.items():
        if job_id in d.cannot_run or "at limit" in why or job_id in d.reserved:
            continue
        could = [name for name, view in left.items() if check(jobs[job_id].view, view) is None]
        assert not could, f"{job_id} waits ({why}) though {could} could run it now"
