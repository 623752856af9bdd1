"""The scheduler's --cycle-burst on real PostgreSQL (issue 30): a cycle dispatches at most that many jobs, asks
for the next cycle at once, and the jobs are dispatched over the next cycles in submission order."""

from __future__ import annotations

from sqlalchemy import update

from federation.control.scheduler import Scheduler
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster
from federation.v1 import jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec

GPU = "nvidia.com/gpu"


async def test_a_burst_spreads_dispatches_over_cycles(api: Api) -> None:
    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 64, "cpu": 64_000}, "used": {GPU: 0, "cpu": 0}, "topology": []}))
    submitted = [(await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(name=f"j{i}", gpus="4", replicas=1))))
                 .job.id for i in range(5)]
    woken = []
    scheduler = Scheduler(store, admin, lambda: True, lambda: None, burst=2)
    scheduler.wake = lambda: woken.append(True)  # type: ignore[method-assign]
    rounds = []
    while len([j for r in rounds for j in r]) < len(submitted):
        decisions = await scheduler.cycle()
        rounds.append(list(decisions.assign))
        assert len(rounds) <= 3
    assert rounds == [submitted[:2], submitted[2:4], submitted[4:]]
    assert len(woken) == 2  # cut short twice; the last cycle dispatched what was left
    for job_id in submitted:
        assert (await store.get(job_id))["phase"] == "DISPATCHED"
