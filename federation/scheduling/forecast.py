"""When each waiting job is expected to start: a forward simulation of the plan as it stands.

Slurm answers `squeue --start` by running its backfill plan forward; nothing in the Kubernetes
batch world does. Here: every cluster's free resources over time, from what is free now and when
each running gang is expected to end (its `federation.dev/expected-duration` annotation, else what
its queue's past jobs took); then the waiting jobs in the order the cycle considered them, each
booked at the earliest time some cluster has room for it for its whole expected run, without
moving anyone booked before it (conservative backfill). The answer is an estimate, and says so:
only free totals and cluster selectors are looked at, not HyperNodes, and later arrivals, reclaim
and changing shares can all move it.

Time is a fixed grid, fine near now and coarse far out (an estimate of "about 3 days" needs no
second's precision), so the whole federation is one array and a thousand jobs cost a fraction of
a second however many gangs run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from federation.scheduling.fit import ClusterView

HORIZON = 30 * 86_400.0  # seconds: a start beyond this is reported as beyond it
GRID = np.concatenate(([0.0], np.geomspace(30.0, HORIZON, 240)))  # segment starts, seconds from now


def remaining(expected: float, ran_for: float) -> float:
    """Seconds a run expected to take `expected` still has after `ran_for`; past its expected end, half as long
    again as it has run (run times are heavy-tailed: the longer a job has run, the longer it is likely to)."""
    return expected - ran_for if ran_for < expected else ran_for / 2


@dataclass(frozen=True, slots=True)
class Holding:
    """Resources held in a cluster until `ends_in` seconds from now (a running gang, or one just sent)."""

    cluster: str
    request: Mapping[str, int]
    ends_in: float
    queue: str = ""  # whose: what ends frees room under its queue's, parents' and tenant's limits too


@dataclass(frozen=True, slots=True)
class Waiting:
    id: str
    request: Mapping[str, int]
    runs_for: float  # expected run time, seconds
    cluster_selector: Mapping[str, str] = field(default_factory=dict)
    clusters: frozenset[str] | None = None  # the only clusters it may ever start in (None: any its selector allows)
    now: frozenset[str] | None = None  # where it fits now, judged as ExplainJob judges it (None: wherever totals fit)
    not_before: float = 0.0  # seconds before it may start wherever there is room (a limit frees up only then)


@dataclass(frozen=True, slots=True)
class Start:
    seconds: float  # from now; HORIZON or more: not within the forecast
    cluster: str


def expected_starts(clusters: Sequence[ClusterView], holding: Sequence[Holding],
                    waiting: Sequence[Waiting]) -> dict[str, Start]:
    """For each waiting job that some cluster could ever hold, when and where it is expected to start.

    `clusters`: Ready clusters with what is free in them once this cycle's decisions are carried out;
    `holding`: everything that frees resources later (this cycle's dispatches included); `waiting`: in
    the order they would be served.
    """
    names = sorted(c.name for c in clusters)
    if not names:
        return {}
    index = {n: i for i, n in enumerate(names)}
    resources = sorted({r for c in clusters for r in c.free} | {r for h in holding for r in h.request}
                       | {r for w in waiting for r in w.request})
    column = {r: k for k, r in enumerate(resources)}
    by_name = {c.name: c for c in clusters}
    # free[c, t, r]: free in cluster c during grid segment t
    free = np.zeros((len(names), len(GRID), len(resources)), dtype=np.int64)
    for c in clusters:
        for r, a in c.free.items():
            free[index[c.name], :, column[r]] = a
    for h in holding:
        i = index.get(h.cluster)
        if i is not None:
            # freed from the first segment after it ends; past the horizon, in the last (beyond it)
            t = min(int(np.searchsorted(GRID, h.ends_in, side="left")), len(GRID) - 1)
            for r, a in h.request.items():
                free[i, t:, column[r]] += a
    selectors: dict[tuple[tuple[str, str], ...], np.ndarray] = {}
    ends: dict[float, np.ndarray] = {}
    out: dict[str, Start] = {}
    for job in waiting:
        if job.not_before >= HORIZON or any(r not in column for r, a in job.request.items() if a > 0):
            continue
        q = np.zeros(len(resources), dtype=np.int64)
        for r, a in job.request.items():
            if a > 0:
                q[column[r]] = a
        key = tuple(sorted(job.cluster_selector.items()))
        allowed = selectors.get(key)
        if allowed is None:
            allowed = selectors[key] = np.array(
                [all(by_name[n].labels.get(k) == v for k, v in key) for n in names], dtype=bool)
        if job.clusters is not None:
            allowed = allowed & np.array([n in job.clusters for n in names], dtype=bool)
        # A job is booked from the start of a segment to the first segment starting after it ends.
        runs_for = max(job.runs_for, 1.0)  # a run of no length would fit anywhere
        end = ends.get(runs_for)
        if end is None:
            end = ends[runs_for] = np.searchsorted(GRID, GRID + runs_for, side="left")
        bad = ~(free >= q).all(2)  # [c, t]
        bad[~allowed] = True
        before = np.concatenate((np.zeros((len(names), 1), dtype=np.int64), np.cumsum(bad, axis=1)), axis=1)
        fits = (before[:, end] - before[:, :-1]) == 0  # [c, t]: the whole run fits from segment t
        if job.now is not None:  # "now" only where the job's own explanation says it fits now
            fits[:, 0] &= np.array([n in job.now for n in names], dtype=bool)
        if job.not_before > 0:
            fits[:, :int(np.searchsorted(GRID, job.not_before, side="left"))] = False
        first = np.where(fits.any(1), fits.argmax(1), len(GRID))
        c = int(first.argmin())  # earliest; ties to the first name
        if first[c] == len(GRID):
            continue  # no cluster ever has room for it (it waits on something the forecast does not see)
        t = int(first[c])
        free[c, t:end[t], :] -= q
        out[job.id] = Start(float(GRID[t]) if t < len(GRID) - 1 else HORIZON, names[c])
    return out


def after_cycle(clusters: Sequence[ClusterView], sent: Sequence[Holding], held: Sequence[Holding],
                waiting: Sequence[Waiting]) -> dict[str, Start]:
    """`expected_starts` once a cycle's dispatches are carried out: `clusters` as the cycle read them, `sent`
    what it dispatched (off its cluster's free resources from now until it ends), `held` what ran before."""
    gone: dict[str, dict[str, int]] = {}
    for h in sent:
        into = gone.setdefault(h.cluster, {})
        for r, a in h.request.items():
            into[r] = into.get(r, 0) + a
    free = [ClusterView(c.name, c.labels, {r: a - gone.get(c.name, {}).get(r, 0) for r, a in c.free.items()})
            for c in clusters]
    return expected_starts(free, [*sent, *held], waiting)


def limit_clears(needed: Mapping[str, int], holding: Sequence[Holding]) -> float:
    """Seconds until gangs of `holding` (those counted under one limit) have ended enough to free `needed`: when a
    job held by that limit may start at the earliest; HORIZON when they never free that much."""
    freed: dict[str, int] = {}
    for h in sorted(holding, key=lambda h: h.ends_in):
        for r in needed:
            freed[r] = freed.get(r, 0) + h.request.get(r, 0)
        if all(freed[r] >= a for r, a in needed.items()):
            return h.ends_in
    return HORIZON
