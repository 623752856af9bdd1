"""A replica stopped in the middle of a statement (after its Execute, before its Sync: an executemany's pipeline cut
off) holds its row locks with no PostgreSQL timeout to end it: every replica's sweep ends it as PostgreSQL ends a
session idle in its transaction, and the writes that waited for its rows go on. Seen once in CI: an agent whose
reports were being written on a replica cut off from PostgreSQL could never register anywhere else."""

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import psycopg
import pytest
from prometheus_client import REGISTRY
from sqlalchemy.engine import URL

from federation.control.stalled import StalledSessions
from federation.store.database import APPLICATION_PREFIX, conninfo, stalled_after

ENDED = "federation_stalled_sessions_ended_total"
LEASE = 0.6  # a session is ended once seen waiting for stalled_after(LEASE), the sweep looking every quarter of it


async def _session(db_url: URL, name: str) -> psycopg.AsyncConnection:
    return await psycopg.AsyncConnection.connect(conninfo(db_url), autocommit=True,
                                                 application_name=f"{APPLICATION_PREFIX}{name}")


async def _state(conn: psycopg.AsyncConnection, pid: int) -> tuple[str, str, str] | None:
    """The session's (state, wait_event_type, wait_event); None once it is gone."""
    return await (await conn.execute("SELECT state, wait_event_type, wait_event FROM pg_stat_activity WHERE pid = %s",
                                     (pid,))).fetchone()


async def _until(what: str, probe: Callable[[], Awaitable[object]], timeout: float = 60) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := await probe():
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_session_stopped_mid_statement_is_ended_and_the_writes_it_held_up_go_on(db_url: URL) -> None:
    observer = await _session(db_url, "observer")
    await observer.execute("CREATE TABLE counters (id int PRIMARY KEY, value int NOT NULL)")
    await observer.execute("INSERT INTO counters VALUES (1, 0)")
    stuck = await _session(db_url, "stuck")
    writer = await _session(db_url, "writer")
    sleeper = await _session(db_url, "sleeper")
    sweeper: asyncio.Task[None] | None = None
    try:
        # Its UPDATE runs and locks the row; the Sync that would end its statement never comes.
        stuck_pid = stuck.pgconn.backend_pid
        stuck.pgconn.enter_pipeline_mode()
        stuck.pgconn.send_query_params(b"UPDATE counters SET value = value + 1 WHERE id = 1", None)
        while stuck.pgconn.flush():
            await asyncio.sleep(0.01)

        async def waiting_mid_statement() -> bool:
            return await _state(observer, stuck_pid) == ("active", "Client", "ClientRead")

        await _until("the stuck session to wait on its client mid-statement", waiting_mid_statement)
        blocked = asyncio.create_task(writer.execute("UPDATE counters SET value = 10 WHERE id = 1"))
        async def writer_waits_on_a_lock() -> bool:
            state = await _state(observer, writer.pgconn.backend_pid)
            return state is not None and state[1] == "Lock"

        await _until("the writer to wait for the stuck session's lock", writer_waits_on_a_lock)
        # A session of the federation busy inside a statement longer than the sweep's limit is not waiting on its
        # client: it must be left to finish.
        slept = asyncio.create_task(sleeper.execute("SELECT pg_sleep(%s)", (stalled_after(LEASE) + 2,)))
        before = REGISTRY.get_sample_value(ENDED)
        sweeper = asyncio.create_task(StalledSessions(db_url, stalled_after(LEASE)).run())
        await asyncio.wait_for(blocked, 60)

        async def gone() -> bool:  # its locks go before its entry in pg_stat_activity does
            return await _state(observer, stuck_pid) is None

        async def counted() -> bool:  # the sweep counts it after its answer, which may come after the writer's
            return REGISTRY.get_sample_value(ENDED) == before + 1

        await _until("the stuck session to be gone", gone)
        await _until("its ending to be counted", counted)
        value = await (await observer.execute("SELECT value FROM counters WHERE id = 1")).fetchone()
        assert value == (10,)  # the stuck statement's increment was rolled back, the waiting write committed
        await asyncio.wait_for(slept, 60)  # raises had it been ended
    finally:
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        for conn in (stuck, writer, sleeper, observer):
            with contextlib.suppress(psycopg.Error):
                await conn.close()



async def test_the_sweep_ends_when_cancelled_however_the_cancel_lands(db_url: URL) -> None:
    """A server's shutdown cancels the sweep and waits for it. A cancel landing in the turn of the loop in which a
    sweep answered went unseen once (Python 3.11's `wait_for` returned the answer instead), and the sweep ran on
    until the process was killed: seen in a benchmark's shutdown under load. Here every cancel lands so."""
    cancels = 0

    class CancelledAsItAnswers(StalledSessions):
        async def sweep(self, conn: psycopg.AsyncConnection) -> int:
            nonlocal cancels
            ended = await super().sweep(conn)
            cancels += 1
            runner.cancel()
            return ended

    runner = asyncio.create_task(CancelledAsItAnswers(db_url, stalled_after(LEASE)).run())
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(60):
            await runner
    assert cancels == 1  # the first cancel ended it
