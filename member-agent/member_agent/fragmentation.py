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
from collections.abc import Mapping

from federation.resources import Resources

GENERAL = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})  # every other resource is a device
TOP_SHAPES = 32
FIRST_EPOCH = 16  # pods seen before the mix is trusted; below it, no fragmentation is scored

Shape = tuple[tuple[str, int], ...]


class PodMix:
    """How often each device-pod shape has been asked for here."""

    def __init__(self) -> None:
        self.counts: Counter[Shape] = Counter()
        self.total = 0
        self.epoch = 0
        self.next_epoch = FIRST_EPOCH
        self.weights: list[tuple[Shape, float]] = []

    def add(self, request: Mapping[str, int]) -> None:
        if not any(r not in GENERAL and a > 0 for r, a in request.items()):
            return
        self.counts[tuple(sorted((r, a) for r, a in request.items() if a > 0))] += 1
        self.total += 1
        if self.total >= self.next_epoch:
            top = self.counts.most_common(TOP_SHAPES)
            seen = sum(n for _, n in top)
            self.weights = [(shape, n / seen) for shape, n in top]
            self.epoch += 1
            self.next_epoch *= 2


def fragmented(free: Mapping[str, int], weights: list[tuple[Shape, float]]) -> float:
    """Device capacity free in `free` that the weighted shapes could not use there (in the devices' units)."""
    devices = sum(a for r, a in free.items() if r not in GENERAL and a > 0)
    if not devices:
        return 0.0
    unusable = 0.0
    for shape, weight in weights:
        if any(free.get(r, 0) < a for r, a in shape):
            unusable += weight
    return unusable * devices


class Fragmentation:
    """Per node, how much placing a request there adds to the fragmentation, remembered until the node changes."""

    def __init__(self) -> None:
        self.mix = PodMix()
        self._memo: dict[str, dict[Shape, float]] = {}
        self._epoch = 0

    def forget(self, node: str) -> None:
        self._memo.pop(node, None)

    def increase(self, node: str, free: Resources, request: Mapping[str, int], shape: Shape | None = None) -> float:
        """How much taking `request` from `free` (the node's free resources) adds; remembered under `shape` when
        given (the caller says `free` is the node's own, untouched by a trial)."""
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
        value = fragmented(after, self.mix.weights) - fragmented(free, self.mix.weights)
        if shape is not None:
            self._memo.setdefault(node, {})[shape] = value
        return value
