"""The scheduling leader's usage history: loaded from PostgreSQL when it starts leading, aged with what each tenant
and queue holds after every cycle, and written back every WRITE_PERIOD under the lease, so a new leader goes on
from where the last one wrote (what ran in between, at most that long and a takeover, is not counted)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from federation.control.leader import Fence
from federation.scheduling.usage import Decay, decayed, mean
from federation.store.usage import Key, UsageStore

# Seconds between two writes of the history: one statement of a row per tenant and queue, so often enough for what
# users read of it (the API reads it from PostgreSQL) to be current.
WRITE_PERIOD = 5.0


async def written(store: UsageStore, half_life: float) -> dict[Key, dict[str, float]]:
    """Every history as the leader last wrote it, decayed to now (by the database's clock)."""
    return {key: decayed(usage, age, half_life, {}) for key, (usage, age) in (await store.read()).items()}


class PastUsage:
    def __init__(self, store: UsageStore | None, decay: Decay, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.decay, self.clock = store, decay, clock
        self.history: dict[Key, dict[str, float]] = {}
        self._at: float | None = None  # the clock's time the history is as of (None: not loaded since leading)
        self._written = float("-inf")

    async def load(self) -> None:
        """The history as the last leader wrote it, decayed to now."""
        if self.store is None:
            return
        self.history = await written(self.store, self.decay.half_life)
        self._at = self.clock()

    def age(self, queues: Mapping[str, Mapping[str, int]], tenants: Mapping[str, Mapping[str, int]]) -> None:
        """On to now, each tenant and queue having held what it holds after the cycle since the last call (the
        history of those gone is dropped)."""
        now = self.clock()
        elapsed = now - self._at if self._at is not None else 0.0
        self._at = now
        held = {("queue", q): u for q, u in queues.items()} | {("tenant", t): u for t, u in tenants.items()}
        self.history = {key: history for key, usage in held.items()
                        if (history := decayed(self.history.get(key, {}), elapsed, self.decay.half_life, usage))}

    async def save_if_due(self, fence: Fence | None) -> None:
        if self.store is None or self._at is None or self.clock() - self._written < WRITE_PERIOD:
            return
        await self.store.write(self.history, fence)
        self._written = self.clock()

    def ordering(self) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
        """What ordering adds to each tenant's and each queue's usage (none while the weight is 0)."""
        if not self.decay.weight:
            return {}, {}
        out: tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]] = ({}, {})
        for (kind, name), history in self.history.items():
            out[0 if kind == "tenant" else 1][name] = mean(history, self.decay.half_life, self.decay.weight)
        return out
