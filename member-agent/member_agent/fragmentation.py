"""GPU fragmentation as the cluster's own workload sees it (Weng et al., "Beware of Fragmentation", ATC '23).

A node's free devices are fragmented for a pod shape when that shape cannot use them there (too few
devices left, or too little cpu or memory beside them). Weighted by how often each shape arrives, the
sum is how much of the node's free device capacity the expected workload could not use. Placing a pod
where it increases that least keeps whole devices for the pods to come; packing by leftover alone
does not know which leftovers are useful.

The expected workload is learned: the device pods this cluster has been asked to hold, counted by
shape, the most frequent `TOP_SHAPES` of them. Its weights are fixed between "epochs" (each time the
count doubles), so scores computed for a node stay valid until that node changes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from federation.kernel.gpuask import GPU, WHOLE
from federation.kernel.resources import SHARE, Resources

GENERAL = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})  # every other resource is a device
TOP_SHAPES = 32
FIRST_EPOCH = 16  # pods seen before the mix is trusted; below it, no fragmentation is scored
# At most this share of the devices asked for came in gangs of several pods: the cluster serves pods on their own
# (inference, notebooks, openb's trace), and placement may spread them (`PodMix.mostly_single`). The ITP trace's
# gangs ask for 15 % of its GPUs, and spreading its lone pods there cost its gangs (docs/development/benchmarks.md).
SINGLE_SHARE = 0.05

Shape = tuple[tuple[str, int], ...]


class PodMix:
    """How often each device-pod shape has been asked for here."""

    def __init__(self) -> None:
        self.counts: Counter[Shape] = Counter()
        self.total = 0
        self.epoch = 0
        self.next_epoch = FIRST_EPOCH
        self.weights: list[tuple[Shape, float]] = []
        self.devices = 0  # devices asked for by the pods counted, in GPU thousandths (`_devices`)
        self.in_gangs = 0  # of `devices`, those asked for by pods that came in gangs of several pods

    def add(self, request: Mapping[str, int], gang: int = 1) -> None:
        """A device pod booked, one of a gang of `gang` pods."""
        if not any(r not in GENERAL and a > 0 for r, a in request.items()):
            return
        self.counts[tuple(sorted((r, a) for r, a in request.items() if a > 0))] += 1
        self.total += 1
        devices = _devices(request)
        self.devices += devices
        self.in_gangs += devices if gang > 1 else 0
        if self.total >= self.next_epoch:
            top = self.counts.most_common(TOP_SHAPES)
            seen = sum(n for _, n in top)
            self.weights = [(shape, n / seen) for shape, n in top]
            self.epoch += 1
            self.next_epoch *= 2

    def mostly_single(self) -> bool:
        """Whether the mix is learnt and nearly all the devices its pods asked for came with pods on their own: no
        gangs to keep whole nodes and HyperNodes for, so a lone pod may go where it leaves the most room
        (`placement._Placer`)."""
        return bool(self.weights) and self.in_gangs <= SINGLE_SHARE * self.devices


def _devices(request: Mapping[str, int]) -> int:
    """A pod's devices in GPU thousandths: a fraction by its share, a whole GPU (or any other device) as 1000."""
    return sum(a if r == SHARE else a * WHOLE for r, a in request.items() if r not in GENERAL and a > 0)


def fragmented(free: Mapping[str, int], weights: list[tuple[Shape, float]], gpus: Sequence[int] | None = None
               ) -> float:
    """Device capacity free in `free` that the weighted shapes could not use there (in the devices' units); on a
    node whose GPUs are devices (`gpus`: each one's share free), in GPU thousandths, device by device."""
    if gpus is not None:
        return _fragmented_gpus(free, weights, gpus)
    devices = sum(a for r, a in free.items() if r not in GENERAL and a > 0)
    if not devices:
        return 0.0
    unusable = 0.0
    for shape, weight in weights:
        if any(free.get(r, 0) < a for r, a in shape):
            unusable += weight
    return unusable * devices


def _fragmented_gpus(free: Mapping[str, int], weights: list[tuple[Shape, float]], gpus: Sequence[int]) -> float:
    """FGD's measure (Weng et al. §4): for each shape, the GPU share free on the node that it could not use: all of
    it where the shape does not fit the node at all (too few wholly free devices for whole GPUs, no device with its
    fraction free, or too little cpu or memory beside them), else what is free on the devices too full for it
    (partly used ones for whole GPUs, those with less than its fraction free for a fraction)."""
    total = sum(gpus)
    if not total:
        return 0.0
    unusable = 0.0
    for shape, weight in weights:
        whole = share = 0
        fits = True
        for r, a in shape:
            if r == GPU:
                whole = a
            elif r == SHARE:
                share = a
            elif free.get(r, 0) < a:
                fits = False
        need = WHOLE if whole else share
        if fits and need and sum(f >= need for f in gpus) >= max(whole, 1):
            unusable += weight * sum(f for f in gpus if f < need)
        elif need:
            unusable += weight * total
    return unusable


class Fragmentation:
    """Per node, how much placing a request there adds to the fragmentation, remembered until the node changes."""

    def __init__(self) -> None:
        self.mix = PodMix()
        self._memo: dict[str, dict[Shape, float]] = {}
        self._epoch = 0

    def forget(self, node: str) -> None:
        self._memo.pop(node, None)

    def remembered(self, node: str, shape: Shape) -> float | None:
        """What `increase` gave for the node's own free resources and this shape since the node last changed, if
        it was asked (so that what it needs computed, the node's devices after the pods, need not be)."""
        if not self.mix.weights:
            return 0.0
        if self._epoch != self.mix.epoch:
            self._memo.clear()
            self._epoch = self.mix.epoch
        return self._memo.get(node, {}).get(shape)

    def increase(self, node: str, free: Resources, request: Mapping[str, int], shape: Shape | None = None,
                 gpus: tuple[Sequence[int], Sequence[int]] | None = None) -> float:
        """How much taking `request` from `free` (the node's free resources) adds; remembered under `shape` when
        given (the caller says `free` is the node's own, untouched by a trial). `gpus`: the node's GPU devices'
        shares free before and after, where its GPUs are devices."""
        if not self.mix.weights:
            return 0.0
        if self._epoch != self.mix.epoch:
            self._memo.clear()
            self._epoch = self.mix.epoch
        if shape is not None:
            found = self._memo.get(node, {}).get(shape)
            if found is not None:
                return found
        after = {r: a - request.get(r, 0) for r, a in free.items()}
        before_gpus, after_gpus = gpus if gpus is not None else (None, None)
        value = fragmented(after, self.mix.weights, after_gpus) - fragmented(free, self.mix.weights, before_gpus)
        if shape is not None:
            self._memo.setdefault(node, {})[shape] = value
        return value
