"""Which replica schedules, and news of changes from every replica.

One dedicated connection holds a session-level advisory lock while this replica is the scheduling
leader; when its process dies, Postgres ends the session and frees the lock, and another replica
takes it on its next try. The same connection LISTENs for change notices, which any replica sends
after a submit, a cancel or an agent's report, so the leader wakes at once wherever the change was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

log = logging.getLogger(__name__)

LOCK_KEY = 0x6665645F73636864  # "fed_schd"
CHANNEL = "federation_changes"


def conninfo(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


class Leadership:
    def __init__(self, url: URL, on_notice: Callable[[], None], retry: float = 1.0) -> None:
        self.url = url
        self.on_notice = on_notice
        self.retry = retry
        self.is_leader = False
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="leadership")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task:
            await self._task
        self.is_leader = False

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                async with await psycopg.AsyncConnection.connect(conninfo(self.url), autocommit=True) as conn:
                    await conn.execute(f"LISTEN {CHANNEL}")
                    await self._hold(conn)
            except (psycopg.Error, OSError) as err:
                if self.is_leader:
                    log.warning("lost the scheduling lock with its connection: %s", err)
                self.is_leader = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.retry)

    async def _hold(self, conn: psycopg.AsyncConnection) -> None:
        while not self._stopping.is_set():
            if not self.is_leader:
                cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (LOCK_KEY,))
                row = await cur.fetchone()
                if row and row[0]:
                    self.is_leader = True
                    log.info("this replica is now the scheduling leader")
                    self.on_notice()
            # Wait for notices (or the next lock attempt); a dead connection raises here.
            async for _ in conn.notifies(timeout=self.retry):
                self.on_notice()
            await conn.execute("SELECT 1")


async def announce(engine: AsyncEngine) -> None:
    """Tell every replica that something changed."""
    async with engine.begin() as conn:
        await conn.execute(text(f"NOTIFY {CHANNEL}"))
