"""Fan-out of the job event log to `WatchJobs` streams.

One poller per server reads new events from Postgres (woken at once by local writes, and on a
short period for writes by other replicas) and offers them to every watcher's bounded queue.
A watcher that falls behind is not waited for: it is marked lagging, drops its queue and reads
the gap from Postgres, so a slow client costs itself time but never stalls the others.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from federation.control.loop import WakeLoop

log = logging.getLogger(__name__)

Loader = Callable[[int, int | None], Awaitable[list[Any]]]  # (after, upto) -> events in order
Current = Callable[[], Awaitable[int]]  # the last committed sequence number


@dataclass(eq=False)
class _Subscriber:
    start: int  # the hub had delivered up to here when this subscriber joined
    queue: asyncio.Queue[Any]
    lagging: bool = False


class EventHub:
    def __init__(self, load: Loader, current: Current, last_seq: int, poll_interval: float = 0.5,
                 watcher_queue: int = 1024) -> None:
        self._load = load
        self._current = current
        self._watcher_queue = watcher_queue
        self.last_seq = last_seq
        self._poll_interval = poll_interval
        self._subscribers: set[_Subscriber] = set()
        self._loop = WakeLoop("event-hub", poll_interval, self._deliver_new)
        self.start, self.stop = self._loop.start, self._loop.stop

    @property
    def watchers(self) -> int:
        """Streams being served from the hub now."""
        return len(self._subscribers)

    def notify(self) -> None:
        """Local writers call this after commit so watchers see their events at once."""
        self._loop.wake()

    async def _deliver_new(self) -> None:
        if not self._subscribers:
            # Nobody to give them to: nothing is read (a busy server's every write woke the hub to read where the
            # log stands); the first watcher to join brings the hub up to date (`watch`).
            return
        while True:
            events = await self._load(self.last_seq, None)
            if not events:
                return
            for event in events:
                for sub in self._subscribers:
                    if sub.lagging:
                        continue
                    try:
                        sub.queue.put_nowait(event)
                    except asyncio.QueueFull:
                        sub.lagging = True
                self.last_seq = event["seq"]

    async def watch(self, after_seq: int | None) -> AsyncIterator[Any]:
        """Events after `after_seq` (None: only new ones), in order, without gaps or repeats.

        "New" is measured against what Postgres has committed, not against this hub's position,
        which may trail it by a poll.
        """
        cursor = await self._current() if after_seq is None else after_seq
        while True:
            if not self._subscribers:
                # The hub read nothing while nobody watched: it starts from what is committed now (what came before
                # is this watcher's backlog, read from Postgres below); one that joined meanwhile counts on the hub
                # from where it stands.
                current = await self._current()
                if not self._subscribers:
                    self.last_seq = max(self.last_seq, current)
            sub = _Subscriber(start=self.last_seq, queue=asyncio.Queue(maxsize=self._watcher_queue))
            self._subscribers.add(sub)
            try:
                while cursor < sub.start:  # the backlog, from Postgres
                    events = await self._load(cursor, sub.start)
                    if not events:
                        break
                    for event in events:
                        yield event
                        cursor = event["seq"]
                while (event := await self._next(sub)) is not None:
                    if event["seq"] > cursor:
                        yield event
                        cursor = event["seq"]
            finally:
                self._subscribers.discard(sub)

    async def _next(self, sub: _Subscriber) -> Any:
        """The next queued event, or None once the subscriber lags with nothing left queued."""
        while True:
            if not sub.queue.empty():
                return sub.queue.get_nowait()
            if sub.lagging:
                return None
            try:
                async with asyncio.timeout(self._poll_interval):
                    return await sub.queue.get()
            except TimeoutError:
                continue
