"""Dynamic MIG partitioning: which idle GPUs to repartition, through NVIDIA's MIG manager, for a gang asking for a
MIG profile the cluster has too little of.

NVIDIA's MIG manager applies a named layout to a node's GPUs when the node's `nvidia.com/mig.config` label names it
(its default configurations include `all-<profile>`: every GPU cut into that profile's slices), saying how it went in
`nvidia.com/mig.config.state` (pending, rebooting, success, failed); the device plugin then publishes the slices
(the mixed strategy's `nvidia.com/mig-<profile>` resources). A node is only ever repartitioned whole and idle: GPU
Feature Discovery says it is MIG-capable and runs the mixed strategy (the single strategy names no profile), it is
ready, nothing on it holds a GPU or a slice, and the MIG manager has not failed on it. Pure: no I/O, ties broken
by node name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from federation.kernel.resources import GPU, MIG_PROFILE, SHARE, Resources
from federation.kernel.tiers import TierFree
from member_agent.devices import COUNT_LABEL, memory_mib
from member_agent.topology import ROOT

if TYPE_CHECKING:
    from member_agent.state import ClusterState
    from member_agent.topology import Node, Topology

CONFIG_LABEL = "nvidia.com/mig.config"  # the layout the MIG manager is to apply
STATE_LABEL = "nvidia.com/mig.config.state"  # how applying it went, as the MIG manager says
CAPABLE_LABEL = "nvidia.com/mig.capable"  # GPU Feature Discovery: the node's GPUs can be partitioned
STRATEGY_LABEL = "nvidia.com/mig.strategy"
BUSY = ("pending", "rebooting")  # the node is being repartitioned: nothing is placed on it meanwhile
FAILED = "failed"
WHOLE_CONFIG = "all-disabled"  # MIG off: whole GPUs

# Slices of each profile one GPU is cut into, by the GPU's memory (GB) as NVIDIA's MIG user guide lists them.
LAYOUTS: dict[int, dict[str, int]] = {
    24: {"1g.6gb": 4, "2g.12gb": 2, "4g.24gb": 1},  # A30
    40: {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},  # A100 40GB
    80: {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},  # A100/H100 80GB
    94: {"1g.12gb": 7, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1},  # H100 NVL
    141: {"1g.18gb": 7, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1},  # H200
}


def config_for(profile: str) -> str:
    """The MIG manager's default configuration cutting every GPU of a node into `profile`."""
    return f"all-{profile}"


def profile_of(resource: str) -> str | None:
    return resource[len(MIG_PROFILE):] if resource.startswith(MIG_PROFILE) else None


def slices_per_gpu(memory_mib: int) -> Mapping[str, int]:
    """The profiles a GPU of this much memory is cut into, and how many of each; none if its memory is unknown."""
    if memory_mib <= 0:
        return {}
    gb = memory_mib / 1024
    return LAYOUTS[min(LAYOUTS, key=lambda size: (abs(size - gb), size))]


def reconfiguring(labels: Mapping[str, str]) -> bool:
    return labels.get(STATE_LABEL, "") in BUSY


@dataclass(frozen=True)
class Candidate:
    """An idle MIG-capable node: its GPUs, their memory (MiB) and the layout it has now."""

    node: str
    gpus: int
    memory_mib: int
    config: str

    def yields(self, profile: str) -> int:
        return self.gpus * slices_per_gpu(self.memory_mib).get(profile, 0)

    @property
    def whole(self) -> bool:
        """Its GPUs are whole now (cutting them takes whole GPUs away from whole-GPU work)."""
        return self.config in ("", WHOLE_CONFIG)


def _gpu_resource(resource: str) -> bool:
    return resource in (GPU, SHARE) or resource.startswith(MIG_PROFILE)


_capable: list[tuple[Topology, tuple[str, ...]]] = []  # the last topology seen and its MIG-capable nodes


def _capable_nodes(topology: Topology) -> tuple[str, ...]:
    """Nodes whose labels allow cutting (labels change only with a new topology): remembered for the last one, as
    every inventory asks (a cluster may have 50,000 nodes and none of them MIG-capable)."""
    if not _capable or _capable[0][0] is not topology:
        _capable[:] = [(topology, tuple(sorted(
            n for n, node in topology.nodes.items()
            if node.labels.get(CAPABLE_LABEL) == "true" and node.labels.get(STRATEGY_LABEL) == "mixed")))]
    return _capable[0][1]


def candidates(state: ClusterState) -> list[Candidate]:
    """The nodes that could be repartitioned now, by name."""
    out = []
    for name in _capable_nodes(state.topology):
        node = state.topology.nodes[name]
        labels = node.labels
        if name not in state.ready or reconfiguring(labels) or labels.get(STATE_LABEL) == FAILED:
            continue  # a failed node is left alone until someone looks (and relabels it)
        if any(amount > 0 and _gpu_resource(r) for r, amount in state.used_on(name).items()):
            continue
        if found := _candidate(node):
            out.append(found)
    return out


def underway(state: ClusterState) -> list[Candidate]:
    """The nodes being repartitioned now, each with the configuration it is being given: what a gang asking for
    those slices may wait for (an agent that restarted while it waited finds them so), by name."""
    out = []
    for name in _capable_nodes(state.topology):
        node = state.topology.nodes[name]
        if reconfiguring(node.labels) and node.labels.get(CONFIG_LABEL, "").startswith("all-") and (
                found := _candidate(node)):
            out.append(found)
    return out


def _candidate(node: Node) -> Candidate | None:
    memory = memory_mib(node.labels)
    count = node.labels.get(COUNT_LABEL, "")
    gpus = int(count) if count.isdigit() else node.allocatable.get(GPU, 0)
    if not gpus:  # cut already: as many GPUs as its slices of one profile say
        gpus = max((-(-a // per) for r, a in node.allocatable.items()
                    if (p := profile_of(r)) and (per := slices_per_gpu(memory).get(p, 0))), default=0)
    return Candidate(node.name, gpus, memory, node.labels.get(CONFIG_LABEL, "")) if gpus and slices_per_gpu(
        memory) else None


def shortfall(wanted: Mapping[str, int], free: Mapping[str, int]) -> dict[str, int]:
    """The slices of each profile a gang asks for beyond what is free (the cluster's, or one HyperNode's, ready
    nodes)."""
    return {r: a - free.get(r, 0) for r, a in sorted(wanted.items())
            if profile_of(r) and a > free.get(r, 0)}


def plan(short: Mapping[str, int], nodes: Sequence[Candidate], cutting: Sequence[Candidate] = ()
         ) -> dict[str, str] | None:
    """The layouts to apply (node -> MIG manager configuration) so the missing slices exist, or None if the idle
    MIG-capable nodes cannot make them. Each profile in name order first counts the nodes being cut into it already
    (`cutting`, from `underway`), then takes, while one node would cover what is still missing, the one that covers
    it with fewest slices (the least cut: already-cut nodes before whole ones), else the node yielding most (fewest
    nodes touched)."""
    left = list(nodes)
    layouts: dict[str, str] = {}
    for resource, amount in sorted(short.items()):
        profile = profile_of(resource)
        if profile is None:
            return None
        for c in cutting:
            if amount > 0 and c.config == config_for(profile):
                layouts[c.node] = c.config
                amount -= c.yields(profile)
        usable = [c for c in left if c.yields(profile) > 0]
        while amount > 0:
            if not usable:
                return None
            covering = [c for c in usable if c.yields(profile) >= amount]
            pick = (min(covering, key=lambda c: (c.yields(profile), c.whole, c.node)) if covering
                    else min(usable, key=lambda c: (-c.yields(profile), c.whole, c.node)))
            usable.remove(pick)
            left.remove(pick)
            layouts[pick.node] = config_for(profile)
            amount -= pick.yields(profile)
    return layouts


def plan_for(wanted: Mapping[str, int], state: ClusterState, highest_tier: int | None = None
             ) -> dict[str, str] | None:
    """`plan` for a gang asking for `wanted` in this cluster; a hard gang's (`highest_tier`) under one HyperNode of
    its tier, counting the slices published there, in the HyperNode where fewest nodes are cut (then by name), so
    the gang fits there once they are."""
    nodes, cutting = candidates(state), underway(state)
    domains = state.topology.of_tier(highest_tier) if highest_tier is not None else []
    if not domains:
        short = shortfall(wanted, state.domain_free[ROOT])
        return plan(short, nodes, cutting) if short else None
    best: tuple[tuple[int, str], dict[str, str]] | None = None
    for domain in domains:
        short = shortfall(wanted, state.domain_free[domain.name])
        under = set(state.nodes_under(domain.name))
        layouts = plan(short, [c for c in nodes if c.node in under], [c for c in cutting if c.node in under]
                       ) if short else None
        if layouts is not None and (best is None or (len(layouts), domain.name) < best[0]):
            best = ((len(layouts), domain.name), layouts)
    return best[1] if best else None


def partitionable(state: ClusterState) -> list[TierFree]:
    """Per tier, lowest first (tier 0: one node), the most slices of each profile one domain's idle MIG-capable
    nodes could be repartitioned into: what the federation may send here beyond the slices published."""
    per_node = {c.node: {f"{MIG_PROFILE}{p}": c.gpus * n for p, n in slices_per_gpu(c.memory_mib).items()}
                for c in candidates(state)}
    if not per_node:
        return []
    sums: dict[str, Resources] = {}
    for node, amounts in per_node.items():
        for domain in state.topology.ancestors(node):
            total = sums.setdefault(domain, {})
            for r, a in amounts.items():
                total[r] = total.get(r, 0) + a
    out = [TierFree(0, "node", _most(per_node.values()), _most(per_node.values()))]
    for tier in state.topology.tiers():
        domains = state.topology.of_tier(tier)
        most = _most(sums[d.name] for d in domains if d.name in sums)
        out.append(TierFree(tier, domains[0].tier_name if domains else "", most, most))
    return out


def _most(amounts: Iterable[Mapping[str, int]]) -> Resources:
    out: Resources = {}
    for each in amounts:
        for r, a in each.items():
            out[r] = max(out.get(r, 0), a)
    return out
