"""A HyperJob's holds on PostgreSQL, the federation's half: its sub-jobs sent together are committed together once
every cluster holds its room (an Admitted event each: the order to bind), released together when one comes back
(HoldReleased: the order to drop the room) or when the holds are not all had in time; a HyperJob's sub-jobs are
checked as one at submission. The scheduler here is the only one deciding, its agents' reports written as they
would arrive."""

from collections.abc import Awaitable, Callable

import grpc
import pytest
from sqlalchemy import func, select, update

from federation.control.scheduler import Scheduler
from federation.kernel.hyperjob import HOLD_CHECK
from federation.relay.orders import order_for
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster, Job, JobEvent
from federation.v1 import agent_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue

GPU = "nvidia.com/gpu"


def hyperjob(name: str, parts: int, gpus: int = 64) -> list[common_pb2.JobSpec]:
    return [common_pb2.JobSpec(name=f"{name}-{i}", queue="train", tasks=[common_pb2.TaskSpec(
        name="worker", replicas=gpus // 8, resources={GPU: "8"})],
        hyperjob=common_pb2.HyperJobPart(id=name, name=name, replicated_job="w", index=i, parts=parts))
        for i in range(parts)]


async def federation(api: Api) -> tuple[JobStore, Scheduler, Callable[[str], Awaitable[list[str]]]]:
    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    for name in ("east", "west"):
        await admin.register_cluster(name, {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).values(last_heartbeat=func.now(), status="READY", inventory={
            "allocatable": {GPU: 64}, "used": {GPU: 0},
            "topology": [{"tier": 0, "tier_name": "node", "max_free": {GPU: 8}, "max_capacity": {GPU: 8}}]}))

    async def kinds(job_id: str) -> list[str]:
        async with api.server.engine.connect() as conn:
            return list((await conn.execute(select(JobEvent.type).where(JobEvent.job_id == job_id)
                                            .order_by(JobEvent.seq))).scalars())
    return store, Scheduler(store, admin, lambda: True, lambda: None), kinds


async def submit(api: Api, specs: list[common_pb2.JobSpec]) -> list[str]:
    return [r.job_id for r in (await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs))).results]


def held(job_id: str) -> agent_pb2.JobUpdate:
    return agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.HELD, hypernode="root", reason="8 pods placed")


async def test_sub_jobs_are_committed_together_once_every_room_is_held(api: Api) -> None:
    store, scheduler, kinds = await federation(api)
    ids = await submit(api, hyperjob("hj", 2))
    sent = (await scheduler.cycle()).assign
    assert sorted(sent[i] for i in ids) == ["east", "west"]
    rows = [await store.get(i) for i in ids]
    assert [r["admission_checks"][0]["state"] for r in rows] == ["PENDING", "PENDING"]
    # The Dispatched event is an order to hold (its check pending): the agent books and does not bind.
    order = order_for({"type": "Dispatched", "attempt": 1, "cluster": rows[0]["cluster"]}, rows[0])
    assert order is not None and order.assign.job.status.admission_checks[0].state == "PENDING"
    await store.apply_update(sent[ids[0]], held(ids[0]))
    assert await store.settle_hyperjobs() == 0  # one held, one not yet: nothing to do
    assert (await store.get(ids[0]))["admission_checks"][0] == {
        "name": HOLD_CHECK, "state": "HELD", "message": f"room held in cluster {sent[ids[0]]}: 8 pods placed"}
    await store.apply_update(sent[ids[1]], held(ids[1]))
    assert await store.settle_hyperjobs() == 2
    assert await store.settle_hyperjobs() == 0  # level-triggered: looking again changes nothing
    for job_id in ids:
        row = await store.get(job_id)
        assert row["phase"] == "DISPATCHED" and row["admission_checks"][0]["state"] == "READY"
        assert row["reason"] == (f"dispatched to cluster {row['cluster']}; HyperJob hj committed: every sub-job has "
                                 "room (east, west); its agent is binding the gang")
        assert await kinds(job_id) == ["Submitted", "Dispatched", "Held", "Admitted"]
        order = order_for({"type": "Admitted", "attempt": 1, "cluster": row["cluster"]}, row)
        assert order is not None and order.assign.job.status.admission_checks[0].state == "READY"  # bind it


async def test_one_sub_job_refused_releases_every_hold(api: Api) -> None:
    store, scheduler, kinds = await federation(api)
    ids = await submit(api, hyperjob("hj", 2))
    sent = (await scheduler.cycle()).assign
    await store.apply_update(sent[ids[0]], held(ids[0]))
    await store.apply_update(sent[ids[1]], agent_pb2.JobUpdate(job_id=ids[1], attempt=1, type=agent_pb2.REJECTED,
                                                               reason="no HyperNode fits the gang"))
    assert await store.settle_hyperjobs() == 1
    first = await store.get(ids[0])
    assert first["phase"] == "PENDING" and first["cluster"] == ""
    assert first["reason"] == (f"HyperJob hj: sub-job 1 came back (cluster {sent[ids[1]]} rejected it: no HyperNode "
                               "fits the gang); every hold released, back in its queue")
    assert await kinds(ids[0]) == ["Submitted", "Dispatched", "Held", "HoldReleased"]
    # HoldReleased is an order to the cluster that held it: drop the room.
    order = order_for({"type": "HoldReleased", "job_id": ids[0], "attempt": 1, "cluster": sent[ids[0]],
                       "message": first["reason"]}, first)
    assert order is not None and order.cancel.job_id == ids[0] and order.cancel.attempt == 1
    # Both wait again, and are sent again together as a new round: the refused one not where it was refused.
    again = (await scheduler.cycle()).assign
    assert (again[ids[0]], again[ids[1]]) == (sent[ids[1]], sent[ids[0]])
    assert [(await store.get(i))["attempt"] for i in ids] == [2, 2]


async def test_holds_not_all_had_in_time_are_released(api: Api) -> None:
    store, scheduler, kinds = await federation(api)
    ids = await submit(api, hyperjob("hj", 2))
    sent = (await scheduler.cycle()).assign
    await store.apply_update(sent[ids[0]], held(ids[0]))
    assert await store.settle_hyperjobs(hold_seconds=3600) == 0
    assert await store.settle_hyperjobs(hold_seconds=0) == 2
    for job_id in ids:
        assert (await store.get(job_id))["phase"] == "PENDING"
        assert (await kinds(job_id))[-1] == "HoldReleased"
    assert (await store.get(ids[0]))["reason"].startswith(
        f"HyperJob hj: sub-job(s) 1 in {sent[ids[1]]} had no room held within 0 s")


async def test_a_hyperjob_is_submitted_whole_and_once(api: Api) -> None:
    await make_queue(api)
    specs = hyperjob("hj", 3)
    with pytest.raises(grpc.aio.AioRpcError) as partial:
        await submit(api, specs[:2])
    assert partial.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "specs[0].hyperjob: HyperJob 'hj' has sub-jobs [0, 1] in this batch, not each of 0 to 2 once" in \
        partial.value.details()
    odd = hyperjob("hj", 3)
    odd[2].hyperjob.max_domains = 2
    with pytest.raises(grpc.aio.AioRpcError) as differ:
        await submit(api, odd)
    assert differ.value.details() == ("specs[2].hyperjob.max_domains: differs from specs[0].hyperjob.max_domains of "
                                      "the same HyperJob 'hj'")
    await make_queue(api, "other")
    odd = hyperjob("hj", 3)
    odd[1].queue = "other"
    with pytest.raises(grpc.aio.AioRpcError) as queues:
        await submit(api, odd)
    assert queues.value.details() == ("specs[1].queue: differs from specs[0].queue: a HyperJob's sub-jobs share "
                                      "its queue")
    async with api.server.engine.connect() as conn:
        assert (await conn.execute(select(func.count()).select_from(Job))).scalar() == 0  # nothing stored
    assert len(await submit(api, specs)) == 3
    with pytest.raises(grpc.aio.AioRpcError) as twice:
        await submit(api, specs)
    assert twice.value.code() == grpc.StatusCode.ALREADY_EXISTS


async def running_together(api: Api, restart: str) -> tuple[JobStore, Scheduler, Callable[[str], Awaitable[list[str]]],
                                                            list[str], dict[str, str]]:
    """A HyperJob of two sub-jobs with this restart policy, held, committed and running."""
    store, scheduler, kinds = await federation(api)
    specs = hyperjob("hj", 2)
    for spec in specs:
        spec.hyperjob.restart = restart
    ids = await submit(api, specs)
    sent = (await scheduler.cycle()).assign
    for job_id in ids:
        await store.apply_update(sent[job_id], held(job_id))
    assert await store.settle_hyperjobs() == 2
    for job_id in ids:
        await store.apply_update(sent[job_id], agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.BOUND,
                                                                   hypernode="root"))
    return store, scheduler, kinds, ids, sent


async def test_a_whole_hyperjob_starts_again_together_and_fails_together(api: Api) -> None:
    store, scheduler, kinds, ids, sent = await running_together(api, "whole")
    # Sub-job 1's pods were not ready in time: sub-job 0 stops too, and both start again together.
    await store.apply_update(sent[ids[1]], agent_pb2.JobUpdate(job_id=ids[1], attempt=1, type=agent_pb2.EVACUATED,
                                                               reason="drained"))
    decisions = await scheduler.cycle()  # before the leader's pass: the lone sub-job is not sent on its own
    assert ids[1] not in decisions.assign
    assert decisions.waiting[ids[1]] == ("HyperJob hj starts again together (its restart policy is whole): waiting "
                                         "for its 1 other sub-job(s) to stop")
    assert await store.settle_hyperjobs() == 1
    first = await store.get(ids[0])
    assert first["phase"] == "PENDING" and first["cluster"] == ""
    assert first["reason"] == (f"HyperJob hj: sub-job 1 stopped (evacuated from cluster {sent[ids[1]]}: drained); its "
                               "restart policy is whole: every sub-job starts again together")
    assert (await kinds(ids[0]))[-1] == "Requeued"  # the order to its cluster: stop it
    assert await store.settle_hyperjobs() == 0
    again = (await scheduler.cycle()).assign
    assert sorted(again) == sorted(ids)  # a new round, together
    # A sub-job that fails ends the HyperJob: the other is cancelled.
    for job_id in ids:
        await store.apply_update(again[job_id], agent_pb2.JobUpdate(job_id=job_id, attempt=2, type=agent_pb2.HELD,
                                                                    hypernode="root"))
    assert await store.settle_hyperjobs() == 2
    for job_id in ids:
        await store.apply_update(again[job_id], agent_pb2.JobUpdate(job_id=job_id, attempt=2, type=agent_pb2.BOUND,
                                                                    hypernode="root"))
    await store.apply_update(again[ids[0]], agent_pb2.JobUpdate(job_id=ids[0], attempt=2, type=agent_pb2.JOB_FAILED,
                                                                reason="PodFailed on worker[0]; maxRetry 3 exhausted"))
    assert await store.settle_hyperjobs() == 1
    other = await store.get(ids[1])
    assert other["phase"] == "CANCELLED" and other["reason"] == (
        "HyperJob hj failed: sub-job 0 failed (PodFailed on worker[0]; maxRetry 3 exhausted); its restart policy is "
        "whole")
    assert (await kinds(ids[1]))[-1] == "Cancelled"


async def test_a_sub_job_restarts_alone_by_default(api: Api) -> None:
    store, scheduler, kinds, ids, sent = await running_together(api, "")
    await store.apply_update(sent[ids[1]], agent_pb2.JobUpdate(job_id=ids[1], attempt=1, type=agent_pb2.EVACUATED,
                                                               reason="drained"))
    assert await store.settle_hyperjobs() == 0
    assert (await store.get(ids[0]))["phase"] == "RUNNING" and (await kinds(ids[0]))[-1] == "Running"  # untouched
    assert ids[1] in (await scheduler.cycle()).assign  # alone, in a round of its own
