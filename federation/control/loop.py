"""A background pass that runs on a period, and at once when woken.

Stopping waits for the pass under way to finish: cancelling one mid-transaction can leave a
database connection in a state the pool cannot recover, so a pass is never cut short.

A pass shares the server's one process with the API. One that computes for long (a scheduling
cycle over tens of thousands of waiting jobs, in a worker thread) shares the interpreter with the loop
meanwhile, and one woken by every submit would run back to back: `rest` makes the loop wait that many
times as long as the last pass took before the next, so the pass never takes more than
1 / (1 + rest) of the time, however often it is woken. Short passes rest for next to nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


class WakeLoop:
    def __init__(self, name: str, period: float, step: Callable[[], Awaitable[None]], rest: float = 0.0) -> None:
        self.name = name
        self.period = period
        self.rest = rest
        self._step = step
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def wake(self) -> None:
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._task:
            await self._task

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.period):
                    await self._wake.wait()
            self._wake.clear()
            if self._stopped.is_set():
                return
            started = time.perf_counter()
            try:
                await self._step()
            except Exception:  # a database hiccup must not end the loop
                log.exception("%s pass failed; retrying", self.name)
                await asyncio.sleep(self.period)
            if self.rest:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.rest * (time.perf_counter() - started)):
                        await self._stopped.wait()
