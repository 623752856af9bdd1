"""Usage history as the API shows it: read from PostgreSQL (the leader writes it every few seconds), decayed to
now."""

from __future__ import annotations

from collections.abc import Mapping

from federation.control.usage import written
from federation.kernel.durations import format_duration
from federation.kernel.resources import GPU
from federation.scheduling.usage import Decay, hours, mean
from federation.store.usage import Key, UsageStore


class PastUsageView:
    def __init__(self, store: UsageStore | None, decay: Decay | None) -> None:
        self.store, self.decay = store, decay or Decay()

    async def read(self) -> dict[Key, dict[str, float]]:
        if self.store is None:
            return {}
        return await written(self.store, self.decay.half_life)

    async def shown(self) -> dict[Key, dict[str, str]]:
        """Each tenant's and queue's history in resource-hours."""
        return {key: hours(history) for key, history in (await self.read()).items()}

    async def order_note(self, tenant: str, queue: str) -> str:
        """What a job reads of how past usage weighs in its queue's turn ("" when it does not)."""
        if not self.decay.weight:
            return ""
        past = await self.read()
        parts = []
        for kind, name in (("tenant", tenant), ("queue", queue)):
            history = past.get((kind, name), {})
            if GPU not in history:
                continue
            counted = mean(history, self.decay.half_life, self.decay.weight)[GPU]
            parts.append(f"its {kind} {name} used {history[GPU] / 3600:.2f} GPU-h, counted as {counted:.2f} "
                         "GPUs beside what it holds now")
        setting = f"half-life {format_duration(self.decay.half_life)}, weight {self.decay.weight:g}"
        return f"past usage counts in its turn ({setting}): " + ("; ".join(parts) if parts else "none yet")


def fill(messages: Mapping[str, object], kind: str, shown: Mapping[Key, Mapping[str, str]]) -> None:
    """Set each message's `past_usage` (by name) from the histories shown."""
    for name, message in messages.items():
        message.past_usage.update(shown.get((kind, name), {}))  # type: ignore[attr-defined]
