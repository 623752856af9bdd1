"""The event log's two numberings on real PostgreSQL: the federation's (no gaps, in commit order) and each tenant's
own (what a tenant's watch resumes from), when one batch names many tenants and when batches naming the same
tenants in different orders commit side by side."""

import asyncio
import random

from sqlalchemy import select
from sqlalchemy.engine import URL

from federation.store.database import async_engine
from federation.store.events import EventRecord, append_events
from federation.store.models import JobEvent


def _events(rng: random.Random, tenants: list[str], n: int) -> list[EventRecord]:
    return [EventRecord(f"job-{rng.randrange(10**9)}", rng.choice(tenants), "q", "Submitted", "PENDING")
            for _ in range(n)]


async def _numbered(engine) -> list[tuple[int, str, int, str]]:  # type: ignore[no-untyped-def]
    async with engine.connect() as conn:
        rows = await conn.execute(select(JobEvent.seq, JobEvent.tenant, JobEvent.tenant_seq, JobEvent.job_id)
                                  .order_by(JobEvent.seq))
        return [tuple(r) for r in rows]


def _assert_numbered(rows: list[tuple[int, str, int, str]]) -> None:
    """The federation's numbers run 1..n; each tenant's, in the federation's order, run 1..its count."""
    assert [seq for seq, *_ in rows] == list(range(1, len(rows) + 1))
    per_tenant: dict[str, list[int]] = {}
    for _, tenant, tenant_seq, _ in rows:
        per_tenant.setdefault(tenant, []).append(tenant_seq)
    for tenant, numbers in per_tenant.items():
        assert numbers == list(range(1, len(numbers) + 1)), tenant


async def test_a_batch_naming_many_tenants_numbers_each_tenants_events_on_from_its_last(db_url: URL) -> None:
    engine = async_engine(db_url)
    rng = random.Random(3)
    tenants = [f"t{i:02d}" for i in range(30)]
    try:
        batches = [_events(rng, tenants[:10], 50), _events(rng, tenants, 400), _events(rng, tenants[5:], 200)]
        for batch in batches:
            async with engine.begin() as conn:
                await append_events(conn, batch)
        rows = await _numbered(engine)
        assert [job for *_, job in rows] == [e.job_id for batch in batches for e in batch]
        _assert_numbered(rows)
        assert {tenant for _, tenant, _, _ in rows} == set(tenants)
    finally:
        await engine.dispose()


async def test_batches_committing_side_by_side_keep_both_numberings_whole(db_url: URL) -> None:
    """Writers of overlapping tenants lock the counters in one order (the federation's, then by tenant name), so
    none waits on another for ever, and no number is given twice or skipped."""
    engine = async_engine(db_url, pool_size=8)
    rng = random.Random(5)
    tenants = [f"t{i:02d}" for i in range(12)]

    async def writer(seed: int) -> None:
        mine = random.Random(seed)
        for _ in range(15):
            batch = _events(mine, mine.sample(tenants, mine.randrange(1, len(tenants) + 1)), mine.randrange(1, 40))
            async with engine.begin() as conn:
                await append_events(conn, batch)

    try:
        await asyncio.wait_for(asyncio.gather(*(writer(rng.randrange(10**6)) for _ in range(6))), 120)
        rows = await _numbered(engine)
        assert len(rows) > 6 * 15
        _assert_numbered(rows)
    finally:
        await engine.dispose()
