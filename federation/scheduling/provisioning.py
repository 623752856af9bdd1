"""Capacity a cluster's autoscaler can add: where a gang that fits no cluster as it is may be sent, for its agent to
ask for the nodes (cluster-autoscaler's ProvisioningRequest, atomic scale-up) and bind the gang when they join.

Pure. A gang is fitted onto new nodes of one node group alone, as an atomic scale-up asks for one group's nodes:
every pod must fit one new node, and the group must be able to add enough of them for the whole gang. Where the
new nodes join the cluster's network topology is the provider's choice, so a gang with a hard tier limit that
would span several new nodes is not sent to be provisioned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from federation.kernel.resources import GPU
from federation.scheduling.fit import ClusterView, JobView, NodeGroupRoom

__all__ = ["Promised", "Provision", "nodes_for", "provisionable"]


@dataclass(frozen=True, slots=True)
class Provision:
    cluster: str
    group: str
    nodes: int

    @property
    def said(self) -> str:
        return f"on {self.nodes} new node(s) of node group {self.group} that cluster {self.cluster} will provision"


def nodes_for(job: JobView, group: NodeGroupRoom) -> int | None:
    """How many new nodes of the group the whole gang needs, or None when a pod fits none of them."""
    if job.memory_asks:  # sized per device on each cluster: not something a new node's totals say
        return None
    per_node = group.per_node
    if any(a > per_node.get(r, 0) for r, a in job.largest_pod.items() if a):
        return None
    if any(a and not per_node.get(r) for r, a in job.request.items()):
        return None
    nodes = max((math.ceil(a / per_node[r]) for r, a in job.request.items() if a), default=0)
    if job.pod_gpus:  # whole-GPU pods of one size: so many fit a node, whatever is left beside them
        per = per_node.get(GPU, 0) // job.pod_gpus
        pods = job.request.get(GPU, 0) // job.pod_gpus
        nodes = max(nodes, math.ceil(pods / per)) if per else nodes
    return max(nodes, 1)


def provisionable(job: JobView, clusters: Iterable[ClusterView], refused: Mapping[str, str],
                  taken: Mapping[tuple[str, str], int], allowed: Iterable[str] | None = None) -> Provision | None:
    """The node group that can hold the gang on the fewest new nodes (then by cluster and group name), among the
    clusters not refusing it whose labels its cluster selector matches. `taken`: nodes already promised this cycle
    per (cluster, group). `allowed`: the clusters its queue's flavors leave it (None: any)."""
    allowed = set(allowed) if allowed is not None else None
    best: tuple[int, str, str] | None = None
    for view in clusters:
        if not view.node_groups or view.name in refused or (allowed is not None and view.name not in allowed):
            continue
        if any(view.labels.get(k) != v for k, v in job.cluster_selector.items()):
            continue
        for group in view.node_groups:
            nodes = nodes_for(job, group)
            if nodes is None or nodes > group.can_add - taken.get((view.name, group.name), 0):
                continue
            if job.mode == "hard" and nodes > 1:
                continue
            if best is None or (nodes, view.name, group.name) < best:
                best = (nodes, view.name, group.name)
    return Provision(best[1], best[2], best[0]) if best else None


@dataclass
class Promised:
    """Nodes promised to gangs in one cycle, per (cluster, group): one group's room is not promised twice."""

    nodes: dict[tuple[str, str], int] = field(default_factory=dict)

    def take(self, p: Provision) -> None:
        key = (p.cluster, p.group)
        self.nodes[key] = self.nodes.get(key, 0) + p.nodes
