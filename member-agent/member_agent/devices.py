"""GPU devices inside a node: which device a pod gets, and how many pods of one ask a node's devices hold.

A node's GPUs are devices with an index, each with a share free in thousandths (1000: the whole device). A pod
asks for whole devices (`nvidia.com/gpu: N`, each device wholly its own) or for a fraction of one device (KAI
Scheduler's pod annotations, read as KAI defines them: `gpu-fraction` a share in (0, 1), or `gpu-memory` in MiB of
one device's memory; `gpu-fraction-num-devices` asks that on several distinct devices). A fraction is never split
across devices, and a device is never given past its whole. Pure: no I/O, ties broken by device index.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

GPU = "nvidia.com/gpu"
WHOLE = 1000  # a device's share, in thousandths
# KAI Scheduler's pod annotations (its constants GpuFraction, GpuMemory, GpuFractionsNumDevices).
FRACTION = "gpu-fraction"
MEMORY = "gpu-memory"
NUM_DEVICES = "gpu-fraction-num-devices"
# What the agent writes on a pod it places: the devices it was given (comma-separated indices) and its share of each.
ASSIGNED = "federation.dev/gpu-devices"
ASSIGNED_SHARE = "federation.dev/gpu-share"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"  # what NVIDIA's container runtime reads
# GPU Feature Discovery's node labels: each device's memory (MiB) and model.
MEMORY_LABEL = "nvidia.com/gpu.memory"
PRODUCT_LABEL = "nvidia.com/gpu.product"


class AskError(ValueError):
    """A pod's GPU annotations that do not say one valid ask; the message names the annotation."""


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """One pod's GPUs: `devices` distinct devices, of each `share` thousandths, or `memory` MiB when > 0 (the share
    then follows from the node's device memory)."""

    devices: int
    share: int = WHOLE
    memory: int = 0

    @property
    def whole(self) -> bool:
        return self.share == WHOLE and not self.memory

    def share_on(self, device_memory: int) -> int:
        """Thousandths of one device of `device_memory` MiB this ask takes (a memory ask rounds up); more than a
        device when it asks more memory than the device has."""
        if not self.memory:
            return self.share
        if device_memory <= 0:
            return WHOLE + 1  # memory unknown: a memory ask cannot be judged to fit
        return max(1, math.ceil(self.memory * WHOLE / device_memory))


def ask_of(annotations: Mapping[str, str], whole_gpus: int) -> GpuAsk | None:
    """The pod's ask from its requested `nvidia.com/gpu` and KAI's annotations; None if it asks for no GPU.
    KAI's rules: a fraction or a memory amount, not both, and not with whole GPUs requested too."""
    fraction, memory = annotations.get(FRACTION), annotations.get(MEMORY)
    if fraction is None and memory is None:
        if NUM_DEVICES in annotations:
            raise AskError(f"annotation {NUM_DEVICES} needs {FRACTION} or {MEMORY}")
        return GpuAsk(whole_gpus) if whole_gpus > 0 else None
    if fraction is not None and memory is not None:
        raise AskError(f"annotations {FRACTION} and {MEMORY} exclude each other")
    if whole_gpus:
        raise AskError(f"annotation {FRACTION if fraction is not None else MEMORY} excludes requesting {GPU}")
    devices = _count(annotations.get(NUM_DEVICES, "1"), NUM_DEVICES)
    if fraction is not None:
        try:
            value = float(fraction)
        except ValueError:
            raise AskError(f"annotation {FRACTION}: {fraction!r} is not a number") from None
        if not 0 < value < 1 or not math.isfinite(value):
            raise AskError(f"annotation {FRACTION}: {fraction!r} is not between 0 and 1 (exclusive)")
        share = round(value * WHOLE)
        if share < 1 or share >= WHOLE or abs(share - value * WHOLE) > 1e-6:
            raise AskError(f"annotation {FRACTION}: {fraction!r} is finer than a thousandth of a GPU")
        return GpuAsk(devices, share)
    return GpuAsk(devices, WHOLE, _count(memory or "", MEMORY))


def _count(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise AskError(f"annotation {name}: {text!r} is not a whole number") from None
    if value < 1:
        raise AskError(f"annotation {name}: {text!r} must be at least 1")
    return value


def fits(free: Sequence[int], share: int, devices: int) -> int:
    """How many pods, each taking `share` on `devices` distinct devices, the devices' free shares hold.

    Each device holds free // share of them; p pods fit when the devices' slots, at most p on one device (a pod's
    devices are distinct), add up to devices * p. Exact: the p pods are dealt out device by device, most slots
    first."""
    if share > WHOLE or share < 1:
        return 0
    slots = [f // share for f in free if f >= share]
    if devices == 1:
        return sum(slots)
    p = sum(slots) // devices
    while p > 0 and sum(min(s, p) for s in slots) < devices * p:
        p -= 1
    return p


def assign(free: Sequence[int], share: int, devices: int) -> tuple[int, ...] | None:
    """The devices for one pod, or None if they do not hold it: whole devices by lowest index; a fraction of one
    device on the device it leaves fullest (least free that still holds it, then lowest index), so fractions pack
    together and whole devices stay whole; a fraction of several on those with most room for more (then lowest
    index), which keeps every pod `fits` counted placeable one after another."""
    if share > WHOLE or share < 1:
        return None
    usable = [i for i, f in enumerate(free) if f >= share]
    if len(usable) < devices:
        return None
    if share < WHOLE:
        usable.sort(key=(lambda i: (free[i], i)) if devices == 1 else (lambda i: (-(free[i] // share), i)))
    return tuple(sorted(usable[:devices]))


def format_devices(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices)


def parse_devices(text: str) -> tuple[int, ...]:
    """Device indices as the agent wrote them; () for anything else (a pod not placed by us)."""
    try:
        return tuple(int(part) for part in text.split(",")) if text else ()
    except ValueError:
        return ()
