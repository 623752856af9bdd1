"""A batch of agent updates applied in one go leaves every job, event and answer as the same updates applied one at
a time: the batch reads its jobs once and writes at its end, so an update must see what the ones before it in the
batch did to its job (a restart after a binding, a report about an attempt another update just ended).

Differential, on PostgreSQL: two sets of the same jobs, dispatched alike; random update sequences (every kind the
agent sends, stale attempts among them, several updates of one job in a row) applied to one set as a single batch
and to the other one update per call; the rows, the events and what each update answered must be the same."""

import random
from typing import Any

from sqlalchemy import text

from federation.store.jobs import JobStore
from federation.v1 import agent_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec

JOBS = 4
SEEDS = 25
KINDS = [agent_pb2.BOUND, agent_pb2.BOUND, agent_pb2.POD_RESTARTED, agent_pb2.PODS_ADDED, agent_pb2.DRAINED,
         agent_pb2.POD_STATUS, agent_pb2.MOVE_WANTED, agent_pb2.DRAIN_PLANNED, agent_pb2.POD_FAILED,
         agent_pb2.JOB_SUCCEEDED, agent_pb2.JOB_FAILED, agent_pb2.REJECTED, agent_pb2.EVACUATED,
         agent_pb2.PODS_NOT_READY, agent_pb2.RUN_TIME_EXCEEDED, agent_pb2.ORPHANS_DELETED, agent_pb2.PREPARING,
         agent_pb2.FENCED]
COLUMNS = ("phase", "cluster", "reason", "hypernode", "tier", "placements", "pods", "request", "retries",
           "requeues", "refusals", "move_wanted", "attempt")


def _update(rng: random.Random, job_id: str, restarts: dict[str, int]) -> agent_pb2.JobUpdate:
    kind = rng.choice(KINDS)
    pods = rng.randint(1, 3)  # the spec has 3 workers
    u = agent_pb2.JobUpdate(job_id=job_id, attempt=rng.choice([1, 1, 1, 2]), type=kind,
                            reason=rng.choice(["", "xid 79", "node lost"]), hypernode=rng.choice(["s0", "s1"]),
                            tier=rng.choice([1, 2]), permanent=rng.random() < 0.3, pods=pods)
    if kind in (agent_pb2.BOUND, agent_pb2.POD_RESTARTED, agent_pb2.PODS_ADDED, agent_pb2.DRAINED,
                agent_pb2.POD_FAILED):
        u.placements.extend(common_pb2.PodPlacement(task="worker", index=i, node=f"n{rng.randint(0, 5)}")
                            for i in range(pods))
    if kind == agent_pb2.POD_RESTARTED:
        restarts[job_id] = restarts.get(job_id, 0) + rng.choice([0, 1, 1])
        u.retries = restarts[job_id]
    if kind == agent_pb2.POD_STATUS:
        u.pod_statuses.add(task="worker", index=0, phase=rng.choice(["Running", "Pending"]), node="n0")
    return u


async def _state(api: Api, ids: list[str]) -> tuple[list[Any], list[Any]]:
    store = JobStore(api.server.engine)
    rows = [tuple(str(row[c]) for c in COLUMNS) for row in [await store.get(job_id) for job_id in ids]]
    async with api.server.engine.connect() as conn:
        events = (await conn.execute(text(
            "SELECT job_id, type, phase, message, attempt, cluster FROM job_events WHERE job_id = ANY(:ids) "
            "AND type NOT IN ('Submitted', 'Dispatched') ORDER BY seq"), {"ids": ids})).all()
    at = {job_id: i for i, job_id in enumerate(ids)}  # the sets' jobs by their place, not their ids
    return rows, [(at[e.job_id], *e[1:]) for e in events]


async def test_a_batch_of_updates_leaves_what_the_same_updates_one_at_a_time_leave(api: Api) -> None:
    await api.server.leadership.stop()  # nothing but this test dispatches
    await make_queue(api)
    store = JobStore(api.server.engine)
    kinds_seen: set[int] = set()
    for seed in range(SEEDS):
        rng = random.Random(seed)
        sets = []
        retries = [rng.choice([0, 2]) for _ in range(JOBS)]
        for _ in range(2):
            ids = [(await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(
                f"s{seed}-{i}", gpus="1", replicas=3, max_retry=retries[i])))).job.id for i in range(JOBS)]
            await store.dispatch(dict.fromkeys(ids, "east"))
            sets.append(ids)
        batched, single = sets
        updates, restarts = [], {}
        for _ in range(rng.randint(5, 14)):
            i = rng.randrange(JOBS)
            updates.append((i, _update(rng, batched[i], restarts)))
        kinds_seen |= {u.type for _, u in updates}

        answered_batched = await store.apply_updates("east", [u for _, u in updates])
        answered_single = []
        for i, u in updates:
            one = agent_pb2.JobUpdate()
            one.CopyFrom(u)
            one.job_id = single[i]
            answered_single.append(await store.apply_update("east", one))

        def said(answers: list[Any]) -> list[Any]:
            return [(a.stop, a.refused, a.event, a.queue, a.waited is None) for a in answers]

        assert said(answered_batched) == said(answered_single), (seed, updates)
        (rows, events), (rows_single, events_single) = await _state(api, batched), await _state(api, single)
        for i, (row, row_single) in enumerate(zip(rows, rows_single, strict=True)):
            assert row == row_single, (seed, i, [(j, u.type, u.attempt) for j, u in updates])
        assert events == events_single, (seed, [(j, u.type, u.attempt) for j, u in updates])
    assert kinds_seen == set(KINDS)  # every kind of update was in some batch
