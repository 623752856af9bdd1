"""The leader writes only the reasons that may have changed (issue 30), and PostgreSQL still holds every waiting
job's reason exactly as the cycle gave it. Real PostgreSQL, the in-process scheduler, random churn between cycles:
jobs submitted (some that fit nowhere, some over a limit) and cancelled, gangs ending, a queue's limit changing,
a preemption's cause."""

from __future__ import annotations

import random

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select, update

from federation import metrics
from federation.control.scheduler import Scheduler
from federation.scheduling.model import summed_by
from federation.scheduling.queues import Reasons
from federation.scheduling.running import Listed
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster, Job, PriorityClass
from federation.store.phases import WAITING_PHASES
from federation.v1 import admin_pb2, agent_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize("seed", [5, 11, 23])
async def test_reasons_in_postgres_match_the_cycle_through_churn(api: Api, seed: int) -> None:
    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    rng = random.Random(seed)
    await make_queue(api, "a")
    await make_queue(api, "b")
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 32, "cpu": 64_000}, "used": {GPU: 0, "cpu": 0}, "topology": []}))

    async def submit(n: int) -> None:
        specs = [spec(name=f"j{rng.randrange(10**6)}", queue=rng.choice("ab"),
                      gpus=str(rng.choice([1, 2, 4, 8])), replicas=rng.choice([1, 1, 2, 8])) for _ in range(n)]
        await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs))

    scheduler = Scheduler(store, admin, lambda: True, lambda: None)
    await submit(60)
    incremental = ran = 0
    for step in range(12):
        decisions = await scheduler.cycle()
        given = dict(decisions.waiting.items())
        async with api.server.engine.connect() as conn:
            stored = dict((await conn.execute(select(Job.id, Job.reason).where(Job.phase.in_(WAITING_PHASES)))).all())
        assert {j: stored[j] for j in given} == given
        # Every waiting job has the cycle's reason, but those it just dispatched or preempted.
        assert set(stored) - set(given) <= set(decisions.assign) | set(decisions.preempt)
        if isinstance(decisions.waiting, Reasons) and scheduler._written is not None:
            incremental += 1
        # What the cache keeps per cluster as jobs come and go is what its holding jobs add up to.
        cache = scheduler.cache
        for phases, kept in ((("DISPATCHED",), cache.dispatched_to), (("RUNNING", "RESTARTING"), cache.running_in)):
            jobs = [j for j in cache.holding.values() if j.phase in phases]
            assert kept == summed_by([j.cluster for j in jobs], [j.request for j in jobs]), phases
        ran += bool(cache.running_in)
        # The running gangs kept from cycle to cycle are those the holding jobs make now.
        classes = {c["name"]: c for c in await admin.list(PriorityClass)}
        kept = scheduler._kept
        assert {g.id: g for g in kept} == \
            {j.id: scheduler._gang(j, classes.get(j.priority_class, {})) for j in cache.holding.values()}
        # ... with what cycles sum over them, kept as the cache said which holding jobs changed
        fresh = Listed(list(kept))
        assert ({q: dict(u) for q, u in kept.usage().items()}, kept.preemptible().keys()) == \
            ({q: dict(u) for q, u in fresh.usage().items()}, fresh.preemptible().keys())
        # Churn before the next cycle: a third of the gangs end, some start.
        holding = sorted(cache.holding.values(), key=lambda j: j.id)
        for job in rng.sample(holding, len(holding) // 3):
            attempt = (await store.get(job.id))["attempt"]
            await store.apply_update(job.cluster, agent_pb2.JobUpdate(job_id=job.id, attempt=attempt,
                                                                     type=agent_pb2.JOB_SUCCEEDED))
        for job in rng.sample(holding, len(holding) // 3):
            if job.phase == "DISPATCHED":
                attempt = (await store.get(job.id))["attempt"]
                await store.apply_update(job.cluster, agent_pb2.JobUpdate(job_id=job.id, attempt=attempt,
                                                                         type=agent_pb2.BOUND))
        waiting = sorted(scheduler.cache.waiting)
        for job_id in rng.sample(waiting, min(len(waiting), rng.randrange(4))):
            await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id))
        await submit(rng.randrange(1, 8))
        if step % 4 == 1:
            limit = {GPU: str(rng.choice([8, 16, 64]))}
            await api.admin.UpdateQueue(admin_pb2.UpdateQueueRequest(queue=admin_pb2.Queue(
                name="a", tenant="ml", limit=limit), update_mask={"paths": ["limit"]}))
        if step == 6 and holding:  # a preemption: the job waits again with its cause in front of its reason
            await store.preempt({holding[-1].id: "preempted for a test"})
        if step % 2:  # told of the changes between cycles, the leader keeps its running gangs up with them
            await scheduler.follow()
            assert not cache.holding_changed  # taken up by `follow`, not left to the next snapshot
            assert {g.id: g for g in scheduler._kept} == \
                {j.id: scheduler._gang(j, classes.get(j.priority_class, {})) for j in cache.holding.values()}
    assert incremental >= 8  # most cycles wrote only what changed
    assert ran >= 4  # gangs were running through several cycles


async def test_a_reclaiming_cycle_counts_the_work_lost_against_each_victims_queue(api: Api) -> None:
    """The cycle's metrics look each preempted gang up among the snapshot's: the GPU-hours it loses are counted
    against its own queue (`federation_preemption_lost_gpu_hours_total`), beside the federation's total."""
    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    for queue in ("a", "b"):
        await make_queue(api, queue, guarantee={GPU: "16"}, reclaimable=True)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 32, "cpu": 64_000}, "used": {GPU: 0, "cpu": 0}, "topology": []}))
    scheduler = Scheduler(store, admin, lambda: True, lambda: None)
    await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec(name=f"b{i}", queue="b", gpus="8", replicas=1)
                                                                for i in range(4)]))
    sent = (await scheduler.cycle()).assign  # b borrows the whole cluster
    assert len(sent) == 4
    for job_id in sent:
        await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.BOUND))
    async with api.server.engine.begin() as conn:  # and its agent reports them running
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 32, "cpu": 64_000}, "used": {GPU: 32, "cpu": 16_000}, "topology": []}))
    await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec(name="a0", queue="a", gpus="8", replicas=2)]))

    def lost(queue: str | None = None) -> float:
        name = "federation_preemption_lost_gpu_hours_total" if queue else "federation_lost_gpu_hours_total"
        registry = metrics.TENANTS if queue else REGISTRY  # (per queue: the tenants' own registry)
        return registry.get_sample_value(name, {"queue": queue} if queue else {}) or 0.0

    before_b, before = lost("b"), lost()
    decisions = await scheduler.cycle()  # a takes back its guarantee
    assert decisions.preempt and set(decisions.preempt) <= set(sent)
    assert decisions.lost.keys() == decisions.preempt.keys()
    assert lost("b") - before_b == pytest.approx(sum(decisions.lost.values()) / 3600) == lost() - before
    assert decisions.lost and lost("a") == 0.0  # the victims' queue, not the one they made room for
