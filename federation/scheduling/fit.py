"""Does a job fit a member cluster? Judged from the cluster's labels, free resources and topology summary.

Pure. The summary says, per tier, the most of each resource free inside one HyperNode of that
tier; a gang with a hard tier limit can only fit where some tier at or under the limit has that
much free. Per-resource maxima may come from different HyperNodes, so this is a necessary
condition: the agent's trial placement is the final word, and a stale or optimistic answer comes
back as a rejection that returns the job to its queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from federation.resources import Resources, format_resources


@dataclass(frozen=True)
class TierFree:
    tier: int
    tier_name: str
    max_free: Resources


@dataclass(frozen=True)
class ClusterView:
    name: str
    labels: Mapping[str, str]
    free: Resources  # whole cluster, after work already sent to it
    tiers: Sequence[TierFree] = ()  # lowest first: tier 0 is one node, the last is the whole cluster


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    request: Resources  # the whole gang
    largest_pod: Resources = field(default_factory=dict)  # per resource, the most one pod asks for
    cluster_selector: Mapping[str, str] = field(default_factory=dict)
    mode: str = ""
    highest_tier: int = 0
    highest_tier_name: str = ""

    # Everything about the gang that decides where it fits: equal shapes fit the same clusters.
    # Made once with the view (it is asked for hundreds of thousands of times a cycle), unsorted for
    # speed: the same resources listed in another order only make a second shape.
    shape: tuple[object, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", (
            tuple(self.request.items()), tuple(self.largest_pod.items()), tuple(self.cluster_selector.items()),
            self.mode, self.highest_tier, self.highest_tier_name))


def covers(free: Mapping[str, int], request: Mapping[str, int]) -> bool:
    return all(free.get(r, 0) >= a for r, a in request.items())


def _short(resources: Mapping[str, int], request: Mapping[str, int]) -> str:
    """The resources `free` lacks for `request`, as `gpu=32/64 free`."""
    free = format_resources({r: max(resources.get(r, 0), 0) for r in request})
    want = format_resources(request)
    return ", ".join(f"{r} {free[r]}/{want[r]} free" for r in want if resources.get(r, 0) < request[r])


def check(job: JobView, cluster: ClusterView) -> str | None:
    """None when the job fits `cluster`, else why not (for the job's reason and ExplainJob)."""
    missing = {k: v for k, v in job.cluster_selector.items() if cluster.labels.get(k) != v}
    if missing:
        return "lacks label " + ",".join(f"{k}={v}" for k, v in sorted(missing.items()))
    if not covers(cluster.free, job.request):
        return "not enough free: " + _short(cluster.free, job.request)
    nodes = [t for t in cluster.tiers if t.tier == 0]
    if nodes and not covers(nodes[0].max_free, job.largest_pod):
        return "no node can hold its largest pod: " + _short(nodes[0].max_free, job.largest_pod)
    if job.mode != "hard":
        return None
    limit = job.highest_tier
    if job.highest_tier_name:
        named = [t.tier for t in cluster.tiers if t.tier_name == job.highest_tier_name]
        if not named:
            return f"has no tier named {job.highest_tier_name!r}"
        limit = named[0]
    within = [t for t in cluster.tiers if 0 < t.tier <= limit]
    if any(covers(t.max_free, job.request) for t in within):
        return None
    best = within[-1].max_free if within else {}
    return f"no HyperNode of tier {limit} or below has enough free: " + _short(best, job.request)


@dataclass(frozen=True)
class ClusterState:
    """A member cluster as ExplainJob sees it: perhaps not Ready, perhaps cordoned."""

    view: ClusterView
    ready: bool
    cordoned: bool


def explain(job: JobView, clusters: Sequence[ClusterState],
            refused: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """For each cluster, by name: None when the job fits there now, else why not."""
    out = []
    for c in sorted(clusters, key=lambda c: c.view.name):
        if not c.ready:
            why: str | None = "not Ready (its agent is not connected or has gone silent)"
        elif c.cordoned:
            why = "cordoned"
        else:
            why = (refused or {}).get(c.view.name) or check(job, c.view)
        out.append((c.view.name, why))
    return out
