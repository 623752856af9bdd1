"""The simulated federation a trace is replayed on: member clusters of 8-GPU nodes in spine-leaf
HyperNode trees, sized so that the trace's GPU demand is a chosen fraction of their capacity.

Each of the `clusters` member clusters has `spines` spines (tier 2) of `leaves` leaves (tier 1) of
`nodes` nodes; `nodes` per leaf is what the load sets. The topology-off baseline places on the same
nodes, by the same names, with no HyperNodes at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from member_agent.clusters import node, tree
from member_agent.simulated import load_cluster
from member_agent.state import ClusterState

GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Shape:
    clusters: int = 3
    spines: int = 2
    leaves: int = 2  # per spine
    nodes: int = 16  # per leaf

    @property
    def gpus(self) -> int:
        return self.clusters * self.spines * self.leaves * self.nodes * GPUS_PER_NODE

    @property
    def leaf_gpus(self) -> int:
        return self.nodes * GPUS_PER_NODE


def shape_for(demand_gpus: float, load: float, clusters: int = 3, spines: int = 2, leaves: int = 2) -> Shape:
    """Nodes per leaf so that the average demand over capacity is closest to `load`."""
    leaves_total = clusters * spines * leaves
    nodes = max(1, round(demand_gpus / load / GPUS_PER_NODE / leaves_total))
    return Shape(clusters, spines, leaves, nodes)


def cluster_names(shape: Shape) -> list[str]:
    return [f"c{i}" for i in range(shape.clusters)]


def build(shape: Shape, topology: bool = True) -> dict[str, ClusterState]:
    """The member clusters' states; without `topology`, the same nodes and no HyperNodes."""
    out = {}
    for name in cluster_names(shape):
        objects = tree(f"{name}-", [shape.spines, shape.leaves, shape.nodes], {GPU: str(GPUS_PER_NODE)},
                       tier_names=["spine", "leaf"])
        if not topology:
            objects = [node(o["metadata"]["name"], {GPU: str(GPUS_PER_NODE)}) for o in objects if o["kind"] == "Node"]
        out[name] = load_cluster(objects)
    return out


def leaf_of(node_name: str) -> str:
    """The tier-1 HyperNode of a node of `tree`: its name without the last `-index`."""
    return node_name.rsplit("-", 1)[0]
