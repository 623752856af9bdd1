"""The waiting jobs as one cycle walks them: a cursor per queue over its jobs in order, the jobs that certainly
wait settled as the cycle finds them.

Two of them: `Lists`, every waiting job sorted into its queue each cycle and each one visited (the cycle from
scratch, kept as the oracle), and `Walked`, over the queue manager kept across cycles (`queues.py`), which visits
queue heads and each shape's first job only and leaves reasons to be read on demand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import attrgetter
from typing import Protocol

from federation.scheduling.fit import Shape
from federation.scheduling.model import Decisions, PendingJob, add_into
from federation.scheduling.queues import Impossible, Limits, QueueManager, Reasons, Verdict, Walk


class Judge(Protocol):
    """What a backlog asks the cycle when settling the jobs that certainly wait (`cycle._Cycle`)."""

    def settle(self, jobs: Sequence[PendingJob], start: int, queue: str) -> int: ...
    def judge(self, queue: str) -> tuple[Callable[[PendingJob], Verdict], Mapping[Shape, Verdict]]: ...


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
    def settle(self, queue: str, cycle: Judge) -> None: ...
    def finish(self, out: Decisions) -> None: ...
    def group(self, hyperjob: str) -> list[PendingJob]: ...


class Lists:
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
        self.groups: dict[str, list[PendingJob]] = {}
        for job in pending:
            if job.view.group is not None:
                self.groups.setdefault(job.view.group.id, []).append(job)

    def queues(self) -> list[str]:
        return sorted(self.by_queue)

    def demand(self, queue: str) -> Iterator[tuple[PendingJob, int]]:
        return ((job, 1) for job in self.by_queue.get(queue, ()))

    def requested(self, queue: str) -> Mapping[str, int]:
        total: dict[str, int] = {}
        for job in self.by_queue.get(queue, ()):
            add_into(total, job.view.request)
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

    def settle(self, queue: str, cycle: Judge) -> None:
        self.heads[queue] = cycle.settle(self.by_queue[queue], self.heads[queue], queue)

    def group(self, hyperjob: str) -> list[PendingJob]:
        """The HyperJob's waiting sub-jobs."""
        return list(self.groups.get(hyperjob, ()))

    def finish(self, out: Decisions) -> None:
        for job in self.pending:
            if job.cause and (why := out.waiting.get(job.id)) is not None:
                out.waiting[job.id] = f"{job.cause}; {why}"


class Walked:
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

    def settle(self, queue: str, cycle: Judge) -> None:
        self.walk.settle(queue, *cycle.judge(queue))

    def group(self, hyperjob: str) -> list[PendingJob]:
        return list(self.manager.groups.get(hyperjob, {}).values())

    def finish(self, out: Decisions) -> None:
        """Causes are put in front of reasons as they are read."""
