"""A pod's GPU ask as users write it: whole GPUs (`nvidia.com/gpu: N`) or a fraction of a device, by KAI Scheduler's
pod annotations read as KAI defines them (`gpu-fraction`: a share in (0, 1); `gpu-memory`: MiB of one device's
memory; `gpu-fraction-num-devices`: that on several distinct devices). Checked at the edge (the server refuses a job
whose annotations do not say one valid ask), carried out by the member agent (`member_agent.devices`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass

from federation.kernel.resources import GPU, WHOLE

# KAI Scheduler's pod annotations (its constants GpuFraction, GpuMemory, GpuFractionsNumDevices).
FRACTION = "gpu-fraction"
MEMORY = "gpu-memory"
NUM_DEVICES = "gpu-fraction-num-devices"
MAX_DEVICES = 64  # devices one pod may share: more than any node holds
MAX_MEMORY_MIB = 1 << 20  # MiB of one device's memory a pod may ask: 1 TiB, beyond any GPU's


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
    devices = _count(annotations.get(NUM_DEVICES, "1"), NUM_DEVICES, MAX_DEVICES)
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
    return GpuAsk(devices, WHOLE, _count(memory or "", MEMORY, MAX_MEMORY_MIB))


def counted(ask: GpuAsk | None) -> int:
    """Thousandths of devices the ask counts for in quotas and fair shares (`resources.SHARE`): exact for whole GPUs
    and fractions. A memory ask's share depends on the device memory of the node it lands on, unknown before: it
    counts as its whole devices, so a quota is never exceeded."""
    if ask is None:
        return 0
    return ask.devices * (WHOLE if ask.memory else ask.share)


def pod_share(pod_template_json: str, whole_gpus: int) -> int:
    """`counted` for one pod of a task: its requested `GPU` and its template's annotations (a job from before the
    server checked them counts its whole GPUs)."""
    try:
        return counted(ask_of(template_annotations(pod_template_json), whole_gpus))
    except AskError:
        return whole_gpus * WHOLE


def _count(text: str, name: str, most: int) -> int:
    """A count as Kubernetes writes one: ASCII digits (Python's int() also reads '٣' and '1_0'), 1 to `most`."""
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise AskError(f"annotation {name}: {text[:32]!r} is not a whole number")
    value = int(text)
    if not 1 <= value <= most:
        raise AskError(f"annotation {name}: {text!r} must be from 1 to {most:,}")
    return value


def template_annotations(pod_template_json: str) -> dict[str, str]:
    """The annotations of a task's pod template (where KAI's users put theirs); {} when it has none."""
    if not pod_template_json:
        return {}
    try:
        template = json.loads(pod_template_json)
    except ValueError:
        return {}
    meta = template.get("metadata") if isinstance(template, dict) else None
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    return {str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, dict) else {}
