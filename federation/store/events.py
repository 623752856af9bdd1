"""The job event log: every state change of a job appends to `job_events` in the same transaction.

Event numbers come from the single `event_counter` row, updated last in the transaction: its row lock makes
writers commit in sequence order, so a reader that has seen event N has seen every event below N, which is what
lets `WatchJobs` resume from a number without gaps or repeats. Each tenant's events are also numbered on their own
(`tenant_event_counters`, locked after the federation's counter), which is what a tenant sees: nothing in what a
tenant reads counts another tenant's work.
"""

from __future__ import annotations

import asyncio
import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from psycopg.rows import dict_row
from sqlalchemy import Table, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from federation import failpoints
from federation.store.database import IDENTIFIERS, driver, json_text
from federation.store.models import (
    EventCounter,
    JobEvent,
    TenantEventCounter,
)

# Rows from which an insert's JSON document is encoded on a worker thread: orjson encodes a hundred job rows in
# under 0.1 ms, less than handing them to a worker costs; a thousand with large pod templates take milliseconds.
OFF_LOOP_ROWS = 500

# The channel every write others must act on is announced on (NOTIFY), each process listening on its lease's
# connection; a notice is delivered when its transaction commits, and never when it rolls back.
CHANGES = "federation_changes"
NOTIFY_CHANGES = f"NOTIFY {CHANGES}".encode()

SENT_BACK_EVENTS = ("Rejected", "Evacuated", "NotReady")  # a cluster sent the job back: its message says why


_PHASES_AFTER = ("SELECT seq, job_id, type, phase, cluster, CASE WHEN type = ANY(%s) THEN message ELSE '' END "
                 "AS message FROM job_events WHERE seq > %s AND seq <= %s ORDER BY seq LIMIT %s")
LAST_EVENT_SEQ = select(EventCounter.last_seq).where(EventCounter.id == 1)
# Count a batch's events in their tenants' counters (a tenant's first event makes its row), returning each one's
# last number. The rows are locked in the order given, which is by name.
TENANT_COUNTERS = (
    f"INSERT INTO {TenantEventCounter.__tablename__} AS c (tenant, last_seq) "
    "SELECT t.tenant, t.n FROM unnest(CAST(%s AS text[]), CAST(%s AS bigint[])) "
    "WITH ORDINALITY AS t(tenant, n, at) ORDER BY t.at "
    "ON CONFLICT (tenant) DO UPDATE SET last_seq = c.last_seq + EXCLUDED.last_seq "
    "RETURNING c.tenant, c.last_seq").encode()
# Take the federation's numbers for a batch of events (and the counter's row lock): the last one given.
NUMBER_EVENTS = (f"UPDATE {EventCounter.__tablename__} SET last_seq = last_seq + %s WHERE id = 1 "
                 "RETURNING last_seq").encode()


# Events that are orders to an agent (federation.relay.orders relays them).
ORDER_EVENTS = ("Dispatched", "Admitted", "Preempted", "Cancelled", "Requeued", "Lost", "CheckRetry", "CheckRejected",
                "HoldReleased")


_events = JobEvent.__table__


@dataclass(frozen=True)
class EventRecord:
    job_id: str
    tenant: str
    queue: str
    type: str
    phase: str
    message: str = ""
    attempt: int = 0
    cluster: str = ""


async def insert_rows(conn: AsyncConnection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert a batch in one statement, PostgreSQL expanding the rows from one JSON document: an executemany
    sends a statement per row, each with its parameters encoded one by one, which cost a submission more
    of the server's time than everything else it does. Sent by the driver (`database.driver`)."""
    defaults = _scalar_defaults(table)
    statement = _insert_statement(table, tuple({**defaults, **rows[0]}))

    def encode() -> str:
        return json_text([{**defaults, **row} for row in rows])

    # A batch of 1,000 job specs is megabytes of JSON: encoded on a worker thread, not the serving loop.
    document = encode() if len(rows) < OFF_LOOP_ROWS else await asyncio.to_thread(encode)
    await (await driver(conn)).execute(statement, (document,))


@functools.cache
def _insert_statement(table: Table, names: tuple[str, ...]) -> bytes:
    quote = IDENTIFIERS.quote
    columns = ", ".join(quote(c) for c in names)
    name = quote(table.name)
    return (f"INSERT INTO {name} ({columns}) SELECT {columns} FROM "
            f"jsonb_populate_recordset(NULL::{name}, CAST(%s AS jsonb))").encode()


@functools.cache
def _scalar_defaults(table: Table) -> dict[str, Any]:
    """The model's own defaults (SQLAlchemy fills them in its inserts; PostgreSQL does not know them)."""
    return {c.name: c.default.arg for c in table.columns if c.default is not None and c.default.is_scalar}


async def append_events(conn: AsyncConnection, events: Sequence[EventRecord]) -> int:
    """Number and insert events; call last in the transaction (it takes the counters' row locks: the
    federation's first, then each tenant's in name order, the same order in every writer)."""
    if not events:
        return 0
    raw = await driver(conn)  # the statements every write runs, by the driver (`database.driver`)
    last = (await (await raw.execute(NUMBER_EVENTS, (len(events),))).fetchone())[0]  # type: ignore[index]
    first = last - len(events) + 1
    per_tenant = Counter(e.tenant for e in events)
    tenants = sorted(per_tenant)
    # Every tenant's counter in one statement, its rows taken in name order (a cycle's dispatches name a hundred
    # tenants: a statement each was a tenth of the cycle's write).
    counted = await (await raw.execute(TENANT_COUNTERS, (tenants, [per_tenant[t] for t in tenants]))).fetchall()
    next_of = {tenant: last_seq - per_tenant[tenant] + 1 for tenant, last_seq in counted}
    rows = []
    for i, e in enumerate(events):
        rows.append({"seq": first + i, "tenant_seq": next_of[e.tenant], "job_id": e.job_id, "tenant": e.tenant,
                     "queue": e.queue, "type": e.type, "phase": e.phase, "message": e.message,
                     "attempt": e.attempt, "cluster": e.cluster})
        next_of[e.tenant] += 1
    await insert_rows(conn, _events, rows)
    for kind in sorted({e.type for e in events}):
        failpoints.reached(f"events:{kind}")  # holding both counters' row locks, before the commit
    return last


class EventLog:
    """Reading the log (a part of `JobStore`)."""

    engine: AsyncEngine

    async def seq_of_tenant_event(self, tenant: str, tenant_seq: int) -> int:
        """The federation's number of the tenant's last event numbered `tenant_seq` or below (0: none)."""
        query = (select(JobEvent.seq).where(JobEvent.tenant == tenant, JobEvent.tenant_seq <= tenant_seq)
                 .order_by(JobEvent.tenant_seq.desc()).limit(1))
        async with self.engine.connect() as conn:
            return (await conn.execute(query)).scalar_one_or_none() or 0

    async def events_after(self, after_seq: int, upto: int | None = None, limit: int = 1000) -> list[Any]:
        query = select(JobEvent).where(JobEvent.seq > after_seq).order_by(JobEvent.seq).limit(limit)
        if upto is not None:
            query = query.where(JobEvent.seq <= upto)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def phases_after(self, after_seq: int, upto: int, limit: int) -> list[Any]:
        """Sequence number, job, type, phase and cluster of the events after `after_seq` up to `upto`, in order;
        the message too of those that send a job back from a cluster (Rejected, Evacuated): the scheduler keeps the
        job away from that cluster for a while, whichever replica heard the agent. Sent by the driver: the scheduler
        reads every event, three or more a job."""
        async with self.engine.connect() as conn, conn.begin(), \
                (await driver(conn)).cursor(row_factory=dict_row) as cur:
            await cur.execute(_PHASES_AFTER, (list(SENT_BACK_EVENTS), after_seq, upto, limit))
            return await cur.fetchall()

    async def order_events(self, after_seq: int, upto: int, clusters: Sequence[str]) -> list[Any]:
        """Events that are orders to the agents of `clusters` (see `federation.relay.orders`), in order."""
        query = (select(JobEvent).where(JobEvent.seq > after_seq, JobEvent.seq <= upto,
                                        JobEvent.type.in_(ORDER_EVENTS),
                                        JobEvent.cluster.in_(clusters)).order_by(JobEvent.seq))
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def last_event_seq(self) -> int:
        async with self.engine.connect() as conn:
            return (await conn.execute(LAST_EVENT_SEQ)).scalar_one()
