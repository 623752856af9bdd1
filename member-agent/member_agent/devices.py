"""GPU devices inside a node: which device a pod gets, and how many pods of one ask a node's devices hold.

A node's GPUs are devices with an index, each with a share free in thousandths (`WHOLE`: the whole device). A
pod's ask (`federation.kernel.gpuask`) takes whole devices, each wholly its own, or a fraction of one device (or the
same fraction of several distinct ones). A fraction is never split across devices, and a device is never given
past its whole.
Pure: no I/O, ties broken by device index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from federation.kernel.resources import WHOLE

# What the agent writes on a pod it places: the devices it was given (comma-separated indices) and its share of each.
ASSIGNED = "federation.dev/gpu-devices"
ASSIGNED_SHARE = "federation.dev/gpu-share"
VISIBLE = "NVIDIA_VISIBLE_DEVICES"  # what NVIDIA's container runtime reads
# GPU Feature Discovery's node labels: each device's memory (MiB) and model.
MEMORY_LABEL = "nvidia.com/gpu.memory"
PRODUCT_LABEL = "nvidia.com/gpu.product"
COUNT_LABEL = "nvidia.com/gpu.count"  # its GPUs, however they are cut


def memory_mib(labels: Mapping[str, str]) -> int:
    """A node's devices' memory (MiB) as GPU Feature Discovery labels it; 0 when unknown."""
    text = labels.get(MEMORY_LABEL, "")
    return int(text) if text.isdigit() else 0


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


def take(free: list[int], devices: Sequence[int], share: int, sign: int = 1) -> tuple[int, int]:
    """Take (sign 1) or give back (-1) `share` of each of `devices` in `free`; the change to the node's `GPU`
    (devices wholly free) and `SHARE` counts, as amounts booked under `sign` (what the devices lost, or got back)."""
    whole, total = sum(free[d] == WHOLE for d in devices), sum(free[d] for d in devices)
    for d in devices:
        free[d] -= sign * share
    return (sign * (whole - sum(free[d] == WHOLE for d in devices)),
            sign * (total - sum(free[d] for d in devices)))


def format_devices(devices: Sequence[int]) -> str:
    return ",".join(str(d) for d in devices)


def parse_devices(text: str) -> tuple[int, ...]:
    """Device indices as the agent wrote them; () for anything else (a pod not placed by us)."""
    try:
        return tuple(int(part) for part in text.split(",")) if text else ()
    except ValueError:
        return ()


def assigned(annotations: Mapping[str, str]) -> tuple[tuple[int, ...], int]:
    """The devices and share the agent wrote on a pod it placed; ((), WHOLE) on any other."""
    devices = parse_devices(annotations.get(ASSIGNED, ""))
    share = annotations.get(ASSIGNED_SHARE, "")
    return (devices, int(share)) if devices and share.isdigit() and 0 < int(share) <= WHOLE else ((), WHOLE)


def pod_devices(annotations: dict[str, str], env: list[dict[str, str]], devices: Sequence[int], share: int) -> None:
    """Write a placed pod's devices: the annotations (read back by `assigned`), and, for a fraction (which no device
    plugin hands out), the devices NVIDIA's container runtime is to expose, as KAI's binder does."""
    if not devices:
        return
    annotations[ASSIGNED] = format_devices(devices)
    annotations[ASSIGNED_SHARE] = str(share)
    if share < WHOLE:
        env.append({"name": VISIBLE, "value": format_devices(devices)})
