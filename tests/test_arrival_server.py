"""Admission on arrival in the scheduler, on real PostgreSQL (issue 40, 3): after a cycle, a submitted job that
fits the room it left is dispatched by `admit_arrivals` without a cycle, saying so; one that does not fit waits for
the next cycle; nothing is admitted while a cycle is under way, and the jobs that came meanwhile are looked at
once it is written."""

from __future__ import annotations

import asyncio

from sqlalchemy import update

from federation.control.scheduler import Scheduler
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster
from federation.v1 import jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec

GPU = "nvidia.com/gpu"


async def _submit(api: Api, name: str, gpus: str) -> str:
    return (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(name=name, gpus=gpus, replicas=1)))).job.id


async def test_a_job_that_fits_what_the_last_cycle_left_is_dispatched_on_arrival(api: Api) -> None:
    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 16, "cpu": 64_000}, "used": {GPU: 0, "cpu": 0}, "topology": []}))
    scheduler = Scheduler(store, admin, lambda: True, lambda: None)
    first = await _submit(api, "first", "8")
    assert await scheduler.admit_arrivals() == {}  # no cycle has run: nothing is known to be left
    assert (await scheduler.cycle()).assign == {first: "east"}

    fits, too_big = await _submit(api, "fits", "4"), await _submit(api, "too-big", "8")
    assert await scheduler.admit_arrivals() == {fits: "east"}  # 8 left: 4 taken, 4 are not the 8 asked
    row = await store.get(fits)
    assert row["phase"] == "DISPATCHED" and row["reason"].startswith("dispatched to cluster east (on arrival)")
    assert (await store.get(too_big))["phase"] == "PENDING"
    assert await scheduler.admit_arrivals() == {}  # each arrival is judged once; the cycle has the rest

    # A cluster cordoned since the cycle is sent nothing that arrives after the cordon, however much room it had.
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=too_big))  # the new job is its queue's head
    assert (await scheduler.cycle()).assign == {}
    await admin.set_cordoned("east", True, "admin")
    after_cordon = await _submit(api, "after-cordon", "2")
    assert await scheduler.admit_arrivals() == {}
    assert (await store.get(after_cordon))["phase"] == "PENDING"
    await admin.set_cordoned("east", False, "admin")
    assert (await scheduler.cycle()).assign == {after_cordon: "east"}

    # While a cycle is under way nothing goes on arrival; once it is written, the jobs that came are looked at.
    async with scheduler._deciding:
        scheduler._arrivals = None  # as a cycle does when it starts
        pending = asyncio.create_task(scheduler.admit_arrivals())
        late = await _submit(api, "late", "2")
    assert await pending == {}
    assert scheduler._missed
    decisions = await scheduler.cycle()
    assert late in decisions.assign  # the cycle read it: its to decide
    assert scheduler._arriving.is_set() and not scheduler._missed
