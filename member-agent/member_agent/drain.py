"""When to move a gang off hardware that turned degraded (or that an operator drains): a pure rule.

A synchronous training gang restarts from its last checkpoint whenever it moves or crashes, so the work at
stake is the time since that checkpoint. Moving at once loses it for sure; waiting for the next checkpoint
(the `federation.dev/checkpoint-interval` annotation, counted from when the gang started) loses nothing
unless the hardware fails first, which, at the failure rate the health rules give the condition, happens
with probability 1 - exp(-rate * wait); a crash then costs the work since the checkpoint up to the crash
and the time to notice it. The gang moves at the checkpoint, or at once when the expected loss of waiting
is the larger. Without a known checkpoint there is nothing to wait for: it moves at once. An operator's
drain has no failure rate: it waits for the checkpoint (bounded by the drain's own deadline).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CRASH_DETECTION = 120.0  # seconds from a crash to its restart being under way (timeouts, the lifecycle policy)


@dataclass(frozen=True)
class DrainTiming:
    delay: float  # seconds from now until the move
    why: str


def drain_timing(running_for: float, checkpoint_interval: float | None, failure_rate: float,
                 restart_cost: float = 0.0, detection: float = CRASH_DETECTION) -> DrainTiming:
    """`running_for`: seconds since the gang started; `failure_rate`: per hour of the hardware it is on."""
    if not checkpoint_interval:
        return DrainTiming(0.0, "no checkpoint interval known: moved at once")
    since = running_for % checkpoint_interval
    wait = checkpoint_interval - since
    if since == 0:
        return DrainTiming(0.0, "at a checkpoint: moved at once")
    crash = 1.0 - math.exp(-failure_rate * wait / 3600.0)
    move_now = since + restart_cost
    wait_then_move = (1.0 - crash) * restart_cost + crash * (since + wait / 2 + restart_cost + detection)
    if move_now <= wait_then_move:
        return DrainTiming(0.0, f"moved at once: waiting {wait:.0f}s for the next checkpoint risks "
                                f"{wait_then_move:.0f}s of expected lost work against {move_now:.0f}s now")
    return DrainTiming(wait, f"moving at the next checkpoint in {wait:.0f}s (expected loss {wait_then_move:.0f}s "
                             f"against {move_now:.0f}s at once)")
