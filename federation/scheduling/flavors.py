"""Resource flavors (Kueue's ResourceFlavor, Slurm's GRES types): one resource told apart by the clusters
that have it, so quotas and fair shares can say "16 H100 GPUs" and not just "16 GPUs".

Pure. A flavor is a resource plus a cluster label selector; a cluster's amount of that resource is of
the first flavor (by name) whose selector its labels match. Amounts of a flavored resource are then
counted twice: under the resource (the total, as without flavors) and under `<resource>@<flavor>`, so
guarantees, limits and deserved shares may be set and computed for either, and a queue's dominant share
is the largest over both. A waiting job counts as demand for the first flavor it could use (its queue's
preference, else any, by name); a running job for the flavor of its cluster. A queue that lists flavors
runs its jobs only on clusters of those flavors, trying them in its order. A flavor of GPUs is one of their
shares too (`resources.SHARE`), so that fractional GPUs count against a flavor's quota. Without flavors, nothing here
changes anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from federation.kernel.resources import FLAVOR, GPU, SHARE, Resources
from federation.scheduling.fit import ClusterView, JobView


@dataclass(frozen=True)
class FlavorInfo:
    name: str
    resource: str
    cluster_selector: Mapping[str, str] = field(default_factory=dict)
    admission_checks: tuple[str, ...] = ()  # what every job sent to a cluster of this flavor passes first

    @property
    def resources(self) -> tuple[str, ...]:
        """What it flavors: its resource, and GPUs' shares with GPUs."""
        return (GPU, SHARE) if self.resource == GPU else (self.resource,)


def _matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _compatible(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    return all(b.get(k, v) == v for k, v in a.items())


class Flavors:
    def __init__(self, flavors: Sequence[FlavorInfo], labels: Mapping[str, Mapping[str, str]]) -> None:
        """`labels`: every member cluster's labels (running jobs may be on clusters not Ready now)."""
        self.flavors = sorted(flavors, key=lambda f: f.name)
        self.labels = labels
        self.resources = [r for f in self.flavors for r in f.resources]
        self.of: dict[str, dict[str, str]] = {}  # cluster -> resource -> its flavor there
        for cluster, cluster_labels in labels.items():
            for f in self.flavors:
                if _matches(cluster_labels, f.cluster_selector):
                    for r in f.resources:
                        self.of.setdefault(cluster, {}).setdefault(r, f.name)

    def __bool__(self) -> bool:
        return bool(self.flavors)

    def held(self, cluster: str, request: Mapping[str, int]) -> Resources:
        """What a gang in `cluster` counts against: each resource, and its flavor there."""
        out = dict(request)
        for r, flavor in self.of.get(cluster, {}).items():
            if request.get(r):
                out[f"{r}{FLAVOR}{flavor}"] = request[r]
        return out

    def capacity(self, total: Mapping[str, int], clusters: Sequence[ClusterView]) -> Resources:
        """The federation's capacity, with each flavor's part of its resource."""
        out = dict(total)
        for c in clusters:
            for r, flavor in self.of.get(c.name, {}).items():
                key = f"{r}{FLAVOR}{flavor}"
                out[key] = out.get(key, 0) + c.capacity.get(r, 0)
        return out

    def usable(self, job: JobView, preference: Sequence[str]) -> list[str]:
        """The flavors the job could run on, in its queue's order (by name when the queue lists none)."""
        names = list(preference) or [f.name for f in self.flavors]
        wanted = {f.name for f in self.flavors if any(job.request.get(r) for r in f.resources)}
        return [name for name in names if name in wanted and any(
            _compatible(job.cluster_selector, self.labels.get(c, {})) for c, of in self.of.items()
            if name in of.values())]

    def wanted(self, job: JobView, preference: Sequence[str]) -> Resources:
        """What a waiting job counts as demand for: its request, and the first flavor it could use."""
        out = dict(job.request)
        first = self.usable(job, preference)
        if first:
            flavor = next(f for f in self.flavors if f.name == first[0])
            for r in flavor.resources:
                if job.request.get(r):
                    out[f"{r}{FLAVOR}{flavor.name}"] = job.request[r]
        return out

    def choices(self, job: JobView, queue: str, preference: Sequence[str], clusters: Sequence[str],
                over: Mapping[str, str]) -> tuple[list[dict[str, str]], dict[str, str]]:
        """The clusters to try the job on, as groups to try in turn (each: the clusters left out, with why),
        and the clusters it may never go to now. `over`: flavored quota keys the job would exceed."""
        asked = [r for r in self.resources if job.request.get(r)]
        if not asked:
            return [{}], {}
        never: dict[str, str] = {}
        flavor_of: dict[str, str] = {}
        for c in clusters:
            flavor = next((self.of.get(c, {}).get(r) for r in asked if self.of.get(c, {}).get(r)), "")
            flavor_of[c] = flavor
            exceeded = next((over[k] for r in asked if (k := f"{r}{FLAVOR}{flavor}") in over), None) if flavor else None
            if preference and flavor not in preference:
                shown = GPU if asked[0] == SHARE else asked[0]
                never[c] = f"its {shown} is not of a flavor queue {queue} may use ({', '.join(preference)})"
            elif exceeded is not None:
                never[c] = exceeded
        if not preference:
            return [never], never
        groups = [{**never, **{c: f"not of flavor {flavor}" for c in clusters if flavor_of[c] != flavor}}
                  for flavor in preference]
        return groups, never

