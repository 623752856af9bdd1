"""Cluster descriptions as Kubernetes objects (Nodes, HyperNodes, bound Pods), KWOK-style.

The example clusters in `examples/clusters/`, the tests and the benchmarks are all made here,
so they describe topology the same way a real cluster's HyperNode objects do.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from member_agent.topology import HYPERNODE_API

Obj = dict[str, Any]


def node(name: str, allocatable: Mapping[str, str], labels: Mapping[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels or {})},
            "status": {"allocatable": dict(allocatable)}}


def hypernode(name: str, tier: int, tier_name: str, members: Sequence[str], kind: str) -> Obj:
    return {"apiVersion": HYPERNODE_API, "kind": "HyperNode", "metadata": {"name": name},
            "spec": {"tier": tier, "tierName": tier_name, "members": [
                {"type": kind, "selector": {"exactMatch": {"name": m}}} for m in members]}}


def pod(name: str, node_name: str, requests: Mapping[str, str]) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node_name,
                     "containers": [{"name": "main", "resources": {"requests": dict(requests)}}]}}


def tree(prefix: str, fanout: Sequence[int], allocatable: Mapping[str, str], labels: Mapping[str, str] | None = None,
         tier_names: Sequence[str] | None = None) -> list[Obj]:
    """A regular tree: `fanout[0]` top domains, ..., `fanout[-1]` nodes per tier-1 domain.

    `tree("h", [2, 4, 4], ...)`: 2 spines (tier 2) x 4 leaves (tier 1) x 4 nodes = 32 nodes.
    """
    tiers = len(fanout) - 1
    names = list(tier_names or [f"tier{t}" for t in range(tiers, 0, -1)])
    objs: list[Obj] = []

    def build(path: str, level: int) -> str:  # level 0: the top domains
        tier = tiers - level
        if tier == 0:
            objs.append(node(path, allocatable, labels))
            return path
        children = [build(f"{path}-{i}", level + 1) for i in range(fanout[level + 1])]
        name = path
        objs.append(hypernode(name, tier, names[level], children, "Node" if tier == 1 else "HyperNode"))
        return name

    for i in range(fanout[0]):
        build(f"{prefix}{i}", 0)
    return objs


def occupy(objs: list[Obj], fraction: float, resource: str, per_node: int, seed: int) -> list[Obj]:
    """Bound pods taking about `fraction` of `resource` on the nodes, at random (seeded)."""
    rng = random.Random(seed)
    pods = []
    for obj in objs:
        if obj["kind"] != "Node":
            continue
        used = sum(rng.random() < fraction for _ in range(per_node))
        if used:
            pods.append(pod(f"other-{obj['metadata']['name']}", obj["metadata"]["name"], {resource: str(used)}))
    return objs + pods


H100 = {"cpu": "192", "memory": "2000Gi", "nvidia.com/gpu": "8"}
GB300 = {"cpu": "144", "memory": "960Gi", "nvidia.com/gpu": "4"}
CPU_NODE = {"cpu": "64", "memory": "256Gi"}


def examples() -> dict[str, list[Obj]]:
    """The three example member clusters of the local federation."""
    h100 = tree("h100-", [2, 4, 4], H100, {"accelerator": "h100"}, ["spine", "leaf"])
    h100.append(pod("monitoring", "h100-0-0-0", {"cpu": "8", "memory": "32Gi"}))
    gb300 = tree("gb300-rack", [4, 18], GB300, {"accelerator": "gb300"}, ["nvl72"])
    cpu = tree("cpu-", [2, 4], CPU_NODE, {"pool": "batch"}, ["rack"])
    return {"h100-spine-leaf": h100, "gb300-nvl72": gb300, "cpu-small": cpu}
