"""Reservations: the room a waiting gang that cannot start now holds in one cluster, so smaller jobs behind it
do not starve it; and, for a job that would fit but for such room, which job holds it.

A part of the cycle (`cycle._Cycle` is built of it), sharing its cluster table and decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from federation.scheduling.fit import JobView, cannot_run

if TYPE_CHECKING:
    from federation.scheduling.choice import ClusterTable
    from federation.scheduling.model import Decisions, PendingJob, QueueInfo, Snapshot


class Reservations:
    """The cycle's reservations (a mixin of `cycle._Cycle`, whose state it shares)."""

    snap: Snapshot
    queues: dict[str, QueueInfo]
    clusters: ClusterTable
    out: Decisions
    holders: dict[str, list[tuple[str, str]]]

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
