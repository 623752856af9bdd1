"""The running gangs as a cycle reads them, kept from one cycle to the next by the edge that learns when a gang
starts or ends.

Every cycle needs what runs summed per queue, the preemptible gangs grouped by cluster and the clusters of each
HyperJob's sub-jobs: three passes over every running gang, about a tenth of a steady cycle at 1,000 clusters (145,000
gangs) where the cycle's own work is a few thousand decisions. Kept here as gangs come and go (as Kueue's cache keeps
its admitted workloads' usage), they cost what changed. A snapshot holding a plain list of gangs has it read into one
at the start of its cycle (`Listed`, by the code every cycle ran before they were kept): the cycle from scratch,
which the differential tests hold a kept one to.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol

from federation.scheduling import native
from federation.scheduling.model import RunningJob, summed_by


class Gangs(Collection[RunningJob], Protocol):
    """The running gangs as a cycle reads them: kept across cycles (`Running`) or read afresh (`Listed`)."""

    store: Any  # the compiled search's copy of the preemptible gangs (native.compiled.GangStore), or None

    def get(self, gang_id: str) -> RunningJob | None: ...
    def usage(self) -> Mapping[str, Mapping[str, int]]: ...
    def preemptible(self) -> dict[str, list[RunningJob]]: ...
    def clusters_of(self, hyperjob: str) -> list[str]: ...
    def lowest_preemptible(self, queue: str) -> int | None: ...


def read(gangs: Collection[RunningJob]) -> Gangs:
    """A snapshot's gangs as its cycle reads them: kept ones as they are, a plain list read afresh."""
    return gangs if isinstance(gangs, Running) else Listed(gangs)


class Listed:
    """Gangs given as a plain list, read afresh each cycle: three passes over every gang (the cycle from scratch,
    and the oracle the kept ones are held to by the differential tests)."""

    def __init__(self, gangs: Iterable[RunningJob]) -> None:
        self.gangs = list(gangs)
        self.store: Any = None  # read anew each cycle: the compiled search reads the lists (with its memo)
        self._by_id: dict[str, RunningJob] | None = None
        self._groups: dict[str, list[str]] | None = None
        self._lowest: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.gangs)

    def __iter__(self) -> Iterator[RunningJob]:
        return iter(self.gangs)

    def __contains__(self, gang: object) -> bool:
        return gang in self.gangs

    def get(self, gang_id: str) -> RunningJob | None:
        if self._by_id is None:
            self._by_id = {gang.id: gang for gang in self.gangs}
        return self._by_id.get(gang_id)

    def usage(self) -> Mapping[str, Mapping[str, int]]:
        return summed_by([gang.queue for gang in self.gangs], [gang.request for gang in self.gangs])

    def preemptible(self) -> dict[str, list[RunningJob]]:
        by_cluster: dict[str, list[RunningJob]] = {}
        for gang in self.gangs:
            if gang.preemptible:
                by_cluster.setdefault(gang.cluster, []).append(gang)
        return by_cluster

    def clusters_of(self, hyperjob: str) -> list[str]:
        if self._groups is None:
            self._groups = {}
            for gang in self.gangs:
                if gang.group:
                    self._groups.setdefault(gang.group, []).append(gang.cluster)
        return list(self._groups.get(hyperjob, ()))

    def lowest_preemptible(self, queue: str) -> int | None:
        if self._lowest is None:
            self._lowest = {}
            for gang in self.gangs:
                if gang.preemptible and gang.priority < self._lowest.get(gang.queue, gang.priority + 1):
                    self._lowest[gang.queue] = gang.priority
        return self._lowest.get(queue)


class Running(Collection[RunningJob]):
    """The running gangs by id, with their sums per queue, the preemptible ones per cluster and the clusters of each
    HyperJob's sub-jobs kept as gangs are added and discarded. A cycle reads it and never changes it: the edge changes
    it between cycles, never while one runs."""

    def __init__(self, gangs: Iterable[RunningJob] = ()) -> None:
        self._gangs: dict[str, RunningJob] = {}
        self._usage: dict[str, dict[str, int]] = {}  # queue -> what its gangs request together
        # queue -> resource -> how many of its gangs name it: a sum keeps a resource some gang names, even at 0 (as
        # adding the gangs up one by one would), and drops it once none does
        self._naming: dict[str, dict[str, int]] = {}
        self._count: dict[str, int] = {}  # queue -> its gangs (one whose gangs ask for nothing still has a sum)
        self._preemptible: dict[str, dict[str, RunningJob]] = {}  # cluster -> its preemptible gangs by id
        # cluster -> those gangs as a list, made when first asked for after the cluster's last change (a list handed
        # out is never changed: a new one is made)
        self._listed: dict[str, list[RunningJob]] = {}
        self._groups: dict[str, dict[str, str]] = {}  # HyperJob -> its running sub-jobs' gang ids -> their clusters
        self._priorities: dict[str, dict[int, int]] = {}  # queue -> priority -> its preemptible gangs of it
        # The preemptible gangs again, as the compiled victim search reads them (native.compiled.GangStore): read once
        # when they start, so that a cycle's search is built from arrays, not from 145,000 objects looked up one by one
        store = getattr(native.compiled, "GangStore", None)  # None too in a build of native/ from before it
        self.store: Any = store() if store is not None else None
        for gang in gangs:
            self.add(gang)

    def __len__(self) -> int:
        return len(self._gangs)

    def __iter__(self) -> Iterator[RunningJob]:
        return iter(self._gangs.values())

    def __contains__(self, gang: object) -> bool:
        return isinstance(gang, RunningJob) and self._gangs.get(gang.id) is gang

    def get(self, gang_id: str) -> RunningJob | None:
        return self._gangs.get(gang_id)

    def add(self, gang: RunningJob) -> None:
        """A gang started (or changed: the one of its id before it is discarded first)."""
        if gang.id in self._gangs:
            self.discard(gang.id)
        self._gangs[gang.id] = gang
        usage = self._usage.setdefault(gang.queue, {})
        naming = self._naming.setdefault(gang.queue, {})
        for r, a in gang.request.items():
            usage[r] = usage.get(r, 0) + a
            naming[r] = naming.get(r, 0) + 1
        self._count[gang.queue] = self._count.get(gang.queue, 0) + 1
        if gang.preemptible:
            self._preemptible.setdefault(gang.cluster, {})[gang.id] = gang
            self._listed.pop(gang.cluster, None)
            priorities = self._priorities.setdefault(gang.queue, {})
            priorities[gang.priority] = priorities.get(gang.priority, 0) + 1
            if self.store is not None:
                self.store.add(gang, gang.cluster)
        if gang.group:
            self._groups.setdefault(gang.group, {})[gang.id] = gang.cluster

    def discard(self, gang_id: str) -> None:
        """A gang ended, was preempted or left its cluster; nothing when it is not here."""
        gang = self._gangs.pop(gang_id, None)
        if gang is None:
            return
        usage, naming = self._usage[gang.queue], self._naming[gang.queue]
        for r, a in gang.request.items():
            if naming[r] == 1:
                del naming[r], usage[r]
            else:
                naming[r] -= 1
                usage[r] -= a
        self._count[gang.queue] -= 1
        if not self._count[gang.queue]:
            del self._usage[gang.queue], self._naming[gang.queue], self._count[gang.queue]
        if gang.preemptible:
            there = self._preemptible[gang.cluster]
            del there[gang_id]
            if not there:
                del self._preemptible[gang.cluster]
            self._listed.pop(gang.cluster, None)
            priorities = self._priorities[gang.queue]
            if priorities[gang.priority] == 1:
                del priorities[gang.priority]
                if not priorities:
                    del self._priorities[gang.queue]
            else:
                priorities[gang.priority] -= 1
            if self.store is not None:
                self.store.discard(gang_id, gang.cluster)
        if gang.group:
            sub_jobs = self._groups[gang.group]
            del sub_jobs[gang_id]
            if not sub_jobs:
                del self._groups[gang.group]

    def usage(self) -> Mapping[str, Mapping[str, int]]:
        """Per queue with gangs running, what they request together (not to be changed)."""
        return self._usage

    def preemptible(self) -> dict[str, list[RunningJob]]:
        """Per cluster with any, its preemptible gangs (in the order they were added; victims are sorted by whoever
        searches them)."""
        listed = self._listed
        for cluster, gangs in self._preemptible.items():
            if cluster not in listed:
                listed[cluster] = list(gangs.values())
        return dict(listed)

    def clusters_of(self, hyperjob: str) -> list[str]:
        """The clusters of the HyperJob's running sub-jobs, one per sub-job."""
        return list(self._groups.get(hyperjob, {}).values())

    def lowest_preemptible(self, queue: str) -> int | None:
        """The lowest priority of the queue's preemptible gangs (None: it runs none)."""
        priorities = self._priorities.get(queue)
        return min(priorities) if priorities else None
