"""Ending the sessions of a replica that stopped driving them in the middle of a statement.

PostgreSQL ends a transaction whose client went quiet between two statements
(`idle_in_transaction_session_timeout`, set on every session of the server's pool), but not one whose client went
quiet inside a statement: after an Execute and before its Sync (the gap an executemany's pipeline leaves open for
as long as it sends) the session counts as active, no timeout of PostgreSQL 15 applies, and it waits to read its
client for as long as the client's TCP stays open, which for a frozen process or a partition a proxy keeps open is
for ever. Its row locks meanwhile hold up every other replica's writes to those rows: an agent's reports of its jobs
(so its stream, and the cluster, never comes back on another replica), the lease's takeover.

So each replica ends such sessions as PostgreSQL ends the idle ones: a session of the federation, waiting on its
client mid-statement with no new statement since, seen so for `stalled_after` by PostgreSQL's own clock, is
terminated. The same timeout, the same meaning: its process has not sent a byte of the statement it began for
that long. The sweep has a connection and a task of its own: a slow answer to it never delays a lease renewal, and
a standby's takeover, waiting on a lease row such a session holds, is not what would have to end it."""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import datetime

import psycopg
from sqlalchemy.engine import URL

from federation import metrics
from federation.store.database import APPLICATION_PREFIX, conninfo

log = logging.getLogger(__name__)

# The federation's sessions (this database, this role: a role may end its own sessions without any grant) waiting
# to read their client while counted active: inside a statement's messages, not between statements.
_WAITING_MID_STATEMENT = """
    SELECT pid, state_change, now() FROM pg_stat_activity
    WHERE datname = current_database() AND usename = current_user AND pid <> pg_backend_pid()
      AND application_name LIKE %(prefix)s AND state = 'active' AND wait_event = 'ClientRead'"""

# Ended only if it still waits on the same statement (a message since would have moved `state_change`).
_END = """
    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
    WHERE pid = %(pid)s AND state_change = %(since)s AND state = 'active' AND wait_event = 'ClientRead'"""


class StalledSessions:
    """What the last sweeps saw: each waiting session, by process and the start of its statement, with when it was
    first seen waiting so. A session seen once only may be reading the next message already on its socket."""

    def __init__(self, url: URL, stalled_after: float) -> None:
        self.url = url
        self.stalled_after = stalled_after
        self.every = stalled_after / 4
        self._seen: dict[tuple[int, datetime], datetime] = {}

    async def run(self) -> None:
        """Sweep every quarter of `stalled_after` until cancelled; a database that does not answer is tried again."""
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        conninfo(self.url), autocommit=True, connect_timeout=max(int(self.stalled_after), 1),
                        application_name=f"{APPLICATION_PREFIX}{os.getpid()}-sweep") as conn:
                    while True:
                        async with asyncio.timeout(self.stalled_after):
                            ended = await self.sweep(conn)
                        metrics.STALLED_SESSIONS_ENDED.inc(ended)
                        await asyncio.sleep(self.every)
            except (psycopg.Error, OSError, TimeoutError) as err:  # the lease says so too, and louder
                log.debug("cannot look for stalled sessions: %s", str(err) or "no answer")
            await asyncio.sleep(self.every)

    async def sweep(self, conn: psycopg.AsyncConnection) -> int:
        """End the sessions that have waited on their client mid-statement for `stalled_after`; how many were ended.
        `conn`: autocommit."""
        rows = await (await conn.execute(_WAITING_MID_STATEMENT, {"prefix": f"{APPLICATION_PREFIX}%"})).fetchall()
        now = rows[0][2] if rows else None
        self._seen = {(pid, since): self._seen.get((pid, since), now) for pid, since, _ in rows}
        ended = 0
        for (pid, since), first in list(self._seen.items()):
            if (now - first).total_seconds() < self.stalled_after:
                continue
            row = await (await conn.execute(_END, {"pid": pid, "since": since})).fetchone()
            if row is not None and row[0]:
                ended += 1
                del self._seen[(pid, since)]
                log.warning("ended PostgreSQL session %d: its client began a statement at %s and has sent nothing "
                            "since for %.1f s (a replica frozen or cut off mid-statement); its locks are released",
                            pid, since.isoformat(timespec="seconds"), (now - first).total_seconds())
        return ended
