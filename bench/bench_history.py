"""History out of the hot path (issue 30): does a long history slow the submit path and the scheduler?

One embedded PostgreSQL with the federation's schema and `bench.db_cycle`'s synthetic federation (100 clusters,
100 tenants x 10 queues, a backlog of pending jobs). Three layouts, measured in the same run:
1. an empty history;
2. H ended jobs moved to the history (`finished_jobs`), as `--archive-after` leaves a federation that has run them;
3. the same H ended jobs left in `jobs` (the layout before the history): the baseline that shows what moving
   them buys.
In each: the submit path's throughput (`JobStore.submit`, what SubmitJobs runs, in batches of 100, wall clock)
(the jobs submitted are taken back after, so each layout sees the same backlog) and the whole server cycle
(`Scheduler.cycle`, median of rounds where a tenth of the dispatched gangs end before each). Last, the empty
layout again (the ended jobs deleted): how much the order of the measurements alone moves the figures.

Writes history.json and history.md.
Usage: python -m bench.bench_history [--quick] [--history N] [--pending N]
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text

from bench.common import machine, measured, out_dir, parser, write
from bench.db_cycle import _attempt, _job, setup
from federation.control.scheduler import Scheduler
from federation.store import database
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.v1 import agent_pb2

SUBMIT_BATCH = 100
FILL_BATCH = 1_000_000  # history rows per INSERT


async def _fill(engine: Any, rows: int) -> float:
    """H ended jobs straight into `finished_jobs` (their ids, seqs below every live job's), then ANALYZE."""
    spec = '{"name": "old", "queue": "t000-q0", "tasks": [{"name": "worker", "replicas": 2, ' \
           '"resources": {"nvidia.com/gpu": "8", "cpu": "16"}}]}'
    started = time.perf_counter()
    for first in range(0, rows, FILL_BATCH):
        async with engine.begin() as conn:
            await conn.execute(text("""
                INSERT INTO finished_jobs (id, seq, name, tenant, queue, priority_class, priority, phase, reason,
                    cluster, hypernode, tier, attempt, retries, preemptions, request, placements, pods, refusals,
                    spec, created_at, updated_at, dispatched_at, started_at, finished_at)
                SELECT 'old-' || g, -g, 'old', 't' || lpad((g % 100)::text, 3, '0'), 't' || lpad((g % 100)::text,
                    3, '0') || '-q' || (g % 10), '', 0, 'SUCCEEDED', '', 'c' || lpad((g % 100)::text, 3, '0'), '',
                    1, 1, 0, 0, '{"nvidia.com/gpu": 16, "cpu": 16000}', '[]', '[]', '{}', CAST(:spec AS jsonb),
                    now() - interval '40 days', now() - interval '39 days', now() - interval '40 days',
                    now() - interval '40 days', now() - interval '39 days'
                FROM generate_series(CAST(:lo AS bigint), CAST(:hi AS bigint)) g"""),
                {"lo": first + 1, "hi": min(rows, first + FILL_BATCH), "spec": spec})
    async with engine.connect() as conn:
        await conn.execute(text("COMMIT"))
        await conn.execute(text("ANALYZE finished_jobs"))
    return time.perf_counter() - started


async def _into_jobs(engine: Any) -> None:
    """Today's layout before the history: the same ended jobs back in `jobs`."""
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO jobs SELECT * FROM finished_jobs"))
        await conn.execute(text("TRUNCATE finished_jobs"))
    async with engine.connect() as conn:
        await conn.execute(text("COMMIT"))
        await conn.execute(text("ANALYZE jobs"))


async def _measure(store: JobStore, scheduler: Scheduler, rng: random.Random, submits: int, rounds: int
                   ) -> dict[str, Any]:
    started = time.perf_counter()
    submitted = []
    for first in range(0, submits, SUBMIT_BATCH):
        batch = [_job(f"t{(t := rng.randrange(100)):03d}-q{rng.randrange(10)}", f"t{t:03d}", rng)
                 for _ in range(min(SUBMIT_BATCH, submits - first))]
        submitted += [r.job_id for r in await store.submit(batch)]
    submit_rate = submits / (time.perf_counter() - started)
    async with store.engine.begin() as conn:  # taken back, so that every layout is measured on the same backlog
        await conn.execute(text("DELETE FROM job_events WHERE job_id = ANY(:ids)"), {"ids": submitted})
        await conn.execute(text("DELETE FROM jobs WHERE id = ANY(:ids)"), {"ids": submitted})
    times = []
    for _ in range(rounds):
        holding = sorted(scheduler.cache.holding.values(), key=lambda j: j.id)
        for job in rng.sample(holding, len(holding) // 10):
            await store.apply_update(job.cluster, agent_pb2.JobUpdate(
                job_id=job.id, attempt=await _attempt(store, job.id), type=agent_pb2.JOB_SUCCEEDED))
        started = time.perf_counter()
        await scheduler.cycle()
        times.append(time.perf_counter() - started)
    return {"submit_jobs_per_second": submit_rate, "cycle_median_seconds": statistics.median(times),
            "cycle_seconds": times}


async def _run(url: Any, pending: int, history: int, submits: int, rounds: int, seed: int) -> dict[str, Any]:
    engine = database.async_engine(url)
    rng = random.Random(seed)
    store = await setup(engine, pending, 100, rng)
    scheduler = Scheduler(store, AdminStore(engine), lambda: True, lambda: None, heartbeat_timeout=3600)
    for _ in range(3):  # the cache loaded, the first packing and reclaim settled
        await scheduler.cycle()
    out = {"empty": await _measure(store, scheduler, rng, submits, rounds)}
    fill = await _fill(engine, history)
    out["in_history"] = await _measure(store, scheduler, rng, submits, rounds)
    await _into_jobs(engine)
    out["in_jobs"] = await _measure(store, scheduler, rng, submits, rounds)
    async with engine.begin() as conn:  # and empty again: what the order of the layouts alone changes
        await conn.execute(text("DELETE FROM jobs WHERE seq < 0"))
    async with engine.connect() as conn:
        await (await conn.execution_options(isolation_level="AUTOCOMMIT")).execute(text("VACUUM ANALYZE jobs"))
    out["empty_again"] = await _measure(store, scheduler, rng, submits, rounds)
    await engine.dispose()
    return {"pending": pending, "history": history, "fill_seconds": fill, "layouts": out}


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--history", type=int, default=None, help="ended jobs (default 10,000,000; quick 20,000)")
    p.add_argument("--pending", type=int, default=None, help="pending jobs (default 100,000; quick 2,000)")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    history = args.history or (20_000 if args.quick else 10_000_000)
    pending = args.pending or (2_000 if args.quick else 100_000)
    submits, rounds = (1_000, 2) if args.quick else (10_000, 5)
    with tempfile.TemporaryDirectory() as tmp, database.embedded_postgres(Path(tmp) / "pg") as raw:
        url = database.sqlalchemy_url(raw)
        database.upgrade(url)
        result = asyncio.run(_run(url, pending, history, submits, rounds, args.seed))
    results = {"benchmark": "history", "date": measured(), "machine": machine(), "quick": args.quick,
               "submits": submits, "rounds": rounds, **result}
    lay = result["layouts"]
    headline = [(f"{history:,} ended jobs, {name}", f"submit {lay[key]['submit_jobs_per_second']:,.0f} jobs/s, cycle "
                 f"{lay[key]['cycle_median_seconds']:.3f} s (empty: {lay['empty']['submit_jobs_per_second']:,.0f} "
                 f"jobs/s, {lay['empty']['cycle_median_seconds']:.3f} s)")
                for key, name in (("in_history", "in the history"), ("in_jobs", "left in jobs"))]
    write(out_dir(args), "history", results, report(results), headline)


def report(r: dict) -> str:
    lay = r["layouts"]
    empty = lay["empty"]
    lines = [f"# History out of the hot path ({r['date']})", "",
             f"Machine: {r['machine']}; embedded PostgreSQL on the same cores. {r['pending']:,} pending jobs on 100 "
             f"clusters; {r['history']:,} ended jobs (written in {r['fill_seconds']:.0f} s). Submit path: "
             f"{r['submits']:,} jobs in batches of {SUBMIT_BATCH}; cycle: median of {r['rounds']} rounds with a tenth "
             "of the running gangs ending before each. Same run, same database, layouts in turn.", "",
             "| layout, in the order measured | submit (jobs/s) | vs empty | server cycle, median (s) | vs empty |",
             "|---|---:|---:|---:|---:|"]
    for key, name in (("empty", "empty history"), ("in_history", f"{r['history']:,} in the history (finished_jobs)"),
                      ("in_jobs", f"{r['history']:,} left in jobs (before)"), ("empty_again", "empty again")):
        m = lay.get(key)
        if m is None:
            continue
        lines.append(f"| {name} | {m['submit_jobs_per_second']:,.0f} | "
                     f"{m['submit_jobs_per_second'] / empty['submit_jobs_per_second'] - 1:+.0%} | "
                     f"{m['cycle_median_seconds']:.3f} | "
                     f"{m['cycle_median_seconds'] / empty['cycle_median_seconds'] - 1:+.0%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
