"""The server's whole scheduling cycle on a real (embedded) PostgreSQL: load, decide, write.

Fills a fresh database with the synthetic federation of bench_scheduler (clusters with their
inventories, tenants, queues, pending jobs submitted through the job store), then times
`Scheduler.cycle()`, wall clock:

- the first cycle, which also loads the leader's job cache (what a newly elected leader pays);
- settling cycles, while reclaim evens out what the first cycle's packing left uneven;
- sustained rounds: before each, a tenth of the dispatched gangs end (their agents report them
  Succeeded through the job store, as the agent stream would) and as many new jobs are submitted,
  so every cycle has freed resources to hand out and a backlog kept at its size. The leader then
  reads those events into its job cache as the server does when told of a change (`Scheduler.follow`;
  admission on arrival off, so every job is the cycle's to place), timed on its own, and the cycle
  after it reads only what came since;
- a takeover: a second replica, a hot standby catching up after each round, becomes leader and runs
  its first cycle.

The process takes the scheduler process's collector settings (`federation.kernel.heap.tune`), as the server's
own start does: with CPython's defaults its collections took 0.15-0.24 s of each sustained cycle here (0.03 s
with them), time the server does not spend.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from bench.bench_scheduler import MIX
from federation.api.agents import inventory_json
from federation.api.convert import spec_to_json
from federation.control.scheduler import Scheduler
from federation.kernel import heap
from federation.store import database
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster, Queue, Tenant
from federation.store.submission import NewJob
from federation.v1 import agent_pb2, common_pb2

GPU = "nvidia.com/gpu"
BATCH = 2_000


def _inventory(nodes: int) -> dict[str, Any]:
    gpus, cpu = 8 * nodes, 192_000 * nodes
    inv = agent_pb2.Inventory(nodes=nodes, ready_nodes=nodes, healthy=True)
    for field in (inv.capacity, inv.allocatable):
        field.amounts.update({GPU: gpus, "cpu": cpu})
    for tier, name, size in ((0, "node", 1), (1, "leaf", 10), (2, "spine", 100), (3, "cluster", nodes)):
        inv.topology.add(tier=tier, tier_name=name).max_free.amounts.update({GPU: 8 * size, "cpu": 192_000 * size})
    return inventory_json(inv)


def _job(queue: str, tenant: str, rng: random.Random) -> NewJob:
    gpus = rng.choices([s for s, _ in MIX], [w for _, w in MIX])[0]
    pod = min(gpus, 8)
    mode = "hard" if gpus in (16, 64) and rng.random() < 0.7 else "soft" if gpus > 8 else ""
    spec = common_pb2.JobSpec(name="bench", queue=queue, network_topology=common_pb2.NetworkTopology(
        mode=mode, highest_tier_allowed=1 if mode else 0), tasks=[common_pb2.TaskSpec(
            name="worker", replicas=gpus // pod, resources={GPU: str(pod), "cpu": str(2 * pod)})])
    return NewJob("bench", tenant, queue, "", rng.choice([0, 0, 0, 10]), {GPU: gpus, "cpu": gpus * 2_000},
                  spec_to_json(spec), "", "")


async def setup(engine: Any, jobs: int, clusters: int, rng: random.Random) -> JobStore:
    """The synthetic federation in a fresh database: clusters with inventories, tenants, queues, `jobs` pending."""
    async with engine.begin() as conn:
        await conn.execute(insert(Cluster), [{"name": f"c{i:03d}", "labels": {}, "status": "READY",
                                              "last_heartbeat": datetime.now(UTC),
                                              "inventory": _inventory(500)} for i in range(clusters)])
        await conn.execute(insert(Tenant), [{"name": f"t{t:03d}", "weight": rng.choice([1, 1, 2, 4])}
                                            for t in range(100)])
        await conn.execute(insert(Queue), [{"name": f"t{t:03d}-q{q}", "tenant": f"t{t:03d}", "weight": 1,
                                            "reclaimable": True} for t in range(100) for q in range(10)])
    store = JobStore(engine)
    for start in range(0, jobs, BATCH):
        batch = []
        for _ in range(start, min(start + BATCH, jobs)):
            t, q = rng.randrange(100), rng.randrange(10)
            batch.append(_job(f"t{t:03d}-q{q}", f"t{t:03d}", rng))
        await store.submit(batch)
    return store


async def _run(url: Any, jobs: int, clusters: int, seed: int, settle: int, rounds: int) -> dict[str, Any]:
    engine = database.async_engine(url)
    rng = random.Random(seed)
    store = await setup(engine, jobs, clusters, rng)
    leading = {"scheduler": True}
    scheduler = Scheduler(store, AdminStore(engine), lambda: leading["scheduler"], lambda: None,
                          heartbeat_timeout=3600, admit_on_arrival=False)
    # A second replica, a hot standby: it catches up after every cycle, then takes over at the end.
    standby = Scheduler(store, AdminStore(engine), lambda: not leading["scheduler"], lambda: None,
                        heartbeat_timeout=3600)
    started = time.perf_counter()
    first = await scheduler.cycle()
    first_seconds = time.perf_counter() - started
    settling = []
    for _ in range(settle):
        started = time.perf_counter()
        await scheduler.cycle()
        settling.append(time.perf_counter() - started)
    times, placed, steps, lags, ingest, events = [], 0, [], [], [], []
    for _ in range(rounds):
        holding = sorted(scheduler.cache.holding.values(), key=lambda j: j.id)
        for job in rng.sample(holding, len(holding) // 10):
            await store.apply_update(job.cluster, agent_pb2.JobUpdate(
                job_id=job.id, attempt=await _attempt(store, job.id), type=agent_pb2.JOB_SUCCEEDED))
        await store.submit([_job(f"t{(t := rng.randrange(100)):03d}-q{rng.randrange(10)}", f"t{t:03d}", rng)
                            for _ in range(len(holding) // 10)])
        before = scheduler.cache.cursor
        started = time.perf_counter()
        await scheduler.follow()
        ingest.append(time.perf_counter() - started)
        events.append((scheduler.cache.cursor or 0) - (before or 0))
        started = time.perf_counter()
        sampler = asyncio.create_task(_loop_lag(lags))
        decisions = await scheduler.cycle()
        times.append(time.perf_counter() - started)
        sampler.cancel()
        steps.append(scheduler.steps)
        placed += len(decisions.assign)
        await standby.tick()
    leading["scheduler"] = False
    started = time.perf_counter()
    await standby.tick()
    takeover = time.perf_counter() - started
    await engine.dispose()
    return {"pending": jobs, "clusters": clusters, "first_seconds": first_seconds,
            "first_dispatched": len(first.assign), "takeover_seconds": takeover, "settling_seconds": settling,
            "rounds": rounds,
            "median_seconds": statistics.median(times), "max_seconds": max(times), "jobs_placed": placed,
            "jobs_per_second": placed / sum(times), "seconds": times,
            # What following the log between cycles cost: a round's events read into the cache before its cycle.
            "ingest_median_seconds": statistics.median(ingest), "ingest_events": statistics.median(events),
            "cycle_and_ingest_median_seconds": statistics.median(map(sum, zip(times, ingest, strict=True))),
            "median_step_seconds": {step: statistics.median(s.get(step, 0.0) for s in steps)
                                    for step in dict.fromkeys(k for s in steps for k in s)},
            # How late the event loop ran a 10 ms timer during the sustained cycles (what an RPC beside them
            # waited), beside the longest decide step: what the loop waited, whole, when the cycle decided on it.
            "loop_lag_p99_seconds": _quantile(lags, 0.99), "loop_lag_max_seconds": max(lags, default=0.0),
            "decide_max_seconds": max((s.get("decide", 0.0) for s in steps), default=0.0)}


LAG_PERIOD = 0.01


async def _loop_lag(lags: list[float]) -> None:
    """Sample the event loop's lag every LAG_PERIOD until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LAG_PERIOD
        await asyncio.sleep(LAG_PERIOD)
        lags.append(max(loop.time() - due, 0.0))


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)] if ordered else 0.0


async def _attempt(store: JobStore, job_id: str) -> int:
    return (await store.get(job_id))["attempt"]


def db_cycle(jobs: int, clusters: int, seed: int, settle: int = 8, rounds: int = 10) -> dict[str, Any]:
    heap.tune()  # process-wide, as `federation-server serve` sets it at its start
    with tempfile.TemporaryDirectory() as tmp, database.embedded_postgres(Path(tmp) / "pg") as raw:
        url = database.sqlalchemy_url(raw)
        database.upgrade(url)
        result = asyncio.run(_run(url, jobs, clusters, seed, settle, rounds))
    result["postgres"] = "embedded PostgreSQL 18"
    return result
