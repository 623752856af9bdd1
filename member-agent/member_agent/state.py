"""What is free where, kept current as pods are bound and released.

Each domain's free total is the sum over its ready nodes; binding or releasing a pod touches the
node and its few ancestors only, so the per-tier summary sent to the server is cheap to refresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from federation.resources import Resources
from member_agent.topology import ROOT, Topology


@dataclass(frozen=True)
class TierFree:
    tier: int
    tier_name: str
    max_free: Resources  # per resource, the most free inside one domain of this tier


class ClusterState:
    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.free: dict[str, Resources] = {n: dict(node.allocatable) for n, node in topology.nodes.items()}
        self.ready: set[str] = set(topology.nodes)
        self.domain_free: dict[str, Resources] = {d: {} for d in topology.domains}
        self.domain_allocatable: dict[str, Resources] = {d: {} for d in topology.domains}
        for name, node in topology.nodes.items():
            self._add_up(name, node.allocatable, self.domain_allocatable)
            self._add_up(name, node.allocatable, self.domain_free)

    def _add_up(self, node: str, amounts: Mapping[str, int], table: dict[str, Resources], sign: int = 1) -> None:
        for domain in self.topology.ancestors(node):
            totals = table[domain]
            for resource, amount in amounts.items():
                totals[resource] = totals.get(resource, 0) + sign * amount

    def allocate(self, node: str, request: Mapping[str, int]) -> None:
        free = self.free[node]
        for resource, amount in request.items():
            free[resource] = free.get(resource, 0) - amount
        if node in self.ready:
            self._add_up(node, request, self.domain_free, -1)

    def release(self, node: str, request: Mapping[str, int]) -> None:
        free = self.free[node]
        for resource, amount in request.items():
            free[resource] = free.get(resource, 0) + amount
        if node in self.ready:
            self._add_up(node, request, self.domain_free)

    def set_ready(self, node: str, ready: bool) -> None:
        """A node that is not ready offers nothing; its pods' resources stay booked to it."""
        if ready == (node in self.ready):
            return
        if ready:
            self.ready.add(node)
            self._add_up(node, self.free[node], self.domain_free)
        else:
            self.ready.discard(node)
            self._add_up(node, self.free[node], self.domain_free, -1)

    def summary(self) -> list[TierFree]:
        """For each tier, lowest first, the most of each resource free inside one of its domains.

        Tier 0 is the single node: whether the largest pod fits anywhere at all.
        """
        most_on_node: Resources = {}
        for node in self.ready:
            for resource, amount in self.free[node].items():
                most_on_node[resource] = max(most_on_node.get(resource, 0), amount)
        out = [TierFree(0, "node", {r: a for r, a in most_on_node.items() if a > 0})]
        for tier in self.topology.tiers():
            domains = self.topology.of_tier(tier)
            most: Resources = {}
            for d in domains:
                for resource, amount in self.domain_free[d.name].items():
                    most[resource] = max(most.get(resource, 0), amount)
            name = domains[0].tier_name if domains else ""
            out.append(TierFree(tier, name, {r: a for r, a in most.items() if a > 0}))
        return out

    def totals(self) -> tuple[Resources, Resources, Resources]:
        """(capacity, allocatable of ready nodes, used) over the whole cluster."""
        capacity = dict(self.domain_allocatable[ROOT])
        allocatable: Resources = {}
        for node in self.ready:
            for resource, amount in self.topology.nodes[node].allocatable.items():
                allocatable[resource] = allocatable.get(resource, 0) + amount
        used = {r: capacity[r] - sum(self.free[n].get(r, 0) for n in self.free) for r in capacity}
        return capacity, allocatable, {r: a for r, a in used.items() if a}
