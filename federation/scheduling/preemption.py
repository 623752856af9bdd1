"""Reclaim, preemption and moves: which running gangs a waiting job may evict, and what evicting them costs.

`Preemptor` answers from the cycle's snapshot, cluster table and ledger and writes no decision (Kueue's
`GetTargets`): the cycle applies what it returns and then tells it which gangs are gone (`take`). Victims: of the
lowest-priority queue first (as Volcano reclaims since v1.10), then lowest priority, least work lost, youngest;
reclaim leaves every queue and tenant it takes from at or above its deserved share, spares protected gangs and
gangs whose lost work costs more than waiting for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from federation.scheduling import native
from federation.scheduling.choice import SHOWN_REASONS, ClusterTable, PreemptiblePool
from federation.scheduling.fairshare import keeps_share
from federation.scheduling.fit import ClusterView, DomainFree, JobView, covers
from federation.scheduling.ledger import Ledger
from federation.scheduling.model import (
    MOVE_BUDGET_SECONDS,
    REPREEMPT_GRACE,
    RESOURCE_FOR_FEWEST,
    PendingJob,
    QueueInfo,
    RunningJob,
    Snapshot,
    add_into,
    summed_by,
)
from federation.scheduling.running import Gangs

Targets = tuple[str, list[RunningJob]]  # the cluster, and the gangs to evict there in order


class VictimOrder:
    """Each cluster's preemptible gangs in victim order: of the lowest-priority queue (as Volcano reclaims since
    v1.10), then lowest priority, then least work lost, then youngest. A cluster's are sorted when first asked for:
    the compiled search sorts them itself (sorting all of them here was a tenth of a cycle's setup), so with it most
    clusters never are."""

    def __init__(self, given: Mapping[str, list[RunningJob]], priority: Mapping[str, int], now: float) -> None:
        self.given = given  # cluster -> its preemptible gangs in the snapshot's order
        self._priority = priority  # queue -> its priority (0: a queue the cycle does not know)
        self._now = now  # the snapshot's clock: the work each gang would lose
        self._sorted: dict[str, list[RunningJob]] = {}

    def get(self, cluster: str, default: Sequence[RunningJob] = ()) -> Sequence[RunningJob]:
        found = self._sorted.get(cluster)
        if found is None:
            gangs = self.given.get(cluster)
            if gangs is None:
                return default
            priority, now = self._priority, self._now
            found = self._sorted[cluster] = sorted(gangs, key=lambda v: (priority.get(v.queue, 0), v.priority,
                                                                         v.at_risk(now), -v.seq, v.id))
        return found

    def __getitem__(self, cluster: str) -> Sequence[RunningJob]:
        if cluster not in self.given:
            raise KeyError(cluster)
        return self.get(cluster)


class Preemptor:
    """The preemptible gangs of each cluster in victim order, and the searches over them."""

    def __init__(self, snap: Snapshot, running: Gangs, queues: Mapping[str, QueueInfo], clusters: ClusterTable,
                 ledger: Ledger, holds: Mapping[str, Mapping[str, int]] | None) -> None:
        """`holds`: running gang -> what it counts against, flavors included; None: what it requested (no flavors,
        and no dictionary of tens of thousands of gangs to build for that)."""
        self.snap = snap
        self.running = running
        self.now = snap.now  # what work lost and protected run times are counted to
        self.queues = queues
        self.clusters = clusters
        self.ledger = ledger
        self.holds = holds
        self.priority = {q: info.priority for q, info in queues.items()}
        self.taken: dict[str, RunningJob] = {}  # gangs evicted this cycle, by id (the compiled search knows objects)
        self.failure = ""  # what the compiled search raised, when it did (the Python search decided instead)
        self._worth: dict[str, bool] = {}  # running gang -> whether reclaim may take it on cost (`_worth_reclaiming`)
        # (queue or ("tenant", name), id of what a gang holds) -> (that usage's version, whether taking it keeps
        # the share)
        self._kept: dict[tuple[str | tuple[str, str], int], tuple[int, bool]] = {}
        self._over: dict[str | None, tuple[int, frozenset[str]]] = {}  # see `_reclaimable`
        self._reporting: tuple[list[ClusterView], np.ndarray] | None = None  # see `_reported`
        self._compiled: Any = None  # the compiled search's gangs (native.compiled.ReclaimPool), built at its first
        self.preemptible = VictimOrder(running.preemptible(), self.priority, self.now)
        # cluster -> queue -> its preemptible gangs there, in the same order: only a search without reclaim asks, so
        # grouped for a cluster when first asked (`_of_queue`).
        self._by_queue: dict[str, dict[str, list[RunningJob]]] = {}
        self._pool: PreemptiblePool | None = None  # see `could_make_room`

    def queue_priority(self, queue: str) -> int:
        return self.priority.get(queue, 0)

    def _of_queue(self, cluster: str, queue: str) -> Sequence[RunningJob]:
        """The preemptible gangs of `queue` in `cluster`, in victim order."""
        grouped = self._by_queue.get(cluster)
        if grouped is None:
            grouped = self._by_queue[cluster] = {}
            for victim in self.preemptible.get(cluster, ()):
                grouped.setdefault(victim.queue, []).append(victim)
        return grouped.get(queue, ())

    def _highest_queue(self, gangs: Sequence[RunningJob]) -> int:
        """The priority of the highest-priority queue these victims come from: room is taken from lower-priority
        queues wherever they can give it."""
        return max(self.queue_priority(v.queue) for v in gangs)

    def take(self, gangs: Sequence[RunningJob]) -> None:
        """The cycle evicted these gangs: they are no victims any more, and their room no longer preemptible."""
        if self._compiled is not None:
            self._compiled.preempted(list(gangs))
        for victim in gangs:
            self.taken[victim.id] = victim
            if self._pool is not None:
                self._pool.add(victim.cluster, victim.queue, victim.request, -1)

    def could_make_room(self, request: Mapping[str, int], queues: Sequence[str]) -> np.ndarray:
        """Per cluster, whether free resources plus every preemptible gang not yet evicted of `queues` would cover
        `request` (`PreemptiblePool.could_make_room`). The compiled search's gangs answer it when built: they are
        read there anyway, and adding them up in Python as well was a tenth of a cycle at 1,000 clusters."""
        found = self._natively(lambda pool: pool.could_make_room(request, list(queues), self.clusters.free_bytes()))
        if found is not None:
            return np.frombuffer(found, dtype=bool)
        if self._pool is None:
            self._pool = PreemptiblePool(self.clusters, sorted(self.queues))
            pooled = [job for gangs in self.preemptible.given.values() for job in gangs
                      if job.queue in self.queues and job.id not in self.taken]
            for (cluster, queue), amounts in summed_by([(job.cluster, job.queue) for job in pooled],
                                                       [job.request for job in pooled]).items():
                self._pool.add(cluster, queue, amounts)
        return self._pool.could_make_room(request, queues)

    def _natively(self, call: Callable[[Any], Any]) -> Any:
        """`call` on the compiled search's gangs (native.compiled.ReclaimPool, built at the first call of a cycle);
        None without it, or once it failed in this cycle: the Python code then decides the same (the differential
        tests hold them equal), and the cycle goes on."""
        if native.compiled is None or self.failure:
            return None
        try:
            if self._compiled is None:
                ledger, pool = self.ledger, native.compiled.ReclaimPool
                queues = [(q, info.priority, info.tenant, ledger.chain[q]) for q, info in self.queues.items()]
                store = self.running.store  # kept gangs' (`running.Running`)
                if store is not None and hasattr(pool, "from_store"):
                    self._compiled = pool.from_store(
                        list(self.clusters.resource), RESOURCE_FOR_FEWEST, list(self.clusters.names), store,
                        self.holds, queues, REPREEMPT_GRACE, self.now)
                else:
                    self._compiled = pool(
                        list(self.clusters.resource), RESOURCE_FOR_FEWEST,
                        [self.preemptible.given.get(name, []) for name in self.clusters.names],
                        self.holds, queues, REPREEMPT_GRACE, self.now, native.memo)
                self._compiled.preempted(list(self.taken.values()))
            return call(self._compiled)
        except BaseException as err:  # a Rust panic is a BaseException; an interrupt is not ours to keep
            if not isinstance(err, Exception) and type(err).__name__ != "PanicException":
                raise
            self.failure = f"{type(err).__name__}: {err}"[:500]
            return None

    def _reclaimable(self, job: PendingJob, queue_within: bool, tenant_within: bool) -> set[str]:
        """Queues other than the job's own that it may take back from: reclaimable ones over their share, of its
        tenant, or of others when its tenant is within its share too; none unless its queue is within its own."""
        if not queue_within:
            return set()
        tenant = self.queues[job.queue].tenant
        key = None if tenant_within else tenant
        # Hundreds of heads ask while the queues over their share stay the same: kept per tenant (None: of every
        # tenant) until they change.
        kept = self._over.get(key)
        if kept is None or kept[0] != self.ledger.over_version:
            over = self.ledger.over_share
            kept = self._over[key] = (self.ledger.over_version, frozenset(
                over if key is None else (q for q in over if self.queues[q].tenant == tenant)))
        return set(kept[1] - {job.queue}) if job.queue in kept[1] else set(kept[1])

    def _worth_reclaiming(self, victim: RunningJob) -> bool:
        """Out of its protected run time and losing less work than waiting for it costs: the same all cycle long,
        so worked out once per gang (heads of many queues look at the same gangs)."""
        found = self._worth.get(victim.id)
        if found is None:
            found = self._worth[victim.id] = not victim.protected(self.now) and victim.pays_to_reclaim(self.now)
        return found

    def _take(self, job: PendingJob, gangs: Sequence[RunningJob], over: set[str], freed: dict[str, int],
              kept: set[str], bound: tuple[int, float, int, int, str] | None = None,
              cluster: str = "") -> list[RunningJob]:
        """Gangs of `gangs` (in victim order) to evict until `freed` covers the job, adding theirs to `freed`.
        `kept` collects why eligible-looking gangs were passed over ("share": their queue or tenant would drop
        below its share; "work": protected, or evicting would lose more than waiting costs).

        With a `bound` (the best choice's key so far, its cluster last), none once this choice's key in `cluster`
        passes it: each of the key's parts (highest queue priority, work lost, GPUs evicted, gangs) only grows as
        gangs are added, so such a choice cannot win, and the gangs after it need not be looked at. A choice equal
        to the best in all four loses too when its cluster's name comes later."""
        tenant = self.queues[job.queue].tenant
        chosen: list[RunningJob] = []
        highest, lost, evicted = 0, 0.0, 0
        borrowed: dict[str | tuple[str, str], dict[str, int]] = {}  # queue or tenant -> its usage, victims gone
        for victim in gangs:
            if not over and victim.priority >= job.priority:
                break  # without reclaim only the job's own queue yields, below its priority: sorted, so done
            if victim.id in self.taken or not (
                    victim.queue in over or (victim.queue == job.queue and victim.priority < job.priority)):
                continue
            if victim.queue != job.queue and not self._worth_reclaiming(victim):
                kept.add("work")
                continue
            if victim.queue != job.queue and not self._may_reclaim(victim, job.queue, tenant, borrowed):
                kept.add("share")
                continue
            chosen.append(victim)
            add_into(freed, victim.request)
            if bound is not None:
                highest = max(highest, self.queue_priority(victim.queue)) if len(chosen) > 1 else \
                    self.queue_priority(victim.queue)
                lost += victim.at_risk(self.now)
                evicted += victim.request.get(RESOURCE_FOR_FEWEST, 0)
                if (highest, lost, evicted, len(chosen), cluster) > bound:
                    return []
            if covers(freed, job.view.request):
                break
        return chosen

    def victims(self, job: PendingJob, queue_within: bool, tenant_within: bool) -> Targets | str:
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
        could = self.could_make_room(job.view.request, [job.queue, *over])
        if not could.any():  # most heads that do not fit, in a full federation: no search to hand the walk
            return self._not_reclaimed(job, queue_within, over, set(), False)
        refused = self.snap.refused.get(job.id, {})  # a cluster that refused the job gets no evictions for it
        searched = self._natively(lambda pool: self._search_compiled(pool, job, over, could, refused))
        best, kept = searched if searched is not None else self._search(job, over, could, refused)
        if best is not None:
            return best
        return self._not_reclaimed(job, queue_within, over, kept, bool(could.any()))

    def may_preempt_in_queue(self, job: PendingJob) -> bool:
        """Whether some preemptible gang of the job's own queue runs below its priority: all that a head past its
        queue's share may evict (it reclaims nothing), so without one the search has nothing to find. Most heads that
        do not fit in a full federation are past their share: a search each was a sixth of a steady cycle."""
        lowest = self.running.lowest_preemptible(job.queue)
        return lowest is not None and lowest < job.priority

    def _lowest(self, job: PendingJob, over: set[str]) -> int:
        return min(self.queue_priority(q) for q in (*over, job.queue))

    def _search(self, job: PendingJob, over: set[str], could: np.ndarray,
                refused: Mapping[str, str]) -> tuple[Targets | None, set[str]]:
        """The search of `victims` over the clusters that `could` make room: the best (cluster, gangs), and why
        eligible-looking gangs were passed over. The oracle `_search_compiled` must equal."""
        best: tuple[int, float, int, int, str, list[RunningJob]] | None = None
        kept: set[str] = set()
        request = job.view.request
        candidates = [self.clusters.names[i] for i in np.flatnonzero(could)]
        # A choice's key is at least (the lowest priority of the queues it may take from, no work lost, the GPUs
        # the cluster is short of, one gang, the cluster): clusters whose least key passes the best choice's are not
        # looked at, and the most free are looked at first (the choice is the least key whatever the order). With
        # the cluster in the bound, a cluster the best would tie with is passed over when its name comes later: at
        # 1,000 clusters, a third of the walks once a best was found.
        lowest = self._lowest(job, over)
        gpus = self.clusters.resource.get(RESOURCE_FOR_FEWEST)
        wanted = request.get(RESOURCE_FOR_FEWEST, 0)
        short = {c: wanted - (int(self.clusters.free[self.clusters.index[c], gpus]) if gpus is not None else 0)
                 for c in candidates}
        selected = self.clusters.selects(job.view)
        for cluster in sorted(candidates, key=lambda c: (short[c], c)):
            if best is not None and (lowest, 0.0, max(short[cluster], 0), 1, cluster) > best[:5]:
                continue
            if cluster in refused or not selected[self.clusters.index[cluster]]:
                continue
            freed = self.clusters.free_dict(cluster)
            if covers(freed, request):
                continue  # its totals fit already (the topology does not): evicting is judged on totals
            gangs = self.preemptible[cluster] if over else self._of_queue(cluster, job.queue)
            chosen = self._take(job, gangs, over, freed, kept, best[:5] if best is not None else None, cluster)
            if chosen and covers(freed, job.view.request):
                evicted = sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in chosen)
                key = (self._highest_queue(chosen), sum(v.at_risk(self.now) for v in chosen), evicted, len(chosen),
                       cluster, chosen)
                if best is None or key[:5] < best[:5]:
                    best = key
        return (best[4], best[5]) if best is not None else None, kept

    def _search_compiled(self, pool: Any, job: PendingJob, over: set[str], could: np.ndarray,
                         refused: Mapping[str, str]) -> tuple[Targets | None, set[str]] | None:
        """`_search` by the compiled walk over `pool` (native/); None where it leaves the job to the Python one."""
        ledger = self.ledger
        assert ledger.shares is not None
        found = pool.victims(
            job.queue, job.priority, job.view.request, sorted(over), self._lowest(job, over),
            self.clusters.free_bytes(), could.tobytes(), self.clusters.selects(job.view).tobytes(),
            [self.clusters.index[c] for c in refused if c in self.clusters.index], ledger.queue_usage,
            ledger.tenant_usage, ledger.queue_version, ledger.tenant_version, ledger.shares.queues,
            ledger.shares.tenants)
        if found is None:
            return None
        at, gangs, bits = found
        kept = {why for bit, why in ((1, "work"), (2, "share")) if bits & bit}
        if at < 0:
            return None, kept
        return (self.clusters.names[at], list(gangs)), kept

    def victims_for_kept(self, job: PendingJob, needed: Mapping[str, int]) -> Targets | None:
        """For a head within its shares that room others keep back holds (`cycle._Cycle.reclaim_kept`): gangs that
        borrowed (reclaim) or of its own queue below its priority to evict in one cluster until `needed` is freed,
        losing the least work, then the fewest GPUs, then the fewest gangs; None if no cluster can."""
        over = self._reclaimable(job, True, True)
        best: tuple[tuple[float, int, int], str, list[RunningJob]] | None = None
        refused = self.snap.refused.get(job.id, {})
        for cluster in sorted(self.clusters.names):
            if cluster in refused:
                continue
            # `_take` evicts until what is freed covers the job's request: starting from all of it but `needed`,
            # that is until `needed` is freed.
            freed = {r: a - needed.get(r, 0) for r, a in job.view.request.items()}
            gangs = self._take(job, self.preemptible.get(cluster, ()), over, freed, set())
            if gangs and covers(freed, job.view.request):
                key = (sum(v.at_risk(self.now) for v in gangs),
                       sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in gangs), len(gangs))
                if best is None or key < best[0]:
                    best = (key, cluster, gangs)
        return (best[1], best[2]) if best is not None else None

    def victims_in_hypernode(self, job: PendingJob, queue_within: bool,
                             tenant_within: bool) -> Targets | str:
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
        refused = self.snap.refused.get(job.id, {})
        selected = self.clusters.selects(job.view)
        views = self._with_hypernodes(selected, refused)
        for view in views:
            cluster_free = self.clusters.free_dict(view.name)  # a HyperNode has no more than its cluster left
            gangs = self.preemptible.get(view.name, ()) if over else self._of_queue(view.name, job.queue)
            inside = _under_each_hypernode(view, gangs)
            for domain, freed in _hypernodes_short_of(job.view, view, cluster_free, inside):
                chosen = self._take(job, inside[domain.name], over, freed, kept)
                if chosen and covers(freed, request):
                    evicted = sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in chosen)
                    key = (self._highest_queue(chosen), sum(v.at_risk(self.now) for v in chosen), domain.tier, evicted,
                           view.name, domain.name, chosen)
                    if best is None or key[:6] < best[:6]:
                        best = key
        if best is not None:
            return best[4], best[6]
        if not views:
            index = self.clusters.index
            sent_back = [c for c in refused if c in index and selected[index[c]]]
            unreported = selected & ~self._reported()[1]
            unreported[[index[c] for c in sent_back]] = False
            said = [f"{_few(sent_back)} sent it back recently"] if sent_back else []
            if len(rows := np.flatnonzero(unreported)):  # past SHOWN_REASONS named by count alone: no more read
                said.append(f"{_few([self.clusters.names[i] for i in rows[:SHOWN_REASONS + 1]])} report no "
                            "HyperNodes")
            return "not reclaimed: a gang with a hard tier limit evicts only inside a HyperNode, and of the " \
                   f"clusters that could hold it {' and '.join(said) or 'none is Ready'}"
        return self._not_reclaimed(job, queue_within, over, kept, True, " inside a HyperNode within its tier limit")

    def moves_in_hypernode(self, job: PendingJob) -> Targets | None:
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
        for view in self._with_hypernodes(self.clusters.selects(job.view), self.snap.refused.get(job.id, {})):
            cluster_free = self.clusters.free_dict(view.name)
            if not covers(cluster_free, request):
                continue  # short of room, not of room in one place: reclaim's business, not moving's
            inside = _under_each_hypernode(view, [
                v for v in self.preemptible.get(view.name, ()) if v.id not in self.taken and v.priority <=
                job.priority and self._worth_reclaiming(v) and covers(pod, v.request)])
            for domain, freed in _hypernodes_short_of(job.view, view, cluster_free, inside):
                chosen = []
                for victim in inside[domain.name]:
                    chosen.append(victim)
                    add_into(freed, victim.request)
                    if covers(freed, request):
                        break
                lost = sum(v.at_risk(self.now) for v in chosen)
                if covers(freed, request) and lost <= budget:
                    evicted = sum(v.request.get(RESOURCE_FOR_FEWEST, 0) for v in chosen)
                    key = (lost, domain.tier, evicted, view.name, domain.name, chosen)
                    if best is None or key[:5] < best[:5]:
                        best = key
        return (best[3], best[5]) if best is not None else None

    def _reported(self) -> tuple[list[ClusterView], np.ndarray]:
        """The snapshot's clusters in the table's order, and per cluster whether its agent reports HyperNodes: worked
        out at the first gang with a hard tier limit, read by every other."""
        if self._reporting is None:
            views = {view.name: view for view in self.snap.clusters}
            listed = [views[name] for name in self.clusters.names]
            self._reporting = listed, np.array([bool(view.domains) for view in listed], dtype=bool)
        return self._reporting

    def _with_hypernodes(self, selected: np.ndarray, refused: Mapping[str, str]) -> list[ClusterView]:
        """The clusters a gang with a hard tier limit may evict in: those it selects that report HyperNodes and have
        not sent it back, in the table's order. Asked for by every such head, over every cluster: one array test,
        then only these."""
        listed, reported = self._reported()
        return [listed[i] for i in np.flatnonzero(selected & reported) if self.clusters.names[i] not in refused]

    def _not_reclaimed(self, job: PendingJob, queue_within: bool, over: set[str], kept: set[str],
                       any_candidates: bool, where: str = "") -> str:
        """Why reclaim or preemption found nothing to evict for the job."""
        tenant = self.queues[job.queue].tenant
        if not queue_within:
            return f"not reclaimed: queue {job.queue} would be over its deserved share"
        if not over and not any(self.ledger.queue_usage[q] for q in self.ledger.over_share if q != job.queue):
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

    def _may_reclaim(self, victim: RunningJob, job_queue: str, tenant: str,
                     borrowed: dict[str | tuple[str, str], dict[str, int]]) -> bool:
        """Whether taking `victim` back leaves its queue, its parents (those not the job's queue's too) and,
        from another tenant, that tenant at or above
        its deserved share (Volcano's proportion plugin; Kueue's LessThanOrEqualToFinalShare), else queues
        take the same GPUs from each other back and forth, each eviction making the next. Counts it taken
        when it may be."""
        theirs = self.queues[victim.queue].tenant
        mine = self.ledger.chain[job_queue]
        # Keyed by queue name, or ("tenant", name): what each holds once the victims chosen so far are gone.
        keys: list[str | tuple[str, str]] = [q for q in self.ledger.chain[victim.queue] if q not in mine]
        if theirs != tenant:
            keys.append(("tenant", theirs))
        held = self.held_by(victim)
        for key in keys:
            if key in borrowed:
                if not keeps_share(borrowed[key], self.ledger.deserved(key), held):
                    return False
            elif not self._keeps_share_now(key, held):
                return False
        for key in keys:
            if key not in borrowed:
                borrowed[key] = dict(self.ledger.usage_of(key))
            add_into(borrowed[key], held, -1)
        return True

    def held_by(self, gang: RunningJob) -> Mapping[str, int]:
        """What a running gang counts against: its request, with its flavors where any are defined."""
        return self.holds[gang.id] if self.holds is not None else gang.request

    def _keeps_share_now(self, key: str | tuple[str, str], held: Mapping[str, int]) -> bool:
        """Whether taking `held` leaves the queue or tenant at or above its share, at its usage as it stands: the
        heads of many queues ask it about the same gangs while that usage does not change, so the answer is kept per
        amounts object (alive all cycle, in `holds` or as a gang's request) until it does."""
        version = self.ledger.version_of(key)
        found = self._kept.get((key, id(held)))
        if found is not None and found[0] == version:
            return found[1]
        keeps = keeps_share(self.ledger.usage_of(key), self.ledger.deserved(key), held)
        self._kept[(key, id(held))] = (version, keeps)
        return keeps


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


def _few(clusters: Sequence[str]) -> str:
    """Clusters named in a waiting job's reason: up to SHOWN_REASONS of them by name, else not one. A list of every
    cluster was hundreds of names long at 1,000 clusters, and changed whenever any of them joined or left."""
    return ", ".join(sorted(clusters)) if len(clusters) <= SHOWN_REASONS else f"more than {SHOWN_REASONS}"
