"""A cluster that sends a job back (rejects it, not for good, or evacuates it) is not offered it again for a
while, whichever replica heard its agent: the scheduler reads it from the job event log, not from the memory
of the process holding the agent's stream (a front end, when the scheduler runs in a process of its own)."""

from sqlalchemy import func, update

from federation.scheduler import Scheduler
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster
from federation.v1 import agent_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec

GPU = "nvidia.com/gpu"


async def test_a_rejection_heard_anywhere_keeps_the_job_from_that_cluster(api: Api) -> None:
    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
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
    other = ({"east", "west"} - {first}).pop()
    # The agent's refusal reaches the store as any replica would apply it; this scheduler is told nothing else.
    await store.apply_update(first, agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.REJECTED,
                                                        reason="no node has 8 nvidia.com/gpu free"))
    assert (await scheduler.cycle()).assign == {job_id: other}
    await store.apply_update(other, agent_pb2.JobUpdate(job_id=job_id, attempt=2, type=agent_pb2.REJECTED,
                                                        reason="no node has 8 nvidia.com/gpu free"))
    decisions = await scheduler.cycle()
    assert job_id not in decisions.assign  # both sent it back within REJECTION_MEMORY
    reason = (await store.get(job_id))["reason"]
    assert f"{first}: rejected it recently: no node has 8 nvidia.com/gpu free" in reason
    assert f"{other}: rejected it recently: no node has 8 nvidia.com/gpu free" in reason
