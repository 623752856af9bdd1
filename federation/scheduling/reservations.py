"""Reservations: the room a waiting gang that cannot start now holds in one cluster, so smaller jobs behind it
do not starve it; and, for a job that would fit but for such room, which job holds it.

Its own holders, over the cycle's cluster table (holding room there is what makes later jobs go elsewhere); the
cycle writes the decisions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from federation.scheduling.choice import ClusterTable
from federation.scheduling.fit import ClusterView, JobView, Shape, cannot_run


class Reservations:
    """Who holds room in which cluster this cycle, in the order they took it."""

    def __init__(self, clusters: ClusterTable, views: Sequence[ClusterView]) -> None:
        self.clusters = clusters
        self.views = views
        self.holders: dict[str, list[tuple[str, str]]] = {}  # cluster -> (job, its tenant) whose room is held there
        # shape -> the table's rows of the clusters that could hold it at all, ascending (so by name): what a cluster
        # could hold does not change within a cycle, and a cycle on 1,000 clusters asked it for each of them, for
        # each head it reserved for
        self._possible: dict[Shape, np.ndarray] = {}

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
        table = self.clusters
        rows = self._possible.get(job.shape)
        if rows is None:
            rows = self._possible[job.shape] = np.array(sorted(
                table.index[view.name] for view in self.views if cannot_run(job, [view]) is None), dtype=np.intp)
        if refused:
            rows = rows[[table.names[i] not in refused for i in rows]]
        if not len(rows):
            return None
        asked = [(table.resource.get(r), a) for r, a in job.request.items() if a]
        known = [(k, a) for k, a in asked if k is not None]
        if not known:  # it asks for nothing, or only for what no cluster has: every share is 0, so the first by name
            return table.names[int(rows[0])]
        # The least share of each asked amount free (a resource no cluster has: none free), most first; of equals, the
        # first by name (rows ascend as names do).
        least = (table.free[np.ix_(rows, [k for k, _ in known])] / np.array([a for _, a in known], dtype=np.float64)
                 ).min(1)
        if len(known) < len(asked):
            least = np.minimum(least, 0.0)
        return table.names[int(rows[int(np.argmax(least))])]
