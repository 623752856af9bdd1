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
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol

from federation.resources import FLAVOR, Resources, base, format_resources
from federation.scheduling.choice import ClusterTable, PreemptiblePool, summary
from federation.scheduling.fairshare import EPSILON, Claim, Tree, dominant_share, excess, hierarchical
from federation.scheduling.fit import ClusterView, DomainFree, JobView, cannot_run, covers
from federation.scheduling.flavors import FlavorInfo, Flavors
from federation.scheduling.forecast import remaining
from federation.scheduling.queues import Impossible, Limits, QueueManager, Reasons, Verdict, Walk

RESOURCE_FOR_FEWEST = "nvidia.com/gpu"  # a victim's work lost is counted in these
# A move for a gang may lose at most this long of the gang's own GPUs in others' work.
MOVE_BUDGET_SECONDS = 300.0
# Seconds a gang back from a preemption is spared by reclaim (RunningJob.protected): the hysteresis that stops
# queue priority and reclaim handing one gang back and forth.
REPREEMPT_GRACE = 120.0
NO_READY_CLUSTER = "no member cluster is ready"


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
    flavors: tuple[str, ...] = ()  # the flavors its jobs may use, in order of preference; () = any
    parent: str = ""  # a queue of the same tenant whose share this one takes part of ("" = the tenant's)


@dataclass(frozen=True, slots=True)
class PendingJob:
    view: JobView
    queue: str
    priority: int
    seq: int
    cause: str = ""  # why it was preempted, when it was: kept at the front of its reason until it runs again
    # Derived, as fields rather than properties: read hundreds of thousands of times a cycle.
    id: str = field(init=False, compare=False)
    rank: tuple[int, int] = field(init=False, compare=False)  # place in its queue: priority, then submission

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", self.view.id)
        object.__setattr__(self, "rank", (-self.priority, self.seq))


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: str
    queue: str
    cluster: str
    priority: int
    seq: int
    request: Mapping[str, int]
    preemptible: bool
    # What evicting it costs, as of the snapshot (the edge reads the clock, the core does not):
    ran_for: float = 0.0  # seconds since it started
    checkpoint: float | None = None  # seconds between its checkpoints (its annotation); None: it keeps none
    expected: float | None = None  # expected whole run in seconds (annotation, or its queue's past jobs); None: unknown
    protected_for: float = 0.0  # seconds until another queue may reclaim it (its priority class's protected run time)
    hypernode: str = ""  # the lowest HyperNode holding all its pods ("" unknown)
    preempted_before: bool = False  # it was preempted or reclaimed before this run: see `protected`

    @property
    def protected(self) -> bool:
        """Spared by reclaim: in its priority class's protected run time, or back from a preemption less than
        REPREEMPT_GRACE ago. The second is hysteresis: a gang reclaimed for one queue and placed again by its
        own queue's priority is not reclaimed again at once for the same shortfall (the two rules would
        otherwise hand it back and forth every cycle while capacity frees up)."""
        return self.protected_for > 0 or (self.preempted_before and self.ran_for < REPREEMPT_GRACE)

    @property
    def since_checkpoint(self) -> float:
        """Seconds of its work that evicting it now would lose (all it did, without checkpoints)."""
        return self.ran_for % self.checkpoint if self.checkpoint else self.ran_for

    @property
    def at_risk(self) -> float:
        """GPU-seconds of work lost if it is evicted now."""
        return self.since_checkpoint * self.request.get(RESOURCE_FOR_FEWEST, 0)

    def pays_to_reclaim(self) -> bool:
        """Whether evicting it gains its queue's rival more than it costs: the work lost since its last checkpoint
        against the time the rival would otherwise wait for it to end (its expected remaining run). Unknown run
        times do not hold reclaim back."""
        return self.expected is None or self.since_checkpoint < remaining(self.expected, self.ran_for)


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
    flavors: Sequence[FlavorInfo] = ()
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # every member cluster's, Ready or not


@dataclass
class Decisions:
    assign: dict[str, str] = field(default_factory=dict)  # job -> cluster
    preempt: dict[str, str] = field(default_factory=dict)  # running job -> reason
    making_room: dict[str, str] = field(default_factory=dict)  # waiting job -> cluster preempted for it
    lost: dict[str, float] = field(default_factory=dict)  # preempted job -> GPU-seconds of work lost by it
    # pending job -> why it waits, in the order the cycle met them (from a walk over the queue manager: worked
    # out only for the jobs asked about)
    waiting: MutableMapping[str, str] = field(default_factory=dict)
    reserved: dict[str, str] = field(default_factory=dict)  # waiting job -> cluster whose room is held for it
    # waiting jobs no cluster or quota could run as things stand
    cannot_run: set[str] | Impossible = field(default_factory=set)
    # waiting job -> the limit holding it: (its owner, "queue NAME" or "tenant NAME"; how much of each resource
    # that owner must free before the job fits under it; the reason): the forecast and ExplainJob read it
    limited: MutableMapping[str, tuple[str, Resources, str]] = field(default_factory=dict)
    shares: Tree | None = None
    usage: dict[str, Resources] = field(default_factory=dict)  # queue -> in use after this cycle


def _add(into: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    for r, a in amounts.items():
        into[r] = into.get(r, 0) + sign * a


def _over(usage: Mapping[str, int], extra: Mapping[str, int], limit: Mapping[str, int]) -> dict[str, int]:
    """Resources of `limit` that usage + extra would exceed (a flavor's limit is judged with the cluster)."""
    if not limit:
        return {}
    return {r: cap for r, cap in limit.items() if FLAVOR not in r and usage.get(r, 0) + extra.get(r, 0) > cap}


def _level(usage: Mapping[str, int], share: Mapping[str, float], level: Mapping[str, float],
           wanted: Mapping[str, int], half: Mapping[str, int]) -> tuple[bool, float, float]:
    """One level of a queue's key (see `_Cycle.key`): over its share with the whole job, how far (its overshoot of
    what the level shares out if over, else its share with half the job), and its share with the whole job."""
    after = dominant_share(usage, share, wanted)
    over = after > 1 + EPSILON
    return over, excess(usage, share, level, wanted) if over else dominant_share(usage, share, half), after


def _held_by(job: PendingJob, owner: str, usage: Mapping[str, int], over: Mapping[str, int],
             why: str) -> tuple[str, Resources, str]:
    needed = {r: usage.get(r, 0) + job.view.request.get(r, 0) - cap for r, cap in over.items()}
    return owner, needed, why


def _fmt(amounts: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in format_resources(amounts).items())


class _Cycle:
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.tenants = {t.name: t for t in snap.tenants}
        self.queues = {q.name: q for q in snap.queues}
        self.clusters = ClusterTable(snap.clusters, snap.capacity)
        self.chain = queue_chains(snap.queues)
        self.depth = 1 + max((len(c) for c in self.chain.values()), default=0)
        self.parents = {q.parent for q in snap.queues if q.parent in self.chain}
        self.queue_usage: dict[str, dict[str, int]] = {q: {} for q in self.queues}
        self.tenant_usage: dict[str, dict[str, int]] = {t: {} for t in self.tenants}
        self.running_by_cluster: dict[str, list[RunningJob]] = {}
        # tenant -> how often its (or its queues') usage changed: a queue's key, which reads only those,
        # is unchanged while this is.
        self.usage_version: dict[str, int] = {}
        self.queue_version: dict[str, int] = {}  # queue -> how often its usage changed
        # queue -> (its chain's versions, its head, the key's queue levels, their shares after): see `key`
        self._queue_levels: dict[str, tuple[tuple[int, ...], PendingJob, tuple[float, ...], tuple[float, ...]]] = {}
        self.pool = PreemptiblePool(self.clusters, sorted(self.queues))
        self.out = Decisions()
        self.remembered = snap.making_room.keys() | snap.refused.keys()  # jobs a past cycle's outcome follows
        self.over_share: set[str] = set()  # reclaimable queues holding more than they deserve (once shares are known)
        self.lowered: set[str] = set()  # queues whose tenant's usage a preemption lowered since the last turn
        self.heads_reserving: set[str] = set()  # queues whose head has had its turn at reclaim and reservation
        # Per gang shape, as the clusters stand; and per shape and queue, with the queue's and tenant's limits.
        self._cannot_run_anywhere: dict[tuple[object, ...], str | None] = {}
        self._cannot_run: dict[tuple[tuple[object, ...], str], str | None] = {}
        self._limited: dict[str, bool] = {}
        self.holders: dict[str, list[tuple[str, str]]] = {}  # cluster -> (job, its tenant) whose room is held there
        self.flavors = Flavors(snap.flavors, {**snap.labels, **{c.name: c.labels for c in snap.clusters}})
        self.holds: dict[str, Resources] = {}  # running job -> what it counts against (flavors included)
        self._wanted: dict[str, Resources] = {}  # waiting job -> what it counts as demand for
        self.capacity: dict[str, float] = {}  # what tenants share (flavors included), once shares are known
        for job in snap.running:
            self.holds[job.id] = self.flavors.held(job.cluster, job.request) if self.flavors else job.request
            if job.queue in self.queues:
                self.use(job.queue, self.holds[job.id])
                if job.preemptible:
                    self.pool.add(job.cluster, job.queue, job.request)
            self.running_by_cluster.setdefault(job.cluster, []).append(job)
        # Victims in order: of the lowest-priority queue (as Volcano reclaims since v1.10), then lowest priority,
        # then least work lost, then youngest.
        self.preemptible = {c: sorted((v for v in jobs if v.preemptible),
                                      key=lambda v: (self.queue_priority(v.queue), v.priority, v.at_risk, -v.seq, v.id))
                            for c, jobs in self.running_by_cluster.items()}
        self.preemptible_in: dict[tuple[str, str], list[RunningJob]] = {}  # (cluster, queue) -> same order
        for c, gangs in self.preemptible.items():
            for victim in gangs:
                self.preemptible_in.setdefault((c, victim.queue), []).append(victim)

    def queue_priority(self, queue: str) -> int:
        info = self.queues.get(queue)
        return info.priority if info is not None else 0

    def _highest_queue(self, gangs: Sequence[RunningJob]) -> int:
        """The priority of the highest-priority queue these victims come from: room is taken from lower-priority
        queues wherever they can give it."""
        return max(self.queue_priority(v.queue) for v in gangs)

    # -- shares ----------------------------------------------------------------------------

    def wanted(self, job: PendingJob) -> Resources:
        """What a waiting job asks for, counted as shares and quotas count it (its flavor included)."""
        if not self.flavors:
            return job.view.request
        found = self._wanted.get(job.id)
        if found is None:
            queue = self.queues.get(job.queue)
            found = self._wanted[job.id] = self.flavors.wanted(job.view, queue.flavors if queue else ())
        return found

    def compute_shares(self, backlog: Demand) -> None:
        demand = {q: dict(u) for q, u in self.queue_usage.items()}
        for queue, into in demand.items():
            if not self.flavors:
                _add(into, backlog.requested(queue))
                continue
            for job, count in backlog.demand(queue):
                for r, a in self.wanted(job).items():
                    into[r] = into.get(r, 0) + a * count
        queues_of: dict[str, list[Claim]] = {}
        children_of: dict[str, list[Claim]] = {}
        for q in self.snap.queues:
            claim = Claim(q.name, q.weight, q.guarantee, q.limit or None, demand[q.name])
            if len(self.chain[q.name]) > 1:
                children_of.setdefault(q.parent, []).append(claim)
            else:
                queues_of.setdefault(q.tenant, []).append(claim)
        tenants = [Claim(t.name, t.weight, t.guarantee, t.limit or None) for t in self.snap.tenants
                   if not t.disabled]
        capacity = self.flavors.capacity(self.snap.capacity, self.snap.clusters) if self.flavors else self.snap.capacity
        self.capacity = {r: float(a) for r, a in capacity.items()}
        self.out.shares = hierarchical(capacity, tenants, queues_of, children_of)
        self.over_share = {q for q, info in self.queues.items() if info.reclaimable and q not in self.parents
                           and dominant_share(self.queue_usage[q], self.out.shares.queues.get(q, {})) > 1}

    def share_after(self, queue: str, extra: Mapping[str, int]) -> tuple[float, float]:
        """The tenant's dominant share and the largest of the queue's and its parents' with `extra` started."""
        assert self.out.shares is not None
        tenant = self.queues[queue].tenant
        deserved = self.out.shares.queues
        return (dominant_share(self.tenant_usage[tenant], self.out.shares.tenants.get(tenant, {}), extra),
                max(dominant_share(self.queue_usage[q], deserved.get(q, {}), extra) for q in self.chain[queue]))

    # -- cluster choice ----------------------------------------------------------------------

    def choose(self, job: PendingJob, queue: str) -> tuple[str | None, list[str]]:
        """The best cluster for the job, or None with each cluster's reason. With flavors, only clusters of
        the flavors its queue may use and whose quotas it would not exceed, in the queue's order."""
        refused = self.snap.refused.get(job.id, {})
        if not self.flavors:
            best = self.clusters.best(job.view, refused)
            return (best, []) if best is not None else (None, self.clusters.reasons(job.view, refused))
        q = self.queues[queue]
        over = {}
        for owner, usage, limit in ((f"queue {queue}", self.queue_usage[queue], q.limit),
                                    (f"tenant {q.tenant}", self.tenant_usage[q.tenant], self.tenants[q.tenant].limit)):
            for key, cap in limit.items():
                if FLAVOR in key and usage.get(key, 0) + job.view.request.get(base(key), 0) > cap:
                    over.setdefault(key, f"{owner} at limit {_fmt({key: cap})}")
        groups, never = self.flavors.choices(job.view, queue, q.flavors, self.clusters.names, over)
        for excluded in groups:
            best = self.clusters.best(job.view, {**excluded, **refused})
            if best is not None:
                return best, []
        return None, self.clusters.reasons(job.view, {**never, **refused})

    # -- reclaim and preemption --------------------------------------------------------------

    def _reclaimable(self, job: PendingJob, queue_within: bool, tenant_within: bool) -> set[str]:
        """Queues other than the job's own that it may take back from: reclaimable ones over their share, of its
        tenant, or of others when its tenant is within its share too; none unless its queue is within its own."""
        tenant = self.queues[job.queue].tenant
        return {q for q in self.over_share if q != job.queue and queue_within
                and (self.queues[q].tenant == tenant or tenant_within)}

    def _take(self, job: PendingJob, gangs: Sequence[RunningJob], over: set[str], freed: dict[str, int],
              kept: set[str]) -> list[RunningJob]:
        """Gangs of `gangs` (in victim order) to evict until `freed` covers the job, adding theirs to `freed`.
        `kept` collects why eligible-looking gangs were passed over ("share": their queue or tenant would drop
        below its share; "work": protected, or evicting would lose more than waiting costs)."""
        assert self.out.shares is not None
        tenant = self.queues[job.queue].tenant
        chosen: list[RunningJob] = []
        borrowed: dict[str, dict[str, int]] = {}  # queue or tenant -> its usage once the victims are gone
        for victim in gangs:
            if not over and victim.priority >= job.priority:
                break  # without reclaim only the job's own queue yields, below its priority: sorted, so done
            if victim.id in self.out.preempt or not (
                    victim.queue in over or (victim.queue == job.queue and victim.priority < job.priority)):
                continue
            if victim.queue != job.queue and (victim.protected or not victim.pays_to_reclaim()):
                kept.add("work")
                continue
            if victim.queue != job.queue and not self._may_reclaim(victim, job.queue, tenant, borrowed,
                                                                   self.out.shares.queues):
                kept.add("share")
                continue
            chosen.append(victim)
            _add(freed, victim.request)
            if covers(freed, job.view.request):
                break
        return chosen

    def victims(self, job: PendingJob, queue_within: bool, tenant_within: bool) -> tuple[str, list[RunningJob]] | str:
        """Whole gangs to evict in one cluster so that `job` then fits, losing the least work; else why none.

        Inside its own queue, a job may preempt lower-priority preemptible jobs. A queue within its deserved
        share may also take back what other queues borrowed: running gangs of reclaimable queues over their
        deserved share, of preemptible classes, as long as those queues keep their deserved share and at
        least the share the job's queue will have with it. From a sibling queue (the same tenant) that is
        all; from another tenant's queue, the job's tenant must be within its share too, and the victim's
        tenant keeps its own. Reclaim spares gangs in their protected run time and gangs whose work since
        their last checkpoint is more than the wait their eviction saves. "Fits" is judged on whole-gang
        totals; the agent's placement decides the topology.
        """
        over = self._reclaimable(job, queue_within, tenant_within)
        best: tuple[int, float, int, int, str, list[RunningJob]] | None = None
        kept: set[str] = set()
        candidates = self.pool.could_make_room(job.view.request, [job.queue, *over])
        refused = self.snap.refused.get(job.id, {})  # a cluster that refused the job gets no evictions for it
        for cluster in candidates:
            labels = self.clusters.labels[self.clusters.index[cluster]]
            if cluster in refused or any(labels.get(k) != v for k, v in job.view.cluster_selector.items()):
                continue
            freed = self.clusters.free_dict(cluster)
            if covers(freed, job.view.request):
                continue  # its totals fit already (the topology does not): evicting is judged on totals
            gangs = self.preemptible[cluster] if over else self.preemptible_in.get((cluster, job.queue), ())
            chosen = self._take(job, gangs, over, freed, kept)
            if chosen and covers(freed, job.view.request):
                evicted = sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in chosen)
                key = (self._highest_queue(chosen), sum(v.at_risk for v in chosen), evicted, len(chosen), cluster,
                       chosen)
                if best is None or key[:5] < best[:5]:
                    best = key
        if best is not None:
            return best[4], best[5]
        return self._not_reclaimed(job, queue_within, over, kept, bool(candidates))

    def victims_in_hypernode(self, job: PendingJob, queue_within: bool,
                             tenant_within: bool) -> tuple[str, list[RunningJob]] | str:
        """For a gang with a hard tier limit: whole gangs to evict inside one HyperNode at or under the limit so
        that the gang fits in it (topology-aware preemption), by the same rules as `victims`; else why none.

        Evicting by whole-cluster totals cannot promise such a gang a HyperNode: it could evict and still not
        fit, then evict again. A HyperNode's own free resources and the gangs running inside it can: the one
        whose freeing loses the least work, then the lowest tier, then the fewest GPUs evicted.
        """
        over = self._reclaimable(job, queue_within, tenant_within)
        request = job.view.request
        best: tuple[int, float, int, int, str, str, list[RunningJob]] | None = None
        kept: set[str] = set()
        reported = False
        refused = self.snap.refused.get(job.id, {})
        for view in self.snap.clusters:
            selector = job.view.cluster_selector
            if view.name in refused or not view.domains or any(view.labels.get(k) != v for k, v in selector.items()):
                continue
            reported = True
            cluster_free = self.clusters.free_dict(view.name)  # a HyperNode has no more than its cluster left
            gangs = self.preemptible.get(view.name, ()) if over else self.preemptible_in.get((view.name, job.queue), ())
            inside = _under_each_hypernode(view, gangs)
            for domain, freed in _hypernodes_short_of(job.view, view, cluster_free, inside):
                chosen = self._take(job, inside[domain.name], over, freed, kept)
                if chosen and covers(freed, request):
                    evicted = sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in chosen)
                    key = (self._highest_queue(chosen), sum(v.at_risk for v in chosen), domain.tier, evicted,
                           view.name, domain.name, chosen)
                    if best is None or key[:6] < best[:6]:
                        best = key
        if best is not None:
            return best[4], best[6]
        if not reported:
            return "not reclaimed: a gang with a hard tier limit evicts only inside a HyperNode, and no cluster " \
                   "that could hold it reports its HyperNodes"
        return self._not_reclaimed(job, queue_within, over, kept, True, " inside a HyperNode within its tier limit")

    def moves_in_hypernode(self, job: PendingJob) -> tuple[str, list[RunningJob]] | None:
        """For a gang with a hard tier limit, within its shares, that its cluster's free resources would hold but
        no HyperNode within its limit does (the free room is scattered): gangs no larger than one of its pods to
        evict inside one such HyperNode, to restart at once on the room the cluster has outside it; None if none.

        Without it such a gang waits for a HyperNode to drain by chance while its tenant, owed the GPUs, stays
        short (the ITP replay: hours at a time, with 200 of 1,440 GPUs idle). Only gangs that could be reclaimed
        on cost are moved (out of their protected run time, losing less work than waiting for them to end
        costs), of no higher priority than the gang; the HyperNode chosen is the one losing least work.
        """
        request, pod = job.view.request, job.view.largest_pod
        budget = request.get(RESOURCE_FOR_FEWEST, 0) * MOVE_BUDGET_SECONDS
        best: tuple[float, int, int, str, str, list[RunningJob]] | None = None
        refused = self.snap.refused.get(job.id, {})
        for view in self.snap.clusters:
            selector = job.view.cluster_selector
            if view.name in refused or not view.domains or any(view.labels.get(k) != v for k, v in selector.items()):
                continue
            cluster_free = self.clusters.free_dict(view.name)
            if not covers(cluster_free, request):
                continue  # short of room, not of room in one place: reclaim's business, not moving's
            inside = _under_each_hypernode(view, [
                v for v in self.preemptible.get(view.name, ()) if v.id not in self.out.preempt and v.priority <=
                job.priority and not v.protected and v.pays_to_reclaim() and covers(pod, v.request)])
            for domain, freed in _hypernodes_short_of(job.view, view, cluster_free, inside):
                chosen = []
                for victim in inside[domain.name]:
                    chosen.append(victim)
                    _add(freed, victim.request)
                    if covers(freed, request):
                        break
                lost = sum(v.at_risk for v in chosen)
                if covers(freed, request) and lost <= budget:
                    evicted = sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in chosen)
                    key = (lost, domain.tier, evicted, view.name, domain.name, chosen)
                    if best is None or key[:5] < best[:5]:
                        best = key
        return (best[3], best[5]) if best is not None else None

    def _not_reclaimed(self, job: PendingJob, queue_within: bool, over: set[str], kept: set[str],
                       any_candidates: bool, where: str = "") -> str:
        """Why reclaim or preemption found nothing to evict for the job."""
        tenant = self.queues[job.queue].tenant
        if not queue_within:
            return f"not reclaimed: queue {job.queue} would be over its deserved share"
        if not over and not any(self.queue_usage[q] for q in self.over_share if q != job.queue):
            return "not reclaimed: no reclaimable queue holds more than its deserved share"
        if not over:
            return f"not reclaimed: tenant {tenant} would be over its deserved share"
        if "share" in kept:
            return "not reclaimed: the queues over their share would drop below it"
        if "work" in kept:
            return "not reclaimed: the gangs that would make room are in their protected run time, or would lose " \
                   "more work since their last checkpoint than waiting for them to end costs"
        if not any_candidates:
            return "not reclaimed: the queues over their share run no preemptible gangs that would make room"
        return f"not reclaimed: evicting what the queues over their share borrowed would still not make room{where}"

    def _may_reclaim(self, victim: RunningJob, job_queue: str, tenant: str, borrowed: dict[str, dict[str, int]],
                     deserved: Mapping[str, Mapping[str, float]]) -> bool:
        """Whether taking `victim` back leaves its queue, its parents (those not the job's queue's too) and,
        from another tenant, that tenant at or above
        its deserved share (Volcano's proportion plugin; Kueue's LessThanOrEqualToFinalShare), else queues
        take the same GPUs from each other back and forth, each eviction making the next. Counts it taken
        when it may be."""
        assert self.out.shares is not None
        theirs = self.queues[victim.queue].tenant
        mine = set(self.chain[job_queue])
        checks = [(f"queue/{q}", self.queue_usage[q], deserved.get(q, {})) for q in self.chain[victim.queue]
                  if q not in mine]  # the victim's queue, and its parents the job's queue does not share
        if theirs != tenant:
            checks.append((f"tenant/{theirs}", self.tenant_usage[theirs], self.out.shares.tenants.get(theirs, {})))
        held = self.holds[victim.id]
        for key, usage, share in checks:
            after = dict(borrowed.get(key, usage))
            _add(after, held, -1)
            if dominant_share(after, share) < 1.0 - 1e-9:
                return False
        for key, usage, _ in checks:
            _add(borrowed.setdefault(key, dict(usage)), held, -1)
        return True

    def use(self, queue: str, request: Mapping[str, int], sign: int = 1) -> None:
        """Count a gang starting (+1) or leaving (-1) against its queue and tenant."""
        for q in self.chain[queue]:
            _add(self.queue_usage[q], request, sign)
            self.queue_version[q] = self.queue_version.get(q, 0) + 1
        tenant = self.queues[queue].tenant
        _add(self.tenant_usage[tenant], request, sign)
        self.usage_version[tenant] = self.usage_version.get(tenant, 0) + 1
        if self.out.shares is not None and self.queues[queue].reclaimable:
            if dominant_share(self.queue_usage[queue], self.out.shares.queues.get(queue, {})) > 1:
                self.over_share.add(queue)
            else:
                self.over_share.discard(queue)

    # -- the loop ------------------------------------------------------------------------------

    def key(self, queue: str, job: PendingJob) -> tuple[float, ...]:
        """Serve the queue of highest priority; then, level by level (tenants, then a tenant's queues, then a
        parent queue's children): first those that stay within what they deserve with the whole head job
        started, the one least far into it with half the job started first (Sainte-Laguë's divisor:
        counting the whole job starves queues deserving less than one, counting none lets them take two);
        then those it would take past their share, the smallest overshoot first. So no member is left a
        whole job short while another is served past its share, nor served a whole job past it while
        another is short of it."""
        assert self.out.shares is not None
        wanted = self.wanted(job)
        half = {r: a // 2 for r, a in wanted.items()}
        tenant = self.queues[queue].tenant
        share = self.out.shares.tenants.get(tenant, {})
        over, measure, after = _level(self.tenant_usage[tenant], share, self.capacity, wanted, half)
        # The queue levels change only when a queue of the chain is used: a sibling served since the queue was
        # pushed changes the tenant level alone, so they are kept per queue for its head and their versions.
        chain = self.chain[queue]
        versions = tuple(self.queue_version.get(q, 0) for q in chain)
        kept = self._queue_levels.get(queue)
        if kept is None or kept[0] != versions or kept[1] is not job:
            levels: list[float] = []
            afters = []
            level = share
            for q in reversed(chain):
                q_share = self.out.shares.queues.get(q, {})
                q_over, q_measure, q_after = _level(self.queue_usage[q], q_share, level, wanted, half)
                levels += (q_over, q_measure)
                afters.append(q_after)
                level = q_share
            levels += (False, 0.0) * (self.depth - 1 - len(afters))  # leaves of different depths: level by level
            kept = self._queue_levels[queue] = (versions, job, tuple(levels), tuple(afters))
        return (-self.queues[queue].priority, over, measure, *kept[2], after, *kept[3])

    def _closed(self, queue: str) -> str | None:
        """Why no job of the queue can run whatever the resources (gone, a parent, closed, its tenant disabled)."""
        q = self.queues.get(queue)
        if q is None:
            return f"queue {queue!r} no longer exists"
        if queue in self.parents:
            return f"queue {queue} is a parent queue: jobs go to its leaf queues"
        shut = next((n for n in self.chain[queue] if self.queues[n].state == "CLOSED"), None)
        if shut is not None:
            return f"queue {shut} is closed" if shut == queue else f"parent queue {shut} is closed"
        if self.tenants.get(q.tenant) is None or self.tenants[q.tenant].disabled:
            return f"tenant {q.tenant} is disabled"
        return None

    def run(self, backlog: Backlog) -> Decisions:
        self.compute_shares(backlog)
        heap: list[tuple[float, ...]] = []
        queues = backlog.queues()
        tokens = dict.fromkeys(queues, 0)  # an entry is current only while its token is the queue's latest

        version = self.usage_version
        tenant_of = {q: info.tenant for q, info in self.queues.items()}

        def push(queue: str, key: tuple[float, ...] | None = None) -> None:
            head = backlog.head(queue)
            if head is not None:
                tokens[queue] += 1
                heapq.heappush(heap, (*(key or self.key(queue, head)), version.get(tenant_of[queue], 0),
                                      tokens[queue], queue))

        closed = {queue: why for queue in queues if (why := self._closed(queue))}
        # Jobs room was made for come first, whatever their queue's turn: the gangs evicted for them must not
        # take their room back by their own queue's priority (issue 26: reclaimed 6 times in 18 s).
        owed = sorted(backlog.owed(self.snap.making_room, self.remembered, closed),
                      key=lambda j: (-self.queue_priority(j.queue), j.rank))
        for job in owed:
            backlog.remove(job)
            self.consider(job, job.queue)
        for queue in queues:
            reason = closed.get(queue)
            if reason:
                backlog.close(queue, reason, self.out)
            else:
                push(queue)
        while heap:
            *popped, seen, token, queue = heapq.heappop(heap)
            if token != tokens[queue]:
                continue  # superseded by a later push
            job = backlog.head(queue)
            assert job is not None
            if version.get(tenant_of[queue], 0) != seen and (now := self.key(queue, job)) > tuple(popped):
                # Its tenant's share grew since the queue was pushed (a sibling queue was served): take
                # its turn again with the share as it is now, so every level stays in water-filling order.
                push(queue, now)
                continue
            backlog.take(queue)
            self.consider(job, queue)
            # A job that certainly stays where it is changes nothing, so its turn in the order does not
            # matter: settle it now instead of sending it round the heap (most of a large backlog).
            backlog.settle(queue, self)
            push(queue)
            for other in self.lowered:  # preemption lowered these queues' tenants' shares: their turn may be now
                if other in tokens and other != queue:
                    push(other)
            self.lowered.clear()
        backlog.finish(self.out)
        self.out.usage = self.queue_usage
        return self.out

    def over_limit(self, job: PendingJob, queue: str) -> str | None:
        """Why a limit holds the job now (its queue's, a parent's or its tenant's), recorded in `limited`."""
        held = self.limit(job, queue)
        if held is None:
            return None
        self.out.limited[job.id] = held
        return held[2]

    def limited(self, queue: str) -> bool:
        """Whether a limit applies to the queue's jobs at all (its own, a parent's, its tenant's)."""
        found = self._limited.get(queue)
        if found is None:
            q = self.queues[queue]
            found = self._limited[queue] = bool(self.tenants[q.tenant].limit or
                                                any(self.queues[n].limit for n in self.chain[queue]))
        return found

    def limit(self, job: PendingJob, queue: str) -> tuple[str, Resources, str] | None:
        """The limit holding the job now: its owner, how much of each resource the owner must free first, why."""
        q = self.queues[queue]
        for name in self.chain[queue]:
            over = _over(self.queue_usage[name], job.view.request, self.queues[name].limit)
            if over:
                why = f"queue at limit {_fmt(over)}" if name == queue else f"parent queue {name} at limit {_fmt(over)}"
                return _held_by(job, f"queue {name}", self.queue_usage[name], over, why)
        over = _over(self.tenant_usage[q.tenant], job.view.request, self.tenants[q.tenant].limit)
        if over:
            return _held_by(job, f"tenant {q.tenant}", self.tenant_usage[q.tenant], over,
                            f"tenant {q.tenant} at limit {_fmt(over)}")
        return None

    def cannot_run(self, job: PendingJob, queue: str) -> str | None:
        """Why no cluster or quota could run the job as the federation stands, even with nothing else
        running (its minimum gang against the clusters' capacity, its largest pod against the largest
        node, a hard tier limit against the largest HyperNode of that tier, its queue's and tenant's
        limits); None when something could. Such a job holds no reservation and keeps nothing waiting."""
        key = (job.view.shape, queue)
        if key not in self._cannot_run:
            shape = job.view.shape
            if shape not in self._cannot_run_anywhere:
                self._cannot_run_anywhere[shape] = cannot_run(job.view, self.snap.clusters)
            own = over_own_limit(job.view, [self.queues[name] for name in self.chain[queue]],
                                 self.tenants[self.queues[queue].tenant]) if self.limited(queue) else None
            self._cannot_run[key] = self._cannot_run_anywhere[shape] or own
        return self._cannot_run[key]

    def verdict(self, job: PendingJob, queue: str) -> Verdict:
        """Whether the job certainly waits as things stand now, and why: it cannot run at all, a limit holds it,
        its shape was already found to fit nowhere in this cycle, or no cluster is ready (None: not certain).
        The same for every job of its shape in its queue while nothing changes (usage, reservations, what fits
        nowhere), so a walk works it out once per shape."""
        impossible = self.cannot_run(job, queue)
        held = self.limit(job, queue) if not impossible and self.limited(queue) else None
        nowhere = self.clusters.nowhere if self.clusters else {}
        shape = job.view.shape
        why = impossible or (held and held[2]) or (shape in nowhere and (self.behind(job) or nowhere[shape])) or (
            not self.clusters and NO_READY_CLUSTER)
        return why or None, bool(impossible), held

    def settle(self, jobs: Sequence[PendingJob], start: int, queue: str) -> int:
        """Give a reason to each job from `start` on that certainly must wait; return where that stops.

        Certain: see `verdict`. A job with a refusal or room being made for it is never certain.
        """
        waiting, limits, impossible_ids = self.out.waiting, self.out.limited, self.out.cannot_run
        # Nothing this walk reads changes during it, so a verdict holds for every job of the same shape in this
        # queue: worked out once per shape, not once per job.
        verdicts: dict[tuple[object, ...], Verdict] = {}
        i = start
        while i < len(jobs):
            job = jobs[i]
            if job.id in self.remembered:
                break
            shape = job.view.shape
            verdict = verdicts.get(shape)
            if verdict is None:
                verdict = verdicts[shape] = self.verdict(job, queue)
            why, impossible, limit = verdict
            if impossible:
                impossible_ids.add(job.id)
            if not why:
                break
            if limit is not None:
                limits[job.id] = limit
            waiting[job.id] = why
            i += 1
        return i

    def hold(self, job: PendingJob, cluster: str, why: str) -> None:
        """Keep the room `job` needs in `cluster` for it: later jobs go elsewhere or into what is left."""
        self.clusters.hold(job.view, cluster)
        self.out.reserved[job.id] = cluster
        self.holders.setdefault(cluster, []).append((job.id, self.queues[job.queue].tenant))
        self.out.waiting[job.id] = why

    def behind(self, job: PendingJob) -> str | None:
        """When the job would fit a cluster but for the room reserved there, which job holds it (named only
        to its own tenant)."""
        if not self.holders:
            return None
        cluster = self.clusters.fits_without_reservations(job.view)
        if cluster is None:
            return None
        holder, tenant = self.holders[cluster][0]
        who = holder if tenant == self.queues[job.queue].tenant else "a job of another tenant"
        return f"behind {who}, which holds the room it needs in cluster {cluster}"

    def consider(self, job: PendingJob, queue: str) -> None:
        why = self.cannot_run(job, queue)
        if why:
            self.out.waiting[job.id] = why
            self.out.cannot_run.add(job.id)
            return
        why = self.over_limit(job, queue)
        if why:
            self.out.waiting[job.id] = why
            return
        cluster, reasons = self.choose(job, queue)
        if cluster is not None:
            self.out.assign[job.id] = cluster
            self.clusters.reserve(job.view, cluster)
            self.use(queue, self.flavors.held(cluster, job.view.request) if self.flavors else job.view.request)
            return
        if not self.clusters:
            self.out.waiting[job.id] = NO_READY_CLUSTER
            return
        room = self.snap.making_room.get(job.id)
        if room in self.clusters:
            self.hold(job, room, f"waiting for preempted job(s) to exit in cluster {room}")
            return
        head = queue not in self.heads_reserving  # one reservation and one reclaim per queue and cycle
        self.heads_reserving.add(queue)
        tenant_share, queue_share = self.share_after(queue, self.wanted(job))
        queue_within, tenant_within = queue_share <= 1.0 + 1e-9, tenant_share <= 1.0 + 1e-9
        why_not = ""
        if head:
            # Whole-cluster totals cannot promise a HyperNode: a gang with a hard tier limit and several pods
            # evicts only inside one HyperNode within its limit (the ITP trace replay showed it evicting,
            # still not fitting, and evicting again when judged on totals).
            hard = job.view.mode == "hard" and job.view.request != job.view.largest_pod
            found = (self.victims_in_hypernode if hard else self.victims)(job, queue_within, tenant_within)
            if isinstance(found, str) and hard and queue_within and tenant_within:
                moved = self.moves_in_hypernode(job)
                if moved is not None:
                    self.evict(job, queue, *moved, moving=True)
                    return
            if isinstance(found, str):
                why_not = found
            else:
                self.evict(job, queue, *found)
                return
        if head and queue_within and tenant_within:
            best = self._reservation_cluster(job.view, self.snap.refused.get(job.id, {}))
            if best is not None:
                self.hold(job, best, f"waiting for resources in cluster {best}, reserved so smaller jobs do not "
                                     f"starve it; {summary(reasons)}" + (f"; {why_not}" if why_not else ""))
                return
        why = self.behind(job) or self.clusters.fits_nowhere(job.view) or \
            "no ready cluster fits: " + summary(reasons)
        self.out.waiting[job.id] = why + (f"; {why_not}" if why_not and queue_within else "")

    def evict(self, job: PendingJob, queue: str, cluster: str, gangs: Sequence[RunningJob],
              moving: bool = False) -> None:
        tenant = self.queues[queue].tenant
        for victim in gangs:
            why = "moved" if moving else "reclaimed" if victim.queue != queue else "preempted"
            self.out.lost[victim.id] = victim.at_risk
            if self.queues[victim.queue].tenant == tenant:
                self.out.preempt[victim.id] = f"{why} for {job.id} (priority {job.priority}) in queue {queue}"
            elif moving:
                self.out.preempt[victim.id] = "moved to restart elsewhere in its cluster, making one HyperNode whole " \
                                              "for a job of another tenant"
            else:  # a tenant reads only its own tenant's names
                self.out.preempt[victim.id] = f"{why} for a job of another tenant, below its deserved share"
            self.use(victim.queue, self.holds[victim.id], -1)
            self.pool.add(victim.cluster, victim.queue, victim.request, -1)
            theirs = self.queues[victim.queue].tenant
            self.lowered.update(q for q, info in self.queues.items() if info.tenant == theirs)
        # Worded as in later cycles (above), so that the reason is not rewritten next cycle.
        self.out.making_room[job.id] = cluster
        self.hold(job, cluster, f"waiting for preempted job(s) to exit in cluster {cluster}")

    def _reservation_cluster(self, job: JobView, refused: Mapping[str, str]) -> str | None:
        """Where the job fits best once what runs there ends: among clusters that could hold it at all and
        have not refused it, the one with most of its request free now."""
        options = []
        for view in self.snap.clusters:
            if view.name in refused or cannot_run(job, [view]) is not None:
                continue
            name = view.name
            options.append((-min((self.clusters.free_of(name, r) / a for r, a in job.request.items() if a),
                                 default=0), name))
        return min(options)[1] if options else None


def _under_each_hypernode(view: ClusterView, gangs: Sequence[RunningJob]) -> dict[str, list[RunningJob]]:
    """HyperNode -> the gangs running under it (each under its own HyperNode and every one above), in order."""
    parent = {d.name: d.parent for d in view.domains}
    inside: dict[str, list[RunningJob]] = {}
    for gang in gangs:
        domain, seen = gang.hypernode, set()
        while domain and domain not in seen:
            seen.add(domain)
            inside.setdefault(domain, []).append(gang)
            domain = parent.get(domain, "")
    return inside


def _hypernodes_short_of(job: JobView, view: ClusterView, cluster_free: Mapping[str, int],
                         inside: Mapping[str, list[RunningJob]]) -> Iterator[tuple[DomainFree, dict[str, int]]]:
    """HyperNodes of `view` within the gang's tier limit, holding gangs of `inside`, that cannot hold it now, each
    with what is free in it (no more than its cluster has left). Where it fits already nothing is evicted: the
    agent's placement decides."""
    for domain in view.domains:
        if not 1 <= domain.tier <= job.highest_tier or domain.name not in inside:
            continue
        freed = {r: max(min(a, cluster_free.get(r, 0)), 0) for r, a in domain.free.items()}
        if not covers(freed, job.request):
            yield domain, freed


def over_own_limit(job: JobView, queues: Sequence[QueueInfo], tenant: TenantInfo) -> str | None:
    """Why the gang alone is more than its queue's, a parent queue's or its tenant's limit allows (it could
    never run under it). `queues`: its queue, then that queue's parents."""
    for owner, limit in (*((f"queue {q.name}", q.limit) for q in queues), (f"tenant {tenant.name}", tenant.limit)):
        over = {r: cap for r, cap in limit.items() if FLAVOR not in r and job.request.get(r, 0) > cap}
        if over:
            need = {r: job.request[r] for r in over}
            return f"cannot run: needs {_fmt(need)}, more than {owner}'s limit {_fmt(over)}"
    return None


def inadmissible(job: JobView, clusters: Sequence[ClusterView], queues: Sequence[QueueInfo],
                 tenant: TenantInfo) -> str | None:
    """Why the gang could not run as the federation stands, even were nothing else running; None if it could.
    `queues`: its queue, then that queue's parents."""
    return cannot_run(job, clusters) or over_own_limit(job, queues, tenant)


def queue_chains(queues: Sequence[QueueInfo]) -> dict[str, list[str]]:
    """Each queue, then its parent, its parent's parent and so on. A parent that is missing, of another tenant
    or on a loop ends the chain (the admin API refuses them; this keeps a cycle safe whatever it is given)."""
    by_name = {q.name: q for q in queues}
    chains: dict[str, list[str]] = {}
    for q in queues:
        chain = [q.name]
        parent = by_name.get(q.parent)
        while parent is not None and parent.tenant == q.tenant and parent.name not in chain:
            chain.append(parent.name)
            parent = by_name.get(parent.parent)
        chains[q.name] = chain
    return chains


class Demand(Protocol):
    """What waits in each queue, as shares count it: one job of each shape, and how many; or, without flavors,
    what they ask for together."""

    def demand(self, queue: str) -> Iterator[tuple[PendingJob, int]]: ...
    def requested(self, queue: str) -> Mapping[str, int]: ...


class Backlog(Demand, Protocol):
    """The waiting jobs as one cycle walks them: a cursor per queue, over its jobs in order."""

    def queues(self) -> list[str]: ...
    def owed(self, making_room: Mapping[str, str], remembered: set[str], closed: Mapping[str, str]
             ) -> list[PendingJob]: ...
    def remove(self, job: PendingJob) -> None: ...
    def head(self, queue: str) -> PendingJob | None: ...
    def take(self, queue: str) -> None: ...
    def close(self, queue: str, reason: str, out: Decisions) -> None: ...
    def settle(self, queue: str, cycle: _Cycle) -> None: ...
    def finish(self, out: Decisions) -> None: ...


class _Lists:
    """Every waiting job sorted into its queue's list, and each one that certainly waits visited: the cycle from
    scratch, whose cost grows with the backlog. Kept as the oracle the queue manager's walk is tested against."""

    def __init__(self, pending: Sequence[PendingJob]) -> None:
        self.pending = pending
        self.by_queue: dict[str, list[PendingJob]] = {}
        for job in pending:
            self.by_queue.setdefault(job.queue, []).append(job)
        for jobs in self.by_queue.values():
            jobs.sort(key=attrgetter("rank"))
        self.heads = dict.fromkeys(self.by_queue, 0)

    def queues(self) -> list[str]:
        return sorted(self.by_queue)

    def demand(self, queue: str) -> Iterator[tuple[PendingJob, int]]:
        return ((job, 1) for job in self.by_queue.get(queue, ()))

    def requested(self, queue: str) -> Mapping[str, int]:
        total: dict[str, int] = {}
        for job in self.by_queue.get(queue, ()):
            _add(total, job.view.request)
        return total

    def owed(self, making_room: Mapping[str, str], remembered: set[str], closed: Mapping[str, str]
             ) -> list[PendingJob]:
        return [job for job in self.pending if job.id in making_room and job.queue not in closed]

    def remove(self, job: PendingJob) -> None:
        self.by_queue[job.queue].remove(job)

    def head(self, queue: str) -> PendingJob | None:
        jobs, i = self.by_queue[queue], self.heads[queue]
        return jobs[i] if i < len(jobs) else None

    def take(self, queue: str) -> None:
        self.heads[queue] += 1

    def close(self, queue: str, reason: str, out: Decisions) -> None:
        for job in self.by_queue[queue]:
            out.waiting[job.id] = reason
        self.heads[queue] = len(self.by_queue[queue])

    def settle(self, queue: str, cycle: _Cycle) -> None:
        self.heads[queue] = cycle.settle(self.by_queue[queue], self.heads[queue], queue)

    def finish(self, out: Decisions) -> None:
        for job in self.pending:
            if job.cause and (why := out.waiting.get(job.id)) is not None:
                out.waiting[job.id] = f"{job.cause}; {why}"


class _Walked:
    """The queue manager's jobs as a `Backlog`: only queue heads and each shape's first job are visited."""

    def __init__(self, manager: QueueManager, out: Decisions) -> None:
        self.manager = manager
        self.walk = Walk(manager)
        out.waiting, out.limited, out.cannot_run = Reasons(self.walk), Limits(self.walk), Impossible(self.walk)

    def queues(self) -> list[str]:
        return self.manager.queues()

    def demand(self, queue: str) -> Iterator[tuple[PendingJob, int]]:
        return self.manager.demand(queue)

    def requested(self, queue: str) -> Mapping[str, int]:
        return self.manager.requested(queue)

    def owed(self, making_room: Mapping[str, str], remembered: set[str], closed: Mapping[str, str]
             ) -> list[PendingJob]:
        jobs = self.manager.jobs
        owed = [jobs[j] for j in making_room if j in jobs and jobs[j].queue not in closed]
        self.walk.begin(remembered, {job.id for job in owed})
        return owed

    def remove(self, job: PendingJob) -> None:
        """Owed jobs stay in the manager; the walk skips them."""

    def head(self, queue: str) -> PendingJob | None:
        return self.walk.head(queue)

    def take(self, queue: str) -> None:
        self.walk.take(queue)

    def close(self, queue: str, reason: str, out: Decisions) -> None:
        self.walk.close(queue, reason)

    def settle(self, queue: str, cycle: _Cycle) -> None:
        self.walk.settle(queue, cycle.verdict)

    def finish(self, out: Decisions) -> None:
        """Causes are put in front of reasons as they are read."""


def schedule(snapshot: Snapshot) -> Decisions:
    """One cycle from scratch over `snapshot.pending` (every waiting job visited)."""
    cycle = _Cycle(snapshot)
    return cycle.run(_Lists(snapshot.pending))


def schedule_backlog(snapshot: Snapshot, manager: QueueManager) -> Decisions:
    """One cycle over the queue manager's waiting jobs (`snapshot.pending` is not read): the same decisions as
    `schedule` with those jobs as `pending`, at a cost that follows the queue heads and shapes, not the backlog.
    The decisions' reasons are read from the manager, which must not change while they are in use."""
    cycle = _Cycle(snapshot)
    return cycle.run(_Walked(manager, cycle.out))


def shares(snapshot: Snapshot, backlog: QueueManager | None = None) -> tuple[Tree, dict[str, Resources],
                                                                             dict[str, Resources]]:
    """Deserved shares, and usage per queue and per tenant, exactly as a cycle would see them (its waiting jobs:
    `backlog`'s if given, else `snapshot.pending`)."""
    cycle = _Cycle(snapshot)
    cycle.compute_shares(backlog if backlog is not None else _Lists(snapshot.pending))
    assert cycle.out.shares is not None
    return cycle.out.shares, cycle.queue_usage, cycle.tenant_usage
