"""A cycle's dispatches and reasons join a batch of ids to the jobs still waiting. PostgreSQL plans that join from its
statistics, which lag a burst of submissions until autovacuum's next ANALYZE: believing few jobs wait, it hashed every
waiting job to update a batch of them. Under `by_key` the join is lookups by primary key, whatever the statistics
say; and the writes still skip jobs that no longer wait."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import insert, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncConnection

from federation.control.leader import Fence
from federation.store.database import async_engine, by_key
from federation.store.jobs import JobStore
from federation.store.models import Cluster, Queue, Tenant
from federation.store.submission import NewJob
from federation.store.transitions import DISPATCH, REASONS

ENDED, WAITING, BATCH = 2_000, 30_000, 2_000


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(node for child in plan.get("Plans", ()) for node in _nodes(child))]


async def _plan(conn: AsyncConnection, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    explained = (await conn.execute(text(f"EXPLAIN (FORMAT JSON) {statement.text}"), params)).scalar_one()
    return _nodes(explained[0]["Plan"])


async def test_a_batch_is_looked_up_by_key_when_the_statistics_say_few_jobs_wait(db_url: URL) -> None:
    engine = async_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(Cluster), [{"name": "c1", "labels": {}, "status": "READY"}])
            await conn.execute(insert(Tenant), [{"name": "t1"}])
            await conn.execute(insert(Queue), [{"name": "q1", "tenant": "t1"}])
        store = JobStore(engine)
        (seed,) = await store.submit([NewJob("j", "t1", "q1", "", 0, {"cpu": 1}, {"queue": "q1"}, "", "")])
        async with engine.begin() as conn:
            columns = [c for c in (await conn.execute(text(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'jobs' "
                "AND column_name NOT IN ('id', 'seq', 'phase')"))).scalars()]
            copy = ", ".join(columns)

            async def copies(conn: AsyncConnection, prefix: str, n: int, phase: str) -> None:
                await conn.execute(text(f"INSERT INTO jobs (id, phase, {copy}) SELECT :prefix || g, :phase, {copy} "
                                        "FROM jobs, generate_series(1, :n) AS g WHERE jobs.id = :seed"),
                                   {"prefix": prefix, "n": n, "phase": phase, "seed": seed.job_id})

            # The statistics taken when one job waited; then a burst arrives, not analyzed yet.
            await copies(conn, "ended-", ENDED, "SUCCEEDED")
        async with engine.connect() as conn:
            await conn.execute(text("ANALYZE jobs"))
            await conn.commit()
        async with engine.begin() as conn:
            await copies(conn, "waiting-", WAITING, "PENDING")
        ids = [f"waiting-{i}" for i in range(1, WAITING + 1, WAITING // BATCH)]
        dispatch = {"ids": ids, "clusters": ["c1"] * len(ids), "notes": [""] * len(ids),
                    "checks": [json.dumps([])] * len(ids), "nexts": [""] * len(ids)}
        reasons = {"ids": ids, "reasons": ["waits"] * len(ids)}
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO leader_lease (id, holder, epoch, expires_at) "
                                    "VALUES (1, 'me', 1, now() + interval '1 hour')"))
        # Planned by key whether the write is the leader's (fenced: set by the lease's check) or not.
        for fence in (None, Fence("me", 1, 3600)):
            async with engine.begin() as conn:
                await by_key(conn, fence)
                if fence is not None:
                    timeout = (await conn.execute(text("SHOW idle_in_transaction_session_timeout"))).scalar_one()
                    assert timeout == "1h"  # and the lease's own setting beside them
                for statement, params in ((DISPATCH, dispatch), (REASONS, reasons)):
                    nodes = await _plan(conn, statement, params)
                    kinds = [node["Node Type"] for node in nodes]
                    assert "Hash Join" not in kinds and "Merge Join" not in kinds, kinds
                    assert any(node.get("Index Name") == "jobs_pkey" for node in nodes), kinds
                await conn.rollback()

        # And by key, a job that no longer waits is still left alone.
        await store.dispatch({ids[0]: "c1"})
        await store.set_waiting({ids[0]: "waits", ids[1]: "waits"})
        assert (await store.get(ids[0]))["phase"] == "DISPATCHED"
        assert (await store.get(ids[0]))["reason"].startswith("dispatched to cluster c1")
        assert (await store.get(ids[1]))["reason"] == "waits"
        assert [r["id"] for r in await store.arrived([ids[0], ids[1]])] == [ids[1]]
    finally:
        await engine.dispose()
