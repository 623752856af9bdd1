"""A tier's room, as an agent summarises its cluster and the federation reads it: for each tier (0 the single node,
up to the whole cluster), the most of each resource free inside one of its HyperNodes, and the most one has at all."""

from __future__ import annotations

from dataclasses import dataclass, field

from federation.kernel.resources import Resources


@dataclass(frozen=True)
class TierFree:
    tier: int
    tier_name: str
    max_free: Resources
    max_capacity: Resources = field(default_factory=dict)  # the most one HyperNode of the tier has at all
