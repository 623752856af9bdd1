"""A cluster that sends a job back (rejects it, not for good, or evacuates it) is not offered it again for a
while, whichever replica heard its agent: the scheduler reads it from the job event log, not from the memory
of the process holding the agent's stream (a front end, when the scheduler runs in a process of its own)."""

from sqlalchemy import func, update

from federation.control.scheduler import Scheduler
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


async def test_the_room_a_leader_is_making_is_known_to_the_next_leader(api: Api) -> None:
    """Gangs evicted for a job take a while to leave; the leader remembers the room it is making and waits for it.
    A replica that leads next (the lease moved, on a loaded machine) knew nothing of it and evicted again (a third
    victim where two made room, seen once in CI). The eviction's MakingRoom event carries it to every replica."""
    from federation.v1 import admin_pb2, common_pb2

    await api.server.leadership.stop()  # these tests' schedulers are the only ones deciding
    await make_queue(api)
    for name, value, preemptible in (("low", 10, True), ("high", 100, False)):
        await api.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(priority_class=admin_pb2.PriorityClass(
            name=name, value=value, preemptible=preemptible)))
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")

    async def inventory(used: int) -> None:
        async with api.server.engine.begin() as conn:
            await conn.execute(update(Cluster).values(last_heartbeat=func.now(), status="READY", inventory={
                "allocatable": {GPU: 24, "cpu": 64_000}, "used": {GPU: used, "cpu": 0},
                "topology": [{"tier": 0, "tier_name": "node", "max_free": {GPU: 24 - used, "cpu": 64_000},
                              "max_capacity": {GPU: 24, "cpu": 64_000}}]}))

    await inventory(0)
    first = Scheduler(store, admin, lambda: True, lambda: None)
    leads = [False]
    second = Scheduler(store, admin, lambda: leads[0], lambda: None)  # a hot standby, following the event log
    low = [(await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(
        f"low{i}", gpus="8", replicas=1, priority_class_name="low")))).job.id for i in range(3)]
    assert set((await first.cycle()).assign) == set(low)
    for job_id in low:
        applied = await store.apply_update("east", agent_pb2.JobUpdate(
            job_id=job_id, attempt=1, type=agent_pb2.BOUND, hypernode="east", tier=0,
            placements=[common_pb2.PodPlacement(task="worker", index=0, node="n0")]))
        assert not applied.refused
    await inventory(24)
    urgent = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(
        "urgent", gpus="8", replicas=1, priority_class_name="high")))).job.id
    await second.tick()  # the standby's catch-up
    decided = await first.cycle()
    assert len(decided.preempt) == 1 and decided.making_room == {urgent: "east"}
    # The evicted gang has not left yet (the agent is slow): the cluster still reports all 24 GPUs used.
    await second.tick()  # the standby reads the eviction and its MakingRoom event
    leads[0] = True
    again = await second.cycle()
    assert again.preempt == {}, again.preempt  # it waits for the room being made, as the first leader would
    assert again.reserved.get(urgent) == "east" and urgent not in again.assign  # holding that room
