"""Issue 41: a large batch is checked in a process of its own, so the API's loop does not share the interpreter
with seconds of checking. The same answers either way: valid jobs, every field at fault, a closed queue."""

from __future__ import annotations

import grpc
import pytest

from federation.api import checking
from federation.v1 import admin_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_admin import rpc_error, violation_fields

TASKS = 64


def wide(name: str, queue: str = "train", bad_cpu_at: int = -1) -> common_pb2.JobSpec:
    """A job of 64 one-pod tasks (one of them asking for "lots" of CPU, if `bad_cpu_at` says which)."""
    return common_pb2.JobSpec(name=name, queue=queue, tasks=[
        common_pb2.TaskSpec(name=f"t{i}", replicas=1, resources={"cpu": "lots" if i == bad_cpu_at else "1"})
        for i in range(TASKS)])


async def answers(api: Api, specs: list[common_pb2.JobSpec]) -> object:
    """What a dry run of `specs` answers: its results, or its refusal's code, message and fields."""
    try:
        done = await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs, dry_run=True))
    except grpc.aio.AioRpcError as err:
        fields = violation_fields(err) if err.code() == grpc.StatusCode.INVALID_ARGUMENT else []
        return err.code(), err.details(), fields
    return [(r.job_id, r.inadmissible) for r in done.results]


async def test_a_large_batch_is_checked_elsewhere_and_answered_as_on_a_thread(
        api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    await make_queue(api)
    await make_queue(api, "closed", state=admin_pb2.CLOSED)
    batches = {
        "valid": [wide(f"w{i}") for i in range(40)],
        "invalid": [wide(f"w{i}") for i in range(39)] + [wide("bad", bad_cpu_at=5), wide("Bad_Name")],
        "closed": [wide(f"w{i}") for i in range(39)] + [wide("late", queue="closed")],
    }
    assert all(len(b) * TASKS >= checking.OFF_PROCESS_TASKS for b in batches.values())
    elsewhere = {name: await answers(api, batch) for name, batch in batches.items()}
    assert api.server.job_servicer is not None and api.server.job_servicer.checking._pool is not None  # it ran
    monkeypatch.setattr(checking, "OFF_PROCESS_TASKS", 10 ** 9)  # now every batch on a worker thread
    here = {name: await answers(api, batch) for name, batch in batches.items()}
    assert elsewhere == here
    assert elsewhere["valid"] == [("", "")] * 40
    code, said, fields = elsewhere["invalid"]  # type: ignore[misc]
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "specs[39].tasks[5]" in said
    assert fields == ["specs[39].tasks[5].resources['cpu']", "specs[40].name"], fields
    assert elsewhere["closed"][0] == grpc.StatusCode.FAILED_PRECONDITION  # type: ignore[index]
    assert "queue 'closed' is closed" in elsewhere["closed"][1]  # type: ignore[index]
    # Nothing was stored by any of them.
    assert not (await api.jobs.ListJobs(jobs_pb2.ListJobsRequest())).jobs
    bad = await rpc_error(api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=batches["invalid"])))
    assert bad.code() == grpc.StatusCode.INVALID_ARGUMENT
