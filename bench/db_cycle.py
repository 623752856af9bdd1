"""The server's whole scheduling cycle on a real (embedded) PostgreSQL: load, decide, write.

Fills a fresh database with the synthetic federation of bench_scheduler (clusters with their
inventories, tenants, queues, pending jobs submitted through the job store), then times
`Scheduler.cycle()`: the first cycle dispatches what fits, the later ones only re-rank the backlog.
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

from bench_scheduler import MIX
from sqlalchemy import insert

from federation.api.agents import inventory_json
from federation.api.convert import spec_to_json
from federation.scheduler import Scheduler
from federation.store import database
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore, NewJob
from federation.store.models import Cluster, Queue, Tenant
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


async def _run(url: Any, jobs: int, clusters: int, seed: int, runs: int) -> dict[str, Any]:
    engine = database.async_engine(url)
    rng = random.Random(seed)
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
    scheduler = Scheduler(store, AdminStore(engine), lambda: True, lambda: None, heartbeat_timeout=3600)
    times, dispatched = [], []
    for _ in range(runs):
        started = time.perf_counter()
        decisions = await scheduler.cycle()
        times.append(time.perf_counter() - started)
        dispatched.append(len(decisions.assign))
    await engine.dispose()
    return {"pending": jobs, "clusters": clusters, "runs": runs, "first_seconds": times[0],
            "first_dispatched": dispatched[0], "median_seconds": statistics.median(times[1:] or times),
            "seconds": times}


def db_cycle(jobs: int, clusters: int, seed: int, runs: int = 4) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, database.embedded_postgres(Path(tmp) / "pg") as raw:
        url = database.sqlalchemy_url(raw)
        database.upgrade(url)
        result = asyncio.run(_run(url, jobs, clusters, seed, runs))
    result["postgres"] = "embedded PostgreSQL 18"
    return result
