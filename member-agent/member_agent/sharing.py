"""GPUs the NVIDIA device plugin shares by time-slicing or MPS: what a node's labels and allocatable say, and what a
pod may ask of such a node.

With sharing on, the plugin publishes each device as `replicas` replicas of `nvidia.com/gpu` (or of
`nvidia.com/gpu.shared` with `renameByDefault`), and GPU Feature Discovery labels the node with the strategy
(`nvidia.com/gpu.sharing-strategy`: time-slicing or mps), the replicas per device (`nvidia.com/gpu.replicas`) and
the physical devices (`nvidia.com/gpu.count`). The kubelet hands out replicas, so a node never holds more than its
allocatable; what the scheduler must add is what the plugin refuses at admission: with MPS a container asking more
than one replica (its `failRequestsGreaterThanOne`, on by default for MPS), and device-level placement of fractions
on devices whose replicas the plugin gives to others.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from federation.kernel.resources import GPU

STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"
REPLICAS_LABEL = "nvidia.com/gpu.replicas"
COUNT_LABEL = "nvidia.com/gpu.count"
SHARED = "nvidia.com/gpu.shared"  # the replicas' name with renameByDefault
STRATEGIES = ("time-slicing", "mps")
MAX_REPLICAS = 64  # more per device is not a configuration the plugin is run with: the labels are not believed


@dataclass(frozen=True)
class Sharing:
    strategy: str  # time-slicing | mps
    replicas: int  # per device
    devices: int  # physical GPUs
    resource: str  # what the replicas are published as: nvidia.com/gpu, or nvidia.com/gpu.shared when renamed

    @property
    def per_pod(self) -> int | None:
        """The most replicas one pod may ask (None: as many as the node has)."""
        return 1 if self.strategy == "mps" else None

    def refuses(self, request: Mapping[str, int]) -> str | None:
        """Why a pod asking `request` cannot run on this node whatever is free (None: it can)."""
        asked = request.get(self.resource, 0)
        if self.per_pod is not None and asked > self.per_pod:
            return (f"{self.resource}: {asked} asked, and MPS gives a pod at most {self.per_pod} replica "
                    f"({self.devices} GPUs x {self.replicas} replicas)")
        return None


def node_sharing(labels: Mapping[str, str], allocatable: Mapping[str, int]) -> Sharing | None:
    """How the node's GPUs are shared, or None when they are not (each replica then is a GPU of its own)."""
    strategy, replicas = labels.get(STRATEGY_LABEL, ""), labels.get(REPLICAS_LABEL, "")
    if strategy not in STRATEGIES or not replicas.isascii() or not replicas.isdigit():
        return None
    per_device = int(replicas)
    if not 2 <= per_device <= MAX_REPLICAS:
        return None
    resource = SHARED if allocatable.get(SHARED) else GPU
    published = allocatable.get(resource, 0)
    if published <= 0:
        return None
    count = labels.get(COUNT_LABEL, "")
    devices = int(count) if count.isascii() and count.isdigit() and int(count) > 0 else -(-published // per_device)
    return Sharing(strategy, per_device, devices, resource)
