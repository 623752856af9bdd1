"""Usage history: what tenants and queues used in the past, decayed with a half-life (Slurm's fair-share usage,
`PriorityDecayHalfLife`; Kueue's admission fair sharing).

Pure. A member's history is the integral of its usage over time, each past second weighing 2^(-age / half-life):
resource-seconds. Divided by the integral of that weight over all the past (half-life / ln 2), it is the mean
amount it held, weighted to the recent past: a member that held 8 GPUs for ever has a mean of 8, one that held
8 GPUs until one half-life ago a mean of 4. Ordering adds that mean, times the admin's weight, to what a member
holds now, so a tenant that ran 500 GPU-hours yesterday does not start level with one that ran none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from federation.kernel.resources import GPU, base, parse_amount

LN2 = math.log(2)
DAY = 86400.0


@dataclass(frozen=True)
class Decay:
    """How history counts: its half-life in seconds, and the weight of its mean beside what is held now (0: not at
    all, the order by what is held now only)."""

    half_life: float = DAY
    weight: float = 0.0


def decayed(past: Mapping[str, float], elapsed: float, half_life: float, holding: Mapping[str, float]
            ) -> dict[str, float]:
    """The history `elapsed` seconds on, `holding` held throughout: the past decays by 2^(-elapsed / half-life)
    and what was held adds its own integral, each second of it decayed since (exact for a constant `holding`)."""
    if elapsed <= 0:
        return dict(past)
    keep = 0.5 ** (elapsed / half_life)
    gained = (1 - keep) * half_life / LN2
    out = {r: a * keep for r, a in past.items()}
    for r, a in holding.items():
        if a:
            out[r] = out.get(r, 0.0) + a * gained
    return {r: a for r, a in out.items() if a > 1e-9}


def mean(history: Mapping[str, float], half_life: float, weight: float = 1.0) -> dict[str, float]:
    """The mean amount held over the past, each second weighed by its decay, times `weight`: what ordering adds
    to a member's usage now."""
    scale = weight * LN2 / half_life
    return {r: a * scale for r, a in history.items() if a * scale > 1e-9}


def hours(history: Mapping[str, float]) -> dict[str, str]:
    """A history as people read it: GPU-hours (per flavor too) and CPU-hours. GPU shares are left out (the GPUs
    say it), and memory and other resources too (byte-hours read as noise)."""
    out = {r: f"{a / 3600:.2f}" for r, a in sorted(history.items()) if base(r) == GPU}
    if "cpu" in history:
        out["cpu"] = f"{history['cpu'] / 3600 / parse_amount('cpu', '1'):.2f}"
    return out
