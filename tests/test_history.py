"""History out of the hot path (issue 30): ended jobs move to `finished_jobs`, still answer GetJob and ListJobs,
and expire after the retention. Real PostgreSQL, the API over a real socket."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from sqlalchemy import func, select, text, update

from federation.control.history import History
from federation.store import submission as jobstore
from federation.store.jobs import JobStore
from federation.store.models import Job, JobEvent, finished_jobs
from federation.v1 import common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.processes import fedctl
from tests.test_api_admin import rpc_error
from tests.test_api_jobs import spec


async def submit(api: Api, n: int) -> list[str]:
    response = await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec(name=f"j{i}") for i in range(n)]))
    return [r.job_id for r in response.results]


async def live_ids(store: JobStore) -> set[str]:
    async with store.engine.connect() as conn:
        return set((await conn.execute(select(Job.id))).scalars())


async def test_ended_jobs_move_to_the_history_and_still_answer(api: Api) -> None:
    await make_queue(api)
    ids = await submit(api, 4)
    for job_id in ids[1:3]:
        await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id))
    store = JobStore(api.server.engine)
    before = {job.id: job for job in (await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=100))).jobs}

    assert await store.archive(3600) == 0  # ended a moment ago: stays live
    assert await store.archive(0) == 2
    assert await live_ids(store) == {ids[0], ids[3]}

    archived = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=ids[1]))
    assert archived == before[ids[1]]
    assert archived.status.phase == common_pb2.CANCELLED
    # Without the history, the live jobs only; with it, in submission order across both tables, a page at a time
    # (the token of an archived job included).
    live = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(count_phases=True))
    assert [job.id for job in live.jobs] == [ids[0], ids[3]] and dict(live.phase_counts) == {"Pending": 2}
    seen, token = [], ""
    while True:
        page = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1, page_token=token, include_history=True))
        seen += [job.id for job in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids
    newest = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=3, newest_first=True, include_history=True))
    assert [job.id for job in newest.jobs] == ids[::-1][:3]
    waiting = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(phases=[common_pb2.PENDING], count_phases=True,
                                                               include_history=True))
    assert [job.id for job in waiting.jobs] == [ids[0], ids[3]]
    assert dict(waiting.phase_counts) == {"Pending": 2, "Cancelled": 2}
    ended = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(phases=[common_pb2.CANCELLED], include_history=True))
    assert [job.id for job in ended.jobs] == ids[1:3]
    # fedctl: `get jobs` the live ones, `get jobs --all` the history too, a job NAMEd wherever it is.
    columns = "custom-columns=ID:.id,PHASE:.status.phase"
    shown = await asyncio.to_thread(fedctl, api.address, "get", "jobs", "-o", columns)
    every = await asyncio.to_thread(fedctl, api.address, "get", "jobs", "--all", "-o", columns)
    named = await asyncio.to_thread(fedctl, api.address, "get", "job", ids[1], "-o", columns)
    assert shown.returncode == every.returncode == named.returncode == 0, (shown.stderr, every.stderr, named.stderr)
    assert [line.split()[0] for line in shown.stdout.splitlines()[1:]] == [ids[0], ids[3]]
    assert [line.split()[0] for line in every.stdout.splitlines()[1:]] == ids
    assert named.stdout.splitlines()[1].split()[0] == ids[1]
    # Cancelling it again is as harmless as before it moved; the live jobs still cancel.
    again = await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=ids[1]))
    assert again.status.phase == common_pb2.CANCELLED


async def test_the_history_expires_with_its_events(api: Api) -> None:
    await make_queue(api)
    ids = await submit(api, 2)
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=ids[0]))
    store = JobStore(api.server.engine)
    assert await store.archive(0) == 1
    assert await store.expire(3600) == 0  # within the retention
    assert await store.expire(0) == 1
    err = await rpc_error(api.jobs.GetJob(jobs_pb2.GetJobRequest(id=ids[0])))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    async with store.engine.connect() as conn:
        events = dict((await conn.execute(
            select(JobEvent.job_id, func.count()).group_by(JobEvent.job_id))).all())
    assert ids[0] not in events and events[ids[1]] >= 1  # the live job keeps its events


async def test_queues_mean_run_times_count_archived_jobs(api: Api) -> None:
    await make_queue(api)
    ids = await submit(api, 1)
    store = JobStore(api.server.engine)
    async with store.engine.begin() as conn:
        await conn.execute(update(Job).where(Job.id == ids[0]).values(
            phase="SUCCEEDED", started_at=func.now() - text("interval '600 seconds'"),
            finished_at=func.now() - text("interval '100 seconds'")))
    live = await store.mean_run_times()
    assert await store.archive(50) == 1
    assert await store.mean_run_times() == live == {"train": pytest.approx(500.0)}


async def test_an_id_the_history_holds_is_not_given_again(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    await make_queue(api)
    first = (await submit(api, 1))[0]
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=first))
    store = JobStore(api.server.engine)
    assert await store.archive(0) == 1
    offered = iter([first, first, "j0-fresh"])  # the archived id comes up twice, then a new one
    monkeypatch.setattr(jobstore, "job_ids", lambda names, taken=(): [next(offered) for _ in names])
    assert await submit(api, 1) == ["j0-fresh"]
    async with store.engine.connect() as conn:
        assert (await conn.execute(select(finished_jobs.c.phase).where(finished_jobs.c.id == first))).scalar() \
            == "CANCELLED"


async def test_an_id_a_live_job_holds_undoes_the_batch_which_is_tried_again_with_new_ids(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    await make_queue(api)
    live = (await submit(api, 1))[0]
    offered = iter([live, "j0-fresh"])  # the live job's id comes up (the primary key refuses it), then a new one
    monkeypatch.setattr(jobstore, "job_ids", lambda names, taken=(): [next(offered) for _ in names])
    assert await submit(api, 1) == ["j0-fresh"]
    assert await live_ids(JobStore(api.server.engine)) == {live, "j0-fresh"}


async def test_the_leader_moves_the_history(api: Api) -> None:
    await make_queue(api)
    ids = await submit(api, 2)
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=ids[0]))
    store = JobStore(api.server.engine)
    leading = False
    history = History(store, lambda: leading, archive_after=0, retention=0)
    await history.tick()
    assert await live_ids(store) == set(ids)  # a standby leaves it to the leader
    leading = True
    await history.tick()
    assert await live_ids(store) == {ids[1]}
    async with store.engine.connect() as conn:
        assert (await conn.execute(select(finished_jobs.c.id))).scalars().all() == [ids[0]]
