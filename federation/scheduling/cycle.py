"""One scheduling cycle over an in-memory snapshot: pure, deterministic, explainable.

The shape follows Kueue's scheduler: compute deserved shares, then repeatedly take the head of
the queue that should be served next, check its quotas, choose a cluster, and if nothing fits,
consider reclaim or preemption, else a reservation. Every job the cycle looks at gets a decision
or a reason; nothing here reads a clock or a database.

Order: higher queue priority first; among equals, the queue whose tenant, then itself, would have
the lowest dominant share (of its deserved share) once its head job starts; inside a queue, higher
job priority, then earlier submission.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from federation.resources import Resources, format_resources
from federation.scheduling.fairshare import Claim, Tree, dominant_share, hierarchical
from federation.scheduling.fit import ClusterView, JobView, TierFree, check

RESOURCE_FOR_FEWEST = "nvidia.com/gpu"  # victims are chosen to evict the fewest of these


@dataclass(frozen=True)
class TenantInfo:
    name: str
    weight: int = 1
    guarantee: Mapping[str, int] = field(default_factory=dict)
    limit: Mapping[str, int] = field(default_factory=dict)  # empty: no limit
    disabled: bool = False


@dataclass(frozen=True)
class QueueInfo:
    name: str
    tenant: str
    weight: int = 1
    priority: int = 0
    guarantee: Mapping[str, int] = field(default_factory=dict)
    limit: Mapping[str, int] = field(default_factory=dict)
    reclaimable: bool = True
    state: str = "OPEN"


@dataclass(frozen=True)
class PendingJob:
    view: JobView
    queue: str
    priority: int
    seq: int

    @property
    def id(self) -> str:
        return self.view.id


@dataclass(frozen=True)
class RunningJob:
    id: str
    queue: str
    cluster: str
    priority: int
    seq: int
    request: Mapping[str, int]
    preemptible: bool


@dataclass(frozen=True)
class Snapshot:
    tenants: Sequence[TenantInfo]
    queues: Sequence[QueueInfo]
    pending: Sequence[PendingJob]
    running: Sequence[RunningJob]  # Dispatched or Running: they hold resources
    clusters: Sequence[ClusterView]  # Ready and not cordoned
    capacity: Mapping[str, int]  # of those clusters, for deserved shares
    refused: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # job -> cluster -> agent's reason
    # job -> cluster where gangs were preempted for it and may not have exited yet (the agent's
    # inventory still counts them): it waits there instead of preempting again.
    making_room: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Decisions:
    assign: dict[str, str] = field(default_factory=dict)  # job -> cluster
    preempt: dict[str, str] = field(default_factory=dict)  # running job -> reason
    making_room: dict[str, str] = field(default_factory=dict)  # waiting job -> cluster preempted for it
    waiting: dict[str, str] = field(default_factory=dict)  # pending job -> why it waits
    positions: dict[str, int] = field(default_factory=dict)  # pending job -> place in its queue, from 1
    shares: Tree | None = None
    usage: dict[str, Resources] = field(default_factory=dict)  # queue -> in use after this cycle


def _add(into: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    for r, a in amounts.items():
        into[r] = into.get(r, 0) + sign * a


def _over(usage: Mapping[str, int], extra: Mapping[str, int], limit: Mapping[str, int]) -> dict[str, int]:
    """Resources of `limit` that usage + extra would exceed."""
    return {r: cap for r, cap in limit.items() if usage.get(r, 0) + extra.get(r, 0) > cap}


def _fmt(amounts: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in format_resources(amounts).items())


class _Cycle:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.tenants = {t.name: t for t in snap.tenants}
        self.queues = {q.name: q for q in snap.queues}
        self.free = {c.name: dict(c.free) for c in snap.clusters}
        self.tiers = {c.name: [(t.tier, t.tier_name, dict(t.max_free)) for t in c.tiers] for c in snap.clusters}
        self.clusters = {c.name: c for c in snap.clusters}
        self.queue_usage: dict[str, dict[str, int]] = {q: {} for q in self.queues}
        self.tenant_usage: dict[str, dict[str, int]] = {t: {} for t in self.tenants}
        self.running_by_cluster: dict[str, list[RunningJob]] = {}
        for job in snap.running:
            if job.queue in self.queues:
                _add(self.queue_usage[job.queue], job.request)
                _add(self.tenant_usage[self.queues[job.queue].tenant], job.request)
            self.running_by_cluster.setdefault(job.cluster, []).append(job)
        self.out = Decisions()

    # -- shares ----------------------------------------------------------------------------

    def compute_shares(self) -> None:
        demand = {q: dict(u) for q, u in self.queue_usage.items()}
        for job in self.snap.pending:
            if job.queue in demand:
                _add(demand[job.queue], job.view.request)
        queues_of: dict[str, list[Claim]] = {}
        for q in self.snap.queues:
            queues_of.setdefault(q.tenant, []).append(Claim(q.name, q.weight, q.guarantee, q.limit or None,
                                                            demand[q.name]))
        tenants = [Claim(t.name, t.weight, t.guarantee, t.limit or None) for t in self.snap.tenants
                   if not t.disabled]
        self.out.shares = hierarchical(self.snap.capacity, tenants, queues_of)

    def share_after(self, queue: str, extra: Mapping[str, int]) -> tuple[float, float]:
        assert self.out.shares is not None
        tenant = self.queues[queue].tenant
        return (dominant_share(self.tenant_usage[tenant], self.out.shares.tenants.get(tenant, {}), extra),
                dominant_share(self.queue_usage[queue], self.out.shares.queues.get(queue, {}), extra))

    # -- cluster choice ----------------------------------------------------------------------

    def _fit_tier(self, job: JobView, cluster: str) -> int:
        """The lowest tier whose largest free HyperNode covers the gang (the whole cluster if none)."""
        for tier, _, most in self.tiers[cluster]:
            if tier > 0 and all(most.get(r, 0) >= a for r, a in job.request.items()):
                return tier
        return 1 << 20

    def _leftover(self, job: JobView, cluster: str) -> float:
        totals = self.snap.capacity
        shares = [(self.free[cluster].get(r, 0) - a) / totals[r] for r, a in job.request.items() if totals.get(r)]
        return max(shares) if shares else 0.0

    def _view(self, cluster: str) -> ClusterView:
        c = self.clusters[cluster]
        return ClusterView(c.name, c.labels, self.free[cluster],
                           [TierFree(t, n, m) for t, n, m in self.tiers[cluster]])

    def choose(self, job: JobView) -> tuple[str | None, list[str]]:
        """The best cluster for `job`, or None with each cluster's reason."""
        fitting, reasons = [], []
        refused = self.snap.refused.get(job.id, {})
        for name in sorted(self.clusters):
            why = refused.get(name) or check(job, self._view(name))
            if why is None:
                fitting.append((self._fit_tier(job, name), self._leftover(job, name), name))
            else:
                reasons.append(f"{name}: {why}")
        return (min(fitting)[2] if fitting else None), reasons

    def reserve(self, job: JobView, cluster: str) -> None:
        """Take the gang's resources out of the cluster for the rest of the cycle.

        No HyperNode can have more free than the whole cluster has left, so each tier's maximum is
        capped at that. Where the gang lands inside the cluster is not known here; a later job sent
        on a stale maximum is rejected by the agent and comes back with the reason.
        """
        free = self.free[cluster]
        _add(free, job.request, -1)
        for _, _, most in self.tiers[cluster]:
            for r in job.request:
                if r in most:
                    most[r] = max(min(most[r], free.get(r, 0)), 0)

    # -- reclaim and preemption --------------------------------------------------------------

    def victims(self, job: PendingJob, reclaim: bool) -> tuple[str, list[RunningJob]] | None:
        """Whole gangs to evict in one cluster so that `job` then fits, evicting the fewest GPUs.

        Inside its own queue, a job may preempt lower-priority preemptible jobs. With `reclaim`, it may
        also take back what other queues borrowed: running gangs of reclaimable queues over their
        deserved share, of preemptible classes, only while those queues stay over it. "Fits" is judged
        on whole-gang totals; the agent's placement decides the topology.
        """
        assert self.out.shares is not None
        best: tuple[int, int, str, list[RunningJob]] | None = None
        for cluster in sorted(self.clusters):
            view = self._view(cluster)
            if any(view.labels.get(k) != v for k, v in job.view.cluster_selector.items()):
                continue
            candidates = []
            for victim in self.running_by_cluster.get(cluster, []):
                if not victim.preemptible or victim.id in self.out.preempt:
                    continue
                if victim.queue == job.queue:
                    if victim.priority < job.priority:
                        candidates.append(victim)
                    continue
                q = self.queues.get(victim.queue)
                if not reclaim or q is None or not q.reclaimable:
                    continue
                if dominant_share(self.queue_usage[victim.queue], self.out.shares.queues.get(victim.queue, {})) > 1:
                    candidates.append(victim)
            candidates.sort(key=lambda v: (v.priority, -v.seq, v.id))  # lowest priority, then youngest
            freed: dict[str, int] = dict(self.free[cluster])
            chosen: list[RunningJob] = []
            borrowed = {q: dict(u) for q, u in self.queue_usage.items()}
            for victim in candidates:
                if _covers(freed, job.view.request):
                    break
                if victim.queue != job.queue:  # reclaim only while the victim's queue stays over its share
                    if dominant_share(borrowed[victim.queue], self.out.shares.queues.get(victim.queue, {})) <= 1:
                        continue
                    _add(borrowed[victim.queue], victim.request, -1)
                chosen.append(victim)
                _add(freed, victim.request)
            if chosen and _covers(freed, job.view.request):
                evicted = sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in chosen)
                key = (evicted, len(chosen), cluster, chosen)
                if best is None or key[:3] < best[:3]:
                    best = key
        return (best[2], best[3]) if best else None

    # -- the loop ------------------------------------------------------------------------------

    def run(self) -> Decisions:
        self.compute_shares()
        by_queue: dict[str, list[PendingJob]] = {}
        for job in self.snap.pending:
            by_queue.setdefault(job.queue, []).append(job)
        for jobs in by_queue.values():
            jobs.sort(key=lambda j: (-j.priority, j.seq))
            for i, job in enumerate(jobs, 1):
                self.out.positions[job.id] = i
        heap: list[tuple[int, float, float, str]] = []
        heads = {q: 0 for q in by_queue}

        def push(queue: str) -> None:
            jobs = by_queue[queue]
            if heads[queue] < len(jobs):
                tenant_share, queue_share = self.share_after(queue, jobs[heads[queue]].view.request)
                heapq.heappush(heap, (-self.queues[queue].priority, tenant_share, queue_share, queue))

        for queue in sorted(by_queue):
            q = self.queues.get(queue)
            reason = None
            if q is None:
                reason = f"queue {queue!r} no longer exists"
            elif q.state == "CLOSED":
                reason = f"queue {queue} is closed"
            elif self.tenants.get(q.tenant) is None or self.tenants[q.tenant].disabled:
                reason = f"tenant {q.tenant} is disabled"
            if reason:
                for job in by_queue[queue]:
                    self.out.waiting[job.id] = reason
                heads[queue] = len(by_queue[queue])
            else:
                push(queue)
        blocked: set[str] = set()
        while heap:
            _, _, _, queue = heapq.heappop(heap)
            job = by_queue[queue][heads[queue]]
            heads[queue] += 1
            self.consider(job, queue, heads[queue] == 1, blocked)
            if queue in blocked:
                for rest in by_queue[queue][heads[queue]:]:
                    self.out.waiting[rest.id] = f"behind {job.id}, which holds a reservation in queue {queue}"
                heads[queue] = len(by_queue[queue])
            else:
                push(queue)
        self.out.usage = self.queue_usage
        return self.out

    def consider(self, job: PendingJob, queue: str, head: bool, blocked: set[str]) -> None:
        q = self.queues[queue]
        over = _over(self.queue_usage[queue], job.view.request, q.limit)
        if over:
            self.out.waiting[job.id] = f"queue at limit {_fmt(over)}"
            return
        over = _over(self.tenant_usage[q.tenant], job.view.request, self.tenants[q.tenant].limit)
        if over:
            self.out.waiting[job.id] = f"tenant {q.tenant} at limit {_fmt(over)}"
            return
        cluster, reasons = self.choose(job.view)
        if cluster is not None:
            self.out.assign[job.id] = cluster
            self.reserve(job.view, cluster)
            _add(self.queue_usage[queue], job.view.request)
            _add(self.tenant_usage[q.tenant], job.view.request)
            return
        if not self.clusters:
            self.out.waiting[job.id] = "no member cluster is ready"
            return
        room = self.snap.making_room.get(job.id)
        if room in self.clusters:
            self.out.waiting[job.id] = f"waiting for preempted job(s) to exit in cluster {room}"
            self.reserve(job.view, room)
            blocked.add(queue)
            return
        within_share = max(self.share_after(queue, job.view.request)) <= 1.0 + 1e-9
        if head:
            found = self.victims(job, reclaim=within_share)
            if found is not None:
                cluster, gangs = found
                for victim in gangs:
                    why = "reclaimed" if victim.queue != queue else "preempted"
                    self.out.preempt[victim.id] = f"{why} for {job.id} (priority {job.priority}) in queue {queue}"
                    _add(self.queue_usage[victim.queue], victim.request, -1)
                    _add(self.tenant_usage[self.queues[victim.queue].tenant], victim.request, -1)
                self.out.waiting[job.id] = f"waiting for {len(gangs)} preempted job(s) to exit in cluster {cluster}"
                self.out.making_room[job.id] = cluster
                self.reserve(job.view, cluster)
                blocked.add(queue)
                return
        if head and within_share:
            best = self._reservation_cluster(job.view)
            if best is not None:
                self.reserve(job.view, best)
                self.out.waiting[job.id] = (f"waiting for resources in cluster {best}, reserved so smaller jobs do "
                                            f"not starve it; " + "; ".join(reasons))
                blocked.add(queue)
                return
        self.out.waiting[job.id] = "no ready cluster fits: " + "; ".join(reasons)

    def _reservation_cluster(self, job: JobView) -> str | None:
        """Where the job fits best by capacity: matching labels and enough allocatable, most free first."""
        options = []
        for name, c in self.clusters.items():
            if any(c.labels.get(k) != v for k, v in job.cluster_selector.items()):
                continue
            options.append((-min((self.free[name].get(r, 0) / a for r, a in job.request.items() if a), default=0),
                            name))
        return min(options)[1] if options else None


def _covers(free: Mapping[str, int], request: Mapping[str, int]) -> bool:
    return all(free.get(r, 0) >= a for r, a in request.items())


def schedule(snapshot: Snapshot) -> Decisions:
    return _Cycle(snapshot).run()


def shares(snapshot: Snapshot) -> tuple[Tree, dict[str, Resources], dict[str, Resources]]:
    """Deserved shares, and usage per queue and per tenant, exactly as a cycle would see them."""
    cycle = _Cycle(snapshot)
    cycle.compute_shares()
    assert cycle.out.shares is not None
    return cycle.out.shares, cycle.queue_usage, cycle.tenant_usage
