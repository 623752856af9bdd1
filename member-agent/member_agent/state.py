"""What is free where, kept current as pods are bound and released.

Each domain's free total is the sum over its ready nodes; binding or releasing a pod touches the
node and its few ancestors only, so the per-tier summary sent to the server is cheap to refresh.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
from sortedcontainers import SortedList

from federation.kernel.gpuask import GPU, WHOLE, GpuAsk
from federation.kernel.jobspec import MAX_GPUS_PER_NODE, MAX_REPORTED_NODE_LABELS, NODE_OWN_LABEL
from federation.kernel.resources import SHARE, Resources
from federation.kernel.tiers import TierFree
from member_agent.devices import assign, fits, memory_mib, take
from member_agent.fragmentation import Fragmentation
from member_agent.nodegroups import NodeGroups
from member_agent.nodehealth import DEGRADED, NodeHealth
from member_agent.sharing import Sharing, node_sharing
from member_agent.topology import ROOT, Node, Toleration, Topology, tolerates

# (request, node selector, tolerations, health level, GPU fraction): what decides how many pods of a task fit on a node
Shape = tuple[tuple[tuple[str, int], ...], tuple[tuple[str, str], ...], tuple[Any, ...], int, GpuAsk | None]
UNLIMITED = 1 << 30  # pods that request nothing fit anywhere
# What a pod may be given, by level: any node that works; no node behind degraded links (a hard-tier gang's
# fallback); healthy nodes only (everyone's first choice, and a gang's only one when it avoids degraded).
ANY_SOUND, SOUND_LINKS, HEALTHY_ONLY = 0, 1, 2


class PodCounts:
    """Memo of how many pods of each shape fit on each node and under each domain.

    Shared by every placement on this state; whatever changes a node forgets the node's entries, and each domain
    above it is owed the node's new count, so a placement recounts only what changed since the last (a lone pod in a
    HyperNode of a thousand nodes recounts one node, not a thousand).
    """

    MAX_SHAPES = 256

    def __init__(self) -> None:
        self.fit: dict[tuple[str, Shape], int] = {}
        self.cap: dict[tuple[str, Shape], int] = {}
        self.shapes: set[Shape] = set()
        # A domain's count less what its changed nodes counted before they changed, and those nodes: its count is
        # that plus what they count now (`placement._Trial.capacity`).
        self.owed: dict[tuple[str, Shape], tuple[int, frozenset[str]]] = {}

    def remember(self, shape: Shape) -> None:
        if shape not in self.shapes:
            if len(self.shapes) >= self.MAX_SHAPES:
                self.clear()
            self.shapes.add(shape)

    def clear(self) -> None:
        self.fit.clear()
        self.cap.clear()
        self.shapes.clear()
        self.owed.clear()

    def changed(self, node: str, domains: Sequence[str]) -> None:
        """`node` changed: its counts go, and each domain above it owes the node's part, where that part is known
        (else the domain is counted afresh)."""
        for shape in self.shapes:
            old = self.fit.pop((node, shape), None)
            for domain in domains:
                key = (domain, shape)
                cap, owed = self.cap.pop(key, None), self.owed.get(key)
                if cap is not None and old is not None:
                    self.owed[key] = (cap - old, frozenset((node,)))
                elif owed is not None and node in owed[1]:
                    continue  # its part is owed already
                elif owed is not None and old is not None:
                    self.owed[key] = (owed[0] - old, owed[1] | {node})
                else:
                    self.owed.pop(key, None)


class ClusterState:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.free: dict[str, Resources] = {n: dict(node.allocatable) for n, node in topology.nodes.items()}
        self.ready: set[str] = set(topology.nodes)
        self.domain_free: dict[str, Resources] = {d: {} for d in topology.domains}
        self.domain_allocatable: dict[str, Resources] = {d: {} for d in topology.domains}
        self.used: Resources = {}
        self.ready_allocatable: Resources = {}
        self.counts = PodCounts()
        self.fragmentation = Fragmentation()  # learns the pod mix from what is allocated
        self.alike: dict[str, tuple[object, ...]] = {}  # per node, what placement scores read of it, until it changes
        self._kinds: dict[str, NodeGroups] = {}  # per domain, its own ready nodes by `kind`, made when first read
        self._by_gpus = NodeGroups(self._gpus_key, topology.nodes)
        # Per domain and pod shape, the least one pod adds to the fragmentation under it, and the pod mix's epoch
        # it was scored in (`placement._Trial.least_fragmenting`): until a node under it changes.
        self._least: dict[str, dict[Shape, tuple[int, float]]] = {}
        self._node_max: dict[str, Resources] = {}  # per parent domain: most free on one of its ready nodes
        # `gpu_free_nodes`' counts, and each node's part in them, brought up to date for the nodes changed since
        self._gpu_counts: dict[int, int] = {}
        self._gpu_part: dict[str, tuple[int, int]] = {}
        self._gpu_stale: set[str] = set(topology.nodes)
        self._stale_node_max: set[str] = set(topology.domains)
        self._domain_rows: dict[str, np.ndarray] = {}  # per domain, its own nodes' rows in the free array
        self._node_capacity: Resources | None = None  # the most one node has of each resource
        self._domain_free: np.ndarray | None = None  # `domain_free` as one array, a row per domain (`summary`)
        self._tier_largest: dict[int, Resources] = {}  # per tier, the most one of its domains has at all
        self._domain_watchers: list[set[str]] = []  # `watch_domains`
        for name, node in topology.nodes.items():
            self._add_up(name, node.allocatable, self.domain_allocatable)
            self._add_up(name, node.allocatable, self.domain_free)
            _add(self.ready_allocatable, node.allocatable)
        # The same free resources as one array, a row per node: a shape not counted yet is counted on every
        # node and summed up the tree at once (a cold count, node by node, is most of a placement on 50,000).
        self._rows = {n: i for i, n in enumerate(sorted(topology.nodes))}
        resources = sorted({r for n in topology.nodes.values() for r in n.allocatable})
        self._columns = {r: k for k, r in enumerate(resources)}
        self._free = np.zeros((len(self._rows), len(self._columns)), dtype=np.int64)
        for name, i in self._rows.items():
            for resource, amount in topology.nodes[name].allocatable.items():
                self._free[i, self._columns[resource]] = amount
        self._ready = np.ones(len(self._rows), dtype=bool)
        self._allowed: dict[tuple[Any, ...], np.ndarray] = {}  # (selector, tolerations) -> nodes it admits
        self._tainted = {i: n for n, i in self._rows.items() if topology.nodes[n].taints}  # row -> node
        self._domain_list = list(topology.domains)
        domain_row = {d: i for i, d in enumerate(self._domain_list)}
        self._domain_row = domain_row
        self._domain_free = np.zeros((len(self._domain_list), len(self._columns)), dtype=np.int64)
        for domain, free in self.domain_free.items():
            for resource, amount in free.items():
                self._domain_free[domain_row[domain], self._columns[resource]] = amount
        self._tiers = {t: topology.of_tier(t) for t in topology.tiers()}  # lowest first, each tier's by name
        self._tier_rows = {t: np.array([domain_row[d.name] for d in domains], dtype=np.int64)
                           for t, domains in self._tiers.items()}
        self._parent_row = np.array([domain_row[topology.node_parent[n]] for n in sorted(topology.nodes)],
                                    dtype=np.int64)
        # children before parents: a HyperNode's members are of lower tiers, the virtual root is above all
        self._bottom_up = [(domain_row[d.name], [domain_row[c] for c in d.children])
                           for d in sorted(topology.domains.values(), key=lambda d: (d.name == ROOT, d.tier))]
        # Per GPU node: each device's share free (thousandths), by device index; its devices' memory (MiB, 0 unknown).
        # The node's `GPU` free is how many are wholly free, its `SHARE` free their sum: kept so by `allocate`.
        # Nodes whose GPUs NVIDIA's device plugin shares (time-slicing, MPS): the kubelet hands out their replicas,
        # so they have no device table of ours (a fraction placed by device would land on replicas given to others).
        self.sharing: dict[str, Sharing] = {n: shared for n, node in topology.nodes.items()
                                            if (shared := node_sharing(node.labels, node.allocatable))}
        self.devices: dict[str, list[int]] = {
            n: [WHOLE] * node.allocatable[GPU] for n, node in topology.nodes.items()
            if node.allocatable.get(GPU) and not (n in self.sharing and self.sharing[n].resource == GPU)}
        self.device_memory: dict[str, int] = {n: memory_mib(topology.nodes[n].labels)
                                              for n in self.devices}
        self.degraded: dict[str, NodeHealth] = {}  # nodes that work and may fail, and why
        self.degraded_links: dict[str, str] = {}  # HyperNodes whose switches or cables are degraded, and why
        self.behind_links: dict[str, str] = {}  # nodes under a degraded HyperNode -> that HyperNode
        self.failed: dict[str, NodeHealth] = {}  # nodes given nothing for their health (kept not ready)
        self.link_faults: dict[str, str] = {}  # HyperNodes reported degraded themselves (not through a node)
        self.health_version = 0  # counts changes of health, for whoever acts on them
        self._avoid = {level: np.zeros(len(self._rows), dtype=bool) for level in (ANY_SOUND, SOUND_LINKS,
                                                                                  HEALTHY_ONLY)}

    # -- health ----------------------------------------------------------------------------------

    def set_health(self, degraded: dict[str, NodeHealth], links: dict[str, str]) -> bool:
        """The nodes now degraded and the HyperNodes whose links are (a link fault of a node degrades its
        lowest HyperNode); whether anything changed. Rare, so every count is simply forgotten."""
        degraded = {n: h for n, h in degraded.items() if n in self._rows and h.state == DEGRADED}
        links = {d: why for d, why in links.items() if d in self.topology.domains and d != ROOT}
        self.link_faults = dict(links)
        for node, h in degraded.items():
            parent = self.topology.node_parent[node]
            if h.link and parent != ROOT:
                links.setdefault(parent, f"{h.reasons[0] if h.reasons else 'link fault'} on {node}")
        if degraded == self.degraded and links == self.degraded_links:
            return False
        self.health_version += 1
        self.degraded, self.degraded_links = degraded, links
        self.behind_links = {}
        for domain in sorted(links, key=lambda d: -self.topology.domains[d].tier):
            for node in self._under(domain):
                self.behind_links.setdefault(node, domain)
        for level in self._avoid.values():
            level[:] = False
        for node in self.behind_links:
            self._avoid[SOUND_LINKS][self._rows[node]] = True
            self._avoid[HEALTHY_ONLY][self._rows[node]] = True
        for node in degraded:
            self._avoid[HEALTHY_ONLY][self._rows[node]] = True
        self.counts.clear()
        self._least.clear()
        self._stale_node_max.update(self.topology.domains)
        return True

    def avoids(self, node: str, level: int) -> bool:
        """Whether a pod of this health level may not be given `node`."""
        if level == ANY_SOUND:
            return False
        return node in self.behind_links or (level == HEALTHY_ONLY and node in self.degraded)

    def unhealthy(self) -> set[str]:
        return set(self.degraded) | set(self.behind_links)

    def _under(self, domain: str) -> list[str]:
        d = self.topology.domains[domain]
        return [*d.nodes, *(n for c in d.children for n in self._under(c))]

    def nodes_under(self, hypernode: str) -> list[str]:
        """Every node under a HyperNode (KeyError: no such HyperNode)."""
        if hypernode == ROOT:
            raise KeyError(hypernode)
        return sorted(self._under(hypernode))

    def _changed(self, node: str) -> None:
        ancestors = self.topology.ancestors(node)
        self.counts.changed(node, ancestors)
        self.fragmentation.forget(node)
        self.alike.pop(node, None)
        self._by_gpus.changed(node)
        for domain in ancestors:
            self._least.pop(domain, None)
        for watcher in self._domain_watchers:
            watcher.update(ancestors)
        if (kinds := self._kinds.get(self.topology.node_parent[node])) is not None:
            kinds.changed(node)
        self._gpu_stale.add(node)
        self._stale_node_max.add(self.topology.node_parent[node])

    def kind(self, node: str) -> tuple[object, ...]:
        """Everything placement's scores read of a node (free resources, totals, its GPU devices' free shares and
        memory): nodes of one kind score alike, so a cluster of a few kinds of node is scored a few times per pod."""
        made = self.alike.get(node)
        if made is None:
            table = self.devices.get(node)
            made = (tuple(sorted(self.free[node].items())),
                    tuple(sorted(self.topology.nodes[node].allocatable.items())),
                    None if table is None else tuple(table), self.device_memory.get(node, 0))
            self.alike[node] = made
        return made

    def watch_domains(self) -> set[str]:
        """A set of domains the state adds each domain to whose free resources may have changed, starting with
        all of them; its reader takes them out as it reads (the inventory's HyperNodes, made again only for those)."""
        watcher = set(self.topology.domains)
        self._domain_watchers.append(watcher)
        return watcher

    def least_fragmenting(self, domain: str, shape: Shape) -> float | None:
        known = self._least.get(domain, {}).get(shape)
        return known[1] if known is not None and known[0] == self.fragmentation.mix.epoch else None

    def remember_least_fragmenting(self, domain: str, shape: Shape, value: float) -> None:
        self._least.setdefault(domain, {})[shape] = (self.fragmentation.mix.epoch, value)

    def kinds_under(self, domain: str) -> dict[Hashable, SortedList]:
        """The domain's own ready nodes (not its children's) by kind, each kind's in name order."""
        kinds = self._kinds.get(domain)
        if kinds is None:
            kinds = self._kinds[domain] = NodeGroups(lambda n: self.kind(n) if n in self.ready else None,
                                                     self.topology.domains[domain].nodes)
        return kinds.groups()

    def most_free_gpus(self) -> Iterator[str]:
        """The ready nodes that have GPUs, the most free first, then by name."""
        groups = self._by_gpus.groups()
        for key in sorted(groups):
            yield from groups[key]

    def _gpus_key(self, node: str) -> int | None:
        if node not in self.ready or self.topology.nodes[node].allocatable.get(GPU, 0) <= 0:
            return None
        return -self.free[node].get(GPU, 0)

    def _add_up(self, node: str, amounts: Mapping[str, int], table: dict[str, Resources], sign: int = 1) -> None:
        mirror = self._domain_free if table is self.domain_free else None
        for domain in self.topology.ancestors(node):
            totals = table[domain]
            for resource, amount in amounts.items():
                totals[resource] = totals.get(resource, 0) + sign * amount
                if mirror is not None and (column := self._columns.get(resource)) is not None:
                    mirror[self._domain_row[domain], column] += sign * amount

    def allocate(self, node: str, request: Mapping[str, int], sign: int = 1, devices: Sequence[int] | None = None,
                 share: int = WHOLE, gang: int = 1) -> tuple[int, ...]:
        """Book (sign 1) or release (-1) a pod's request on a node; a GPU pod's devices too, `share` of each of
        `devices`. A whole-GPU pod whose devices are not known (another scheduler's) takes the lowest wholly free
        ones on booking, the highest wholly taken on release. `gang`: the pods of its gang, for the pod mix.
        Returns the devices booked."""
        free = self.free.get(node)
        if free is None:  # the node has left the cluster; what was booked on it went with it
            return ()
        table = self.devices.get(node)
        held: tuple[int, ...] = ()
        asked = request
        if table is not None and (devices or request.get(GPU)):
            held, request = self._book_devices(table, request, sign, devices, share)
        self._book(node, free, request, sign, asked, gang)
        return held

    def _book_devices(self, table: list[int], request: Mapping[str, int], sign: int, devices: Sequence[int] | None,
                      share: int) -> tuple[tuple[int, ...], dict[str, int]]:
        """Change the devices' free shares; the request with its `GPU` and `SHARE` as the devices changed."""
        if not devices:
            count = request.get(GPU, 0)
            if sign > 0:
                devices = assign(table, WHOLE, count) or ()
            else:
                devices = [i for i in range(len(table) - 1, -1, -1) if table[i] == 0][:count]
            share = WHOLE
        held = tuple(d for d in devices if 0 <= d < len(table))
        unknown = request.get(GPU, 0) - len(held) if share == WHOLE else 0  # none of its devices free: by count
        whole, shares = take(table, held, share, sign)
        changed = {r: a for r, a in request.items() if r not in (GPU, SHARE)}
        # As booked amounts under `sign`: what the devices lost (booking) or got back (releasing).
        changed[GPU] = whole + max(unknown, 0)
        changed[SHARE] = shares
        return held, changed

    def _book(self, node: str, free: Resources, request: Mapping[str, int], sign: int,
              asked: Mapping[str, int], gang: int = 1) -> None:
        self._shift(node, free, request, sign)
        if sign > 0:
            self.fragmentation.mix.add(asked, gang)

    def _shift(self, node: str, free: Resources, request: Mapping[str, int], sign: int) -> None:
        """Take `request` off the node's free resources (sign 1) or give it back (-1), and off its domains'."""
        row = self._rows[node]
        for resource, amount in request.items():
            free[resource] = free.get(resource, 0) - sign * amount
            column = self._columns.get(resource)
            if column is not None:
                self._free[row, column] -= sign * amount
        _add(self.used, request, sign)
        if node in self.ready:
            self._add_up(node, request, self.domain_free, -sign)
        self._changed(node)

    @contextmanager
    def narrowed(self, resources: Collection[str], available: Mapping[str, Resources]) -> Iterator[None]:
        """For one placement: on every node, each of `resources` free at most as much as `available` says there
        (none where it says nothing). Where a pod's DRA claims have selectors of their own, only some of their
        class's devices can be its: `available` counts those per node (`claims.matching`)."""
        lowered = {node: {r: extra for r in resources if (extra := free.get(r, 0) - available.get(node, {}).get(r, 0))
                          > 0} for node, free in self.free.items()}
        with self.lowered(lowered):
            yield

    @contextmanager
    def lowered(self, amounts: Mapping[str, Resources]) -> Iterator[None]:
        """For one placement: these amounts taken off these nodes' free resources (and their domains'), given back
        after, so that the state is exactly as it was."""
        taken = [(node, dict(request)) for node, request in amounts.items() if request and node in self.free]
        for node, request in taken:
            self._shift(node, self.free[node], request, 1)
        try:
            yield
        finally:
            for node, request in taken:
                self._shift(node, self.free[node], request, -1)

    def release(self, node: str, request: Mapping[str, int], devices: Sequence[int] | None = None,
                share: int = WHOLE) -> None:
        self.allocate(node, request, -1, devices, share)

    def take_over(self, previous: ClusterState) -> None:
        """What `previous` booked on each node that is still here, devices included (a rebuilt state)."""
        for name in self.topology.nodes:
            if name not in previous.free:
                continue
            used = previous.used_on(name)
            before, table = previous.devices.get(name), self.devices.get(name)
            if before is not None and table is not None and len(before) == len(table):
                used = {r: a for r, a in used.items() if r not in (GPU, SHARE)}
                for d, left in enumerate(before):
                    if left < WHOLE:
                        self.allocate(name, {}, 1, (d,), WHOLE - left)
            self.allocate(name, used)

    def gpu_fit(self, node: str, ask: GpuAsk, taken: Mapping[int, int] | None = None) -> int:
        """How many pods of a fractional `ask` the node's devices hold (less `taken` per device)."""
        table = self.devices.get(node)
        if table is None:
            return 0
        free = [f - taken.get(d, 0) for d, f in enumerate(table)] if taken else table
        return fits(free, ask.share_on(self.device_memory.get(node, 0)), ask.devices)

    def refuses(self, node: str, request: Mapping[str, int]) -> str | None:
        """Why a pod asking `request` cannot run on `node` whatever is free there (its GPUs' sharing), or None."""
        shared = self.sharing.get(node)
        return shared.refuses(request) if shared is not None else None

    def used_on(self, node: str) -> Resources:
        """What is booked on a node (its allocatable less what is free)."""
        allocatable, free = self.topology.nodes[node].allocatable, self.free[node]
        return {r: allocatable.get(r, 0) - free.get(r, 0) for r in {*allocatable, *free}
                if allocatable.get(r, 0) != free.get(r, 0)}

    def replace_node(self, node: Node) -> None:
        """The same node with new taints: where pods may go changes, what is free does not."""
        self.topology.nodes[node.name] = node
        self._allowed.clear()
        row = self._rows[node.name]
        if node.taints:
            self._tainted[row] = node.name
        else:
            self._tainted.pop(row, None)
        self._changed(node.name)

    def set_ready(self, node: str, ready: bool) -> None:
        """A node that is not ready offers nothing; its pods' resources stay booked to it."""
        if node not in self.free or ready == (node in self.ready):
            return
        sign = 1 if ready else -1
        if ready:
            self.ready.add(node)
        else:
            self.ready.discard(node)
        self._ready[self._rows[node]] = ready
        self._add_up(node, self.free[node], self.domain_free, sign)
        _add(self.ready_allocatable, self.topology.nodes[node].allocatable, sign)
        self._changed(node)

    def count_everywhere(self, shape: Shape, request: Mapping[str, int], selector: Mapping[str, str],
                         tolerations: tuple[Toleration, ...], level: int = ANY_SOUND, ask: GpuAsk | None = None
                         ) -> None:
        """Remember, for every domain, how many pods of `shape` fit under it: the per-node rule of
        `placement._Trial.fit` (ready, selector, taints tolerated, the scarcest resource), on all nodes at once."""
        key = (tuple(sorted(selector.items())), tolerations)
        allowed = self._allowed.get(key)
        if allowed is None:
            nodes = self.topology.nodes
            allowed = np.array([all(nodes[n].labels.get(k) == v for k, v in selector.items()) for n in self._rows],
                               dtype=bool) if selector else np.ones(len(self._rows), dtype=bool)
            for row, name in self._tainted.items():
                allowed[row] &= tolerates(tolerations, nodes[name].taints)
            self._allowed[key] = allowed
        asked = [(r, a) for r, a in request.items() if a > 0]
        if any(r not in self._columns for r, _ in asked):
            counts = np.zeros(len(self._rows), dtype=np.int64)
        else:
            counts = np.full(len(self._rows), UNLIMITED, dtype=np.int64)
            for resource, amount in asked:
                np.minimum(counts, np.maximum(self._free[:, self._columns[resource]], 0) // amount, out=counts)
        if ask is not None and not ask.whole:  # a fraction: as the node's devices hold it, not their sum
            for node in self.devices:
                row = self._rows[node]
                counts[row] = min(counts[row], self.gpu_fit(node, ask))
        for node, shared in self.sharing.items():
            if shared.refuses(request):
                counts[self._rows[node]] = 0
        counts[~(allowed & self._ready) | self._avoid[level]] = 0
        under = np.bincount(self._parent_row, weights=counts, minlength=len(self._domain_list))
        totals = [round(x) for x in under]  # exact: sums stay far below 2**53
        for row, children in self._bottom_up:
            totals[row] += sum(totals[c] for c in children)
        self.counts.remember(shape)
        cap = self.counts.cap
        for domain, total in zip(self._domain_list, totals, strict=True):
            cap[(domain, shape)] = total

    @functools.cached_property
    def node_label_pairs(self) -> list[str] | None:
        """The label pairs (`key=value`) its nodes carry, but each node's own name, for the federation to check
        pods' nodeSelectors against; None when there are too many to report. Once per topology: a node's labels
        changing rebuilds it."""
        pairs = {f"{k}={v}" for node in self.topology.nodes.values() for k, v in node.labels.items()
                 if k != NODE_OWN_LABEL}
        return sorted(pairs) if len(pairs) <= MAX_REPORTED_NODE_LABELS else None

    def gpu_free_nodes(self) -> list[int]:
        """[f] = ready nodes with exactly f whole GPUs free ([] without GPUs): the federation checks gangs' pods
        against it node by node. An MPS node's free replicas count as that many nodes of one free GPU each: MPS
        gives a pod one replica at most, so they hold that many one-GPU pods and no larger one."""
        counts = self._gpu_counts  # kept: every inventory reads it, and a binding changes a node or two
        for node in self._gpu_stale:
            old = self._gpu_part.pop(node, None)
            if old is not None:
                counts[old[0]] -= old[1]
            part = self._gpu_part_of(node)
            if part is not None:
                counts[part[0]] = counts.get(part[0], 0) + part[1]
                self._gpu_part[node] = part
        self._gpu_stale.clear()
        counts = {f: n for f, n in counts.items() if n}
        self._gpu_counts = counts
        if not counts:
            return []
        return [counts.get(f, 0) for f in range(min(max(counts), MAX_GPUS_PER_NODE) + 1)]

    def _gpu_part_of(self, node: str) -> tuple[int, int] | None:
        """The node's part in `gpu_free_nodes`: (whole GPUs free, nodes) or, on an MPS node, (1, its free
        replicas); None when it is not ready or has no GPUs."""
        if node not in self.ready or not (self.topology.nodes[node].allocatable.get(GPU, 0)
                                          or self.free[node].get(GPU, 0)):
            return None
        free = min(max(self.free[node].get(GPU, 0), 0), MAX_GPUS_PER_NODE)
        shared = self.sharing.get(node)
        if shared is not None and shared.resource == GPU and shared.per_pod == 1:
            return (1, free)
        return (free, 1)

    def summary(self, healthy: bool = False) -> list[TierFree]:
        """For each tier, lowest first, the most of each resource free inside one of its domains, and the
        most one of its domains has at all (what a gang could have once everything running there ends).
        `healthy`: counting only healthy nodes (not degraded, not behind degraded links), as the federation
        prefers clusters where a gang fits on sound hardware.

        Tier 0 is the single node: whether the largest pod fits anywhere at all.
        """
        unhealthy = self.unhealthy() if healthy else set()
        less: dict[str, Resources] = {}  # per domain: what its unhealthy ready nodes have free
        most_on_node: Resources = {}
        if not unhealthy:  # the most free on any ready node, over the free array
            if self._ready.any():
                most_on_node = dict(zip(self._columns, self._free[self._ready].max(0).tolist(), strict=True))
        else:  # per parent domain, the most on one of its healthy ready nodes
            for domain in self._stale_node_max:
                self._node_max[domain] = self._most_on_a_node(domain, set())
            self._stale_node_max.clear()
            node_max = dict(self._node_max)
            for node in unhealthy:
                node_max[self.topology.node_parent[node]] = {}
            for parent in {self.topology.node_parent[n] for n in unhealthy}:
                node_max[parent] = self._most_on_a_node(parent, unhealthy)
            for node in unhealthy & self.ready:
                for domain in self.topology.ancestors(node):
                    _add(less.setdefault(domain, {}), self.free[node])
            for most in node_max.values():
                for resource, amount in most.items():
                    most_on_node[resource] = max(most_on_node.get(resource, 0), amount)
        if self._node_capacity is None:
            self._node_capacity = {}
            for node in self.topology.nodes.values():
                for resource, amount in node.allocatable.items():
                    self._node_capacity[resource] = max(self._node_capacity.get(resource, 0), amount)
        out = [TierFree(0, "node", {r: a for r, a in most_on_node.items() if a > 0}, dict(self._node_capacity))]
        for tier, domains in self._tiers.items():
            most: Resources = {}
            if not less and len(rows := self._tier_rows[tier]):  # over the domains' free array: a few hundred at once
                most = dict(zip(self._columns, self._domain_free[rows].max(0).tolist(), strict=True))
            for d in domains if less else ():
                taken = less.get(d.name, {})
                for resource, amount in self.domain_free[d.name].items():
                    most[resource] = max(most.get(resource, 0), amount - taken.get(resource, 0))
            largest = self._tier_largest.get(tier)
            if largest is None:  # what domains have at all never changes
                largest = self._tier_largest[tier] = {}
                for d in domains:
                    for resource, amount in self.domain_allocatable[d.name].items():
                        largest[resource] = max(largest.get(resource, 0), amount)
            name = domains[0].tier_name if domains else ""
            out.append(TierFree(tier, name, {r: a for r, a in most.items() if a > 0}, dict(largest)))
        return out

    def _most_on_a_node(self, domain: str, skip: set[str]) -> Resources:
        if not skip:  # the common case, over the free array (a flat HyperNode of a thousand nodes, each binding)
            rows = self._domain_rows.get(domain)
            if rows is None:
                rows = self._domain_rows[domain] = np.array(
                    [self._rows[n] for n in self.topology.domains[domain].nodes], dtype=np.int64)
            ready = rows[self._ready[rows]]
            if not len(ready):
                return {}
            return dict(zip(self._columns, self._free[ready].max(0).tolist(), strict=True))
        most: Resources = {}
        for node in self.topology.domains[domain].nodes:
            if node in self.ready and node not in skip:
                for resource, amount in self.free[node].items():
                    most[resource] = max(most.get(resource, 0), amount)
        return most

    def totals(self) -> tuple[Resources, Resources, Resources]:
        """(capacity, allocatable of ready nodes, used) over the whole cluster; GPUs counted as devices (one partly
        used is used) and, in `SHARE`, as the thousandths of them booked (the federation's quotas count those)."""
        return (dict(self.domain_allocatable[ROOT]), {r: a for r, a in self.ready_allocatable.items() if a},
                {r: a for r, a in self.used.items() if a})


def _add(totals: Resources, amounts: Mapping[str, int], sign: int = 1) -> None:
    for resource, amount in amounts.items():
        totals[resource] = totals.get(resource, 0) + sign * amount
