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
the queue manager of `queues.py`), what each queue and tenant holds (`ledger.py`), the order of queue heads
(`ordering.py`), limits and lending limits (`quotas.py`), cluster choice (`choice.py`, `fit.py`, `flavors.py`),
deserved shares (`fairshare.py`), reclaim, preemption and moves (`preemption.py`), reservations
(`reservations.py`), HyperJobs (`hyperjobs.py`) and the start-time forecast (`forecast.py`, `outlook.py`). This
module is the loop that serves queue heads in order and applies what the parts find.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from federation.kernel.hyperjob import HOLD_CHECK
from federation.kernel.resources import FLAVOR, Resources, base
from federation.scheduling import running
from federation.scheduling.backlog import Backlog, Demand, Lists, Walked
from federation.scheduling.choice import ClusterTable, summary
from federation.scheduling.fairshare import EPSILON, Claim, Tree, hierarchical
from federation.scheduling.fit import JobView, Shape
from federation.scheduling.flavors import Flavors
from federation.scheduling.hyperjobs import HyperJobs
from federation.scheduling.ledger import Ledger
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
    Wants,
    add_into,
    queue_chains,
    summed_by,
)
from federation.scheduling.ordering import HeadOrder
from federation.scheduling.preemption import Preemptor
from federation.scheduling.provisioning import Promised, provisionable
from federation.scheduling.queues import QueueManager, Verdict
from federation.scheduling.quotas import Quotas, fmt
from federation.scheduling.reservations import Reservations

# The cycle's names, for those who import them from here (its model, constants and entry points).
__all__ = ["MOVE_BUDGET_SECONDS", "NO_READY_CLUSTER", "REPREEMPT_GRACE", "RESOURCE_FOR_FEWEST", "Decisions",
           "PendingJob", "QueueInfo", "RunningJob", "Snapshot", "TenantInfo",
           "queue_chains", "schedule", "schedule_backlog", "shares", "walk_backlog"]


@dataclass
class _Kept:
    """Verdicts kept by gang shape (`_Cycle.judge`): those alike for every tenant; for shapes that would fit a cluster
    but for room held there, the one every tenant but the holder's gets (whom they wait behind is named to its own
    tenant alone), and the holder's tenant's; and how far into the cluster table's changes they hold: the shapes found
    to fit nowhere, the clusters that took work and those that first held room, each in order, as many of each as they
    know of."""
    version: int
    nowhere_seen: int
    changed_seen: int
    holding_seen: int
    views: dict[Shape, JobView] = field(default_factory=dict)  # a gang of each shape given a verdict
    verdicts: dict[Shape, Verdict] = field(default_factory=dict)
    others: dict[Shape, Verdict] = field(default_factory=dict)  # shape -> its verdict for tenants not holding the room
    held_by: dict[Shape, str] = field(default_factory=dict)  # shape -> the tenant holding the room it waits behind
    behind: dict[str, dict[Shape, Verdict]] = field(default_factory=dict)  # the holder's tenant -> shape -> verdict
    # cluster row -> (the holder's tenant, or None for `others`, shape)
    behind_in: dict[int, list[tuple[str | None, Shape]]] = field(default_factory=dict)

    def catch_up(self, table: ClusterTable) -> None:
        """Drop what the table's changes since made wrong: a shape found to fit nowhere has a new verdict; a cluster
        that took work has less free room, so a shape that would fit there but for room held may no longer (free
        room only shrinks: one that would not, still would not)."""
        if self.nowhere_seen < len(table.found_nowhere):
            # (A verdict kept per tenant was worked out once its shape fitted nowhere, or for one that never can.)
            for shape in table.found_nowhere[self.nowhere_seen:]:
                self.verdicts.pop(shape, None)
            self.nowhere_seen = len(table.found_nowhere)
        if self.changed_seen < len(table.changed):
            for row in table.changed[self.changed_seen:]:
                for tenant, shape in self.behind_in.pop(row, ()):
                    self._drop(shape, tenant)
            self.changed_seen = len(table.changed)
        if self.holding_seen < len(table.holding_since):
            # A cluster that held no room now holds some: a shape that fits nowhere and would fit there but for it
            # now waits behind its holder (or behind it instead of a later cluster's). Other verdicts do not read it.
            for row in table.holding_since[self.holding_seen:]:
                nowhere = [self.views[s] for s in self.views.keys() & table.nowhere.keys()]
                for shape in table.fit_but_for_holds_at(nowhere, row):
                    self.verdicts.pop(shape, None)
                    self._drop(shape, None)
                    for mine in self.behind.values():
                        mine.pop(shape, None)
            self.holding_seen = len(table.holding_since)

    def _drop(self, shape: Shape, tenant: str | None) -> None:
        """Forget the shape's verdict of waiting behind room held: every tenant's but the holder's (None), or that
        tenant's."""
        if tenant is None:
            self.others.pop(shape, None)
            self.held_by.pop(shape, None)
        else:
            self.behind[tenant].pop(shape, None)


class _Cycle:
    """The loop over queue heads. Its parts (the ledger, the head order, quotas, the preemptor, reservations,
    HyperJobs) keep their own state and answer; the decisions are written here alone, so what a cycle decided is
    read in one place."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self.tenants = {t.name: t for t in snap.tenants}
        self.queues = {q.name: q for q in snap.queues}
        self.queues_of: dict[str, list[str]] = {}  # tenant -> its queues
        for q in snap.queues:
            self.queues_of.setdefault(q.tenant, []).append(q.name)
        self.clusters = ClusterTable(snap.clusters, snap.capacity)
        self.chain = queue_chains(snap.queues)
        self.parents = {q.parent for q in snap.queues if q.parent in self.chain}
        self.ledger = Ledger(self.queues, self.tenants, self.chain)
        self.out = Decisions()
        self.remembered = snap.making_room.keys() | snap.refused.keys()  # jobs a past cycle's outcome follows
        self.lowered: set[str] = set()  # queues whose tenant's usage a preemption lowered since the last turn
        self.heads_reserving: set[str] = set()  # queues whose head has had its turn at reclaim and reservation
        self.flavors = Flavors(snap.flavors, {**snap.labels, **{c.name: c.labels for c in snap.clusters}})
        self.flavor_checks = {f.name: f.admission_checks for f in snap.flavors if f.admission_checks}
        self.promised = Promised()
        # Not a method of the cycle: the head order holds it, and the cycle's own would tie the cycle into a reference
        # cycle that only a full collection frees (with the snapshot it holds: a list of every waiting job).
        self.wanted = Wants(self.flavors, self.queues).of
        self._kept: _Kept | None = None  # see `judge`
        self.running = running.read(snap.running)
        # running job -> what it counts against, where flavors make it more than its request (see `held_by`)
        holds: Mapping[str, Mapping[str, int]] | None = {
            job.id: self.flavors.held(job.cluster, job.request) for job in self.running} if self.flavors else None
        if holds is None:  # what runs per queue, kept beside the gangs
            used: Mapping[str, Mapping[str, int]] = self.running.usage()
        else:  # with flavors, added up per queue first: tens of thousands of gangs, a few hundred sums
            counted = [job for job in self.running if job.queue in self.queues]
            used = summed_by([job.queue for job in counted], [holds[job.id] for job in counted])
        for queue, amounts in used.items():
            if queue in self.queues:
                self.ledger.use(queue, amounts)
        self.order = HeadOrder(self.ledger, self.queues, snap.past_tenants, snap.past_queues, self.wanted)
        self.preemptor = Preemptor(snap, self.running, self.queues, self.clusters, self.ledger, holds)
        self.reservations = Reservations(self.clusters, snap.clusters)
        self.quotas = Quotas(self.tenants, self.queues, snap.clusters, self.ledger)
        self.hyperjobs = HyperJobs(snap, self.running, self.queues, self.clusters, self.flavors, self.quotas)

    def queue_priority(self, queue: str) -> int:
        info = self.queues.get(queue)
        return info.priority if info is not None else 0

    # -- shares ----------------------------------------------------------------------------

    def compute_shares(self, backlog: Demand) -> None:
        demand = {q: dict(u) for q, u in self.ledger.queue_usage.items()}
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
        self.out.shares = hierarchical(capacity, tenants, queues_of, children_of)
        self.ledger.deserve(self.out.shares, capacity, (q for q in self.queues if q not in self.parents))

    # -- cluster choice ----------------------------------------------------------------------

    def choose(self, job: PendingJob, queue: str, gone: Mapping[str, str] | None = None
               ) -> tuple[str | None, Sequence[str]]:
        """The best cluster for the job, or None with each cluster's reason. With flavors, only clusters of
        the flavors its queue may use and whose quotas it would not exceed, in the queue's order. `gone`: clusters
        passed over whatever their room, and why (cordoned since the snapshot)."""
        refused = self.snap.refused.get(job.id, {})
        if gone:
            refused = {**refused, **gone}
        if not self.flavors:
            best = self.clusters.best(job.view, refused)
            return (best, []) if best is not None else (None, self.clusters.reasons(job.view, refused))
        q = self.queues[queue]
        over = {}
        ledger, tenant = self.ledger, q.tenant
        for owner, usage, limit in ((f"queue {queue}", ledger.queue_usage[queue], q.limit),
                                    (f"tenant {tenant}", ledger.tenant_usage[tenant], self.tenants[tenant].limit)):
            for key, cap in limit.items():
                if FLAVOR in key and usage.get(key, 0) + job.view.request.get(base(key), 0) > cap:
                    over.setdefault(key, f"{owner} at limit {fmt({key: cap})}")
        if self.quotas.kept_around(queue):
            kept = self.quotas.kept_from(job.view.request, queue, flavored=True)
            for key in kept[1] if kept else ():
                over.setdefault(key, kept[2])
        groups, never = self.flavors.choices(job.view, queue, q.flavors, self.clusters.names, over)
        for excluded in groups:
            best = self.clusters.best(job.view, {**excluded, **refused})
            if best is not None:
                return best, []
        return None, self.clusters.reasons(job.view, {**never, **refused})

    # -- the loop ------------------------------------------------------------------------------

    def closed(self, queue: str) -> str | None:
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

        version = self.ledger.tenant_version
        tenant_of = {q: info.tenant for q, info in self.queues.items()}

        def push(queue: str, key: tuple[float, ...] | None = None) -> None:
            head = backlog.head(queue)
            if head is not None:
                tokens[queue] += 1
                heapq.heappush(heap, (*(key or self.order.key(queue, head)), version.get(tenant_of[queue], 0),
                                      tokens[queue], queue))

        closed = {queue: why for queue in queues if (why := self.closed(queue))}
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
            if version.get(tenant_of[queue], 0) != seen and (now := self.order.key(queue, job)) > tuple(popped):
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
        self.out.usage, self.out.tenant_usage = self.ledger.queue_usage, self.ledger.tenant_usage
        self.out.compiled_failure = self.preemptor.failure
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
        tenant_share, queue_share = self.ledger.share_after(queue, self.wanted(job))
        if queue_share > 1.0 + EPSILON or tenant_share > 1.0 + EPSILON:
            return False
        found = self.preemptor.victims_for_kept(job, needed)
        if found is None:
            return False
        self.evict(job, queue, *found)
        return True

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
        impossible = self.quotas.cannot_run(job, queue)
        held = self.quotas.limit(job, queue) if not impossible else None
        if held is not None and held[0] == "federation" and queue not in self.heads_reserving:
            return None, False, None  # its queue's head may still reclaim for it (`reclaim_kept`)
        nowhere = self.clusters.nowhere if self.clusters and not self.quotas.provisions(queue) else {}
        shape = job.view.shape
        why = impossible or (held and held[2]) or (shape in nowhere and (self.behind(job) or nowhere[shape])) or (
            not self.clusters and NO_READY_CLUSTER)
        return why or None, bool(impossible), held

    def judge(self, queue: str) -> tuple[Callable[[PendingJob], Verdict], Mapping[Shape, Verdict]]:
        """`verdict` for the queue's jobs, and the verdicts it already gave them by gang shape (jobs of no HyperJob):
        kept by shape (and by tenant where whom a gang waits behind is named) while the cluster table stands as it was
        (its `version`: room given back) and what changed since could not change them (`_Kept.catch_up`: shapes found
        to fit nowhere, clusters that took work, clusters that first held room; at 1,000 clusters a hundred of those
        a cycle each started the verdicts over, about 3,800 worked out again a cycle, now about 35),
        when no limit or provisioning applies to the queue: nothing else that verdict reads can differ then. A
        settling walk asks about 40,000 times a cycle at 1,000,000 pending, over 1,000 queues but only 35 shapes
        and 100 tenants: the walk reads those before it asks, without a call each. One judge per walk of a queue:
        what the queue alone decides is looked up once."""
        if self.quotas.limited(queue) or self.quotas.provisions(queue):
            return (lambda job: self.verdict(job, queue)), {}
        table = self.clusters
        kept = self._kept
        if kept is None or kept.version != table.version:
            kept = self._kept = _Kept(table.version, len(table.found_nowhere), len(table.changed),
                                      len(table.holding_since))
        else:
            kept.catch_up(table)
        tenant = self.queues[queue].tenant
        shared, mine, others = kept.verdicts, kept.behind.get(tenant), kept.others
        if others and tenant in kept.held_by.values():  # the holder's own tenant is told whom it waits behind
            others = {shape: found for shape, found in others.items() if kept.held_by[shape] != tenant}
        known = {**shared, **others, **(mine or {})} if mine or others else shared

        def judged(job: PendingJob) -> Verdict:
            if job.view.group is not None:
                return self.verdict(job, queue)
            shape = job.view.shape
            found = known.get(shape)
            if found is None:
                found = self.verdict(job, queue)
                # Only whom a gang waits behind tells tenants apart, and only a shape that would fit but for room
                # held somewhere waits behind anyone: named to the holder's tenant, the same for every other.
                behind = table.fits_without_reservations(job.view) if table.holding and found[0] is not None \
                    else None
                kept.views[shape] = job.view
                if behind is None:
                    shared[shape] = found
                elif (holder := self.reservations.holders[behind][0][1]) != tenant:
                    kept.others[shape], kept.held_by[shape] = found, holder
                    kept.behind_in.setdefault(table.index[behind], []).append((None, shape))
                else:
                    kept.behind.setdefault(tenant, {})[shape] = found
                    kept.behind_in.setdefault(table.index[behind], []).append((tenant, shape))
                if known is not shared:
                    known[shape] = found
            return found

        return judged, known

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
        self.ledger.use(queue, self.held(cluster, job.view.request))

    def held(self, cluster: str, request: Mapping[str, int]) -> Mapping[str, int]:
        """What a gang sent to `cluster` counts against: its request, with its flavors there where any are defined."""
        return self.flavors.held(cluster, request) if self.flavors else request

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

    def hold(self, job: PendingJob, cluster: str, why: str) -> None:
        """Reserve the room `job` needs in `cluster` for it (`reservations`), saying why it waits."""
        self.reservations.hold(job.view, cluster, self.queues[job.queue].tenant)
        self.out.reserved[job.id] = cluster
        self.out.waiting[job.id] = why

    def behind(self, job: PendingJob) -> str | None:
        return self.reservations.behind(job.view, self.queues[job.queue].tenant)

    def evict(self, job: PendingJob, queue: str, cluster: str, gangs: Sequence[RunningJob],
              moving: bool = False) -> None:
        """Apply what the preemptor found: the gangs leave (their usage no longer counted) and the job holds the
        room they make."""
        tenant = self.queues[queue].tenant
        self.preemptor.take(gangs)
        for victim in gangs:
            why = "moved" if moving else "reclaimed" if victim.queue != queue else "preempted"
            self.out.lost[victim.id] = victim.at_risk(self.snap.now)
            if self.queues[victim.queue].tenant == tenant:
                self.out.preempt[victim.id] = f"{why} for {job.id} (priority {job.priority}) in queue {queue}"
            elif moving:
                self.out.preempt[victim.id] = "moved to restart elsewhere in its cluster, making one HyperNode whole " \
                                              "for a job of another tenant"
            else:  # a tenant reads only its own tenant's names
                self.out.preempt[victim.id] = f"{why} for a job of another tenant, below its deserved share"
            self.ledger.use(victim.queue, self.preemptor.held_by(victim), -1)
            self.lowered.update(self.queues_of[self.queues[victim.queue].tenant])
        # Worded as in later cycles (above), so that the reason is not rewritten next cycle.
        self.out.making_room[job.id] = cluster
        self.hold(job, cluster, f"waiting for preempted job(s) to exit in cluster {cluster}")

    def consider_group(self, job: PendingJob, queue: str) -> None:
        """Decide the job's HyperJob when its first waiting sub-job comes up (`hyperjobs`); its other sub-jobs
        follow that."""
        sent, waiting = self.hyperjobs.decide(job, queue, self.backlog)
        for placed in sent:
            sub = placed.job
            self.out.assign[sub.id] = placed.cluster
            self._admit(sub, queue, placed.cluster)
            self.out.checks[sub.id] = (HOLD_CHECK, *self.out.checks.get(sub.id, ()))
            self.out.notes[sub.id] = placed.note
        if job.id in waiting:
            self.out.waiting[job.id] = waiting[job.id]

    def consider(self, job: PendingJob, queue: str) -> None:
        if job.view.group is not None:
            self.consider_group(job, queue)
            return
        why = self.quotas.cannot_run(job, queue)
        if why:
            self.out.waiting[job.id] = why
            self.out.cannot_run.add(job.id)
            return
        held = self.quotas.limit(job, queue)
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
        if self.quotas.provisions(queue) and self._provision(job, queue):
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
        tenant_share, queue_share = self.ledger.share_after(queue, self.wanted(job))
        queue_within, tenant_within = queue_share <= 1.0 + 1e-9, tenant_share <= 1.0 + 1e-9
        why_not = ""  # (said only of a queue within its share)
        if head and (queue_within or self.preemptor.may_preempt_in_queue(job)):
            # Whole-cluster totals cannot promise a HyperNode: a gang with a hard tier limit and several pods
            # evicts only inside one HyperNode within its limit (the ITP trace replay showed it evicting,
            # still not fitting, and evicting again when judged on totals).
            hard = job.view.mode == "hard" and job.view.request != job.view.largest_pod
            preemptor = self.preemptor
            found = (preemptor.victims_in_hypernode if hard else preemptor.victims)(job, queue_within, tenant_within)
            if isinstance(found, str) and hard and queue_within and tenant_within:
                moved = preemptor.moves_in_hypernode(job)
                if moved is not None:
                    self.evict(job, queue, *moved, moving=True)
                    return
            if isinstance(found, str):
                why_not = found
            else:
                self.evict(job, queue, *found)
                return
        if head and queue_within and tenant_within:
            best = self.reservations.cluster_for(job.view, self.snap.refused.get(job.id, {}))
            if best is not None:
                self.hold(job, best, f"waiting for resources in cluster {best}, reserved so smaller jobs do not "
                                     f"starve it; {summary(reasons)}" + (f"; {why_not}" if why_not else ""))
                return
        why = self.behind(job) or self.clusters.fits_nowhere(job.view) or \
            "no ready cluster fits: " + summary(reasons)
        self.out.waiting[job.id] = why + (f"; {why_not}" if why_not and queue_within else "")


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
    return cycle.out.shares, cycle.ledger.queue_usage, cycle.ledger.tenant_usage
