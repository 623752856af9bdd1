"""From the federation's Job message to the placement core's GangRequest, for this cluster.

Tier names only mean something inside a cluster (its HyperNodes' tierName), so they are
resolved here; a name this cluster does not have rejects the job with that reason.
"""

from __future__ import annotations

from collections.abc import Sequence

from federation.resources import parse_resources
from federation.v1 import common_pb2
from member_agent.placement import GangRequest, PodPlacement, Rejection, TaskRequest
from member_agent.topology import Toleration, Topology


def _tier(topo: common_pb2.NetworkTopology, topology: Topology) -> int | Rejection | None:
    if topo.highest_tier_name:
        tier = topology.tier_names.get(topo.highest_tier_name)
        if tier is None:
            known = ", ".join(sorted(topology.tier_names)) or "none"
            return Rejection(f"this cluster has no tier named {topo.highest_tier_name!r} (tiers: {known})")
        return tier
    return topo.highest_tier_allowed or None


def gang_request(spec: common_pb2.JobSpec, topology: Topology,
                 running: Sequence[PodPlacement] = ()) -> GangRequest | Rejection:
    tasks = []
    for task in spec.tasks:
        partition_tier: int | None = None
        pp = task.partition_policy
        if pp.partition_size and pp.network_topology.mode == "hard":
            tier = _tier(pp.network_topology, topology)
            if isinstance(tier, Rejection):
                return tier
            partition_tier = tier or 1
        tasks.append(TaskRequest(
            name=task.name, replicas=task.replicas, request=parse_resources(task.resources),
            node_selector=dict(task.node_selector),
            tolerations=tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in task.tolerations),
            min_available=task.min_available if task.HasField("min_available") else None,
            partition_size=pp.partition_size, min_partitions=pp.min_partitions, partition_tier=partition_tier))
    tier = _tier(spec.network_topology, topology)
    if isinstance(tier, Rejection):
        return tier
    return GangRequest(tasks=tuple(tasks), min_available=spec.min_available, mode=spec.network_topology.mode,
                       highest_tier=tier, running=tuple(running))
