"""Topology-aware gang placement: one pure function, the same rules for every job (docs/architecture.md, Placement).

`place(state, gang)` reads the cluster state and returns where every pod goes, or why the gang
cannot be placed; it changes nothing. The rules:

- walk tiers from the lowest; `hard` stops at the job's tier limit, `soft` widens up to the whole
  cluster, no constraint starts at the virtual root;
- among the domains of the first tier where the gang fits, take the one that will be fullest
  afterwards (its free total minus the gang's request is all that decides that, so candidates
  are sorted first and tried in order: the first trial that succeeds is the best fit);
- fullness is measured in the device the gang asks for (GPUs, not the CPU that comes with them),
  else in the resource it takes the largest share of; and a gang that asks for no device of a
  kind keeps off places that offer one while others will do, so CPU pods do not strand GPUs;
- inside it, descend: give the pods to the fullest child that takes them all, or else to the
  child that takes the most, down to nodes, so a gang spans as few domains and nodes as possible;
  among children that take them all, one the gang leaves balanced comes before a fuller one: the
  least increase in device left free without the cpu and memory to use it (in the child's own
  proportions), so packing does not strand GPUs behind exhausted CPUs either;
- required pods (min_available, minPartitions) are placed all together or not at all; the others
  are added in the same pass when they fit under the chosen domain;
- a partition stays inside one domain at or under its own tier limit;
- ties break by name, so the same input always gives the same placement;
- health: a gang is first placed on healthy nodes only; when nothing healthy fits it, on degraded nodes
  too (never for a gang that avoids degraded hardware), and a hard-tier gang never behind degraded links
  (a HyperNode whose switches or cables are degraded); failed nodes are never used (not ready).

Capacity is counted in pods of one shape: for each node, how many more pods of that request fit;
summed up the tree, this count is exact for a gang of identical pods and a necessary condition
otherwise, so most domains are rejected without a trial.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from federation.kernel.gpuask import GPU, WHOLE, GpuAsk
from federation.kernel.resources import SHARE, Resources, format_resources
from member_agent.devices import assign, take
from member_agent.nodehealth import summary
from member_agent.state import ANY_SOUND, HEALTHY_ONLY, SOUND_LINKS, UNLIMITED, ClusterState, Shape
from member_agent.topology import ROOT, Toleration, tolerates

GENERAL = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})  # every other resource is a device


@dataclass(frozen=True)
class TaskRequest:
    name: str
    replicas: int
    request: Resources
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()  # a node's NoSchedule/NoExecute taints must all be tolerated
    min_available: int | None = None  # None: as the job's min_available decides
    partition_size: int = 0  # 0: no partitions
    min_partitions: int = 0  # 0: all partitions
    partition_tier: int | None = None  # hard tier limit of each partition
    health: int = ANY_SOUND  # which nodes it may be given (state.HEALTHY_ONLY...): set by `place`, level by level
    gpu: GpuAsk | None = None  # a fraction of a device (KAI's annotations); whole GPUs are `request`'s nvidia.com/gpu

    @cached_property
    def shape(self) -> Shape:
        """What decides where one pod fits: pods of equal shape share their fit counts."""
        return (tuple(sorted(self.request.items())), tuple(sorted(self.node_selector.items())), self.tolerations,
                self.health, self.gpu)

    @cached_property
    def ask(self) -> GpuAsk | None:
        """The devices one pod takes: its fraction, else its whole GPUs."""
        return self.gpu or (GpuAsk(self.request[GPU]) if self.request.get(GPU) else None)


@dataclass(frozen=True)
class PodPlacement:
    task: str
    index: int
    node: str
    # The GPU devices it was given and its share of each (thousandths): which pod it is does not depend on them.
    devices: tuple[int, ...] = field(default=(), compare=False)
    share: int = field(default=WHOLE, compare=False)


@dataclass(frozen=True)
class GangRequest:
    tasks: tuple[TaskRequest, ...]
    min_available: int = 0  # 0: every replica
    mode: str = ""  # "hard" | "soft" | "" (no constraint)
    highest_tier: int | None = None
    running: tuple[PodPlacement, ...] = ()  # pods already placed (restarts, extra replicas)
    avoid_degraded: bool = False  # healthy nodes only, even when nothing else fits (and for moves off them)


@dataclass(frozen=True)
class Placement:
    pods: tuple[PodPlacement, ...]  # the new pods only
    hypernode: str  # lowest domain holding every pod of the job
    tier: int


@dataclass(frozen=True)
class Rejection:
    reason: str


@dataclass
class _Group:
    """Pods of one task to place, in units (a partition, or a single pod)."""

    task: TaskRequest
    units: list[list[int]]  # pod indices per unit
    required: int  # units that must be placed
    unit_tier: int | None  # each unit must stay under a domain of at most this tier

    @property
    def size(self) -> int:
        return len(self.units[0]) if self.units else 0


class _Trial:
    """Free resources as a trial placement would leave them, over the untouched state.

    Pod counts for places this trial has not touched are the state's shared counts (and counts
    computed here for them are stored there); places it has touched get counts of their own.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.topology = state.topology
        self.used: dict[str, Resources] = {}
        self.domain_used: dict[str, Resources] = {}
        self.pods: list[PodPlacement] = []
        self.taken: dict[str, dict[int, int]] = {}  # node -> GPU device -> share this trial gave
        self._journal: list[tuple[str, Resources, list[PodPlacement]]] = []
        self._touched: set[str] = set()
        self._fit: dict[tuple[str, Shape], int] = {}
        self._cap: dict[tuple[str, Shape], int] = {}

    def _memo(self, place: str, kind: str) -> dict[tuple[str, Shape], int]:
        if place in self._touched:
            return self._fit if kind == "fit" else self._cap
        return self.state.counts.fit if kind == "fit" else self.state.counts.cap

    def free(self, node: str, resource: str) -> int:
        return self.state.free[node].get(resource, 0) - self.used.get(node, {}).get(resource, 0)

    def fit(self, node: str, task: TaskRequest) -> int:
        """How many more pods of `task` fit on `node`."""
        key = (node, task.shape)
        memo = self._memo(node, "fit")
        count = memo.get(key)
        if count is None:
            self.state.counts.remember(task.shape)
            if (node not in self.state.ready or self.state.avoids(node, task.health)
                    or self.state.refuses(node, task.request)):
                count = 0
            else:
                spec = self.topology.nodes[node]
                allowed = all(spec.labels.get(k) == v for k, v in task.node_selector.items()) and (
                    not spec.taints or tolerates(task.tolerations, spec.taints))
                count = UNLIMITED if allowed else 0
                for resource, amount in task.request.items():
                    count = min(count, max(self.free(node, resource), 0) // amount)
                if task.gpu is not None and not task.gpu.whole and count:
                    count = min(count, self.state.gpu_fit(node, task.gpu, self.taken.get(node)))
            memo[key] = count
        return count

    def capacity(self, domain: str, task: TaskRequest) -> int:
        """How many more pods of `task` fit under `domain`."""
        key = (domain, task.shape)
        memo = self._memo(domain, "cap")
        count = memo.get(key)
        if count is None and memo is self.state.counts.cap and task.shape not in self.state.counts.shapes:
            self.state.count_everywhere(task.shape, task.request, task.node_selector, task.tolerations,
                                        task.health, task.gpu)
            count = memo.get(key)
        if count is None and memo is self.state.counts.cap and (owed := self.state.counts.owed.pop(key, None)):
            count = owed[0] + sum(self.fit(n, task) for n in owed[1])
            memo[key] = count
        if count is None:
            d = self.topology.domains[domain]
            count = sum(self.fit(n, task) for n in d.nodes) + sum(self.capacity(c, task) for c in d.children)
            self.state.counts.remember(task.shape)
            memo[key] = count
        return count

    def put(self, node: str, task: TaskRequest, indices: Sequence[int]) -> None:
        """Give `node` these pods of `task`, and each its GPU devices (as `devices.assign` picks them on what this
        trial left free): the node's `GPU` and `SHARE` change as its devices do, the rest by the request."""
        delta = {r: a * len(indices) for r, a in task.request.items() if r not in (GPU, SHARE)}
        table, ask = self.state.devices.get(node), task.ask
        if table is None or ask is None:
            placed = [PodPlacement(task.name, i, node) for i in indices]
            delta.update((r, a * len(indices)) for r, a in task.request.items() if r in (GPU, SHARE))
        else:
            share = ask.share_on(self.state.device_memory.get(node, 0))
            taken = self.taken.setdefault(node, {})
            free = [f - taken.get(d, 0) for d, f in enumerate(table)]
            placed, delta[GPU], delta[SHARE] = [], 0, 0
            for i in indices:
                devices = assign(free, share, ask.devices) or ()
                whole, shares = take(free, devices, share)
                delta[GPU] += whole
                delta[SHARE] += shares
                for d in devices:
                    taken[d] = taken.get(d, 0) + share
                placed.append(PodPlacement(task.name, i, node, devices, share))
        self._use(node, delta, 1)
        self.pods.extend(placed)
        self._journal.append((node, delta, placed))

    def _use(self, node: str, delta: Mapping[str, int], sign: int) -> None:
        for i, place in enumerate([node, *self.topology.ancestors(node)]):
            table = self.used if i == 0 else self.domain_used
            used = table.setdefault(place, {})
            for resource, amount in delta.items():
                used[resource] = used.get(resource, 0) + amount * sign
            self._touched.add(place)
            for memo in (self._fit, self._cap):
                for key in [k for k in memo if k[0] == place]:
                    del memo[key]

    def mark(self) -> int:
        return len(self._journal)

    def rollback(self, mark: int) -> None:
        while len(self._journal) > mark:
            node, delta, placed = self._journal.pop()
            self._use(node, delta, -1)
            taken = self.taken.get(node, {})
            for pod in placed:
                for d in pod.devices:
                    taken[d] -= pod.share
            del self.pods[-len(placed):]

    def fragmenting(self, node: str, request: Mapping[str, int], task: TaskRequest | None = None,
                    count: int = 0) -> float:
        """How much taking `request` on `node` adds to the cluster's fragmentation for its pod mix; where the node's
        GPUs are devices, device by device as `count` pods of `task` would be given them."""
        fragmentation = self.state.fragmentation
        if node in self._touched:
            free = {r: self.free(node, r) for r in self.state.free[node]}
            gpus = self._gpus_after(node, task, count) if task is not None else None
            return fragmentation.increase(node, free, request, gpus=gpus)
        shape = (*sorted(request.items()), ("pods", count))
        if (known := fragmentation.remembered(node, shape)) is not None:
            return known
        gpus = self._gpus_after(node, task, count) if task is not None else None
        return fragmentation.increase(node, self.state.free[node], request, shape, gpus)

    def _gpus_after(self, node: str, task: TaskRequest, count: int) -> tuple[list[int], list[int]] | None:
        """The node's GPU devices' shares free, as this trial left them and after `count` more pods of `task`."""
        table, ask = self.state.devices.get(node), task.ask
        if table is None or ask is None or not self.state.fragmentation.mix.weights:
            return None
        taken = self.taken.get(node, {})
        before = [f - taken.get(d, 0) for d, f in enumerate(table)]
        after, share = list(before), ask.share_on(self.state.device_memory.get(node, 0))
        for _ in range(count):
            for d in assign(after, share, ask.devices) or ():
                after[d] -= share
        return before, after

    def least_fragmenting(self, domain: str, task: TaskRequest) -> float:
        """The least one pod of `task` adds to the fragmentation on any node under `domain` that takes it (nodes
        alike scored once)."""
        untouched = domain not in self._touched  # then it is the state's, remembered until a node under it changes
        if untouched and (known := self.state.least_fragmenting(domain, task.shape)) is not None:
            return known
        d = self.topology.domains[domain]
        values = [self.fragmenting(n, task.request, task, 1) for n, _ in self.of_each_kind(domain, task, 1)]
        values += [self.least_fragmenting(c, task) for c in d.children if self.capacity(c, task) > 0]
        least = min(values, default=0.0)
        if untouched:
            self.state.remember_least_fragmenting(domain, task.shape, least)
        return least

    def of_each_kind(self, domain: str, task: TaskRequest, wanted: int) -> list[tuple[str, int]]:
        """Of the domain's own nodes that take `wanted` pods of `task`, the first by name of each kind, and how many
        they take. Where this trial has touched nothing under the domain, read off the state's nodes by kind: the
        nodes of one kind that a pod may be given take as many as each other (a kind fixes everything `fit` reads
        but the node's labels, taints, health and sharing, which make it 0), so a kind's first such node stands for
        it and a kind too full for the pods is passed over whole."""
        if domain in self._touched:
            first: dict[tuple[object, ...], tuple[str, int]] = {}
            for n in self.topology.domains[domain].nodes:
                if (count := self.fit(n, task)) >= wanted and (kind := self.alike(n)) not in first:
                    first[kind] = (n, count)  # (the domain's nodes are in name order)
            return list(first.values())
        out = []
        asked = [(r, a) for r, a in task.request.items() if a > 0]
        for nodes in self.state.kinds_under(domain).values():
            free = self.state.free[nodes[0]]
            if any(max(free.get(r, 0), 0) // a < wanted for r, a in asked):
                continue
            for n in nodes:
                if (count := self.fit(n, task)) > 0:
                    if count >= wanted:
                        out.append((n, count))
                    break
        return out

    def alike(self, node: str) -> tuple[object, ...]:
        """What a node's scores read of it (`ClusterState.kind`), as this trial leaves it."""
        if node not in self.used and node not in self.taken:
            return self.state.kind(node)  # a lone pod scores every node: most are as the state left them
        table = self.state.devices.get(node)
        taken = self.taken.get(node, {})
        return (tuple(sorted((r, self.free(node, r)) for r in self.state.free[node])),
                tuple(sorted(self.topology.nodes[node].allocatable.items())),
                None if table is None else tuple(f - taken.get(d, 0) for d, f in enumerate(table)),
                self.state.device_memory.get(node, 0))

    def _amounts(self, name: str, is_node: bool, resource: str) -> tuple[int, int]:
        """Free and total of `resource` in the node or domain `name`, as this trial leaves it."""
        if is_node:
            return self.free(name, resource), self.topology.nodes[name].allocatable.get(resource, 0)
        return (self.state.domain_free[name].get(resource, 0) - self.domain_used.get(name, {}).get(resource, 0),
                self.state.domain_allocatable[name].get(resource, 0))

    def leftover(self, name: str, is_node: bool, request: Mapping[str, int], resource: str | None) -> float:
        """Share of `resource` still free in `name` after also taking `request`: lower is fuller."""
        if resource is None:
            return 0.0
        free, total = self._amounts(name, is_node, resource)
        return (free - request.get(resource, 0)) / total if total else 0.0

    def stranding(self, name: str, is_node: bool, request: Mapping[str, int], resource: str | None) -> float:
        """How much more of the device `resource` taking `request` leaves free in `name` without the
        cpu and memory beside it to use it: the device's free share beyond the scarcest general
        resource's, after less before (shares of the place's own totals, so its proportions)."""
        if resource is None or resource in GENERAL:
            return 0.0
        device_free, device_total = self._amounts(name, is_node, resource)
        general = [(r, *self._amounts(name, is_node, r)) for r in GENERAL]
        general = [(r, free, total) for r, free, total in general if total]
        if not device_total or not general:
            return 0.0

        def stranded(taken: int) -> float:
            device = (device_free - taken * request.get(resource, 0)) / device_total
            return max(0.0, device - min((free - taken * request.get(r, 0)) / total for r, free, total in general))

        return stranded(1) - stranded(0)


def _deciding(request: Mapping[str, int], totals: Mapping[str, int]) -> str | None:
    """The resource whose fullness decides: the device asked for (packing GPUs, not the CPU beside
    them, is what leaves whole GPUs free), else the resource the request takes the largest share of."""
    shares = [(r not in GENERAL, amount / totals[r], r) for r, amount in request.items() if totals.get(r)]
    return max(shares)[2] if shares else None


def _groups(gang: GangRequest) -> list[_Group]:
    """Split the gang into per-task groups and decide how many units of each are required."""
    running = {(p.task, p.index) for p in gang.running}
    total = sum(t.replicas for t in gang.tasks)
    min_total = gang.min_available or total
    groups: list[_Group] = []
    required_pods = len(running)
    for task in gang.tasks:
        if task.partition_size:
            parts = [list(range(k, k + task.partition_size)) for k in range(0, task.replicas, task.partition_size)]
            done = sum(all((task.name, i) in running for i in part) for part in parts)
            # pods missing from a partly running partition are placed as single pods
            loose = [i for part in parts if any((task.name, i) in running for i in part)
                     for i in part if (task.name, i) not in running]
            todo = [part for part in parts if not any((task.name, i) in running for i in part)]
            need = max((task.min_partitions or len(parts)) - done, 0)
            if todo:
                groups.append(_Group(task, todo, min(need, len(todo)), task.partition_tier))
                required_pods += min(need, len(todo)) * task.partition_size
            if loose:
                groups.append(_Group(task, [[i] for i in loose], len(loose), None))
                required_pods += len(loose)
        else:
            todo = [i for i in range(task.replicas) if (task.name, i) not in running]
            have = task.replicas - len(todo)
            need = max((task.min_available if task.min_available is not None else 0) - have, 0)
            groups.append(_Group(task, [[i] for i in todo], min(need, len(todo)), None))
            required_pods += min(need, len(todo))
    # Top up to the job's min_available with further pods, in task order.
    for g in groups:
        while required_pods < min_total and g.required < len(g.units):
            g.required += 1
            required_pods += g.size
    return [g for g in groups if g.units]


def _request(groups: Sequence[_Group], required_only: bool) -> Resources:
    out: Resources = {}
    for g in groups:
        count = (g.required if required_only else len(g.units)) * g.size
        for resource, amount in g.task.request.items():
            out[resource] = out.get(resource, 0) + amount * count
    return out


class _Placer:
    def __init__(self, state: ClusterState, groups: list[_Group], spread: bool = False) -> None:
        """`spread`: the gang is one pod, with no others to keep close. Where the cluster's learnt pod mix says its
        pods come on their own (no gangs to keep whole HyperNodes for) the emptiest of the places that fragment it
        alike takes the pod (Kubernetes' LeastAllocated), keeping cpu and memory free beside every node's GPUs; on
        openb that leaves fewer GPUs unallocatable than packing (docs/development/benchmarks.md). Elsewhere the
        fullest."""
        self.spread = spread and state.fragmentation.mix.mostly_single()
        self.state = state
        self.topology = state.topology
        self.groups = groups
        self.totals = state.domain_allocatable[ROOT]
        self.base = _Trial(state)  # the untouched state, its counts shared by every trial
        self.devices = [r for r in self.totals if r not in GENERAL]  # what this cluster's nodes offer beyond cpu

    def spares(self, name: str, is_node: bool, asked: Mapping[str, int]) -> bool:
        """Whether `name` offers a device `asked` does not include: such places are kept for pods needing it.
        Not a matter of the trial (what a place offers never changes), and nothing to look at when the gang
        asks for every device the cluster has, as in most clusters."""
        if all(d in asked for d in self.devices):
            return False
        offered = self.topology.nodes[name].allocatable if is_node else self.state.domain_allocatable[name]
        return any(r not in asked and r not in GENERAL for r in offered)

    # -- descent ---------------------------------------------------------------------------

    def _choose(self, trial: _Trial, options: list[tuple[str, bool, int]], wanted: int, per_unit: Mapping[str, int],
                resource: str | None, task: TaskRequest | None = None) -> tuple[str, bool, int]:
        """Of the options that take all `wanted` units, the best (`_best`); else the one that takes the most (then
        fullest)."""
        whole = [o for o in options if o[2] >= wanted]
        if whole:
            # Nodes alike score alike, and then the first by name wins: only each kind's first node is scored (a
            # lone pod in a HyperNode of a thousand nodes of a few kinds scores a few, not a thousand).
            first: dict[tuple[object, ...], tuple[str, bool, int]] = {}
            domains = []
            for o in whole:
                if not o[1]:
                    domains.append(o)
                    continue
                kind = trial.alike(o[0])
                seen = first.get(kind)
                if seen is None or o[0] < seen[0]:
                    first[kind] = o
            return self._best(trial, [*first.values(), *domains], wanted, per_unit, resource, task)
        return min(options, key=lambda o: (-o[2], self.spares(o[0], o[1], per_unit),
                                           trial.leftover(o[0], o[1], {}, resource), o[0]))

    def _best(self, trial: _Trial, options: list[tuple[str, bool, int]], wanted: int, per_unit: Mapping[str, int],
              resource: str | None, task: TaskRequest | None) -> tuple[str, bool, int]:
        """Of options that each take all `wanted` units (a node of each kind at most), the one that fragments the
        cluster least for its pod mix (a single pod of `task` looks into domains for the node it would take), then
        the fullest (the emptiest, when spreading a lone pod); ties by name."""
        if len(options) == 1:
            return options[0]
        request = {r: a * wanted for r, a in per_unit.items()}

        def fragmenting(name: str, is_node: bool) -> float:
            if is_node:
                return trial.fragmenting(name, request, task, wanted)
            return trial.least_fragmenting(name, task) if task is not None and wanted == 1 else 0.0

        fuller = -1.0 if self.spread else 1.0

        def key(o: tuple[str, bool, int]) -> tuple[object, ...]:
            return (self.spares(o[0], o[1], per_unit), fragmenting(o[0], o[1]),
                    trial.stranding(o[0], o[1], request, resource),
                    fuller * trial.leftover(o[0], o[1], request, resource), o[0])

        return min(options, key=key)

    def _pods(self, trial: _Trial, domain: str, task: TaskRequest, indices: list[int]) -> bool:
        """Place single pods under `domain`, fullest-first, spanning as few children as possible."""
        resource = _deciding(task.request, self.totals)
        d = self.topology.domains[domain]
        children = [(c, False, trial.capacity(c, task)) for c in d.children]
        # Where some child or node takes them all (a lone pod: anywhere it fits), a node of each kind is enough.
        whole = [o for o in children if o[2] >= len(indices)]
        whole += [(n, True, count) for n, count in trial.of_each_kind(domain, task, len(indices))]
        if whole:
            name, is_node, _ = self._best(trial, whole, len(indices), task.request, resource, task)
            if is_node:
                trial.put(name, task, indices)
                return True
            return self._pods(trial, name, task, indices)
        options = [o for o in children if o[2] > 0]
        options += [(n, True, count) for n in d.nodes if (count := trial.fit(n, task)) > 0]
        remaining = list(indices)
        while remaining:
            if not options:
                return False
            choice = self._choose(trial, options, len(remaining), task.request, resource, task)
            options.remove(choice)
            name, is_node, capacity = choice
            take, remaining = remaining[:capacity], remaining[capacity:]
            if is_node:
                trial.put(name, task, take)
            elif not self._pods(trial, name, task, take):
                return False
        return True

    def _unit_capacity(self, trial: _Trial, domain: str, group: _Group) -> int:
        """How many units of `group` fit under `domain`, each unit inside one domain of its tier limit."""
        d = self.topology.domains[domain]
        if group.unit_tier is None or d.tier <= group.unit_tier:
            return trial.capacity(domain, group.task) // group.size
        return sum(self._unit_capacity(trial, c, group) for c in d.children)

    def _units(self, trial: _Trial, domain: str, group: _Group, units: list[list[int]]) -> bool:
        d = self.topology.domains[domain]
        if group.unit_tier is None or d.tier <= group.unit_tier:
            return self._pods(trial, domain, group.task, [i for unit in units for i in unit])
        resource = _deciding(group.task.request, self.totals)
        options = [(c, False, self._unit_capacity(trial, c, group)) for c in d.children]
        options = [o for o in options if o[2] > 0]
        per_unit = {r: a * group.size for r, a in group.task.request.items()}
        remaining = list(units)
        while remaining:
            if not options:
                return False
            choice = self._choose(trial, options, len(remaining), per_unit, resource)
            options.remove(choice)
            take, remaining = remaining[:choice[2]], remaining[choice[2]:]
            if not self._units(trial, choice[0], group, take):
                return False
        return True

    # -- one domain ------------------------------------------------------------------------

    def trial(self, domain: str) -> _Trial | None:
        """Required units all under `domain`, then as many optional ones as fit; None if not all required fit."""
        trial = _Trial(self.state)
        for g in self.groups:
            if g.required and not self._units(trial, domain, g, g.units[:g.required]):
                return None
        for g in self.groups:
            for unit in g.units[g.required:]:
                mark = trial.mark()
                if self._unit_capacity(trial, domain, g) < 1 or not self._units(trial, domain, g, [unit]):
                    trial.rollback(mark)
        return trial

    def fits_roughly(self, domain: str, request: Resources) -> bool:
        """Cheap necessary conditions: free totals, and each group's unit count on its own."""
        free = self.state.domain_free[domain]
        if any(free.get(r, 0) < a for r, a in request.items()):
            return False
        return all(self._unit_capacity(self.base, domain, g) >= g.required for g in self.groups if g.required)


def place(state: ClusterState, gang: GangRequest) -> Placement | Rejection:
    """Healthy nodes first; degraded ones (not behind degraded links for a hard-tier gang) only when that fails."""
    if unmatched := _unmatched(state, gang):  # whatever is free: said as such, not as room lacking
        return Rejection(unmatched)
    if not state.degraded and not state.degraded_links:
        return _place(state, gang)
    hard = gang.mode == "hard" and gang.highest_tier is not None
    levels = [HEALTHY_ONLY] if gang.avoid_degraded else [HEALTHY_ONLY, SOUND_LINKS if hard else ANY_SOUND]
    outcome: Placement | Rejection = Rejection("")
    for level in levels:
        tasks = tuple(replace(t, health=level) for t in gang.tasks)
        outcome = _place(state, replace(gang, tasks=tasks))
        if isinstance(outcome, Placement):
            return outcome
    if levels[-1] == ANY_SOUND:  # health did not stand in its way
        return outcome
    avoided = summary(state.degraded)
    if state.degraded_links:
        avoided.append(f"{len(state.degraded_links)} HyperNode(s) with degraded links ("
                       f"{', '.join(sorted(state.degraded_links)[:3])})")
    return Rejection(f"{outcome.reason}; avoided: {'; '.join(avoided)}" if avoided else outcome.reason)


def _unmatched(state: ClusterState, gang: GangRequest) -> str:
    """Why no node of the cluster could ever take one of the gang's tasks: no node has every label its
    nodeSelector names, or every node with room for one of its pods refuses it (an MPS node asked for more than one
    replica); "" when each task has some node."""
    for task in gang.tasks:
        if task.node_selector and not any(all(node.labels.get(k) == v for k, v in task.node_selector.items())
                                          for node in state.topology.nodes.values()):
            pairs = ",".join(f"{k}={v}" for k, v in sorted(task.node_selector.items()))
            return f"no node matches task {task.name}'s nodeSelector {pairs}"
        if not any(shared.refuses(task.request) for shared in state.sharing.values()):
            continue  # (only a shared node refuses what it has room for)
        having = [n for n, node in state.topology.nodes.items()
                  if all(node.allocatable.get(r, 0) >= a for r, a in task.request.items() if a > 0)]
        refusals = [why for n in having if (why := state.refuses(n, task.request))]
        if having and len(refusals) == len(having):
            return f"no node takes task {task.name}'s pods: {refusals[0]}"
    return ""


def _place(state: ClusterState, gang: GangRequest) -> Placement | Rejection:
    topology = state.topology
    groups = sorted(_groups(gang), key=lambda g: (-g.size, -sum(g.task.request.values()), g.task.name))
    if not groups:
        return Rejection("the job has no pods left to place")
    placer = _Placer(state, groups, spread=not gang.running and sum(t.replicas for t in gang.tasks) == 1)
    request = _request(groups, required_only=True)
    root_tier = topology.root.tier
    limit = root_tier
    if gang.mode == "hard" and gang.highest_tier is not None:
        limit = min(gang.highest_tier, root_tier)
    tiers = [t for t in topology.tiers() if t <= limit] if gang.mode in ("hard", "soft") else [root_tier]
    allowed: set[str] | None = None
    if gang.running:
        anchor = topology.lowest_common_domain(p.node for p in gang.running)
        allowed = {anchor, *topology.above(anchor)}
        tiers = [t for t in tiers if t >= topology.domains[anchor].tier] or \
            ([] if gang.mode == "hard" else [root_tier])
    resource = _deciding(request, placer.totals)
    for tier in tiers:
        candidates = [d.name for d in topology.of_tier(tier) if allowed is None or d.name in allowed]
        candidates = [c for c in candidates if placer.fits_roughly(c, request)]
        candidates.sort(key=lambda c: (placer.spares(c, False, request),
                                       placer.base.leftover(c, False, request, resource), c))
        for candidate in candidates:
            trial = placer.trial(candidate)
            if trial is not None:
                nodes = [p.node for p in trial.pods] + [p.node for p in gang.running]
                landed = topology.lowest_common_domain(nodes)
                return Placement(tuple(trial.pods), landed, topology.domains[landed].tier)
    pods = sum(g.required * g.size for g in groups)
    wanted = f"{pods} pods needing {_describe(request)}"
    if gang.mode == "hard" and limit < root_tier:
        return Rejection(f"no HyperNode of tier {limit} or below can hold {wanted}")
    bounded = [g for g in groups if g.required and g.unit_tier is not None and g.unit_tier < root_tier]
    if bounded:  # the totals may well fit: what does not is a partition inside its domain
        g = bounded[0]
        names = sorted(n for n, t in topology.tier_names.items() if t == g.unit_tier)
        named = f" ({', '.join(names)})" if names else ""
        return Rejection(f"the cluster cannot hold {wanted} at once with each partition of task {g.task.name} "
                         f"({g.size} pods) under one HyperNode of tier {g.unit_tier}{named}")
    return Rejection(f"the cluster cannot hold {wanted} at once")


def _describe(request: Resources) -> str:
    return ", ".join(f"{k}={v}" for k, v in format_resources(request).items()) or "no resources"
