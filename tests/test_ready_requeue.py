"""Ready or requeued (issue 46, 5), the federation's half on PostgreSQL: a job its cluster gave back because its pods
were not all running in time goes back to its queue after a backoff that doubles with each requeue (Kueue's
waitForPodsReady requeuing strategy), counted in its status; the scheduler's job cache keeps it out of the queue
until then, then offers it elsewhere first; past the requeue limit it fails."""

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from sqlalchemy import func, update

from federation.control.scheduler import Scheduler
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster
from federation.store.transitions import Requeueing
from federation.v1 import agent_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec

GPU = "nvidia.com/gpu"
NOT_READY = ("its pods were not all running 5m after it was sent here (worker 0 of 2 running; "
             "federation.dev/ready-timeout)")


def test_the_backoff_doubles_up_to_its_ceiling() -> None:
    requeueing = Requeueing(base=60, ceiling=3600)
    assert [requeueing.backoff(n) for n in (1, 2, 3, 6, 7, 100)] == [60, 120, 240, 1920, 3600, 3600]


async def test_a_job_not_ready_in_time_waits_out_a_backoff_then_runs_elsewhere_and_fails_past_the_limit(
        api: Api) -> None:
    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    await make_queue(api)
    store = JobStore(api.server.engine, Requeueing(base=30, ceiling=3600, limit=2))
    admin = AdminStore(api.server.engine)
    for name in ("east", "west"):
        await admin.register_cluster(name, {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).values(last_heartbeat=func.now(), status="READY", inventory={
            "allocatable": {GPU: 16, "cpu": 64_000}, "used": {GPU: 0, "cpu": 0},
            "topology": [{"tier": 0, "tier_name": "node", "max_free": {GPU: 8, "cpu": 64_000},
                          "max_capacity": {GPU: 8, "cpu": 64_000}}]}))
    job_id = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(gpus="8", replicas=2)))).job.id
    scheduler = Scheduler(store, admin, lambda: True, lambda: None)
    first = (await scheduler.cycle()).assign[job_id]
    await store.apply_update(first, agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.PODS_NOT_READY,
                                                        reason=NOT_READY))
    row = await store.get(job_id)
    assert row["phase"] == "PENDING" and row["cluster"] == "" and row["requeues"] == 1
    assert row["requeue_at"] - row["updated_at"] == timedelta(seconds=30)  # the backoff's base, by PostgreSQL's clock
    assert row["reason"] == (f"not ready in cluster {first}: {NOT_READY}; requeued (requeue 1), back in its queue "
                             "after 30 s")
    status = (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))).status
    assert status.requeues == 1 and status.requeue_time.ToDatetime(UTC) == row["requeue_at"]
    # While it waits out the backoff it is in no queue: nothing is decided for it, and its reason stays.
    decisions = await scheduler.cycle()
    assert job_id not in decisions.assign and job_id in scheduler.cache.backing_off
    assert job_id not in scheduler.cache.waiting
    assert (await store.get(job_id))["reason"] == row["reason"]
    # Its time come, it is offered the other cluster first: the one that gave it back is passed over as long again.
    scheduler.cache.clock = lambda: datetime.now(UTC) + timedelta(seconds=31)
    second = (await scheduler.cycle()).assign[job_id]
    assert second != first
    assert (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))).status.phase == common_pb2.DISPATCHED
    # The second time, twice as long.
    await store.apply_update(second, agent_pb2.JobUpdate(job_id=job_id, attempt=2, type=agent_pb2.PODS_NOT_READY,
                                                         reason=NOT_READY))
    row = await store.get(job_id)
    assert row["requeues"] == 2 and row["requeue_at"] - row["updated_at"] == timedelta(seconds=60)
    # Back after that, it goes to the first cluster again: the second, which gave it back last, is still passed over;
    # the first's time (its backoff, then as long again) has passed.
    scheduler.cache.clock = lambda: datetime.now(UTC) + timedelta(seconds=61)
    assert (await scheduler.cycle()).assign[job_id] == first
    # The third time is past the limit of two: it fails, saying why.
    third = (await store.get(job_id))["cluster"]
    await store.apply_update(third, agent_pb2.JobUpdate(job_id=job_id, attempt=3, type=agent_pb2.PODS_NOT_READY,
                                                        reason=NOT_READY))
    row = await store.get(job_id)
    assert row["phase"] == "FAILED" and row["requeues"] == 2
    assert row["reason"] == f"not ready in cluster {third}: {NOT_READY}; requeued 2 time(s) already, the most allowed"
    events = [e for e in await store.events_after(0, limit=100) if e["job_id"] == job_id]
    assert [(e["type"], e["phase"]) for e in events if e["type"] in ("NotReady", "Dispatched")] == [
        ("Dispatched", "DISPATCHED"), ("NotReady", "PENDING"), ("Dispatched", "DISPATCHED"), ("NotReady", "PENDING"),
        ("Dispatched", "DISPATCHED"), ("NotReady", "FAILED")]


async def test_a_job_past_its_maximum_run_time_with_the_requeue_policy_runs_again_as_a_retry(front_end: Api) -> None:
    """Issue 46 (3): `federation.dev/on-max-run-time: requeue`, its agent's RUN_TIME_EXCEEDED: back in its queue,
    counted against its maxRetry, failed when that is spent; a policy the server does not know is refused by name."""
    api = front_end  # the test writes the scheduler's rows itself: no scheduler beside it
    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    annotations = {"federation.dev/max-run-time": "2h", "federation.dev/on-max-run-time": "requeue"}
    job_id = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(
        replicas=1, max_retry=1, annotations=annotations)))).job.id
    overran = "stopped: it ran past its maximum run time of 2h (federation.dev/max-run-time)"
    for attempt, phase, reason in (
            (1, "PENDING", f"{overran} in cluster east; requeued (retry 1 of 1)"),
            (2, "FAILED", f"{overran} in cluster east; maxRetry 1 exhausted")):
        await store.dispatch({job_id: "east"})
        await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=attempt, type=agent_pb2.BOUND))
        await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=attempt,
                                                             type=agent_pb2.RUN_TIME_EXCEEDED, reason=overran))
        row = await store.get(job_id)
        assert (row["phase"], row["reason"], row["cluster"]) == (phase, reason, "")
    bad = spec(replicas=1, annotations={**annotations, "federation.dev/on-max-run-time": "extend"})
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "annotations['federation.dev/on-max-run-time']: must be one of fail, requeue" in err.value.details()
