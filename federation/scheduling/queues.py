"""The queue manager: every waiting job, kept in order across cycles, so a cycle's work follows what changed.

Kueue keeps each queue as a heap between cycles and looks at queue heads only. Here each queue is a sorted list
(higher priority, then earlier submission) kept up to date from the job events (`add`, `remove`), with, per
queue, the same list split by gang shape. A cycle (`Walk`) then never visits the jobs that certainly wait: equal
shapes get equal verdicts while nothing changes (it cannot run, a limit holds it, its shape fits nowhere this
cycle, no cluster is ready), so past the job the cycle just decided, the next one that needs deciding is the first
job, after it, of a shape whose verdict is not certain (or a job with a past outcome to follow). The jobs in
between are recorded as one `Settled` range with their shapes' verdicts, and their reasons are read from it only
when someone asks (`Reasons`): the server's writes, ExplainJob, the forecast's first jobs.

Pure: no clock, no I/O. Decisions are exactly those of the from-scratch walk (`cycle.schedule`), which the
differential test checks on random event sequences.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Generic, TypeVar

from sortedcontainers import SortedKeyList

from federation.scheduling.fit import Shape

if TYPE_CHECKING:
    from federation.scheduling.model import PendingJob

# A shape's verdict in one settling walk: why it waits (None: not certain, decide it), whether it can never run
# as things stand, and the limit holding it (owner, what the owner must free, why) if one does.
Verdict = tuple[str | None, bool, tuple[str, Mapping[str, int], str] | None]
Rank = tuple[int, int]
_rank = attrgetter("rank")
T = TypeVar("T")


class QueueManager:
    """Waiting jobs by queue, in order, and by queue and shape; changed only by job events."""

    def __init__(self, jobs: Sequence[PendingJob] = ()) -> None:
        self.jobs: dict[str, PendingJob] = {}
        self.order: dict[str, SortedKeyList] = {}  # queue -> its jobs by rank
        self.shapes: dict[str, dict[Shape, SortedKeyList]] = {}  # queue -> shape -> its jobs of that shape by rank
        # queue -> shape -> its last job of that shape: a walk asks for it tens of thousands of times a cycle, and a
        # sorted list's last item is a Python call away
        self.last: dict[str, dict[Shape, PendingJob]] = {}
        self.caused: dict[str, PendingJob] = {}  # jobs back from a preemption, whose reason starts with its cause
        self.totals: dict[str, dict[str, int]] = {}  # queue -> what its jobs ask for together
        self.groups: dict[str, dict[str, PendingJob]] = {}  # HyperJob -> its waiting sub-jobs
        self.grouped: dict[str, int] = {}  # queue -> how many of its jobs are HyperJobs' sub-jobs (none: absent)
        self.extend(jobs)

    def __len__(self) -> int:
        return len(self.jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.jobs

    def add(self, job: PendingJob) -> None:
        """A job waits (or waits again: a job already held is replaced, e.g. its priority changed)."""
        if job.id in self.jobs:
            self.remove(job.id)
        self.jobs[job.id] = job
        self.order.setdefault(job.queue, SortedKeyList(key=_rank)).add(job)
        self.shapes.setdefault(job.queue, {}).setdefault(job.view.shape, SortedKeyList(key=_rank)).add(job)
        last = self.last.setdefault(job.queue, {})
        if job.view.shape not in last or last[job.view.shape].rank < job.rank:
            last[job.view.shape] = job
        if job.cause:
            self.caused[job.id] = job
        if job.view.group is not None:
            self.groups.setdefault(job.view.group.id, {})[job.id] = job
            self.grouped[job.queue] = self.grouped.get(job.queue, 0) + 1
        total = self.totals.setdefault(job.queue, {})
        for r, a in job.view.request.items():
            total[r] = total.get(r, 0) + a

    def extend(self, jobs: Iterable[PendingJob]) -> None:
        """Many jobs at once (a new leader's load): each list sorted once, not grown one job at a time."""
        fresh: dict[str, list[PendingJob]] = {}
        for job in {job.id: job for job in jobs}.values():  # a job given twice: the later one, as `add` would
            if job.id in self.jobs or job.queue in self.order:
                self.add(job)
            else:
                self.jobs[job.id] = job
                fresh.setdefault(job.queue, []).append(job)
        for queue, listed in fresh.items():
            self.order[queue] = SortedKeyList(listed, key=_rank)
            by_shape: dict[Shape, list[PendingJob]] = {}
            total = self.totals[queue] = {}
            for job in listed:
                by_shape.setdefault(job.view.shape, []).append(job)
                if job.cause:
                    self.caused[job.id] = job
                if job.view.group is not None:
                    self.groups.setdefault(job.view.group.id, {})[job.id] = job
                    self.grouped[queue] = self.grouped.get(queue, 0) + 1
                for r, a in job.view.request.items():
                    total[r] = total.get(r, 0) + a
            self.shapes[queue] = {shape: SortedKeyList(same, key=_rank) for shape, same in by_shape.items()}
            self.last[queue] = {shape: same[-1] for shape, same in self.shapes[queue].items()}

    def remove(self, job_id: str) -> PendingJob | None:
        """A job no longer waits (dispatched, cancelled, gone): the job, or None if it was not here."""
        job = self.jobs.pop(job_id, None)
        if job is None:
            return None
        self.caused.pop(job_id, None)
        if job.view.group is not None:
            siblings = self.groups[job.view.group.id]
            del siblings[job_id]
            if not siblings:
                del self.groups[job.view.group.id]
            self.grouped[job.queue] -= 1
            if not self.grouped[job.queue]:
                del self.grouped[job.queue]
        order = self.order[job.queue]
        order.remove(job)
        shapes = self.shapes[job.queue]
        same = shapes[job.view.shape]
        same.remove(job)
        if not same:
            del shapes[job.view.shape], self.last[job.queue][job.view.shape]
        elif self.last[job.queue][job.view.shape] is job:
            self.last[job.queue][job.view.shape] = same[-1]
        if not order:
            del self.order[job.queue], self.shapes[job.queue], self.last[job.queue]
        total = self.totals[job.queue]
        for r, a in job.view.request.items():
            total[r] -= a
            if not total[r]:
                del total[r]  # as a sum over the jobs left would have it
        if not total:
            del self.totals[job.queue]
        return job

    def queues(self) -> list[str]:
        """Queues with waiting jobs, by name."""
        return sorted(self.order)

    def count(self, queue: str) -> int:
        order = self.order.get(queue)
        return len(order) if order is not None else 0

    def requested(self, queue: str) -> Mapping[str, int]:
        return self.totals.get(queue, {})

    def demand(self, queue: str) -> Iterator[tuple[PendingJob, int]]:
        """One job of each shape waiting in the queue, and how many of that shape wait: what shares count."""
        for same in self.shapes.get(queue, {}).values():
            yield same[0], len(same)


@dataclass(frozen=True)
class Settled:
    """Jobs of one queue that certainly wait, from `lo` up to `hi` (ranks; None: to its end), as one walk found
    them: their reason is their shape's verdict, or `reason` for all of them (a closed queue)."""
    queue: str
    lo: tuple[int, int]
    hi: tuple[int, int] | None
    verdicts: Mapping[Shape, Verdict]
    reason: str | None = None

    def verdict(self, job: PendingJob) -> Verdict:
        if self.reason is not None:
            return self.reason, False, None
        return self.verdicts[job.view.shape]

    def whys(self) -> Mapping[Shape, str] | str:
        """The reasons it gives, per shape (or one for all)."""
        if self.reason is not None:
            return self.reason
        return {shape: v[0] for shape, v in self.verdicts.items() if v[0] is not None}

    def why(self, shape: Shape) -> str | None:
        """The reason the range gives jobs of `shape` (None: it holds none of them)."""
        if self.reason is not None:
            return self.reason
        found = self.verdicts.get(shape)
        return None if found is None else found[0]

    def verdicts_given(self) -> Iterable[Verdict]:
        return ((self.reason, False, None),) if self.reason is not None else self.verdicts.values()


def _uncovered(lo: Rank, hi: Rank | None, covers: Sequence[tuple[Rank, Rank | None]]
               ) -> list[tuple[Rank, Rank | None]]:
    """The parts of [lo, hi) (None: no end) that none of `covers`' intervals holds."""
    parts: list[tuple[Rank, Rank | None]] = [(lo, hi)]
    for c_lo, c_hi in covers:
        cut = []
        for p_lo, p_hi in parts:
            if (c_hi is not None and c_hi <= p_lo) or (p_hi is not None and p_hi <= c_lo):
                cut.append((p_lo, p_hi))
                continue
            if p_lo < c_lo:
                cut.append((p_lo, c_lo))
            if c_hi is not None and (p_hi is None or c_hi < p_hi):
                cut.append((c_hi, p_hi))
        parts = cut
    return parts


class Walk:
    """One cycle's pass over the queue manager: a cursor per queue, and the ranges it settled. The manager must not
    change while the walk and the decisions read from it are in use (the server holds both inside one cycle)."""

    def __init__(self, manager: QueueManager) -> None:
        self.manager = manager
        self.owed: set[str] = set()  # decided before the walk (room was made for them): skipped by it
        self.cursor: dict[str, int] = dict.fromkeys(manager.order, 0)
        # queue -> indices of its jobs with a past cycle's outcome to follow (never settled with others), in order
        self.stops: dict[str, list[int]] = {}
        self.log: list[str | Settled] = []  # in walk order: a job decided on its own, or a range settled
        self.settled: dict[str, list[Settled]] = {}  # queue -> its ranges, in rank order
        # queue -> (its cursor, the job there): asked for at each push and pop of the queue, while the cursor stays
        self._heads: dict[str, tuple[int, PendingJob | None]] = {}

    def begin(self, remembered: Iterable[str], owed: set[str]) -> None:
        """Before the walk: the jobs with a past cycle's outcome to follow, and those of them decided first."""
        self.owed = owed
        for job_id in remembered:
            job = self.manager.jobs.get(job_id)
            if job is not None and job_id not in owed:
                self.stops.setdefault(job.queue, []).append(self.manager.order[job.queue].bisect_key_left(job.rank))
        for stops in self.stops.values():
            stops.sort()

    def head(self, queue: str) -> PendingJob | None:
        i = self.cursor[queue]
        known = self._heads.get(queue)
        if known is not None and known[0] == i:
            return known[1]
        order = self.manager.order[queue]
        n = len(order)
        job = order[i] if i < n else None
        while job is not None and job.id in self.owed:
            i += 1
            job = order[i] if i < n else None
        self.cursor[queue] = i
        self._heads[queue] = (i, job)
        return job

    def take(self, queue: str) -> None:
        self.cursor[queue] += 1

    def close(self, queue: str, reason: str) -> None:
        """Every job of the queue waits for the same reason (the queue is closed, gone, its tenant disabled)."""
        order = self.manager.order[queue]
        self._record(Settled(queue, order[0].rank, None, {}, reason))
        self.cursor[queue] = len(order)

    def settle(self, queue: str, verdict: Callable[[PendingJob], Verdict],
               known: Mapping[Shape, Verdict]) -> None:
        """Move the queue's cursor past every job that certainly waits, recording them as one range. `known`: the
        verdicts `verdict` already gave by shape (for jobs of no HyperJob), read before it is asked."""
        order, i = self.manager.order[queue], self.cursor[queue]
        n = len(order)  # (a sorted list's length, and each item, is a Python call away: each read once here)
        if i >= n:
            return
        job = order[i]
        start = job.rank
        stops = self.stops.get(queue, ())
        k = bisect.bisect_left(stops, i)
        stop = order[stops[k]].rank if k < len(stops) else None
        verdicts: dict[Shape, Verdict] = {}
        j, owed = i, self.owed
        while job.id in owed:
            j += 1
            if j == n:
                job = None
                break
            job = order[j]
        if job is not None and (stop is None or job.rank < stop):
            # The next job first, on its own: when it needs deciding (most of a cycle that places much) nothing
            # is settled, and each shape's first job need not be looked for.
            found = verdict(job)
            if found[0] is None:
                return
            verdicts[job.view.shape] = found
        # Every shape with jobs left past the cursor gets its verdict (any of its jobs will do); only the shapes
        # that need deciding are looked for, and the first of their jobs ends the range. In a queue whose every
        # shape certainly waits (most queues, most cycles, in a full federation) nothing is looked for at all.
        if queue in self.manager.grouped:
            verdicts = self._verdicts(queue, start, verdicts, verdict, known)
        else:
            # No HyperJob's sub-job waits here: each shape's verdict is the one kept, or its last job's, asked for; a
            # lookup per shape in C, not a Python step (a settle per queue visited, 35 shapes each). A shape whose
            # jobs are all behind the cursor gets one too, which no job of the range reads.
            last = self.manager.last[queue]
            for shape in last.keys() - known.keys() - verdicts.keys():
                verdicts[shape] = verdict(last[shape])
            kept = {**known, **verdicts} if verdicts else known
            verdicts = dict(zip(last, map(kept.__getitem__, last), strict=True))
        shapes = self.manager.shapes[queue]
        for shape in [shape for shape, found in verdicts.items() if found[0] is None]:
            same = shapes[shape]
            first = self._first(same, start)
            if first is not None and (stop is None or first.rank < stop):
                stop = first.rank
        end = n if stop is None else order.bisect_key_left(stop)
        if end > i:
            self._record(Settled(queue, start, stop, verdicts))
            self.cursor[queue] = end

    def _verdicts(self, queue: str, start: Rank, verdicts: dict[Shape, Verdict],
                  verdict: Callable[[PendingJob], Verdict], known: Mapping[Shape, Verdict]) -> dict[Shape, Verdict]:
        """The verdict of each shape with jobs from `start` on, shape by shape, as the cycle from scratch gives it:
        that of the shape's first job there. A HyperJob's sub-job is never settled with its shape, so one first of
        its shape stops the range; one after a job of its shape that waits takes that job's verdict."""
        for shape, same in self.manager.shapes[queue].items():
            if shape in verdicts:
                continue
            first = self._first(same, start)
            if first is None:
                continue
            found = known.get(shape) if first.view.group is None else None
            verdicts[shape] = found if found is not None else verdict(first)
        return verdicts

    def _first(self, same: SortedKeyList, start: Rank) -> PendingJob | None:
        """The first of these jobs (one queue's of one shape) from `start` on that the walk has not decided first."""
        j = same.bisect_key_left(start)
        while j < len(same) and same[j].id in self.owed:
            j += 1
        return same[j] if j < len(same) else None

    def _record(self, settled: Settled) -> None:
        self.log.append(settled)
        self.settled.setdefault(settled.queue, []).append(settled)

    def decided(self, job_id: str) -> None:
        """A job decided on its own: its place in the walk's order."""
        self.log.append(job_id)

    def find(self, job: PendingJob) -> Settled | None:
        """The range that settled the job, if one did."""
        ranges = self.settled.get(job.queue)
        if not ranges:
            return None
        k = bisect.bisect_right(ranges, job.rank, key=attrgetter("lo")) - 1
        if k < 0:
            return None
        found = ranges[k]
        return found if found.hi is None or job.rank < found.hi else None

    def members(self, settled: Settled) -> Iterator[PendingJob]:
        order = self.manager.order[settled.queue]
        hi = settled.hi
        for job in order.irange_key(settled.lo, hi, inclusive=(True, False)) if hi is not None \
                else order.irange_key(settled.lo):
            if job.id not in self.owed:
                yield job


class _Lazy(Generic[T]):
    """What a walk says of each waiting job, one field of its verdict, read on demand: the jobs decided on their
    own are held as given; a settled job's is read from its range."""

    def __init__(self, walk: Walk, field: Callable[[PendingJob | None, Verdict], T | None]) -> None:
        self.walk = walk
        self.field = field
        self.explicit: dict[str, T] = {}

    def _settled(self, job_id: str) -> T | None:
        job = self.walk.manager.jobs.get(job_id)
        if job is None or job_id in self.walk.owed:
            return None
        found = self.walk.find(job)
        return None if found is None else self.field(job, found.verdict(job))

    def _value(self, job_id: str) -> T | None:
        found = self.explicit.get(job_id)
        return found if found is not None else self._settled(job_id)

    def _get(self, job_id: str) -> T:
        found = self._value(job_id)
        if found is None:
            raise KeyError(job_id)
        return found

    def __contains__(self, job_id: object) -> bool:
        return isinstance(job_id, str) and (job_id in self.explicit or self._settled(job_id) is not None)

    def __iter__(self) -> Iterator[str]:
        return (job_id for job_id, _ in self._pairs())

    def __len__(self) -> int:
        return sum(1 for _ in self._pairs())

    def _pairs(self) -> Iterator[tuple[str, T]]:
        """Every job with a value, and the value, in the walk's order: one pass over its log."""
        for entry in self.walk.log:
            if isinstance(entry, str):
                found = self.explicit.get(entry)
                if found is not None:
                    yield entry, found
            elif any(self.field(None, v) is not None for v in entry.verdicts_given()):
                for job in self.walk.members(entry):  # a range whose verdicts say nothing of this field is skipped
                    value = self.field(job, entry.verdict(job))
                    if value is not None:
                        yield job.id, value


class _Items(ItemsView):
    """A lazy mapping's items in one pass, not one look-up per key."""

    def __init__(self, mapping: _Lazy) -> None:
        super().__init__(mapping)
        self.lazy = mapping

    def __iter__(self) -> Iterator:
        return self.lazy._pairs()


class _LazyMap(_Lazy[T], MutableMapping[str, T]):
    """A lazy field as the mapping `Decisions` holds; what the cycle sets is held as given, nothing is removed."""

    def items(self) -> _Items:  # type: ignore[override]
        return _Items(self)

    def __getitem__(self, job_id: str) -> T:
        return self._get(job_id)

    def __setitem__(self, job_id: str, value: T) -> None:
        self.explicit[job_id] = value

    def __delitem__(self, job_id: str) -> None:
        raise TypeError("a walk's verdicts are not taken back")

    # The lazy field's own, not Mapping's (which reads every value, or wants them listed).
    __contains__ = _Lazy.__contains__
    __iter__ = _Lazy.__iter__
    __len__ = _Lazy.__len__


class Reasons(_LazyMap[str]):
    """Waiting job -> why it waits, in the order the walk met them; a job back from a preemption has its cause
    first. Only what is asked for is worked out."""

    def __init__(self, walk: Walk) -> None:
        super().__init__(walk, lambda job, v: v[0])

    def _pairs(self) -> Iterator[tuple[str, str]]:
        caused = self.walk.manager.caused
        for job_id, why in super()._pairs():
            job = caused.get(job_id)
            yield job_id, f"{job.cause}; {why}" if job is not None else why

    def changed_since(self, before: Mapping[str, Sequence[Settled]] | None, touched: Iterable[str]
                      ) -> dict[str, str]:
        """The reasons that may differ from those a walk `before` gave (and were written), at a cost that follows
        change: jobs decided on their own, jobs `touched` since (an event, or decided on their own before), and
        the jobs of each range not covered by a range of `before` giving their shape the same reason. Without
        `before` (a first cycle, a new leader), every reason."""
        if before is None:
            return dict(self.items())
        out = {job_id: self[job_id] for job_id in self.explicit}
        caused = self.walk.manager.caused
        for job_id in touched:  # (thousands a cycle: each looked up once)
            why = self._value(job_id)
            if why is not None:
                job = caused.get(job_id)
                out[job_id] = f"{job.cause}; {why}" if job is not None else why
        for queue, ranges in self.walk.settled.items():
            shapes = self.walk.manager.shapes[queue]
            old = before.get(queue, ())
            for now in ranges:
                # Most of a range is where the same range was last cycle (a queue's tail): nothing to look at.
                alike = [p for p in old if p.whys() == now.whys()]
                rest = _uncovered(now.lo, now.hi, [(p.lo, p.hi) for p in alike])
                if not rest:
                    continue
                others = [p for p in old if p not in alike]
                for shape, same in shapes.items():
                    why = now.why(shape)
                    if why is None:
                        continue
                    for part_lo, part_hi in rest:
                        for lo, hi in _uncovered(part_lo, part_hi,
                                                 [(p.lo, p.hi) for p in others if p.why(shape) == why]):
                            for job in same.irange_key(lo, hi, inclusive=(True, False)) if hi is not None \
                                    else same.irange_key(lo):
                                if job.id not in self.walk.owed:
                                    cause = caused.get(job.id)
                                    out[job.id] = f"{cause.cause}; {why}" if cause is not None else why
        return out

    def __getitem__(self, job_id: str) -> str:
        why = self._get(job_id)
        job = self.walk.manager.caused.get(job_id)
        return f"{job.cause}; {why}" if job is not None else why

    def __setitem__(self, job_id: str, why: str) -> None:
        if job_id not in self.explicit:
            self.walk.decided(job_id)
        self.explicit[job_id] = why


class Limits(_LazyMap[tuple[str, Mapping[str, int], str]]):
    """Waiting job -> the limit holding it, as `Decisions.limited`."""

    def __init__(self, walk: Walk) -> None:
        super().__init__(walk, lambda job, v: v[2])


class Impossible(_Lazy[bool]):
    """Waiting jobs that cannot run as things stand, as `Decisions.cannot_run` (a set)."""

    def __init__(self, walk: Walk) -> None:
        super().__init__(walk, lambda job, v: True if v[1] else None)

    def add(self, job_id: str) -> None:
        self.explicit[job_id] = True
