"""A cycle's writes send their ids, clusters and texts as PostgreSQL arrays, in binary (`database._binary_lists`):
on real PostgreSQL, what comes back is each text exactly as written, whatever quoting an array literal would need
(quotes, backslashes, braces, commas, a lone NULL, empty, new lines, non-ASCII); and the holds of many clusters
written in one statement."""

from __future__ import annotations

import gc

from sqlalchemy import insert, select
from sqlalchemy.engine import URL

from federation.store.admin import AdminStore
from federation.store.database import async_engine
from federation.store.jobs import JobStore
from federation.store.models import Cluster, JobEvent, Queue, Tenant
from federation.store.submission import NewJob

AWKWARD = ['say "hi"', "back\\slash", "{braces}", "a, b", "NULL", "", "two\nlines", "ünïcødé ✓", " spaced ",
           "quote ' and \\\" both", "{\"a\": [1, 2]}"]


async def test_texts_written_in_batches_come_back_exactly(db_url: URL) -> None:
    engine = async_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(Cluster), [{"name": "c1", "labels": {}, "status": "READY"}])
            await conn.execute(insert(Tenant), [{"name": "t1"}])
            await conn.execute(insert(Queue), [{"name": "q1", "tenant": "t1"}])
        store = JobStore(engine)
        jobs = await store.submit([NewJob("j", "t1", "q1", "", 0, {"cpu": 1}, {"queue": "q1"}, "", "")
                                   for _ in AWKWARD])
        ids = [job.job_id for job in jobs]
        reasons = {job_id: f"waits: {text}" for job_id, text in zip(ids, AWKWARD, strict=True)}
        await store.set_waiting(reasons)
        for job_id, reason in reasons.items():
            assert (await store.get(job_id))["reason"] == reason

        half = ids[: len(ids) // 2]
        notes = {job_id: text for job_id, text in zip(ids, AWKWARD, strict=True) if job_id in half}
        moved = await store.dispatch(dict.fromkeys(half, "c1"), notes=notes)
        assert sorted(r["id"] for r in moved) == sorted(half)
        for job_id in half:
            # (then what it waits for next: its agent placing it)
            assert (await store.get(job_id))["reason"].startswith(f"dispatched to cluster c1 ({notes[job_id]});")

        why = {job_id: f"preempted: {notes[job_id]}" for job_id in half}
        await store.preempt(why)
        for job_id in half:
            assert (await store.get(job_id))["reason"] == why[job_id]
        async with engine.connect() as conn:
            said = {(r.job_id, r.type): r.message for r in await conn.execute(
                select(JobEvent.job_id, JobEvent.type, JobEvent.message).where(JobEvent.job_id.in_(half)))}
        assert {job_id: said[job_id, "Preempted"] for job_id in half} == why
    finally:
        await engine.dispose()


async def test_holds_of_many_clusters_are_written_in_one_go_and_the_rest_kept(db_url: URL) -> None:
    engine = async_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(Cluster), [{"name": f"c{i}", "labels": {}, "status": "READY"} for i in range(4)])
        admin = AdminStore(engine)
        await admin.set_holds({"c0": [["j1", 2, 8]], "c1": [["j2", 1, 4], ["j3", 4, 8]], "c2": []})
        await admin.set_holds({"c1": [], "c3": [["j4", 1, 1]]})  # c0 and c2 not named: as they were
        await admin.set_holds({})
        async with engine.connect() as conn:
            holds = dict((await conn.execute(select(Cluster.name, Cluster.holds))).all())
        assert holds == {"c0": [["j1", 2, 8]], "c1": [], "c2": [], "c3": [["j4", 1, 1]]}
    finally:
        await engine.dispose()


async def test_reading_jobs_leaves_no_reference_cycles(db_url: URL) -> None:
    """GetJob and ListJobs read through one statement made once: made per read, its alias of the jobs table left
    about 600 objects in reference cycles each time, for the collector to walk (1.2 million per 2,000 reads)."""
    engine = async_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(Tenant), [{"name": "t1"}])
            await conn.execute(insert(Queue), [{"name": "q1", "tenant": "t1"}])
        store = JobStore(engine)
        (job,) = await store.submit([NewJob("j", "t1", "q1", "", 0, {"cpu": 1}, {"queue": "q1"}, "", "")])
        await store.get(job.job_id)  # the first read compiles and caches what every later one reuses
        await store.list(tenant="t1")
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for _ in range(20):
                assert (await store.get(job.job_id))["queue_position"] == 1
                assert [r["id"] for r in await store.list(tenant="t1")] == [job.job_id]
            gc.collect()
            left = len(gc.garbage)
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        assert left < 200, left  # 40 reads: 3,441 with the statement made per read
    finally:
        await engine.dispose()
