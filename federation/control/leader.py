"""Which replica schedules, and news of changes from every replica.

Leadership is a lease, as Kubernetes' leader election keeps one: a row in PostgreSQL naming the holder,
an epoch and an expiry (PostgreSQL's clock, so replicas agree). The leader renews it well before it
expires; a replica finding it expired takes it with the next epoch. A leader that cannot renew in time
(frozen, partitioned from the database, its connection cut) stops deciding by its own clock before the
lease can pass to another, and every write a cycle makes is fenced: it commits only while the lease is
still this replica's at this epoch, so a leader that wakes late cannot dispatch on stale state.

The same dedicated connection LISTENs for change notices, which any replica sends after a submit, a
cancel or an agent's report, so the leader wakes at once wherever the change was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import psycopg
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from federation.store.database import APPLICATION_PREFIX, conninfo, set_local
from federation.store.events import CHANGES

log = logging.getLogger(__name__)

LEASE = 4.0  # seconds a lease lasts unless renewed


class NotLeader(Exception):
    """This replica's lease is gone (or was taken over): its decisions must not be written."""


@dataclass(frozen=True)
class Fence:
    """The lease a write is made under: it commits only while the lease is still `holder`'s at `epoch`."""

    holder: str
    epoch: int
    lease: float

    async def check(self, conn: AsyncConnection, settings: Mapping[str, str] = MappingProxyType({})) -> None:
        """Inside a writing transaction: hold the lease row so no one takes it over before this commits. `settings`:
        the transaction's own besides (`by_key`'s), set by the same statement.

        The hold is a KEY SHARE lock: it keeps a takeover out (a takeover locks the row FOR UPDATE first) but not
        the holder's own renewal (a plain UPDATE of the expiry, which KEY SHARE admits). So a long write, a
        hundred thousand reasons say, never makes the leader miss its renewal and lose the lease it writes under.

        A leader frozen or cut off mid-transaction would hold that row (and the jobs it locked) until
        PostgreSQL noticed its client gone, which a silent network can put off for many minutes, and no
        replica could take the lease meanwhile. So PostgreSQL ends such a transaction itself once it has
        waited on its client for a lease: fenced writes hold the lease no longer than a lease.
        """
        timeout = {"idle_in_transaction_session_timeout": str(int(self.lease * 1000))}
        row = (await conn.execute(text(
            f"SELECT {set_local({**timeout, **settings})} FROM leader_lease WHERE id = 1 AND holder = :holder "
            "AND epoch = :epoch AND expires_at > now() FOR KEY SHARE"),
            {"holder": self.holder, "epoch": self.epoch})).first()
        if row is None:
            raise NotLeader(f"the scheduling lease of epoch {self.epoch} is no longer this replica's")


class Leadership:
    """The lease, and change notices. `candidate`: this process may lead (a scheduler); an API front end only
    listens. `address`: where this process answers as leader (SchedulerService), published with the lease
    beside a secret drawn here, which the front ends present there."""

    def __init__(self, url: URL, on_notice: Callable[[], None], lease: float = LEASE, candidate: bool = True,
                 address: str = "") -> None:
        self.url = url
        self.on_notice = on_notice
        self.lease = lease
        self.candidate = candidate
        self.address = address
        self.secret = secrets.token_hex(16)
        self.renew_every = lease / 4
        self.holder = f"{uuid.uuid4().hex[:12]}"
        self.epoch = 0
        self._renewed = float("-inf")  # monotonic time of the last renewal that succeeded
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def is_leader(self) -> bool:
        """Held, and renewed recently enough by this process's own clock: a leader that was frozen or cut
        off longer than that stops deciding before another could have taken the lease."""
        return self.epoch > 0 and time.monotonic() - self._renewed < self.lease * 0.75

    @property
    def fence(self) -> Fence:
        return Fence(self.holder, self.epoch, self.lease)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="leadership")

    async def stop(self) -> None:
        """Give the lease back at once, so another replica leads without waiting for it to expire."""
        self._stopping.set()
        if self._task:
            await self._task
        if self.epoch:  # bounded as a renewal is: a database that does not answer lets the lease expire instead
            with contextlib.suppress(psycopg.Error, OSError, TimeoutError):
                async with asyncio.timeout(self.renew_every * 2), await self._connect() as conn:
                    await conn.execute("UPDATE leader_lease SET expires_at = now() WHERE id = 1 AND holder = %s "
                                       "AND epoch = %s", (self.holder, self.epoch))
        self.epoch = 0

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                async with await self._connect() as conn:
                    await conn.execute(f"LISTEN {CHANGES}")
                    await self._hold(conn)
            except (psycopg.Error, OSError, TimeoutError) as err:
                if self.epoch:
                    log.warning("cannot renew the scheduling lease: %s", str(err) or "no answer")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.renew_every):
                    await self._stopping.wait()

    async def _connect(self) -> psycopg.AsyncConnection:
        """The lease's own connection, given up on as a renewal is when PostgreSQL does not answer."""
        return await psycopg.AsyncConnection.connect(
            conninfo(self.url), autocommit=True, connect_timeout=max(int(self.renew_every), 1),
            application_name=f"{APPLICATION_PREFIX}{os.getpid()}-lease")

    async def _renew(self, conn: psycopg.AsyncConnection) -> None:
        if not self.candidate:
            return
        started = time.monotonic()
        interval = f"{self.lease} seconds"
        if self.epoch:
            cur = await conn.execute(
                "UPDATE leader_lease SET expires_at = now() + %s::interval WHERE id = 1 AND holder = %s "
                "AND epoch = %s AND expires_at > now() RETURNING epoch", (interval, self.holder, self.epoch))
            if await cur.fetchone() is None:
                log.warning("the scheduling lease of epoch %d expired or was taken over", self.epoch)
                self.epoch = 0
                return
        else:
            # An expired lease is taken FOR UPDATE: that waits for the fenced writes still in flight under it
            # (they hold KEY SHARE, which the UPDATE's own lock would not wait for), so none of them commits after
            # another replica leads; and a lease renewed meanwhile is seen so, and left alone.
            async with conn.transaction():
                expired = await (await conn.execute(
                    "SELECT 1 FROM leader_lease WHERE id = 1 AND expires_at <= now() FOR UPDATE")).fetchone()
                if expired is not None:
                    cur = await conn.execute(
                        "UPDATE leader_lease SET holder = %s, epoch = epoch + 1, expires_at = now() + %s::interval, "
                        "address = %s, secret = %s WHERE id = 1 RETURNING epoch",
                        (self.holder, interval, self.address, self.secret))
                else:  # no lease yet, or a live one (the insert then does nothing)
                    cur = await conn.execute(
                        "INSERT INTO leader_lease (id, holder, epoch, expires_at, address, secret) "
                        "VALUES (1, %s, 1, now() + %s::interval, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING epoch",
                        (self.holder, interval, self.address, self.secret))
                row = await cur.fetchone()
            if row is None:
                return  # another replica holds it
            self.epoch = int(row[0])
            log.info("this replica is now the scheduling leader (lease epoch %d)", self.epoch)
            self.on_notice()
        self._renewed = started  # counted from before the call: the lease may be older than its answer

    async def _hold(self, conn: psycopg.AsyncConnection) -> None:
        while not self._stopping.is_set():
            # A partitioned database does not answer at all: give up on this connection and try another.
            async with asyncio.timeout(self.renew_every * 2):
                await self._renew(conn)
            # Wait for notices until the next renewal; a dead connection raises here.
            async for _ in conn.notifies(timeout=self.renew_every):
                self.on_notice()


async def announce(engine: AsyncEngine) -> None:
    """Tell every replica that something changed."""
    async with engine.begin() as conn:
        await conn.execute(text(f"NOTIFY {CHANGES}"))
