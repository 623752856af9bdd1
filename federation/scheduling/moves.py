"""Where a gang on degraded hardware may go: only to hardware that is better.

An agent whose gang's hardware degraded moves it inside its own cluster when healthy room there takes it. When
none does, moving it is worth its restart only if another cluster would run it on healthy hardware now: sent
back to the queue with nowhere healthy to go, it restarts on hardware as degraded as the one it left (or on the
same). So the agent keeps it running and says so, and the federation moves it (a preemption; the cluster choice
then prefers healthy hardware) the first cycle some other cluster has healthy room for it, never before. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from federation.scheduling.fit import ClusterView, JobView, check, fits_healthy


def healthier(job: JobView, clusters: Sequence[ClusterView], current: str, refused: Collection[str] = (),
              busy: Collection[str] = ()) -> str | None:
    """The first cluster by name, other than `current`, that would run the gang on healthy hardware now; None when
    none would. `refused`: clusters that refused the job; `busy`: clusters this cycle already gave work to (their
    free totals are stale until they report again)."""
    for cluster in sorted(clusters, key=lambda c: c.name):
        if cluster.name == current or cluster.name in refused or cluster.name in busy:
            continue
        if check(job, cluster) is None and fits_healthy(job, cluster):
            return cluster.name
    return None
