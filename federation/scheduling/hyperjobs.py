"""HyperJobs in the cycle: a HyperJob's waiting sub-jobs are placed on clusters together, at least as many as it
needs at once (its minAvailable, less those already running), or none of them; counted against its queue and
tenant as one job. Each placed sub-job goes out with the `hyperjob` admission check: its cluster's agent holds its
room, and the federation commits the sub-jobs together once every one has room (`store.hyperjobs`).

The choice is greedy and deterministic: sub-jobs with the fewest clusters they may use first (then by index), each
to the cluster it fits best among those it may use (its clusterNames, less those that refused it; its HyperJob's
clusters once maxDomains of them are taken; one value of the cluster topology label, tried in name order), each
reservation seen by the next. A trial that falls short is undone whole. A HyperJob neither reserves room nor
preempts while it waits.

Its own state (the clusters each HyperJob's running sub-jobs hold, the HyperJobs decided this cycle) over the
cycle's cluster table, where it reserves room as it tries; the cycle applies what it sends (`decide`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from federation.kernel.hyperjob import WHOLE, Part
from federation.scheduling.choice import ClusterTable, summary
from federation.scheduling.fit import JobView
from federation.scheduling.flavors import Flavors
from federation.scheduling.model import NO_READY_CLUSTER, PendingJob, QueueInfo, Snapshot, add_into
from federation.scheduling.running import Gangs

if TYPE_CHECKING:
    from federation.kernel.resources import Resources
    from federation.scheduling.backlog import Backlog

SHORT_SAID = 3  # sub-jobs a waiting HyperJob's reason names


class Rules(Protocol):
    """What holds a job back whatever the room (the cycle's quotas and limits)."""

    def cannot_run(self, job: PendingJob, queue: str) -> str | None: ...
    def limit(self, job: PendingJob, queue: str) -> tuple[str, Resources, str] | None: ...
    def limited(self, queue: str) -> bool: ...


@dataclass
class Sent:
    """A placed sub-job: where it goes, and what to say of it."""
    job: PendingJob
    cluster: str
    note: str


class HyperJobs:
    """The cycle's HyperJobs: each decided once, when its first waiting sub-job comes up."""

    def __init__(self, snap: Snapshot, running: Gangs, queues: Mapping[str, QueueInfo], clusters: ClusterTable,
                 flavors: Flavors, rules: Rules) -> None:
        self.snap = snap
        self.queues = queues
        self.clusters = clusters
        self.flavors = flavors
        self.rules = rules
        self.running = running  # the clusters of each HyperJob's sub-jobs that hold room are read from it
        self.decided: dict[str, dict[str, str]] = {}  # HyperJob decided this cycle -> its sub-jobs left waiting, why

    def decide(self, job: PendingJob, queue: str, backlog: Backlog) -> tuple[list[Sent], Mapping[str, str]]:
        """For a sub-job coming up: the sub-jobs of its HyperJob to send now (only when first decided), and those
        left waiting with why."""
        part = job.view.group
        assert part is not None
        decided = self.decided.get(part.id)
        if decided is not None:
            return [], decided
        sent: list[Sent] = []
        decided = self.decided[part.id] = self._place_group(job, part, queue, backlog, sent)
        return sent, decided

    def _place_group(self, job: PendingJob, part: Part, queue: str, backlog: Backlog, sent: list[Sent]
                     ) -> dict[str, str]:
        waiting = sorted(backlog.group(part.id), key=_index)
        active = self.running.clusters_of(part.id)
        if active and part.restart == WHOLE:  # the rest are being stopped, to start again with it
            said = f"HyperJob {part.name} starts again together (its restart policy is whole): waiting for its " \
                   f"{len(active)} other sub-job(s) to stop"
            return {s.id: said for s in waiting}
        need = min(len(waiting), max(1, part.needed - len(active)))
        for sub in waiting:
            if why := self.rules.cannot_run(sub, queue):
                said = f"HyperJob {part.name} cannot run: sub-job {_index(sub)}: {why}"
                return {s.id: said for s in waiting}
        best: tuple[dict[str, str], list[tuple[PendingJob, str]]] | None = None
        for scope in self._scopes(part, active, queue):
            saved = self.clusters.save()
            chosen, short = self._try(job, waiting, active, scope, queue)
            if len(chosen) >= need:
                return self._commit(part, waiting, chosen, short, sent)
            self.clusters.restore(saved)
            if best is None or len(chosen) > len(best[0]):
                best = (chosen, short)
        short = best[1] if best is not None else [(s, NO_READY_CLUSTER) for s in waiting]
        placed = len(best[0]) if best is not None else 0
        named = "; ".join(f"sub-job {_index(s)}: {why}" for s, why in short[:SHORT_SAID])
        more = f"; and {len(short) - SHORT_SAID} more" if len(short) > SHORT_SAID else ""
        said = (f"HyperJob {part.name} waits, holding nothing: {placed} of the {need} sub-job(s) it needs together "
                f"have room; {named}{more}")
        return {s.id: said for s in waiting}

    def _scopes(self, part: Part, active: Sequence[str], queue: str) -> list[set[str]]:
        """The sets of clusters its sub-jobs may be spread over, in the order they are tried: every cluster, or,
        with a cluster topology, the clusters of each value of its label (only that of its running sub-jobs)."""
        names = self.clusters.names
        if self.flavors and self.queues[queue].flavors:
            wanted = set(self.queues[queue].flavors)
            names = [c for c in names if wanted & set(self.flavors.of.get(c, {}).values())]
        if not part.cluster_topology:
            return [set(names)]
        key = part.cluster_topology
        labels = {**self.snap.labels, **{c.name: c.labels for c in self.snap.clusters}}
        held = {labels.get(c, {}).get(key) for c in active}
        values = sorted(held) if held else sorted({v for c in names if (v := labels.get(c, {}).get(key))})
        return [{c for c in names if labels.get(c, {}).get(key) == v} for v in values if v is not None]

    def _try(self, job: PendingJob, waiting: Sequence[PendingJob], active: Sequence[str], scope: set[str],
             queue: str) -> tuple[dict[str, str], list[tuple[PendingJob, str]]]:
        """Reserve room for each sub-job in turn within `scope`: those placed (sub-job -> cluster), and why each of
        the rest was not."""
        chosen: dict[str, str] = {}
        short: list[tuple[PendingJob, str]] = []
        domains = set(active)
        total: dict[str, int] = {}
        for sub in sorted(waiting, key=lambda s: (len(self._may_use(s, scope)), _index(s))):  # most bound first
            part = sub.view.group
            assert part is not None
            allowed = _named(part, scope)
            if part.max_domains and len(domains) >= part.max_domains:
                allowed &= domains
            with_it = dict(total)
            add_into(with_it, sub.view.request)
            if self.rules.limited(queue):
                held = self.rules.limit(PendingJob(JobView(part.id, with_it), queue, job.priority, job.seq), queue)
                if held is not None:
                    short.append((sub, held[2]))
                    continue
            excluded = {c: _why_not(part, c, domains) for c in self.clusters.names if c not in allowed}
            refused: Mapping[str, str] = {**self.snap.refused.get(sub.id, {}), **excluded}
            cluster = self.clusters.best(sub.view, refused) if allowed else None
            if cluster is None:
                placed = ", ".join(str(_index(s)) for s in waiting if s.id in chosen)
                beside = f" beside sub-job(s) {placed}, placed first" if placed else ""
                short.append((sub, f"no cluster it may use fits{beside}: " + summary(
                    [r for r in self.clusters.reasons(sub.view, refused) if r.partition(":")[0] in allowed] +
                    [f"{c}: {excluded[c]}" for c in sorted(excluded)])))
                continue
            self.clusters.reserve(sub.view, cluster)
            chosen[sub.id] = cluster
            domains.add(cluster)
            total = with_it
        return chosen, short

    def _may_use(self, sub: PendingJob, scope: set[str]) -> set[str]:
        """The clusters of `scope` the sub-job may go to, as it stands: its clusterNames, less those that refused it."""
        assert sub.view.group is not None
        return _named(sub.view.group, scope) - self.snap.refused.get(sub.id, {}).keys()

    def _commit(self, part: Part, waiting: Sequence[PendingJob], chosen: Mapping[str, str],
                short: Sequence[tuple[PendingJob, str]], sent: list[Sent]) -> dict[str, str]:
        """Send the placed sub-jobs, each to be held in its cluster until all are; the rest wait, saying why."""
        spread = ", ".join(f"{_index(s)} to {chosen[s.id]}" for s in waiting if s.id in chosen)
        sent += [Sent(sub, chosen[sub.id], f"sub-job {_index(sub)} of HyperJob {part.name}: sub-jobs {spread}, each "
                                           "cluster holding its room until all have it")
                 for sub in waiting if sub.id in chosen]
        return {s.id: f"HyperJob {part.name} started {len(chosen)} sub-job(s) without it: {why}" for s, why in short}


def _index(job: PendingJob) -> int:
    return job.view.group.index if job.view.group else 0


def _named(part: Part, scope: set[str]) -> set[str]:
    """The clusters of `scope` its clusterNames let the sub-job go to."""
    return scope & set(part.clusters) if part.clusters else set(scope)


def _why_not(part: Part, cluster: str, domains: set[str]) -> str:
    if part.clusters and cluster not in part.clusters:
        return f"not among its clusterNames ({', '.join(part.clusters)})"
    if part.max_domains and len(domains) >= part.max_domains and cluster not in domains:
        return f"its HyperJob spans maxDomains {part.max_domains} cluster(s) already"
    return f"not in the same {part.cluster_topology} as its other sub-jobs" if part.cluster_topology else \
        "not a cluster its queue's flavors may use"
