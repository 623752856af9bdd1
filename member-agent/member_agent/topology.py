"""The cluster's network topology: nodes under Volcano HyperNodes, under a virtual root.

Pure data and functions. Built from Node and HyperNode manifests (or from node labels when a
cluster has no HyperNode objects, as Volcano's label discoverer does), validated as a whole, and
then carried by `ClusterState`, which keeps each domain's free resources current as pods come
and go, so that placement never has to re-add a subtree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federation.kernel.gpuask import GPU, WHOLE
from federation.kernel.resources import SHARE, QuantityError, Resources, parse_amount

ROOT = "<cluster>"  # the virtual root above the highest tier; holds every node
HYPERNODE_API = "topology.volcano.sh/v1alpha1"


class TopologyError(ValueError):
    """A topology that cannot be used; the message names the HyperNode or node at fault."""


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: str = ""  # Equal (the default) | Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes' rule: effects match (or none given); an empty key with Exists matches every key."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


def tolerates(tolerations: Sequence[Toleration], taints: Sequence[Taint]) -> bool:
    """Whether a pod with `tolerations` may be placed on a node with `taints` (PreferNoSchedule never forbids)."""
    return all(any(t.tolerates(taint) for t in tolerations) for taint in taints if taint.effect != "PreferNoSchedule")


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str]
    allocatable: Resources
    taints: tuple[Taint, ...] = ()


@dataclass(frozen=True)
class Selector:
    """One HyperNode member selector: exactMatch, regexMatch or labelMatch."""

    exact: str | None = None
    regex: str | None = None
    labels: Mapping[str, str] | None = None

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        if self.exact is not None:
            return name == self.exact
        if self.regex is not None:
            return re.search(self.regex, name) is not None  # Go's MatchString, as Volcano: not anchored
        return all(labels.get(k) == v for k, v in (self.labels or {}).items())


@dataclass(frozen=True)
class Member:
    kind: str  # "Node" | "HyperNode"
    selector: Selector


@dataclass(frozen=True)
class HyperNodeSpec:
    name: str
    tier: int
    tier_name: str
    members: tuple[Member, ...]


@dataclass
class Domain:
    """A HyperNode (or the virtual root) once the tree is built."""

    name: str
    tier: int
    tier_name: str
    parent: str | None = None
    children: list[str] = field(default_factory=list)  # child domains, sorted by name
    nodes: list[str] = field(default_factory=list)  # nodes directly under it, sorted by name


@dataclass
class Topology:
    nodes: dict[str, Node]
    domains: dict[str, Domain]
    node_parent: dict[str, str]
    tier_names: dict[str, int]  # tierName -> tier
    # What is odd but not wrong, as in Volcano: a member selector no Node or HyperNode matches (yet) leaves
    # its HyperNode without it; the agent logs these.
    notes: list[str] = field(default_factory=list)

    @property
    def root(self) -> Domain:
        return self.domains[ROOT]

    def tiers(self) -> list[int]:
        return sorted({d.tier for d in self.domains.values()})

    def of_tier(self, tier: int) -> list[Domain]:
        return sorted((d for d in self.domains.values() if d.tier == tier), key=lambda d: d.name)

    def ancestors(self, node: str) -> list[str]:
        """Domains above `node`, lowest first, ending at the root."""
        out = []
        current: str | None = self.node_parent[node]
        while current is not None:
            out.append(current)
            current = self.domains[current].parent
        return out

    def above(self, domain: str) -> list[str]:
        """Domains strictly above `domain`, lowest first."""
        out = []
        current = self.domains[domain].parent
        while current is not None:
            out.append(current)
            current = self.domains[current].parent
        return out

    def lowest_common_domain(self, nodes: Iterable[str]) -> str:
        paths = [self.ancestors(n) for n in nodes]
        if not paths:
            return ROOT
        common = set(paths[0]).intersection(*map(set, paths[1:]))
        return next(d for d in paths[0] if d in common)


def _selector(data: Mapping[str, Any], where: str) -> Selector:
    if "exactMatch" in data:
        return Selector(exact=str((data["exactMatch"] or {}).get("name", "")))
    if "regexMatch" in data:
        pattern = str((data["regexMatch"] or {}).get("pattern", ""))
        try:
            re.compile(pattern)
        except re.error as err:
            raise TopologyError(f"{where}: invalid regexMatch pattern {pattern!r}: {err}") from None
        return Selector(regex=pattern)
    if "labelMatch" in data:
        labels = (data["labelMatch"] or {}).get("matchLabels") or {}
        return Selector(labels={str(k): str(v) for k, v in labels.items()})
    raise TopologyError(f"{where}: selector needs exactMatch, regexMatch or labelMatch")


def parse_hypernode(obj: Mapping[str, Any]) -> HyperNodeSpec:
    name = str((obj.get("metadata") or {}).get("name", ""))
    where = f"HyperNode {name!r}"
    if not name:
        raise TopologyError("a HyperNode has no metadata.name")
    spec = obj.get("spec") or {}
    tier = spec.get("tier")
    if isinstance(tier, bool) or not isinstance(tier, int) or tier < 1:
        raise TopologyError(f"{where}: spec.tier must be a positive integer, got {tier!r}")
    members = []
    for i, m in enumerate(spec.get("members") or []):
        kind = (m or {}).get("type", "")
        if kind not in ("Node", "HyperNode"):
            raise TopologyError(f"{where}: members[{i}].type must be Node or HyperNode, got {kind!r}")
        members.append(Member(kind, _selector((m or {}).get("selector") or {}, f"{where} members[{i}]")))
    if not members:
        raise TopologyError(f"{where}: has no members")
    return HyperNodeSpec(name, tier, str(spec.get("tierName", "")), tuple(members))


def parse_node(obj: Mapping[str, Any]) -> Node:
    meta = obj.get("metadata") or {}
    name = str(meta.get("name", ""))
    if not name:
        raise TopologyError("a Node has no metadata.name")
    allocatable: Resources = {}
    for resource, quantity in ((obj.get("status") or {}).get("allocatable") or {}).items():
        try:
            amount = parse_amount(str(resource), quantity)
        except QuantityError as err:
            raise TopologyError(f"Node {name!r}: status.allocatable.{resource}: {err}") from None
        if amount:
            allocatable[str(resource)] = amount
    taints = tuple(Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
                   for t in (obj.get("spec") or {}).get("taints") or [] if isinstance(t, Mapping))
    if allocatable.get(GPU):
        allocatable[SHARE] = allocatable[GPU] * WHOLE
    return Node(name, {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}, allocatable, taints)


def _matching(selector: Selector, candidates: Mapping[str, Mapping[str, str]]) -> list[str]:
    if selector.exact is not None:  # the common case, and a lookup rather than a scan
        return [selector.exact] if selector.exact in candidates else []
    return [name for name, labels in candidates.items() if selector.matches(name, labels)]


def one_tree(nodes: Sequence[Node], hypernodes: Sequence[HyperNodeSpec]) -> tuple[list[HyperNodeSpec], list[str]]:
    """The HyperNodes of one tree over each node, and a note for each tree left out.

    Volcano's discoverers may write two trees over the same nodes (its label discoverer, one per topology
    type, each with its own tier names); Volcano's scheduler keeps both. Placement here works on one tree per
    cluster, so the trees (HyperNodes joined by membership) are taken largest first, and one that covers a node
    an earlier tree covers with other tier names is left out, said in a note (a job naming its tiers then fits
    nowhere and says so). HyperNodes of the same tier names claiming one node stay an error for `build`."""
    node_labels = {n.name: n.labels for n in nodes}
    hypernode_labels: dict[str, Mapping[str, str]] = {h.name: {} for h in hypernodes}
    root = {h.name: h.name for h in hypernodes}

    def find(name: str) -> str:
        while root[name] != name:
            root[name] = root[root[name]]
            name = root[name]
        return name

    covered: dict[str, set[str]] = {h.name: set() for h in hypernodes}
    for h in hypernodes:
        for member in h.members:
            if member.kind == "HyperNode":
                for child in _matching(member.selector, hypernode_labels):
                    root[find(child)] = find(h.name)
            else:
                covered[h.name].update(_matching(member.selector, node_labels))
    trees: dict[str, list[HyperNodeSpec]] = {}
    for h in hypernodes:
        trees.setdefault(find(h.name), []).append(h)
    kept: list[HyperNodeSpec] = []
    taken: set[str] = set()
    dropped: dict[tuple[str, ...], list[str]] = {}  # tier names -> the HyperNodes left out with them
    order = sorted(trees.values(), key=lambda t: (-len(t), sorted({h.tier_name for h in t}), sorted(h.name for h in t)))
    kept_tiers: set[str] = set()
    for tree in order:
        under = set().union(*(covered[h.name] for h in tree))
        tiers = {h.tier_name for h in tree}
        if under & taken and not tiers & kept_tiers:  # another topology type's tree, not a clash within one
            dropped.setdefault(tuple(sorted(tiers)), []).extend(h.name for h in tree)
            continue
        kept.extend(tree)
        taken |= under
        kept_tiers |= tiers
    notes = [f"{len(names)} HyperNodes of tier names {', '.join(n or '(none)' for n in tiers)} (e.g. "
             f"{sorted(names)[0]!r}) are a second tree over nodes another tree holds: left out (one tree per "
             "cluster here)" for tiers, names in sorted(dropped.items())]
    return kept, notes


def build(nodes: Sequence[Node], hypernodes: Sequence[HyperNodeSpec]) -> Topology:
    """Build and validate the tree; every problem found is reported, each naming its HyperNode. A member that
    matches nothing is only noted: Volcano's HyperNodes may name nodes before they join (or after they left)."""
    problems: list[str] = []
    hypernodes, notes = one_tree(nodes, hypernodes)
    by_name = {n.name: n for n in nodes}
    if len(by_name) != len(nodes):
        problems.append("two Nodes share a name")
    specs = {h.name: h for h in hypernodes}
    if len(specs) != len(hypernodes):
        problems.append("two HyperNodes share a name")
    domains = {h.name: Domain(h.name, h.tier, h.tier_name) for h in hypernodes}
    node_parent: dict[str, str] = {}
    domain_parent: dict[str, str] = {}
    node_labels = {n.name: n.labels for n in nodes}
    hypernode_labels: dict[str, Mapping[str, str]] = {h.name: {} for h in hypernodes}
    for h in sorted(hypernodes, key=lambda h: h.name):
        for i, member in enumerate(h.members):
            candidates, owners = (node_labels, node_parent) if member.kind == "Node" else (hypernode_labels,
                                                                                              domain_parent)
            matched = _matching(member.selector, candidates)
            if not matched:
                notes.append(f"HyperNode {h.name!r}: members[{i}] ({member.kind}) matches nothing (yet)")
            for name in matched:
                if member.kind == "HyperNode":
                    if name == h.name:
                        problems.append(f"HyperNode {h.name!r}: lists itself as a member")
                        continue
                    if specs[name].tier >= h.tier:
                        problems.append(f"HyperNode {h.name!r} (tier {h.tier}) has member {name!r} of tier "
                                        f"{specs[name].tier}; members must be of a lower tier")
                previous = owners.get(name)
                if previous is not None and previous != h.name:
                    problems.append(f"{member.kind} {name!r} is under two HyperNodes: {previous!r} and {h.name!r}")
                owners[name] = h.name
    tier_names: dict[str, int] = {}
    for h in hypernodes:
        if h.tier_name and tier_names.setdefault(h.tier_name, h.tier) != h.tier:
            problems.append(f"HyperNode {h.name!r}: tierName {h.tier_name!r} is used for tiers "
                            f"{tier_names[h.tier_name]} and {h.tier}")
    # Cycles cannot survive the strictly-decreasing tier rule, but check the walk up anyway.
    for start in domain_parent:
        seen, current = {start}, domain_parent.get(start)
        while current is not None:
            if current in seen:
                problems.append(f"HyperNode {start!r} is part of a cycle")
                break
            seen.add(current)
            current = domain_parent.get(current)
    if problems:
        raise TopologyError("; ".join(dict.fromkeys(problems)))

    top = max((h.tier for h in hypernodes), default=0)
    domains[ROOT] = Domain(ROOT, top + 1, "cluster")
    for child, parent in domain_parent.items():
        domains[child].parent = parent
    for d in domains.values():
        if d.name != ROOT and d.parent is None:
            d.parent = ROOT
        if d.parent is not None:
            domains[d.parent].children.append(d.name)
    for n in nodes:
        parent = node_parent.setdefault(n.name, ROOT)  # a node no HyperNode lists hangs off the root
        domains[parent].nodes.append(n.name)
    for d in domains.values():
        d.children.sort()
        d.nodes.sort()
    return Topology(by_name, domains, node_parent, tier_names, notes)


def discover_from_labels(nodes: Sequence[Node], keys: Sequence[str]) -> Topology:
    """Volcano's label discovery: `keys` from the widest domain to the closest (e.g. zone, spine, leaf).

    The last key is tier 1. A node missing a key is attached to the deepest domain it has.
    """
    return build(nodes, label_hypernodes(nodes, keys))


def label_hypernodes(nodes: Sequence[Node], keys: Sequence[str]) -> list[HyperNodeSpec]:
    """The HyperNodes node labels describe: one per value of each key, named `<key's last part>-<value>`,
    members by exact name (what the agent writes to the cluster when it discovers the topology)."""
    hypernodes: dict[str, tuple[int, str, set[str], set[str]]] = {}  # name -> tier, tierName, nodes, children
    tier_of = {key: len(keys) - i for i, key in enumerate(keys)}
    for n in nodes:
        parent: str | None = None
        for key in keys:
            if key not in n.labels:
                break
            name = f"{key.rsplit('/', 1)[-1]}-{n.labels[key]}".lower()
            name = re.sub(r"[^a-z0-9-]", "-", name).strip("-")[:253]
            tier, _, members, children = hypernodes.setdefault(name, (tier_of[key], key, set(), set()))
            if parent is not None:
                hypernodes[parent][3].add(name)
            parent = name
        if parent is not None:
            hypernodes[parent][2].add(n.name)
    specs = []
    for name, (tier, key, members, children) in sorted(hypernodes.items()):
        specs.append(HyperNodeSpec(name, tier, key.rsplit("/", 1)[-1], tuple(
            [Member("Node", Selector(exact=m)) for m in sorted(members)]
            + [Member("HyperNode", Selector(exact=c)) for c in sorted(children)])))
    return specs


def _items(objects: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    """Objects as kubectl reads them: empty documents skipped, a `List` (what `kubectl get -o yaml` prints)
    read as its items."""
    for obj in objects:
        if not isinstance(obj, Mapping):
            continue
        if str(obj.get("kind", "")).endswith("List") and isinstance(obj.get("items"), list):
            yield from _items(obj["items"])
        else:
            yield obj


def load_objects(
    objects: Iterable[Any],
) -> tuple[list[Node], list[HyperNodeSpec], list[Mapping[str, Any]]]:
    """Split a cluster description into Nodes, HyperNodes and bound Pods (other kinds are ignored)."""
    nodes, hypernodes, pods = [], [], []
    for obj in _items(objects):
        kind = obj.get("kind")
        if kind == "Node":
            nodes.append(parse_node(obj))
        elif kind == "HyperNode":
            hypernodes.append(parse_hypernode(obj))
        elif kind == "Pod":
            pods.append(obj)
    return nodes, hypernodes, pods
