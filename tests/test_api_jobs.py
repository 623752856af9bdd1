"""JobService over a real socket against real Postgres."""

import asyncio
from collections.abc import Callable

import grpc
import pytest

from federation.store.jobs import JobStore
from federation.v1 import admin_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_admin import rpc_error, violation_fields
from tests.test_validation import MUTATIONS


def spec(name: str = "train", queue: str = "train", gpus: str = "8", replicas: int = 2,
         **fields: object) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(name=name, queue=queue, tasks=[common_pb2.TaskSpec(
        name="worker", replicas=replicas, resources={"nvidia.com/gpu": gpus, "cpu": "4"})], **fields)


async def all_jobs(api: Api) -> list[common_pb2.Job]:
    return list((await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000))).jobs)


async def event_count(api: Api) -> int:
    return await JobStore(api.server.engine).last_event_seq()


async def test_submit_get_and_defaults(api: Api) -> None:
    await make_queue(api)
    await api.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(priority_class=admin_pb2.PriorityClass(
        name="normal", value=100, global_default=True)))
    response = await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(
        network_topology=common_pb2.NetworkTopology(mode="hard"))))
    job = response.job
    assert not response.duplicate
    assert job.id.startswith("train-")
    assert (job.tenant, job.priority, job.status.phase) == ("ml", 100, common_pb2.PENDING)
    assert job.status.reason == "no member cluster is ready"
    assert job.spec.priority_class_name == ""  # as submitted; the class it got is stored beside it
    assert job.spec.max_retry == 3 and job.spec.network_topology.highest_tier_allowed == 1  # Volcano defaults
    fetched = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job.id))
    assert fetched == job
    err = await rpc_error(api.jobs.GetJob(jobs_pb2.GetJobRequest(id="nope-1")))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_a_dry_run_submit_stores_nothing_as_in_a_batch(api: Api) -> None:
    """Issue 27 (2): SubmitJob honoured dry_run no more than its proto said; now as SubmitJobs does."""
    await make_queue(api)
    before = await event_count(api)
    response = await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(), dry_run=True))
    assert response.job.id == "" and response.job.tenant == "ml" and response.job.spec.max_retry == 3
    assert response.job.status.phase == common_pb2.PENDING
    batch = await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec()], dry_run=True))
    assert batch.results[0].job_id == "" and batch.results[0].inadmissible == response.inadmissible
    assert await all_jobs(api) == [] and await event_count(api) == before
    bad = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=-1), dry_run=True)))
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT  # still validated


async def test_a_cancel_reason_is_bounded_and_printable_and_a_refused_cancel_changes_nothing(api: Api) -> None:
    """Issue 27 (1): one 10 MB reason made every listing and watch from the start fail for everyone."""
    await make_queue(api)
    job = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec()))).job
    before = await event_count(api)
    for reason in ("x" * 10_000_000, "done\x1b]0;owned\x07"):
        err = await rpc_error(api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job.id, reason=reason)))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and violation_fields(err) == ["reason"]
    assert (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job.id))).status.phase == common_pb2.PENDING
    assert await event_count(api) == before
    done = await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job.id, reason="r" * 1024))
    assert done.status.phase == common_pb2.CANCELLED


async def test_a_phase_outside_the_enum_is_refused_naming_it(api: Api) -> None:
    """Issue 27 (7): it was INTERNAL."""
    err = await rpc_error(api.jobs.ListJobs(jobs_pb2.ListJobsRequest(phases=[common_pb2.PENDING, 99])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violation_fields(err) == ["phases[1]"]


@pytest.mark.parametrize(("mutate", "field"), [(m, f) for _, m, f in MUTATIONS], ids=[n for n, _, _ in MUTATIONS])
async def test_every_rule_rejects_and_stores_nothing(api: Api, mutate: Callable[[common_pb2.JobSpec], object],
                                                     field: str) -> None:
    from tests.test_validation import valid_spec

    await make_queue(api, "q")
    bad = valid_spec()
    mutate(bad)
    err = await rpc_error(api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec(queue="q"), bad])))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field.replace("spec.", "specs[1].", 1) in violation_fields(err)
    assert await all_jobs(api) == []
    assert await event_count(api) == 0


async def test_references_and_queue_state(api: Api) -> None:
    await make_queue(api)
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(queue="ghost"))))
    assert violation_fields(err) == ["spec.queue"]
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(priority_class_name="vip"))))
    assert violation_fields(err) == ["spec.priority_class_name"]
    await make_queue(api, "closed", state=admin_pb2.CLOSED)
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(queue="closed"))))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "closed" in err.details()
    err = await rpc_error(api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest()))
    assert violation_fields(err) == ["specs"]
    assert await all_jobs(api) == []


async def test_concurrent_duplicate_submits_make_one_job(api: Api) -> None:
    await make_queue(api)
    request = jobs_pb2.SubmitJobRequest(spec=spec(request_id="retry-me"))
    responses = await asyncio.gather(*(api.jobs.SubmitJob(request) for _ in range(20)))
    assert len({r.job.id for r in responses}) == 1
    assert sum(not r.duplicate for r in responses) == 1
    # the same key in a batch, and in another tenant, behave as expected
    batch = await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec(request_id="b"), spec(request_id="b")]))
    assert batch.results[0].job_id == batch.results[1].job_id and batch.results[1].duplicate
    await make_queue(api, "other", "bio")
    other = await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(queue="other", request_id="retry-me")))
    assert not other.duplicate
    assert len(await all_jobs(api)) == 3
    assert await event_count(api) == 3


async def test_list_filters_and_pagination(api: Api) -> None:
    await make_queue(api, "a", "t1")
    await make_queue(api, "b", "t2")
    specs = [spec(name=f"j{i}", queue="ab"[i % 2]) for i in range(25)]
    submitted = await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs))
    ids = [r.job_id for r in submitted.results]
    seen, token = [], ""
    while True:
        page = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=7, page_token=token))
        assert len(page.jobs) <= 7
        seen += [j.id for j in page.jobs]
        token = page.next_page_token
        if not token:
            break
    assert seen == ids
    by_tenant = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(tenant="t2"))
    assert [j.id for j in by_tenant.jobs] == ids[1::2]
    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=ids[0]))
    cancelled = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(queue="a", phases=[common_pb2.CANCELLED]))
    assert [j.id for j in cancelled.jobs] == [ids[0]]
    err = await rpc_error(api.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_token="garbage")))
    assert violation_fields(err) == ["page_token"]


async def test_cancel(api: Api) -> None:
    await make_queue(api)
    job = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec()))).job
    cancelled = await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job.id, reason="wrong data"))
    assert (cancelled.status.phase, cancelled.status.reason) == (common_pb2.CANCELLED, "wrong data")
    assert cancelled.status.finish_time.seconds > 0
    again = await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job.id))
    assert again.status.reason == "wrong data"  # repeating a cancel changes nothing
    err = await rpc_error(api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id="ghost-9")))
    assert err.code() == grpc.StatusCode.NOT_FOUND
    assert await event_count(api) == 2  # Submitted, Cancelled

    # a queue with an unfinished job cannot be deleted; once it is cancelled, it can
    await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(name="second")))
    err = await rpc_error(api.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="train")))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    for j in await all_jobs(api):
        await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=j.id))
    await api.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="train"))
