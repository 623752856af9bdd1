"""Admission on arrival in the scheduler, on real PostgreSQL (issue 40, 3): after a cycle, a submitted job that
fits the room it left is dispatched by `admit_arrivals` without a cycle, saying so; one that does not fit waits for
the next cycle. While a cycle decides, a job submitted meanwhile is judged against what the cycle before left and
sent; the deciding cycle's decisions are written when that job still fits what they leave, and dropped (nothing
sent twice) when it does not. Once a cycle's orders are written, jobs go on arrival against what it left while it
writes its reasons. Nothing is admitted while a cycle reads its snapshot, and the jobs that came meanwhile are
looked at once it is written. A cycle's orders are committed while it works out the reasons of the jobs that wait."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

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


async def _scheduler(api: Api) -> tuple[Scheduler, JobStore, AdminStore]:
    """This test's scheduler, the only one deciding, over one cluster `east` of 16 GPUs."""
    await api.server.leadership.stop()
    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 16, "cpu": 64_000}, "used": {GPU: 0, "cpu": 0}, "topology": []}))
    return Scheduler(store, admin, lambda: True, lambda: None), store, admin


@asynccontextmanager
async def deciding(scheduler: Scheduler) -> AsyncIterator[asyncio.Task[Any]]:
    """A cycle held in its decide step (its worker thread waits) for as long as the block runs; then let go."""
    entered, go = threading.Event(), threading.Event()
    decide: Callable[..., Any] = scheduler._decide

    def held(*args: Any) -> Any:
        entered.set()
        go.wait(120)
        return decide(*args)

    scheduler._decide = held  # type: ignore[method-assign]
    task = asyncio.create_task(scheduler.cycle())
    try:
        while not entered.is_set():
            assert not task.done(), task.exception()
            await asyncio.sleep(0.01)
        yield task
    finally:
        go.set()
        scheduler._decide = decide  # type: ignore[method-assign]


async def _total_dispatched(store: JobStore, ids: list[str]) -> int:
    rows = [await store.get(job_id) for job_id in ids]
    return sum(int(r["request"][GPU]) for r in rows if r["phase"] == "DISPATCHED")


async def test_a_job_that_fits_what_the_last_cycle_left_is_dispatched_on_arrival(api: Api) -> None:
    scheduler, store, admin = await _scheduler(api)
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


async def test_a_job_submitted_while_a_cycle_decides_goes_at_once_and_the_cycle_still_writes(api: Api) -> None:
    scheduler, store, _ = await _scheduler(api)
    await make_queue(api, "infer")
    first = await _submit(api, "first", "8")
    assert (await scheduler.cycle()).assign == {first: "east"}  # 8 left
    queued = await _submit(api, "queued", "4")  # not looked at on arrival: the next cycle's
    async with deciding(scheduler) as cycle:
        late = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(
            spec=spec(name="late", queue="infer", gpus="2", replicas=1)))).job.id
        assert await scheduler.admit_arrivals() == {late: "east"}  # while the cycle decides
        row = await store.get(late)
        assert row["phase"] == "DISPATCHED" and row["reason"].startswith("dispatched to cluster east (on arrival)")
        assert not cycle.done()
    assert (await cycle).assign == {queued: "east"}  # 4 of the 8 it saw left; 2 of those 4 taken meanwhile: fits
    assert (await store.get(queued))["phase"] == "DISPATCHED"
    assert await _total_dispatched(store, [first, queued, late]) == 14


async def test_a_cycle_whose_room_a_job_took_meanwhile_writes_nothing_and_the_next_decides_again(api: Api) -> None:
    scheduler, store, _ = await _scheduler(api)
    await make_queue(api, "infer")
    first = await _submit(api, "first", "8")
    assert (await scheduler.cycle()).assign == {first: "east"}  # 8 left
    queued = await _submit(api, "queued", "8")  # the next cycle gives it the 8 left
    async with deciding(scheduler) as cycle:
        late = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(
            spec=spec(name="late", queue="infer", gpus="2", replicas=1)))).job.id
        assert await scheduler.admit_arrivals() == {late: "east"}  # the cycle before left 8
    assert (await cycle).assign == {}  # it gave `queued` all 8: dropped, not written over `late`
    assert (await store.get(queued))["phase"] == "PENDING"
    assert await _total_dispatched(store, [first, queued, late]) == 10
    # The next cycle sees `late` holding 2 of the 8 and decides again. A dropped cycle left nothing to judge
    # arrivals against, so nothing goes on arrival while the next one decides: it always finishes.
    async with deciding(scheduler) as cycle:
        again = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(
            spec=spec(name="again", queue="infer", gpus="1", replicas=1)))).job.id
        assert await scheduler.admit_arrivals() == {}
    assert (await cycle).assign == {}  # 6 left: `queued` asks 8
    assert (await store.get(queued))["phase"] == "PENDING" and (await store.get(again))["phase"] == "PENDING"
    assert (await scheduler.cycle()).assign == {again: "east"}  # what came meanwhile: the cycle after's


async def test_a_job_submitted_while_a_cycle_writes_its_reasons_goes_against_what_that_cycle_left(api: Api) -> None:
    """A large backlog's reasons take seconds to write when the free room they name changed: the cycle's orders are
    written first, and from then on what it left is offered to jobs arriving."""
    scheduler, store, _ = await _scheduler(api)
    await make_queue(api, "infer")
    first, queued = await _submit(api, "first", "8"), await _submit(api, "queued", "4")
    big = await _submit(api, "big", "32")  # fits nowhere: waits, with a reason the cycle writes
    entered, go = asyncio.Event(), asyncio.Event()
    set_waiting = scheduler.jobs.set_waiting

    async def held(*args: Any) -> None:
        entered.set()
        await go.wait()
        await set_waiting(*args)

    scheduler.jobs.set_waiting = held  # type: ignore[method-assign]
    cycle = asyncio.create_task(scheduler.cycle())
    await asyncio.wait_for(entered.wait(), 60)
    late = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(
        spec=spec(name="late", queue="infer", gpus="4", replicas=1)))).job.id
    too_many = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(
        spec=spec(name="too-many", queue="infer", gpus="1", replicas=1)))).job.id
    assert await scheduler.admit_arrivals() == {late: "east"}  # 16 - 8 - 4 left 4: `late` takes them, not one more
    assert not cycle.done()
    go.set()
    assert (await cycle).assign == {first: "east", queued: "east"}
    assert (await store.get(big))["reason"].startswith("cannot run: needs nvidia.com/gpu=32 in one cluster")
    assert (await store.get(too_many))["phase"] == "PENDING"
    assert await _total_dispatched(store, [first, queued, late, big, too_many]) == 16


async def test_a_job_cancelled_while_a_cycle_writes_its_reasons_leaves_no_reason_behind(api: Api) -> None:
    """Arrivals refresh the job cache while a cycle writes its reasons: a job that stopped waiting meanwhile is not
    put back among the reasons the cache believes PostgreSQL holds."""
    scheduler, store, _ = await _scheduler(api)
    first, waits = await _submit(api, "first", "8"), await _submit(api, "waits", "12")
    assert (await scheduler.cycle()).assign == {first: "east"}  # `waits`: 12 asked, 8 free
    scheduler.cache.reasons[waits] = None  # as after an event of its: the next cycle writes its reason again
    entered, go = asyncio.Event(), asyncio.Event()
    set_waiting = scheduler.jobs.set_waiting
    written: list[dict[str, str]] = []

    async def held(reasons: dict[str, str], *args: Any) -> None:
        written.append(reasons)
        entered.set()
        await go.wait()
        await set_waiting(reasons, *args)

    scheduler.jobs.set_waiting = held  # type: ignore[method-assign]
    cycle = asyncio.create_task(scheduler.cycle())
    await asyncio.wait_for(entered.wait(), 60)
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=waits))
    await _submit(api, "late", "1")
    assert set((await scheduler.admit_arrivals()).values()) == {"east"}  # it refreshed the cache meanwhile
    assert waits not in scheduler.cache.reasons
    go.set()
    await cycle
    assert waits in written[0]  # the cycle wrote its reason (PostgreSQL left it alone: no longer waiting)
    assert waits not in scheduler.cache.reasons
    assert (await store.get(waits))["phase"] == "CANCELLED"


async def test_the_leader_reads_the_event_log_on_every_change_with_or_without_admission(api: Api) -> None:
    """`follow`, what the leader runs on every change between cycles: the job cache reads the new events then, so a
    cycle reads only those after them; with admission on arrival off it dispatches nothing, and not while a cycle
    decides (that cycle's backlog must not change under it)."""
    scheduler, store, _ = await _scheduler(api)
    scheduler.admit_on_arrival = False
    await scheduler.cycle()
    async with deciding(scheduler) as cycle:
        during = await _submit(api, "during", "4")
        assert await scheduler.follow() == {}
        assert during not in scheduler.cache.waiting  # the deciding cycle's backlog is left as it is
    await cycle
    late = await _submit(api, "late", "4")
    assert await scheduler.follow() == {}
    assert {during, late} <= set(scheduler.cache.waiting)
    assert scheduler.cache.cursor == await store.last_event_seq()
    assert (await store.get(late))["phase"] == "PENDING"  # nothing goes on arrival with admission off
    assert (await scheduler.cycle()).assign == {during: "east", late: "east"}


async def test_a_cycles_orders_are_written_while_its_reasons_are_worked_out(api: Api) -> None:
    """The dispatches go out beside the explanation of those that wait, not after it: held while it explains, the
    cycle has already committed its orders, and the reasons follow once it is let go."""
    scheduler, store, _ = await _scheduler(api)
    fits, waits = await _submit(api, "fits", "8"), await _submit(api, "waits", "16")
    submitted_reason = (await store.get(waits))["reason"]
    entered, go = threading.Event(), threading.Event()
    explain: Callable[..., Any] = scheduler._explain

    def held(*args: Any) -> Any:
        entered.set()
        go.wait(120)
        return explain(*args)

    scheduler._explain = held  # type: ignore[method-assign]
    cycle = asyncio.create_task(scheduler.cycle())
    try:
        while not entered.is_set():
            assert not cycle.done(), cycle.exception()
            await asyncio.sleep(0.01)
        for _ in range(1200):  # a minute, however loaded the machine: the orders need nothing of the explanation
            if (await store.get(fits))["phase"] == "DISPATCHED":
                break
            await asyncio.sleep(0.05)
        assert (await store.get(fits))["phase"] == "DISPATCHED"
        assert (await store.get(waits))["reason"] == submitted_reason  # not explained yet
        assert not cycle.done()
    finally:
        go.set()
    assert (await cycle).assign == {fits: "east"}
    row = await store.get(waits)
    assert row["phase"] == "PENDING" and row["reason"] != submitted_reason
