"""A submission tells the other processes in its own transaction (real PostgreSQL, LISTEN on a connection of its
own): the notice comes with the commit, not from a transaction of its own after it, which cost every batch three
more round trips and the scheduler's process a later wake."""

from __future__ import annotations

import asyncio

import psycopg
from sqlalchemy.engine import URL

from federation.store import database
from federation.store.events import CHANGES
from federation.store.jobs import JobStore
from federation.store.submission import NewJob


def _job(name: str, request_id: str = "") -> NewJob:
    return NewJob(name=name, tenant="ml", queue="train", priority_class="", priority=0, request={"nvidia.com/gpu": 1},
                  spec={"name": name, "queue": "train", "tasks": [{"name": "w", "replicas": 1,
                                                                   "resources": {"nvidia.com/gpu": "1"}}]},
                  request_id=request_id, reason="waiting")


async def test_a_submission_announces_itself_in_its_own_transaction(db_url: URL) -> None:
    engine = database.async_engine(db_url)
    listener = await psycopg.AsyncConnection.connect(
        db_url.set(drivername="postgresql").render_as_string(hide_password=False), autocommit=True)
    try:
        await listener.execute(f"LISTEN {CHANGES}")
        store = JobStore(engine)
        results = await store.submit([_job(f"j{i}", request_id=f"r{i}") for i in range(10)])
        notices = []

        async def receive() -> None:
            async for notice in listener.notifies(timeout=30, stop_after=1):
                notices.append(notice)

        await asyncio.wait_for(receive(), 60)
        assert [n.channel for n in notices] == [CHANGES]
        assert len(await store.by_ids([r.job_id for r in results])) == 10  # what it announced is there to read
    finally:
        await listener.close()
        await engine.dispose()
