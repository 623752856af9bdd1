"""The server's connection pool pings a connection before use only once it has sat unused for a while
(`database.PING_AFTER_IDLE`): real PostgreSQL, a backend ended under an idle pooled connection."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from federation.store import database


def _terminate(url: URL, pid: int) -> None:
    with psycopg.connect(url.set(drivername="postgresql").render_as_string(hide_password=False),
                         autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def _backend(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(text("SELECT pg_backend_pid()"))).scalar_one())


async def test_a_connection_idle_past_the_threshold_is_pinged_and_a_dead_one_replaced_before_use(
        db_url: URL, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(database, "PING_AFTER_IDLE", 0.2)
    engine = database.async_engine(db_url, pool_size=1)
    pings: list[object] = []
    ping = engine.sync_engine.dialect.do_ping
    monkeypatch.setattr(engine.sync_engine.dialect, "do_ping", lambda c: (pings.append(c), ping(c))[1])
    try:
        first = await _backend(engine)
        assert await _backend(engine) == first and pings == []  # used a moment ago: handed out as it is
        await asyncio.sleep(0.3)
        assert await _backend(engine) == first and len(pings) == 1  # idle past the threshold: pinged, alive
        await asyncio.to_thread(_terminate, db_url, first)
        await asyncio.sleep(0.3)
        # Its backend gone while it sat idle: the ping finds it dead and the pool hands out a new one, no error.
        second = await _backend(engine)
        assert second != first and len(pings) == 2
    finally:
        await engine.dispose()
