"""Does a job fit a member cluster? Judged from the cluster's labels, free resources and topology summary.

Pure. The summary says, per tier, the most of each resource free inside one HyperNode of that
tier; a gang with a hard tier limit can only fit where some tier at or under the limit has that
much free. Per-resource maxima may come from different HyperNodes, so this is a necessary
condition: the agent's trial placement is the final word, and a stale or optimistic answer comes
back as a rejection that returns the job to its queue.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from federation.kernel.gpuask import GpuAsk
from federation.kernel.hyperjob import Part
from federation.kernel.resources import GPU, SHARE, WHOLE, Resources, add, format_resources
from federation.kernel.tiers import TierFree


@dataclass(frozen=True)
class DomainFree:
    """One HyperNode and what is free under it: where topology-aware preemption can make room for a gang."""

    name: str
    tier: int
    parent: str  # "" at the top
    free: Resources


@dataclass(frozen=True, slots=True)
class NodeGroupRoom:
    """A node group its cluster's autoscaler can grow (`scheduling.provisioning`)."""

    name: str
    per_node: Resources  # what one new node offers
    can_add: int  # how many more nodes the group can add


@dataclass(frozen=True)
class ClusterView:
    name: str
    labels: Mapping[str, str]
    free: Resources  # whole cluster, after work already sent to it
    tiers: Sequence[TierFree] = ()  # lowest first: tier 0 is one node, the last is the whole cluster
    capacity: Resources = field(default_factory=dict)  # allocatable of its ready nodes, free or not
    domains: Sequence[DomainFree] = ()  # its HyperNodes, when its agent reports them (at most 1,000)
    # As `tiers`, counting healthy nodes only, when some of its hardware is degraded (None: all is healthy);
    # and what is degraded or failed there, for people ("3 nodes degraded (XID 79)").
    healthy_tiers: Sequence[TierFree] | None = None
    health: Sequence[str] = ()
    # MIG slices its agent could cut idle GPUs into (NVIDIA's MIG manager): room for a gang beside `capacity`,
    # never counted in it (the same GPUs are counted whole there).
    partitionable: Resources = field(default_factory=dict)
    # The label pairs ("key=value") its nodes carry, as its agent reports them (None: not reported, so a pod's
    # nodeSelector is left to the agent's placement there).
    node_labels: frozenset[str] | None = None
    # [f] = its ready nodes with exactly f whole GPUs free, as its agent reports them (None: not reported)
    gpu_free_nodes: tuple[int, ...] | None = None
    # MiB of the largest GPU device of its nodes, as its agent reports it (0: unknown): a gpu-memory ask takes at
    # least that share of a device there
    gpu_memory: int = 0
    node_groups: tuple[NodeGroupRoom, ...] = ()  # what its autoscaler can add, as its agent reports it


@dataclass(frozen=True, slots=True)
class JobView:
    id: str
    request: Resources  # the whole gang
    largest_pod: Resources = field(default_factory=dict)  # per resource, the most one pod asks for
    cluster_selector: Mapping[str, str] = field(default_factory=dict)
    mode: str = ""
    highest_tier: int = 0
    highest_tier_name: str = ""
    # Every label pair ("key=value") one of its pods' nodeSelectors asks for: a cluster none of whose nodes
    # carries one of them cannot hold the gang (a necessary condition; the agent's placement matches them node
    # by node).
    node_selector: tuple[str, ...] = ()
    # Whole GPUs each of its GPU pods asks, when all ask the same (0: none, or pods of different sizes): its
    # request[GPU] / pod_gpus pods then need a node each with that many free.
    pod_gpus: int = 0
    # One partition of a task whose partitions must each stay inside a HyperNode (a hard partition topology): its
    # pods' request, as resource pairs, and that limit; () when it has none. The largest such partition stands
    # for the gang's (a necessary condition: a cluster none of whose HyperNodes holds one cannot hold the gang).
    partition: tuple[tuple[str, int], ...] = ()
    partition_tier: int = 0
    partition_tier_name: str = ""
    # Its pods that ask for GPU memory (KAI's gpu-memory) rather than whole GPUs or fractions: (pods, devices each,
    # MiB each device). `request` counts each such device whole (what quotas count, the device memory being unknown
    # before it lands) and `largest_pod` leaves them out; `sized` fits them per cluster, by its device memory.
    memory_asks: tuple[tuple[int, int, int], ...] = ()
    # The HyperJob it is a sub-job of (None: an ordinary job): the cycle places its waiting sub-jobs together.
    group: Part | None = None

    # Everything about the gang that decides where it fits: equal shapes fit the same clusters, and are one
    # object (`Shape`). Made once with the view (it is asked for hundreds of thousands of times a cycle),
    # unsorted for speed: the same resources listed in another order only make a second shape.
    shape: Shape = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        shape = shape_of((tuple(self.request.items()), tuple(self.largest_pod.items()),
                          tuple(self.cluster_selector.items()), self.mode, self.highest_tier, self.highest_tier_name,
                          self.node_selector, self.pod_gpus, self.partition, self.partition_tier,
                          self.partition_tier_name, self.memory_asks), self)
        object.__setattr__(self, "shape", shape)
        # Equal shapes hold equal amounts: the first view's mappings serve them all (a million waiting jobs of a
        # few hundred shapes would otherwise hold three dicts each). Nothing changes a view's mappings in place.
        object.__setattr__(self, "request", shape.request)
        object.__setattr__(self, "largest_pod", shape.largest_pod)
        object.__setattr__(self, "cluster_selector", shape.cluster_selector)


class Shape:
    """A gang shape, one object per distinct shape while any job has it: the cycle's caches and the queue
    manager key on it by identity, without hashing its nested tuple at every look-up."""

    __slots__ = ("__weakref__", "cluster_selector", "key", "largest_pod", "request")

    def __init__(self, key: tuple[object, ...], view: JobView) -> None:
        self.key = key
        self.request, self.largest_pod, self.cluster_selector = view.request, view.largest_pod, view.cluster_selector

    def __reduce__(self) -> tuple[object, ...]:
        return _unpickled, (self.key, self.request, self.largest_pod, self.cluster_selector)

    def __repr__(self) -> str:
        return f"Shape{self.key!r}"


_SHAPES: weakref.WeakValueDictionary[tuple[object, ...], Shape] = weakref.WeakValueDictionary()


def shape_of(key: tuple[object, ...], view: JobView) -> Shape:
    found = _SHAPES.get(key)
    if found is None:
        found = _SHAPES[key] = Shape(key, view)
    return found


def _unpickled(key: tuple[object, ...], request: Resources, largest_pod: Resources,
               cluster_selector: Mapping[str, str]) -> Shape:
    """An unpickled shape is this process's equal shape, if it has one."""
    return JobView("", request, largest_pod, cluster_selector, *key[3:]).shape  # type: ignore[arg-type]


def sized(job: JobView, cluster: ClusterView) -> tuple[Mapping[str, int], Mapping[str, int]]:
    """The gang's request and largest pod as `cluster` would hold them: a gpu-memory ask as the share of a device
    it takes on the cluster's largest devices (the least it can take there: a necessary condition, as every check
    here), or a whole device where the cluster does not say its device memory."""
    if not job.memory_asks:
        return job.request, job.largest_pod
    request, largest = dict(job.request), dict(job.largest_pod)
    for pods, devices, memory in job.memory_asks:
        share = GpuAsk(devices, memory=memory).share_on(cluster.gpu_memory) if cluster.gpu_memory else WHOLE
        request[SHARE] = request.get(SHARE, 0) - pods * devices * WHOLE + pods * devices * share
        largest[SHARE] = max(largest.get(SHARE, 0), devices * share)
    return request, largest


def covers(free: Mapping[str, int], request: Mapping[str, int]) -> bool:
    return all(free.get(r, 0) >= a for r, a in request.items())


def _short(resources: Mapping[str, int], request: Mapping[str, int], what: str = "free") -> str:
    """The resources `resources` lacks for `request`, as `gpu=32/64 free` (`what` they are: "free", "in all")."""
    short = [r for r in request if resources.get(r, 0) < request[r]]
    free = format_resources({r: max(resources.get(r, 0), 0) for r in short})
    want = format_resources({r: request[r] for r in short})
    return ", ".join(f"{r} {free[r]}/{want[r]} {what}" for r in want)


def unlabelled(job: JobView, node_labels: frozenset[str] | None) -> list[str]:
    """The label pairs the gang's pods select nodes by that no node of a cluster reporting `node_labels` has."""
    if not job.node_selector or node_labels is None:
        return []
    return [pair for pair in job.node_selector if pair not in node_labels]


def pods_room(gpu_free_nodes: Sequence[int], pod_gpus: int) -> int:
    """How many pods of `pod_gpus` whole GPUs the nodes of a free-GPU histogram hold, node by node."""
    return sum((free // pod_gpus) * nodes for free, nodes in enumerate(gpu_free_nodes))


def gpu_pods(job: JobView) -> int:
    """How many pods of `pod_gpus` GPUs the gang needs at least (0: not known pod by pod)."""
    return job.request.get(GPU, 0) // job.pod_gpus if job.pod_gpus else 0


def selects(job: JobView, cluster: ClusterView) -> bool:
    """Whether the cluster's labels match the gang's cluster selector and its nodes have every label the
    pods' nodeSelectors name: whatever is free, a cluster that does not could never take the gang."""
    return all(cluster.labels.get(k) == v for k, v in job.cluster_selector.items()) and \
        not unlabelled(job, cluster.node_labels)


# Why a gang does not fit a cluster: the kind of reason (no ": " in it), and what its detail names, formatted only
# when read (`said`): the amounts there, the amounts asked, and what the amounts there are ("free", "in all").
Why = tuple[str, tuple[Mapping[str, int], Mapping[str, int], str] | None]


def said(why: Why) -> str:
    """The reason as written: its kind, then its detail."""
    kind, detail = why
    if detail is None:
        return kind
    there, asked, what = detail
    return f"{kind}: {_short(there, asked, what)}"


def check(job: JobView, cluster: ClusterView) -> str | None:
    """None when the job fits `cluster`, else why not (for the job's reason and ExplainJob)."""
    why = why_not(job, cluster)
    return None if why is None else said(why)


def why_not(job: JobView, cluster: ClusterView) -> Why | None:
    """`check`, its detail not yet formatted: a shape that fits none of a thousand clusters is summed up by kind
    (`choice.summary`), and formatting every cluster's free amounts was a fifth of a cycle there."""
    if (unmatched := labels_unmatched(job, cluster.labels, cluster.node_labels)) is not None:
        return unmatched, None
    request, largest = sized(job, cluster)
    if not covers(cluster.free, request):
        # A cluster too small for the gang says so, the same whatever runs there: its free room changes with every
        # job that starts or ends, and a reason naming it is rewritten for every waiting job each time.
        capacity = whole(cluster)
        if capacity and not covers(capacity, request):
            return TOO_SMALL, (capacity, request, "in all")
        return NOT_ENOUGH_FREE, (cluster.free, request, "free")
    nodes = [t for t in cluster.tiers if t.tier == 0]
    if nodes and not covers(nodes[0].max_free, largest):
        return NO_NODE_HOLDS, (nodes[0].max_free, largest, "free")
    pods = gpu_pods(job)
    if pods and cluster.gpu_free_nodes is not None and (room := pods_room(cluster.gpu_free_nodes, job.pod_gpus)) < pods:
        return pods_unheld(job, room), None
    if (apart := partition_limit(job, cluster)) is not None:
        need = dict(job.partition)
        inside = [t for t in cluster.tiers if 0 < t.tier <= apart]
        if inside and not any(covers(t.max_free, need) for t in inside):
            return (f"no HyperNode of tier {apart} or below has room for one of its partitions",
                    (inside[-1].max_free, need, "free"))
    limit = tier_limit(job, cluster)
    if limit is None:
        return None
    within = [t for t in cluster.tiers if 0 < t.tier <= limit]
    if any(covers(t.max_free, request) for t in within):
        return None
    best = within[-1].max_free if within else {}
    return tier_short(limit), (best, request, "free")


# The kinds of `why_not` whose words never vary (`choice.ClusterTable` finds them over arrays, for many clusters).
TOO_SMALL = "too small"
NOT_ENOUGH_FREE = "not enough free"
NO_NODE_HOLDS = "no node can hold its largest pod"


def labels_unmatched(job: JobView, labels: Mapping[str, str], node_labels: frozenset[str] | None) -> str | None:
    """Why a cluster of these labels, whose nodes carry `node_labels`, could never take the gang, whatever is free
    there (None: it could)."""
    missing = {k: v for k, v in job.cluster_selector.items() if labels.get(k) != v}
    if missing:
        return "lacks label " + ",".join(f"{k}={v}" for k, v in sorted(missing.items()))
    if nodes_lack := unlabelled(job, node_labels):
        return f"no node has label {','.join(nodes_lack)} (its pods' nodeSelector)"
    return None


def whole(cluster: ClusterView) -> Resources:
    """Everything the cluster has, free or not: its ready nodes' allocatable and the MIG slices it could cut."""
    return add(cluster.capacity, cluster.partitionable) if cluster.partitionable else cluster.capacity


def pods_unheld(job: JobView, room: int) -> str:
    return (f"its nodes hold {room} of its {gpu_pods(job)} pods of {job.pod_gpus} {GPU} (nodes with that many free, "
            "pod by pod)")


def tier_short(limit: int) -> str:
    return f"no HyperNode of tier {limit} or below has enough free"


def fits_healthy(job: JobView, cluster: ClusterView) -> bool:
    """Whether a gang that fits `cluster` fits on its healthy hardware alone (the cluster choice prefers those)."""
    if cluster.healthy_tiers is None:
        return True
    view = ClusterView(cluster.name, cluster.labels, cluster.free, cluster.healthy_tiers,
                       gpu_memory=cluster.gpu_memory)
    if why_not(job, view) is not None:
        return False
    limit = tier_limit(job, view)
    request = sized(job, view)[0]
    return any(covers(t.max_free, request) for t in cluster.healthy_tiers
               if t.tier > 0 and (limit is None or t.tier <= limit))


def tier_limit(job: JobView, cluster: ClusterView) -> int | None:
    """The highest tier a hard gang may span in `cluster`; None: no limit there. A tier name the cluster
    does not have is no limit, as Volcano resolves it."""
    if job.mode != "hard":
        return None
    if job.highest_tier_name:
        return next((t.tier for t in cluster.tiers if t.tier_name == job.highest_tier_name), None)
    return job.highest_tier


def partition_limit(job: JobView, cluster: ClusterView) -> int | None:
    """The highest tier one of the gang's partitions may span in `cluster`; None: no limit there (none asked, or
    a tier name the cluster does not have, as Volcano resolves it)."""
    if not job.partition:
        return None
    if job.partition_tier_name:
        return next((t.tier for t in cluster.tiers if t.tier_name == job.partition_tier_name), None)
    return job.partition_tier or None


def could_hold(job: JobView, cluster: ClusterView) -> bool:
    """Whether the cluster could hold the gang once everything there has ended (its labels, capacity, largest
    node and HyperNodes of the gang's tier limit)."""
    return _lacks(job, cluster)[0] == 4


def _lacks(job: JobView, cluster: ClusterView) -> tuple[int, str, Resources, Resources]:
    """How far the gang gets in `cluster` once everything there has ended: (stage passed, what it needs
    at the stage it fails, the amounts needed, the amounts offered); stage 4 when it fits."""
    if any(cluster.labels.get(k) != v for k, v in job.cluster_selector.items()):
        return 0, "a cluster labelled " + ",".join(f"{k}={v}" for k, v in sorted(job.cluster_selector.items())), \
            {}, {}
    if unlabelled(job, cluster.node_labels):
        return 0, "nodes labelled " + ",".join(job.node_selector) + ", as its pods' nodeSelector asks", {}, {}
    capacity = whole(cluster)
    request, largest = sized(job, cluster)
    if capacity and not covers(capacity, request):
        return 1, "in one cluster", dict(request), capacity
    node = next((t.max_capacity for t in cluster.tiers if t.tier == 0 and t.max_capacity), None)
    if node is not None and not covers(node, largest):
        return 2, "on one node for its largest pod", dict(largest), node
    limit = tier_limit(job, cluster)
    within = [t.max_capacity for t in cluster.tiers if limit is not None and 0 < t.tier <= limit and t.max_capacity]
    if limit is not None and within and not any(covers(c, request) for c in within):
        return 3, f"within one HyperNode of tier {limit}", dict(request), within[-1]
    apart = partition_limit(job, cluster)
    inside = [t.max_capacity for t in cluster.tiers if apart is not None and 0 < t.tier <= apart and t.max_capacity]
    if inside and not any(covers(c, dict(job.partition)) for c in inside):
        return 3, f"for one partition within one HyperNode of tier {apart}", dict(job.partition), inside[-1]
    return 4, "", {}, {}


def cannot_run(job: JobView, clusters: Sequence[ClusterView]) -> str | None:
    """Why the gang could not run in any of `clusters` even with nothing else running there, naming the
    constraint and the most the federation offers for it; None when some cluster could hold it."""
    if not clusters:
        return None
    found = []
    for c in clusters:
        lacks = _lacks(job, c)
        if lacks[0] == 4:
            return None  # one cluster could hold it: the others need not be looked at (a thousand, per shape)
        found.append((*lacks, c.name))
    stage = max(f[0] for f in found)
    where = [f for f in found if f[0] == stage]
    _, what, need, _, _ = where[0]
    if stage == 0:
        return f"cannot run: no member cluster matches its selector (it needs {what})"
    resource = next((r for r in need if any(f[3].get(r, 0) < need[r] for f in where)), next(iter(need)))
    offered = max(where, key=lambda f: (f[3].get(resource, 0), f[4]))
    return (f"cannot run: needs {_fmt_one(resource, need[resource])} {what}; the most any cluster offers is "
            f"{_fmt_one(resource, offered[3].get(resource, 0))} ({offered[4]})")


def _fmt_one(resource: str, amount: int) -> str:
    return ",".join(f"{r}={a}" for r, a in format_resources({resource: amount}).items())


@dataclass(frozen=True)
class ClusterState:
    """A member cluster as ExplainJob sees it: perhaps not Ready, perhaps cordoned."""

    view: ClusterView
    ready: bool
    cordoned: bool
    problem: str = ""  # why its agent's report is not used


def explain(job: JobView, clusters: Sequence[ClusterState], refused: Mapping[str, str] | None = None,
            held: Mapping[str, tuple[Resources, str]] | None = None,
            held_by: str | None = None) -> list[tuple[str, str | None]]:
    """For each cluster, by name: None when the job fits there now, else why not. `held`: per cluster, the
    room the last cycle reserved there for other waiting jobs, and the first of them; a job that fits only
    in that room does not fit now. `held_by`: what holds the job whatever is free, if anything (a limit, or
    why it cannot run at all): then it fits nowhere now (the reason, these rows and the forecast agree)."""
    out = []
    for c in sorted(clusters, key=lambda c: c.view.name):
        if not c.ready:
            why: str | None = "not Ready (its agent is not connected or has gone silent)"
        elif c.cordoned:
            why = "cordoned"
        elif c.problem:
            why = c.problem
        else:
            why = (refused or {}).get(c.view.name) or check(job, c.view)
            room, holder = (held or {}).get(c.view.name, ({}, ""))
            if why is None and room:
                left = {r: a - room.get(r, 0) for r, a in c.view.free.items()}
                if not covers(left, job.request):
                    why = f"the room it needs is reserved for {holder}"
            if why is None and held_by:
                why = f"room enough, but {held_by}"
        out.append((c.view.name, why))
    by_name = {c.view.name: c.view for c in clusters}
    healthy = {name: fits_healthy(job, by_name[name]) for name, why in out if why is None}
    if any(healthy.values()):
        out = [(name, f"skipped: {'; '.join(by_name[name].health) or 'degraded hardware'} (the gang fits there "
                      "only on degraded hardware, and fits on healthy hardware elsewhere)")
               if healthy.get(name) is False else (name, why) for name, why in out]
    return out
