"""Reservations: the room a waiting gang that cannot start now holds in one cluster, so smaller jobs behind it
do not starve it; and, for a job that would fit but for such room, which job holds it.

Its own holders, over the cycle's cluster table (holding room there is what makes later jobs go elsewhere); the
cycle writes the decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from federation.scheduling.choice import ClusterTable
from federation.scheduling.fit import ClusterView, JobView, cannot_run


class Reservations:
    """Who holds room in which cluster this cycle, in the order they took it."""

    def __init__(self, clusters: ClusterTable, views: Sequence[ClusterView]) -> None:
        self.clusters = clusters
        self.views = views
        self.holders: dict[str, list[tuple[str, str]]] = {}  # cluster -> (job, its tenant) whose room is held there

    def hold(self, job: JobView, cluster: str, tenant: str) -> None:
        """Keep the room `job` needs in `cluster` for it: later jobs go elsewhere or into what is left."""
        self.clusters.hold(job, cluster)
        self.holders.setdefault(cluster, []).append((job.id, tenant))

    def behind(self, job: JobView, tenant: str) -> str | None:
        """When the job (of `tenant`) would fit a cluster but for the room reserved there, which job holds it
        (named only to its own tenant)."""
        if not self.holders:
            return None
        cluster = self.clusters.fits_without_reservations(job)
        if cluster is None:
            return None
        holder, theirs = self.holders[cluster][0]
        who = holder if theirs == tenant else "a job of another tenant"
        return f"behind {who}, which holds the room it needs in cluster {cluster}"

    def cluster_for(self, job: JobView, refused: Mapping[str, str]) -> str | None:
        """Where the job fits best once what runs there ends: among clusters that could hold it at all and
        have not refused it, the one with most of its request free now."""
        options = []
        for view in self.views:
            if view.name in refused or cannot_run(job, [view]) is not None:
                continue
            name = view.name
            options.append((-min((self.clusters.free_of(name, r) / a for r, a in job.request.items() if a),
                                 default=0), name))
        return min(options)[1] if options else None
