"""A background pass that runs on a period, and at once when woken.

Stopping waits for the pass under way to finish: cancelling one mid-transaction can leave a
database connection in a state the pool cannot recover, so a pass is never cut short.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class WakeLoop:
    def __init__(self, name: str, period: float, step: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.period = period
        self._step = step
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task:
            await self._task

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period)
            self._wake.clear()
            if self._stopping:
                return
            try:
                await self._step()
            except Exception:  # a database hiccup must not end the loop
                log.exception("%s pass failed; retrying", self.name)
                await asyncio.sleep(self.period)
