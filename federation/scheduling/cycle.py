"""One scheduling cycle over an in-memory snapshot: pure, deterministic, explainable.

The shape follows Kueue's scheduler: compute deserved shares, then repeatedly take the head of
the queue that should be served next, check its quotas, choose a cluster, and if nothing fits,
consider reclaim or preemption, else a reservation. Every job the cycle looks at gets a decision
or a reason; nothing here reads a clock or a database.

Order: first the queue heads that stay within their tenant's and their queues' deserved shares once
started, then those that would go past one; in each, higher queue priority first; among equals, the queue
whose tenant, then itself, would have the lowest dominant share (of its deserved share) once its head job
starts, its past usage counted beside what it holds when history is on (`usage.py`); inside a queue, higher job
priority, then earlier submission.

The parts, each its own module: the model (`model.py`), the waiting jobs as a walk sees them (`backlog.py`, over
the queue manager of `queues.py`), cluster choice (`choice.py`, `fit.py`, `flavors.py`), deserved shares
(`fairshare.py`), reclaim, preemption and moves (`preemption.py`), reservations (`reservations.py`) and the
start-time forecast (`forecast.py`, `outlook.py`). This module is the loop that serves queue heads in order.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from federation.kernel.admission import PROVISIONING
from federation.kernel.resources import FLAVOR, Resources, base, format_resources
from federation.scheduling.backlog import Backlog, Demand, Lists, Walked
from federation.scheduling.choice import ClusterTable, PreemptiblePool, summary
from federation.scheduling.fairshare import EPSILON, Claim, Tree, dominant_share, excess, hierarchical, kept_back
from federation.scheduling.fit import JobView, Shape, cannot_run, covers
from federation.scheduling.flavors import Flavors
from federation.scheduling.hyperjobs import HyperJobs
from federation.scheduling.model import (
    MOVE_BUDGET_SECONDS,
    NO_READY_CLUSTER,
    REPREEMPT_GRACE,
    RESOURCE_FOR_FEWEST,
    Decisions,
    PendingJob,
    QueueInfo,
    RunningJob,
    Snapshot,
    TenantInfo,
    add_into,
    queue_chains,
)
from federation.scheduling.preemption import Preemption
from federation.scheduling.provisioning import Promised, provisionable
from federation.scheduling.queues import QueueManager, Verdict
from federation.scheduling.reservations import Reservations

# The cycle's names, for those who import them from here (its model, constants and entry points).
__all__ = ["MOVE_BUDGET_SECONDS", "NO_READY_CLUSTER", "REPREEMPT_GRACE", "RESOURCE_FOR_FEWEST", "Decisions",
           "PendingJob", "QueueInfo", "RunningJob", "Snapshot", "TenantInfo", "over_own_limit",
           "queue_chains", "schedule", "schedule_backlog", "shares", "walk_backlog"]

def _over(usage: Mapping[str, int], extra: Mapping[str, int], limit: Mapping[str, int]) -> dict[str, int]:
    """Resources of `limit` that usage + extra would exceed (a flavor's limit is judged with the cluster)."""
    if not limit:
        return {}
    return {r: cap for r, cap in limit.items() if FLAVOR not in r and usage.get(r, 0) + extra.get(r, 0) > cap}


def _level(usage: Mapping[str, float], share: Mapping[str, float], level: Mapping[str, float],
           wanted: Mapping[str, int], half: Mapping[str, int]) -> tuple[bool, float, float]:
    """One level of a queue's key (see `_Cycle.key`): over its share with the whole job, how far (its overshoot of
    what the level shares out if over, else its share with half the job), and its share with the whole job."""
    after = dominant_share(usage, share, wanted)
    over = after > 1 + EPSILON
    return over, excess(usage, share, level, wanted) if over else dominant_share(usage, share, half), after


def _with_past(usage: Mapping[str, int], past: Mapping[str, float] | None) -> Mapping[str, float]:
    """Usage as ordering counts it: with what the member's history adds (none: usage itself, no copy)."""
    if not past:
        return usage
    out: dict[str, float] = dict(usage)
    for r, a in past.items():
        out[r] = out.get(r, 0) + a
    return out


def _held_by(job: PendingJob, owner: str, usage: Mapping[str, int], over: Mapping[str, int],
             why: str) -> tuple[str, Resources, str]:
    needed = {r: usage.get(r, 0) + job.view.request.get(r, 0) - cap for r, cap in over.items()}
    return owner, needed, why


def _fmt(amounts: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in format_resources(amounts).items())


class _Cycle(Preemption, Reservations, HyperJobs):
    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.tenants = {t.name: t for t in snap.tenants}
        self.queues = {q.name: q for q in snap.queues}
        self.queues_of: dict[str, list[str]] = {}  # tenant -> its queues
        for q in snap.queues:
            self.queues_of.setdefault(q.tenant, []).append(q.name)
        self.clusters = ClusterTable(snap.clusters, snap.capacity)
        self.chain = queue_chains(snap.queues)
        self.depth = 1 + max((len(c) for c in self.chain.values()), default=0)
        self.parents = {q.parent for q in snap.queues if q.parent in self.chain}
        self.queue_usage: dict[str, dict[str, int]] = {q: {} for q in self.queues}
        self.tenant_usage: dict[str, dict[str, int]] = {t: {} for t in self.tenants}
        self.total_usage: dict[str, int] = {}  # of every gang running or started by this cycle
        # What lenders keep back of their guarantees (lending limits), and each member's siblings that do.
        self.kept = {("tenant", t.name): kept for t in snap.tenants
                     if not t.disabled and (kept := kept_back(t.guarantee, t.lending_limit))}
        self.kept.update({("queue", q.name): kept for q in snap.queues if (kept := kept_back(q.guarantee,
                                                                                          q.lending_limit))})
        self.keepers: dict[tuple[str, str], list[tuple[str, str]]] = {}  # member -> its siblings that keep some back
        for kind, name in self.kept:
            siblings = ([("tenant", t) for t in self.tenants] if kind == "tenant" else
                        [("queue", q.name) for q in snap.queues if (q.tenant, q.parent) == (
                            self.queues[name].tenant, self.queues[name].parent)])
            for sibling in siblings:
                if sibling != (kind, name):
                    self.keepers.setdefault(sibling, []).append((kind, name))
        self.running_by_cluster: dict[str, list[RunningJob]] = {}
        self.group_clusters: dict[str, list[str]] = {}
        for running in snap.running:
            if running.group:
                self.group_clusters.setdefault(running.group, []).append(running.cluster)
        self.groups_decided: dict[str, dict[str, str]] = {}
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
        self._cannot_run_anywhere: dict[Shape, str | None] = {}
        self._cannot_run: dict[tuple[Shape, str], str | None] = {}
        self._limited: dict[str, bool] = {}
        self._worth: dict[str, bool] = {}
        self._kept: dict[tuple[str | tuple[str, str], int], tuple[int, bool]] = {}
        self._compiled = None
        self.holders: dict[str, list[tuple[str, str]]] = {}  # cluster -> (job, its tenant) whose room is held there
        self.flavors = Flavors(snap.flavors, {**snap.labels, **{c.name: c.labels for c in snap.clusters}})
        self.flavor_checks = {f.name: f.admission_checks for f in snap.flavors if f.admission_checks}
        # Whether any cluster reports node groups its autoscaler can grow (`provisioning`), and the nodes this
        # cycle promised of them.
        self.growable = any(c.node_groups for c in snap.clusters)
        self.promised = Promised()
        self.holds: dict[str, Resources] = {}  # running job -> what it counts against (flavors included)
        self._wanted: dict[str, Resources] = {}  # waiting job -> what it counts as demand for
        self.capacity: dict[str, float] = {}  # what tenants share (flavors included), once shares are known
        # What runs, added up per queue and per (cluster, queue) first: tens of thousands of gangs, a few thousand
        # sums.
        used: dict[str, dict[str, int]] = {}
        pooled: dict[tuple[str, str], dict[str, int]] = {}
        for job in snap.running:
            held = self.holds[job.id] = self.flavors.held(job.cluster, job.request) if self.flavors else job.request
            if job.queue in self.queues:
                add_into(used.setdefault(job.queue, {}), held)
                if job.preemptible:
                    add_into(pooled.setdefault((job.cluster, job.queue), {}), job.request)
            self.running_by_cluster.setdefault(job.cluster, []).append(job)
        for queue, amounts in used.items():
            self.use(queue, amounts)
        for (cluster, queue), amounts in pooled.items():
            self.pool.add(cluster, queue, amounts)
        # Victims in order: of the lowest-priority queue (as Volcano reclaims since v1.10), then lowest priority,
        # then least work lost, then youngest.
        priority = {q: info.priority for q, info in self.queues.items()}
        self.preemptible = {c: sorted((v for v in jobs if v.preemptible),
                                      key=lambda v: (priority.get(v.queue, 0), v.priority, v.at_risk, -v.seq, v.id))
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
                add_into(into, backlog.requested(queue))
                continue
            for job, count in backlog.demand(queue):
                for r, a in self.wanted(job).items():
                    into[r] = into.get(r, 0) + a * count
        queues_of: dict[str, list[Claim]] = {}
        children_of: dict[str, list[Claim]] = {}
        for q in self.snap.queues:
            claim = Claim(q.name, q.weight, q.guarantee, q.limit or None, demand[q.name], q.lending_limit)
            if len(self.chain[q.name]) > 1:
                children_of.setdefault(q.parent, []).append(claim)
            else:
                queues_of.setdefault(q.tenant, []).append(claim)
        tenants = [Claim(t.name, t.weight, t.guarantee, t.limit or None, lending_limit=t.lending_limit)
                   for t in self.snap.tenants if not t.disabled]
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
        if self._kept_around(queue):
            kept = self.kept_from(job.view.request, queue, flavored=True)
            for key in kept[1] if kept else ():
                over.setdefault(key, kept[2])
        groups, never = self.flavors.choices(job.view, queue, q.flavors, self.clusters.names, over)
        for excluded in groups:
            best = self.clusters.best(job.view, {**excluded, **refused})
            if best is not None:
                return best, []
        return None, self.clusters.reasons(job.view, {**never, **refused})

    # -- reclaim and preemption --------------------------------------------------------------
    def use(self, queue: str, request: Mapping[str, int], sign: int = 1) -> None:
        """Count a gang starting (+1) or leaving (-1) against its queue and tenant."""
        for q in self.chain[queue]:
            add_into(self.queue_usage[q], request, sign)
            self.queue_version[q] = self.queue_version.get(q, 0) + 1
        tenant = self.queues[queue].tenant
        add_into(self.tenant_usage[tenant], request, sign)
        add_into(self.total_usage, request, sign)
        self.usage_version[tenant] = self.usage_version.get(tenant, 0) + 1
        if self.out.shares is not None and self.queues[queue].reclaimable:
            if dominant_share(self.queue_usage[queue], self.out.shares.queues.get(queue, {})) > 1:
                self.over_share.add(queue)
            else:
                self.over_share.discard(queue)

    # -- the loop ------------------------------------------------------------------------------

    def key(self, queue: str, job: PendingJob) -> tuple[float, ...]:
        """Serve heads within every share before heads past one; among them, the queue of highest priority;
        then, level by level (tenants, then a tenant's queues, then a
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
        over, measure, after = _level(_with_past(self.tenant_usage[tenant], self.snap.past_tenants.get(tenant)),
                                      share, self.capacity, wanted, half)
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
                q_over, q_measure, q_after = _level(_with_past(self.queue_usage[q], self.snap.past_queues.get(q)),
                                                    q_share, level, wanted, half)
                levels += (q_over, q_measure)
                afters.append(q_after)
                level = q_share
            levels += (False, 0.0) * (self.depth - 1 - len(afters))  # leaves of different depths: level by level
            kept = self._queue_levels[queue] = (versions, job, tuple(levels), tuple(afters))
        # Queue priority orders heads that stay within every share they are under; past a share a head comes
        # after all of those: room past its share is only borrowed (a sibling within its share reclaims it), so
        # priority giving it first would hand out what is taken back a cycle later.
        past = over or any(kept[2][0::2])
        return (past, -self.queues[queue].priority, over, measure, *kept[2], after, *kept[3])

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
        self.backlog = backlog
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
            if self.spent():
                self.out.cut_short = True
                break
            backlog.remove(job)
            self.consider(job, job.queue)
        for queue in queues:
            reason = closed.get(queue)
            if reason:
                backlog.close(queue, reason, self.out)
            else:
                push(queue)
        while heap:
            if self.spent():
                self.out.cut_short = True
                break
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
        self.out.usage, self.out.tenant_usage = self.queue_usage, self.tenant_usage
        return self.out

    def spent(self) -> bool:
        """Whether the cycle's burst of dispatches is used up (see Snapshot.burst)."""
        return bool(self.snap.burst) and len(self.out.assign) >= self.snap.burst

    def reclaim_kept(self, job: PendingJob, queue: str, needed: Mapping[str, int]) -> bool:
        """For a job that room others keep back holds (`kept_from`): wait for gangs evicted for it to exit, or, as
        its queue's head within its queue's and tenant's deserved shares, evict gangs that borrowed (reclaim) or
        of its own queue below its priority, in one cluster, until `needed` is freed. What others keep back is
        free room, so such a job often fits a cluster now: only reclaim makes it its own. Whether it did."""
        room = self.snap.making_room.get(job.id)
        if room in self.clusters:
            self.hold(job, room, f"waiting for preempted job(s) to exit in cluster {room}")
            return True
        if queue in self.heads_reserving:
            return False
        self.heads_reserving.add(queue)
        tenant_share, queue_share = self.share_after(queue, self.wanted(job))
        if queue_share > 1.0 + EPSILON or tenant_share > 1.0 + EPSILON:
            return False
        over = self._reclaimable(job, True, True)
        best: tuple[tuple[float, int, int], str, list[RunningJob]] | None = None
        for cluster in sorted(self.clusters.names):
            if cluster in self.snap.refused.get(job.id, {}):
                continue
            # `_take` evicts until what is freed covers the job's request: starting from all of it but `needed`,
            # that is until `needed` is freed.
            freed = {r: a - needed.get(r, 0) for r, a in job.view.request.items()}
            gangs = self._take(job, self.preemptible.get(cluster, ()), over, freed, set())
            if gangs and covers(freed, job.view.request):
                key = (sum(v.at_risk for v in gangs), sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in gangs),
                       len(gangs))
                if best is None or key < best[0]:
                    best = (key, cluster, gangs)
        if best is None:
            return False
        self.evict(job, queue, best[1], best[2])
        return True

    def limited(self, queue: str) -> bool:
        """Whether a limit applies to the queue's jobs at all (its own, a parent's, its tenant's)."""
        found = self._limited.get(queue)
        if found is None:
            q = self.queues[queue]
            found = self._limited[queue] = bool(self.tenants[q.tenant].limit or
                                                any(self.queues[n].limit for n in self.chain[queue]) or
                                                self._kept_around(queue))
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
        return self.kept_from(job.view.request, queue, flavored=False)

    def _kept_around(self, queue: str) -> bool:
        """Whether any sibling of the queue, of a parent of it or of its tenant keeps part of its guarantee back."""
        return (("tenant", self.queues[queue].tenant) in self.keepers or
                any(("queue", n) in self.keepers for n in self.chain[queue]))

    def kept_from(self, request: Mapping[str, int], queue: str, flavored: bool
                  ) -> tuple[str, Resources, str] | None:
        """Whether a gang of `request` would start in room others keep back (their lending limits), with how much
        must end anywhere before it fits and why. At each level of its queue's path (its tenant among tenants, its
        queue and each parent among their siblings), what the member's siblings keep back and do not use is not
        the gang's to take: the federation's usage, the gang and that must stay within the capacity. That holds a
        gang within its own guarantee too when others borrowed the guarantee: the free room is the lender's, and
        the gang's queue reclaims its own (`reclaim_kept`). `flavored`: judge the flavored resources
        (`r@flavor`, for each flavor the gang could use) instead of the plain ones."""
        q = self.queues[queue]
        path = [("tenant", q.tenant), *(("queue", n) for n in self.chain[queue])]
        withheld: dict[str, float] = {}
        keepers: dict[str, list[str]] = {}
        for member in path:
            for keeper in self.keepers.get(member, ()):
                used = self.tenant_usage[keeper[1]] if keeper[0] == "tenant" else self.queue_usage[keeper[1]]
                for key, amount in self.kept[keeper].items():
                    if (FLAVOR in key) != flavored:
                        continue
                    idle = amount - used.get(key, 0)
                    if request.get(base(key), 0) <= 0 or idle <= 0:
                        continue
                    withheld[key] = withheld.get(key, 0) + idle
                    keepers.setdefault(key, []).append(f"{keeper[0]} {keeper[1]}")
        needed = {key: round(self.total_usage.get(key, 0) + request.get(base(key), 0) + idle
                             - self.capacity.get(key, 0.0))
                  for key, idle in withheld.items()}
        needed = {key: amount for key, amount in needed.items() if amount > 0}
        if not needed:
            return None
        kept = {key: round(withheld[key]) for key in needed}
        owners = {o for key in needed for o in keepers[key]}
        # A tenant reads only its own tenant's names: the keepers among tenants are always others.
        tenants = sum(o.startswith("tenant ") for o in owners)
        who = sorted(o for o in owners if not o.startswith("tenant "))
        who += ["other tenants"] if tenants > 1 else ["another tenant"] if tenants else []
        return "federation", needed, (f"{_fmt(kept)} is kept back for {', '.join(who)} by lending limits: too "
                                      "little of the rest is free")

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
            anywhere = self._cannot_run_anywhere[shape]
            if anywhere and self.provisions(queue) and provisionable(job.view, self.snap.clusters, {}, {}):
                anywhere = None  # not on the clusters as they are, but on nodes one of them can add
            self._cannot_run[key] = anywhere or own
        return self._cannot_run[key]

    def provisions(self, queue: str) -> bool:
        """Whether the queue's gangs may be sent to capacity a cluster's autoscaler can add."""
        return self.growable and PROVISIONING in self.queues[queue].admission_checks

    def checks(self, queue: str, cluster: str) -> tuple[str, ...]:
        """The admission checks a job of the queue passes in the cluster: its queue's, then its flavors' there."""
        names = list(self.queues[queue].admission_checks)
        for flavor in sorted(set(self.flavors.of.get(cluster, {}).values())) if self.flavor_checks else ():
            names += [c for c in self.flavor_checks.get(flavor, ()) if c not in names]
        return tuple(names)

    def verdict(self, job: PendingJob, queue: str) -> Verdict:
        """Whether the job certainly waits as things stand now, and why: it cannot run at all, a limit holds it,
        its shape was already found to fit nowhere in this cycle, or no cluster is ready (None: not certain).
        The same for every job of its shape in its queue while nothing changes (usage, reservations, what fits
        nowhere), so a walk works it out once per shape."""
        if job.view.group is not None:
            return None, False, None  # decided with its HyperJob's other sub-jobs, never settled with its shape
        impossible = self.cannot_run(job, queue)
        held = self.limit(job, queue) if not impossible and self.limited(queue) else None
        if held is not None and held[0] == "federation" and queue not in self.heads_reserving:
            return None, False, None  # its queue's head may still reclaim for it (`reclaim_kept`)
        nowhere = self.clusters.nowhere if self.clusters and not self.provisions(queue) else {}
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
        verdicts: dict[Shape, Verdict] = {}
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

    def _admit(self, job: PendingJob, queue: str, cluster: str) -> None:
        """Count a job sent to `cluster` against its queue and tenant, with the admission checks it passes there."""
        if checks := self.checks(queue, cluster):
            self.out.checks[job.id] = checks
        self.use(queue, self.flavors.held(cluster, job.view.request) if self.flavors else job.view.request)

    def _provision(self, job: PendingJob, queue: str) -> bool:
        """Send a gang that fits no cluster as it is to new nodes a cluster's autoscaler can add, when one can."""
        allowed = None
        if self.flavors and self.queues[queue].flavors:
            wanted = set(self.queues[queue].flavors)
            allowed = [c for c, of in self.flavors.of.items() if wanted & set(of.values())]
        found = provisionable(job.view, self.snap.clusters, self.snap.refused.get(job.id, {}), self.promised.nodes,
                              allowed)
        if found is None:
            return False
        self.promised.take(found)
        self.out.assign[job.id] = found.cluster
        self.out.provisioning[job.id] = found
        self.out.notes[job.id] = found.said
        self._admit(job, queue, found.cluster)
        return True

    def consider(self, job: PendingJob, queue: str) -> None:
        if job.view.group is not None:
            self.consider_group(job, queue)
            return
        why = self.cannot_run(job, queue)
        if why:
            self.out.waiting[job.id] = why
            self.out.cannot_run.add(job.id)
            return
        held = self.limit(job, queue)
        if held is not None:
            if held[0] == "federation" and self.reclaim_kept(job, queue, held[1]):
                return
            self.out.limited[job.id] = held
            self.out.waiting[job.id] = held[2]
            return
        cluster, reasons = self.choose(job, queue)
        if cluster is not None:
            self.out.assign[job.id] = cluster
            if note := self.clusters.passed_over(job.view, cluster):
                self.out.notes[job.id] = note
            self._admit(job, queue, cluster)
            self.clusters.reserve(job.view, cluster)
            return
        if self.provisions(queue) and self._provision(job, queue):
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


def over_own_limit(job: JobView, queues: Sequence[QueueInfo], tenant: TenantInfo) -> str | None:
    """Why the gang alone is more than its queue's, a parent queue's or its tenant's limit allows (it could
    never run under it). `queues`: its queue, then that queue's parents."""
    for owner, limit in (*((f"queue {q.name}", q.limit) for q in queues), (f"tenant {tenant.name}", tenant.limit)):
        over = {r: cap for r, cap in limit.items() if FLAVOR not in r and job.request.get(r, 0) > cap}
        if over:
            need = {r: job.request[r] for r in over}
            return f"cannot run: needs {_fmt(need)}, more than {owner}'s limit {_fmt(over)}"
    return None



def schedule(snapshot: Snapshot) -> Decisions:
    """One cycle from scratch over `snapshot.pending` (every waiting job visited)."""
    cycle = _Cycle(snapshot)
    return cycle.run(Lists(snapshot.pending))


def schedule_backlog(snapshot: Snapshot, manager: QueueManager) -> Decisions:
    """One cycle over the queue manager's waiting jobs (`snapshot.pending` is not read): the same decisions as
    `schedule` with those jobs as `pending`, at a cost that follows the queue heads and shapes, not the backlog.
    The decisions' reasons are read from the manager, which must not change while they are in use."""
    return walk_backlog(snapshot, manager).out


def walk_backlog(snapshot: Snapshot, manager: QueueManager) -> _Cycle:
    """`schedule_backlog`, returning the cycle itself: what it left (its cluster table, usage and shares) is what
    jobs admitted on arrival take from until the next cycle (`arrival.Arrivals`)."""
    cycle = _Cycle(snapshot)
    cycle.run(Walked(manager, cycle.out))
    return cycle


def shares(snapshot: Snapshot, backlog: QueueManager | None = None) -> tuple[Tree, dict[str, Resources],
                                                                             dict[str, Resources]]:
    """Deserved shares, and usage per queue and per tenant, exactly as a cycle would see them (its waiting jobs:
    `backlog`'s if given, else `snapshot.pending`)."""
    cycle = _Cycle(snapshot)
    cycle.compute_shares(backlog if backlog is not None else Lists(snapshot.pending))
    assert cycle.out.shares is not None
    return cycle.out.shares, cycle.queue_usage, cycle.tenant_usage
