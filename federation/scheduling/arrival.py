"""Admission on arrival: a job that fits at once is dispatched when it is submitted, not a cycle later.

A full cycle over a large backlog takes a good part of a second, and the loop rests as long again after it, so a
job that fits an idle cluster used to wait for the cycle under way, the rest, and then its own cycle. Kueue pops
queue heads continuously; here, between two cycles, each newly submitted job is judged against what the last
cycle left (`Arrivals`): its cluster table after every dispatch and reservation it made, its usage, its deserved
shares. A job goes at once only when the next cycle would have no better use for the room it takes:

- it is its queue's head, is no HyperJob's sub-job, and its queue is open;
- no limit holds it, and with it started its queue, each parent and its tenant stay within their deserved
  shares, worked out again with what waits now (its demand included, as the next cycle will), so its turn
  comes before every head that is past a share, and reclaim never takes it back;
- it fits the room that cycle left: every waiting head had its turn at that room and did not take it (or a
  limit held it), and room held for a gang (reservations, room being made by preemption) stays held. Room freed
  since (gangs that ended) is not offered here: waiting heads get their turn at it in the next cycle first;
- the last cycle was not cut short by the burst (heads it did not reach had no turn), and no gang of the job's
  tenant was preempted by it (their usage is counted gone before they are);
- its cluster may still be sent jobs: one cordoned, gone silent or found with a problem since that cycle is
  passed over (a job submitted after a cordon must never reach the cluster).

Everything else, and every job this path passes over, waits for the next full cycle, which keeps reclaim,
reservations, provisioning, HyperJobs and moves.

While the next cycle decides (it walks the backlog, which must not change meanwhile), jobs submitted since its
snapshot are judged the same way against what the last cycle left, with the backlog as that snapshot found it
(`Arriving`): a job whose queue had jobs waiting then is not its head, and waits. That cycle did not know them, so
once it has decided, they are counted into what it left (`Arrivals.took`) before its decisions are written; if one
no longer fits where it went, or its queue or tenant would then be past a deserved share, that cycle's decisions
are dropped (none written: nothing is sent twice) and the next cycle, which sees them, decides again.
Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from federation.scheduling.fairshare import EPSILON
from federation.scheduling.fit import check
from federation.scheduling.model import add_into

if TYPE_CHECKING:
    from collections.abc import Iterator

    from federation.scheduling.backlog import Demand
    from federation.scheduling.cycle import _Cycle
    from federation.scheduling.model import PendingJob
    from federation.scheduling.queues import QueueManager


ON_ARRIVAL = "on arrival"  # what a job's dispatch reason says of a job sent this way


@dataclass(frozen=True)
class Admitted:
    """Where a job goes on arrival, what to say of the choice, and the admission checks it passes there."""
    cluster: str
    note: str
    checks: tuple[str, ...]


class Arriving:
    """What waits while a cycle walks the backlog: the backlog as its snapshot found it (unchanged until the cycle has
    decided) and the jobs submitted since. A queue with jobs waiting in the backlog has its head there, whatever the
    priority of one submitted since: that one waits for the cycle after."""

    def __init__(self, backlog: QueueManager, jobs: Sequence[PendingJob]) -> None:
        self.backlog = backlog
        self.arrived: dict[str, list[PendingJob]] = {}
        for job in sorted(jobs, key=lambda job: job.rank):  # in its queue's order
            self.arrived.setdefault(job.queue, []).append(job)
        self.order: Mapping[str, Sequence[PendingJob]] = {
            queue: backlog.order.get(queue) or arrived for queue, arrived in self.arrived.items()}

    def requested(self, queue: str) -> Mapping[str, int]:
        total = dict(self.backlog.requested(queue))
        for job in self.arrived.get(queue, ()):
            add_into(total, job.view.request)
        return total

    def demand(self, queue: str) -> Iterator[tuple[PendingJob, int]]:
        yield from self.backlog.demand(queue)
        for job in self.arrived.get(queue, ()):
            yield job, 1


class Arrivals:
    """What one cycle left, taken by the jobs admitted on arrival until the next cycle starts."""

    def __init__(self, cycle: _Cycle) -> None:
        self.cycle = cycle
        # Tenants whose preempted gangs the cycle counted gone while they still hold their room.
        preempted = [gang for v in cycle.out.preempt if (gang := cycle.running.get(v)) is not None]
        self.preempted_tenants = {cycle.queues[gang.queue].tenant for gang in preempted if gang.queue in cycle.queues}

    def reshare(self, backlog: Demand) -> None:
        """Deserved shares as the next cycle will have them: what waits now (`backlog`, the arrivals among it)
        beside what runs, the last cycle's dispatches and the jobs admitted on arrival since."""
        self.cycle.compute_shares(backlog)

    def admit_all(self, backlog: QueueManager | Arriving, jobs: Sequence[PendingJob], usable: Collection[str]
                  ) -> dict[str, Admitted | str]:
        """Each job in turn, shares worked out again first with what waits now (`backlog`, which holds them): where
        it goes, or why it waits. A job admitted here no longer waits, so the one after it in its queue is the
        queue's head for the next. `usable`: the clusters jobs may be sent to now (read after the jobs were)."""
        self.reshare(backlog)
        out: dict[str, Admitted | str] = {}
        sent: set[str] = set()
        gone = {c: "cordoned, not ready or with a problem since the last cycle" for c in self.cycle.clusters.names
                if c not in usable}
        for job in jobs:
            head = next((j for j in backlog.order[job.queue] if j.id not in sent), None) is job
            found = out[job.id] = self.admit(job, head, gone)
            if isinstance(found, Admitted):
                sent.add(job.id)
        return out

    def admit(self, job: PendingJob, head: bool, gone: Mapping[str, str] | None = None) -> Admitted | str:
        """Where the job goes now, or why it waits for the next cycle. `head`: it is its queue's first waiting
        job; `gone`: clusters it may not be sent to any more, and why."""
        cycle, queue = self.cycle, job.queue
        if cycle.out.cut_short:
            return "the last cycle was cut short: heads it did not reach come first"
        if job.view.group is not None:
            return "a HyperJob's sub-jobs are decided together by a cycle"
        if not head:
            return "not its queue's head"
        if queue not in cycle.queues:
            return f"queue {queue!r} was not known to the last cycle"
        closed = cycle.closed(queue)
        if closed:
            return closed
        if cycle.queues[queue].tenant in self.preempted_tenants:
            return "gangs of its tenant preempted by the last cycle are still leaving"
        why = cycle.quotas.cannot_run(job, queue)
        if why:
            return why
        held = cycle.quotas.limit(job, queue)
        if held is not None:
            return held[2]
        tenant_share, queue_share = cycle.ledger.share_after(queue, cycle.wanted(job))
        if tenant_share > 1 + EPSILON or queue_share > 1 + EPSILON:
            return "past a deserved share once started: its turn is the cycle's"
        cluster, reasons = cycle.choose(job, queue, gone)
        if cluster is None:
            return "no cluster has room the last cycle left: " + "; ".join(reasons[:3])
        held = cycle.held(cluster, job.view.request)
        if cycle.flavors and max(cycle.ledger.share_after(queue, held)) > 1 + EPSILON:
            # judged above as demand; what it holds is the flavor of the cluster chosen
            return "past a deserved share of the flavor it would hold there: its turn is the cycle's"
        passed_over = cycle.clusters.passed_over(job.view, cluster)
        note = ON_ARRIVAL + (f"; {passed_over}" if passed_over else "")
        checks = cycle.checks(queue, cluster)
        self._take(job, cluster, held)
        return Admitted(cluster, note, checks)

    def took(self, admitted: Sequence[tuple[PendingJob, str]], backlog: Demand) -> bool:
        """Count in jobs admitted on arrival while this cycle decided (judged against the cycle before, which this
        one did not see), as if admitted after it; `backlog`: what waits now. False when one of them no longer fits
        the room this cycle left in its cluster, or its queue or tenant is past a deserved share with it: this
        cycle's decisions then must not be written."""
        cycle = self.cycle
        for job, cluster in admitted:
            if cluster not in cycle.clusters.index or check(job.view, cycle.clusters.view(cluster)) is not None:
                return False
            self._take(job, cluster, cycle.held(cluster, job.view.request))
        self.reshare(backlog)
        return all(max(cycle.ledger.share_after(job.queue, {})) <= 1 + EPSILON for job, _ in admitted)

    def _take(self, job: PendingJob, cluster: str, held: Mapping[str, int]) -> None:
        """Count the job as sent to `cluster`: its queue's usage and the room it takes there."""
        self.cycle.ledger.use(job.queue, held)
        self.cycle.clusters.reserve(job.view, cluster)
