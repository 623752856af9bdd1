"""Queue status, explanations, leadership and metrics over real sockets on real PostgreSQL."""

import asyncio
import contextlib
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc
import pytest
from sqlalchemy import func, update
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from federation.control.leader import Leadership
from federation.store.admin import AdminStore
from federation.store.database import async_engine
from federation.store.events import EventRecord, append_events
from federation.store.models import Cluster
from federation.v1 import admin_pb2, agent_pb2, common_pb2, jobs_pb2
from member_agent.agent import Agent
from tests.conftest import Api, make_queue
from tests.processes import fedctl
from tests.test_api_admin import rpc_error
from tests.test_api_admission import h100  # noqa: F401  (a fixture: one member cluster with its agent)
from tests.test_api_jobs import spec

GPU = "nvidia.com/gpu"


async def test_queue_status_and_explain(api: Api) -> None:
    await make_queue(api, "train", "ml", guarantee={"nvidia.com/gpu": "16"})
    job = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=2)))).job
    status = await api.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="train"))
    assert (status.queue, status.tenant, status.pending, status.running) == ("train", "ml", 1, 0)
    assert dict(status.usage) == {}
    err = await rpc_error(api.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="nope")))
    assert err.code() == grpc.StatusCode.NOT_FOUND

    await AdminStore(api.server.engine).register_cluster("east", {}, "0.1.0")  # just heard from, no inventory
    explained = await api.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=job.id))
    assert [(c.cluster, c.fits, c.reason) for c in explained.clusters] == [
        ("east", False, "not enough free: cpu 0/8 free, nvidia.com/gpu 0/16 free")]
    async with api.server.engine.begin() as conn:  # silent for longer than the heartbeat timeout
        await conn.execute(update(Cluster).values(last_heartbeat=func.now() - timedelta(minutes=5)))
    explained = await api.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=job.id))
    assert explained.phase == 1 and [(c.cluster, c.fits, c.reason) for c in explained.clusters] == [
        ("east", False, "not Ready (its agent is not connected or has gone silent)")]
    for _ in range(50):  # the leader's cycle writes the reason
        current = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job.id))
        if current.status.reason == "no member cluster is ready":
            break
        await asyncio.sleep(0.1)
    assert current.status.reason == "no member cluster is ready" and current.status.queue_position == 1
    # Positions are counted when read: a more urgent job in the queue goes ahead at once.
    await api.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(
        priority_class=admin_pb2.PriorityClass(name="urgent", value=100)))
    urgent_spec = spec(replicas=2)
    urgent_spec.priority_class_name = "urgent"
    urgent = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=urgent_spec))).job
    later = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=2)))).job
    positions = {j.id: j.status.queue_position
                 for j in (await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(queue="train"))).jobs}
    assert positions == {urgent.id: 1, job.id: 2, later.id: 3}


async def test_only_one_replica_leads(api: Api) -> None:
    for _ in range(50):
        if api.server.leadership.is_leader:
            break
        await asyncio.sleep(0.1)
    assert api.server.leadership.is_leader
    second = Leadership(api.server.url, lambda: None, lease=0.4)
    second.start()
    await asyncio.sleep(1.0)
    assert not second.is_leader  # the lease is held and renewed
    await api.server.leadership.stop()
    for _ in range(50):
        if second.is_leader:
            break
        await asyncio.sleep(0.1)
    assert second.is_leader  # taken over once the leader let go
    await second.stop()


async def test_a_leader_stalled_inside_a_fenced_write_keeps_the_lease_no_longer_than_a_lease(db_url: URL) -> None:
    """A frozen or partitioned leader may stop between its fence check and its commit, holding the lease row;
    another replica must still take over once the lease has run out."""
    engine = async_engine(db_url)
    first = Leadership(db_url, lambda: None, lease=0.5)
    second = Leadership(db_url, lambda: None, lease=0.5)
    first.start()
    conn = await engine.connect()
    try:
        for _ in range(50):
            if first.is_leader:
                break
            await asyncio.sleep(0.1)
        assert first.is_leader
        stalled = await conn.begin()
        await first.fence.check(conn)  # and then nothing more from this client: it is stalled mid-write
        first._stopping.set()  # renews no more, without giving the lease back
        second.start()
        for _ in range(100):
            if second.is_leader:
                break
            await asyncio.sleep(0.1)
        assert second.is_leader
        with pytest.raises(DBAPIError):  # PostgreSQL ended the stalled write: it can never commit now
            await stalled.commit()
    finally:
        with contextlib.suppress(DBAPIError):
            await conn.close()
        await second.stop()
        await first.stop()
        await engine.dispose()


async def test_a_replica_stalled_inside_any_write_holds_the_event_counter_no_longer_than_it_allows(
        db_url: URL) -> None:
    """Every write appends events under the one event counter's row lock; a replica frozen between that and its
    commit (an agent's report is not fenced) must not stop every other replica's writes for good."""
    stalled_engine = async_engine(db_url, stalled_after=0.5)
    engine = async_engine(db_url)
    event = EventRecord(job_id="j-1", tenant="t", queue="q", type="Submitted", phase="PENDING")
    conn = await stalled_engine.connect()
    try:
        stalled = await conn.begin()
        first = await append_events(conn, [event])  # and then nothing more from this client
        async with engine.begin() as other:  # waits for the counter until PostgreSQL ends the stalled write
            second = await append_events(other, [event])
        assert second == first  # the stalled write's number was never used: it did not commit
        with pytest.raises(DBAPIError):
            await stalled.commit()
    finally:
        with contextlib.suppress(DBAPIError):
            await conn.close()
        await stalled_engine.dispose()
        await engine.dispose()


def test_metrics_endpoint(tmp_path: Path) -> None:
    from federation.cli.dev import ServerProcess

    # --log-level after `serve`: global options go anywhere
    server = ServerProcess("--data-dir", str(tmp_path / "pg"), "--auto-migrate", "--log-level", "warning")
    try:
        body = urllib.request.urlopen(f"http://{server.metrics}/metrics", timeout=10).read().decode()
    finally:
        server.stop()
    assert "federation_scheduler_cycle_seconds" in body and "federation_jobs_scheduled_total" in body


async def test_the_job_cache_follows_the_event_log(front_end: Api) -> None:
    from federation.control.jobcache import JobCache
    from federation.store.jobs import JobStore

    api = front_end  # the test dispatches and preempts itself: a scheduler beside it would rewrite the reasons
    await make_queue(api)
    store = JobStore(api.server.engine)
    cache = JobCache(store)
    first = [(await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=2)))).job.id for _ in range(3)]
    await cache.refresh()
    assert set(cache.waiting) == set(first) and not cache.holding

    await api.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=first[1]))
    await api.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(
        priority_class=admin_pb2.PriorityClass(name="urgent", value=100)))
    urgent_spec = spec(replicas=2)
    urgent_spec.priority_class_name = "urgent"
    urgent = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=urgent_spec))).job.id
    await store.dispatch({first[0]: "c1"})
    await cache.refresh()  # caught up from the events, not read again whole
    assert set(cache.waiting) == {urgent, first[2]} == {r["id"] for r in await store.pending(100)}
    assert cache.waiting[urgent].priority == 100 and cache.waiting[urgent].view.request["nvidia.com/gpu"] == 16
    assert list(cache.holding) == [first[0]]
    assert (cache.holding[first[0]].cluster, cache.holding[first[0]].phase) == ("c1", "DISPATCHED")

    await store.apply_update("c1", agent_pb2.JobUpdate(job_id=first[0], attempt=1, type=agent_pb2.BOUND,
                                                       hypernode="leaf-0", tier=1))
    await cache.refresh()
    assert cache.holding[first[0]].phase == "RUNNING"

    await store.preempt({first[0]: "preempted for a test"})
    await store.dispatch({urgent: "c2"})
    await cache.refresh()
    assert set(cache.waiting) == {first[0], first[2]} and set(cache.holding) == {urgent}
    assert cache.reasons[first[0]] == "preempted for a test" == (await store.get(first[0]))["reason"]


async def test_a_standby_keeps_its_cache_and_takes_over_with_current_reasons(api: Api) -> None:
    from federation.control.scheduler import Scheduler
    from federation.store.jobs import JobStore

    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    leader = {"a": True}
    a = Scheduler(store, admin, lambda: leader["a"], lambda: None)
    b = Scheduler(store, admin, lambda: not leader["a"], lambda: None)
    job_id = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=2)))).job.id
    await a.tick()
    await b.tick()  # the standby reads the job, with the reason the leader wrote
    assert job_id in b.cache.waiting and b.cache.reasons[job_id] == "no member cluster is ready"

    await admin.register_cluster("east", {}, "0.1.0")
    await a.tick()  # rewritten by the leader, without an event
    await b.tick()
    written = (await store.get(job_id))["reason"]
    assert written.startswith("no ready cluster fits: east")

    await admin.set_cordoned("east", True, "test")  # back to the first reason, decided by the new leader
    leader["a"] = False
    await b.tick()
    assert (await store.get(job_id))["reason"] == "no member cluster is ready"


async def test_a_pod_restart_is_an_event_with_its_count_and_a_resent_one_changes_nothing(api: Api) -> None:
    from federation.store.jobs import JobStore

    await make_queue(api)
    store = JobStore(api.server.engine)
    job_id = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=2)))).job.id
    await store.dispatch({job_id: "east"})
    pods = [common_pb2.PodPlacement(task="worker", index=i, node=f"n{i}") for i in range(2)]
    await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.BOUND,
                                                         hypernode="leaf-0", tier=1, placements=pods))
    pods[1] = common_pb2.PodPlacement(task="worker", index=1, node="n7")
    restart = agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.POD_RESTARTED, hypernode="leaf-0",
                                  tier=1, placements=pods, retries=1,
                                  reason="RestartTask after PodFailed on worker[1]: OOMKilled (retry 1 of 3)")
    await store.apply_update("east", restart)
    await store.apply_update("east", restart)  # resent after a reconnect
    job = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))
    assert job.status.retries == 1 and job.status.phase == common_pb2.RUNNING
    assert [(p.index, p.node) for p in job.status.placements] == [(0, "n0"), (1, "n7")]
    assert "restarted 1 time(s), last: RestartTask after PodFailed on worker[1]" in job.status.reason
    events = [e for e in await store.events_after(0, limit=100) if e["job_id"] == job_id]
    assert [e["type"] for e in events] == ["Submitted", "Dispatched", "Running", "PodRestarted"]


async def test_work_comes_back_from_a_silent_cluster(api: Api) -> None:
    from federation.store.jobs import JobStore

    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    for name in ("east", "west"):
        await admin.register_cluster(name, {}, "0.1.0")
    once = spec(replicas=2)
    once.max_retry = 0
    ids = [(await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=s))).job.id
           for s in (spec(replicas=2), spec(replicas=2), once, spec(replicas=2))]
    queued, running, fragile, elsewhere = ids
    await store.dispatch({queued: "east", running: "east", fragile: "east", elsewhere: "west"})
    for job_id in (running, fragile):
        await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.BOUND))

    async def silent_for(seconds: int) -> None:
        async with api.server.engine.begin() as conn:
            await conn.execute(update(Cluster).where(Cluster.name == "east").values(
                last_heartbeat=func.now() - timedelta(seconds=seconds)))

    await silent_for(20)  # past the heartbeat timeout (10 s), within the grace (30 s more)
    assert [r["id"] for r in await store.requeue_from_silent(10, 30)] == [queued]
    job = await store.get(queued)
    assert (job["phase"], job["cluster"], job["reason"]) == (
        "PENDING", "", "requeued: cluster east went silent before placing it")
    assert (await store.get(running))["phase"] == "RUNNING"
    assert {c["name"]: c["status"] for c in (await admin.clusters(10))[0]} == {"east": "NOT_READY", "west": "READY"}

    await silent_for(60)  # past the grace too: the running jobs are lost
    assert sorted(r["id"] for r in await store.requeue_from_silent(10, 30)) == sorted([running, fragile])
    job = await store.get(running)
    assert (job["phase"], job["retries"]) == ("PENDING", 1)
    assert job["reason"] == "lost with cluster east, silent for over 40 s; requeued (retry 1 of 3)"
    job = await store.get(fragile)
    assert (job["phase"], job["reason"]) == ("FAILED", "lost with cluster east, silent for over 40 s; "
                                                       "maxRetry 0 exhausted")
    assert (await store.get(elsewhere))["phase"] == "DISPATCHED"  # west still talks
    assert await store.requeue_from_silent(10, 30) == []  # nothing twice
    # the silent agent comes back still running the lost job: it is told to stop
    stale = await store.apply_update("east", agent_pb2.JobUpdate(job_id=running, attempt=1, type=agent_pb2.BOUND))
    assert stale.stop


@pytest.mark.parametrize("lands_after", ["the job cache's read", "the clusters' read"])
async def test_a_cycle_sees_jobs_as_they_were_when_its_inventories_were_read(api: Api, lands_after: str) -> None:
    """An agent reports a job's end, then the inventory that frees its GPUs. Whenever those land
    during a snapshot, the snapshot holds the job exactly while its GPUs are in use, and the freed
    GPUs go to the tenant that lost them (light, below its share) before the heavier one."""
    from federation.control.scheduler import Scheduler
    from federation.store.jobs import JobStore

    await api.server.leadership.stop()  # this test's scheduler is the only one deciding
    for tenant, weight in (("light", 1), ("heavy", 3)):
        await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name=tenant, weight=weight)))
        await api.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name=tenant, tenant=tenant)))
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")

    async def inventory(used_gpus: int) -> None:
        async with api.server.engine.begin() as conn:
            await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
                "allocatable": {GPU: 32, "cpu": 64_000}, "used": {GPU: used_gpus, "cpu": 0}, "topology": []}))

    async def submit(queue: str) -> str:
        job = spec(name=queue, queue=queue, gpus="4", replicas=1)
        return (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=job))).job.id

    # Each tenant holds its deserved share of the 32 GPUs (8 and 24) in jobs of 4 GPUs.
    running = [await submit("light") for _ in range(2)] + [await submit("heavy") for _ in range(6)]
    ended = running[0]
    await store.dispatch(dict.fromkeys(running, "east"))
    for job_id in running:
        await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.BOUND))
    await inventory(used_gpus=32)
    light_next, heavy_next = await submit("light"), await submit("heavy")
    scheduler = Scheduler(store, admin, lambda: True, lambda: None)
    assert not (await scheduler.cycle()).assign  # full

    landed = False

    async def agent_reports_the_end() -> None:
        nonlocal landed
        if not landed:
            landed = True
            await store.apply_update("east", agent_pb2.JobUpdate(job_id=ended, attempt=1,
                                                                 type=agent_pb2.JOB_SUCCEEDED))
            await inventory(used_gpus=28)

    hooked = (scheduler.cache, "refresh") if lands_after == "the job cache's read" else (admin, "for_scheduling")
    read = getattr(*hooked)

    async def read_then_land(*args: object) -> object:
        result = await read(*args)
        await agent_reports_the_end()
        return result

    setattr(*hooked, read_then_land)
    snapshot = await scheduler.snapshot()
    assert landed
    holds_ended = ended in {j.id for j in snapshot.running}
    assert snapshot.clusters[0].free[GPU] == (0 if holds_ended else 4)
    assigned: dict[str, str] = {}
    for _ in range(2):  # the end may have landed after the snapshot's moment: seen by the next cycle
        assigned = (await scheduler.cycle()).assign
        if assigned:
            break
    assert assigned == {light_next: "east"}
    assert heavy_next in scheduler.cache.waiting


async def test_waiting_jobs_show_when_and_where_they_are_expected_to_start(api: Api) -> None:
    """The leader's forecast: the running gang ends after its expected duration, the first waiting job
    starts then, the one behind it once the first has run; each in GetJob, ListJobs and ExplainJob."""
    from federation.store.jobs import JobStore

    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 32, "cpu": 64_000}, "used": {GPU: 32, "cpu": 16_000}, "topology": []}))

    def annotated(duration: str, replicas: int) -> common_pb2.JobSpec:
        return spec(replicas=replicas, annotations={"federation.dev/expected-duration": duration})

    running = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=annotated("2h", 4)))).job.id
    await store.dispatch({running: "east"})
    await store.apply_update("east", agent_pb2.JobUpdate(job_id=running, attempt=1, type=agent_pb2.BOUND))
    first = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=annotated("1h", 2)))).job.id
    second = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=annotated("30m", 4)))).job.id
    submitted = datetime.now(UTC)

    async def expected(job_id: str) -> common_pb2.JobStatus:
        for _ in range(100):
            job = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))
            if job.status.expected_start_time.seconds:
                return job.status
            await asyncio.sleep(0.1)
        raise AssertionError(f"no expected start for {job_id}: {job.status}")

    def hours(status: common_pb2.JobStatus) -> float:
        return (status.expected_start_time.ToDatetime(UTC) - submitted).total_seconds() / 3600

    one, two = await expected(first), await expected(second)
    assert one.expected_cluster == two.expected_cluster == "east"
    assert 1.95 <= hours(one) <= 2.25  # when the running gang ends (the forecast's grid rounds up)
    assert hours(two) >= 3.0 - 0.05  # the first holds half the cluster for its hour after that
    listed = {j.id: j.status for j in (await api.jobs.ListJobs(jobs_pb2.ListJobsRequest(queue="train"))).jobs}
    assert listed[first].expected_start_time == one.expected_start_time
    assert not listed[running].HasField("expected_start_time")  # it runs: nothing to expect
    explained = await api.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=second))
    assert (explained.expected_start_time, explained.expected_cluster) == (two.expected_start_time, "east")
    shown = await asyncio.to_thread(fedctl, api.address, "explain", first)
    assert shown.returncode == 0 and "expected: starts in about 2h on east" in shown.stdout, shown
    table = await asyncio.to_thread(fedctl, api.address, "list", "jobs")
    assert "STARTS" in table.stdout and "~2h east" in table.stdout, table.stdout

    bad = annotated("soon", 1)
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=bad)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "annotations['federation.dev/expected-duration']" in err.details() and "soon" in err.details()


async def test_an_admin_reads_which_job_holds_the_room_a_tenant_reads_only_whose(
        api: Api, h100: Agent) -> None:  # noqa: F811
    """Issue 42 (3): an admin saw "behind a job of another tenant", never which job. The room a cycle reserves for
    one tenant's waiting gang is named in ExplainJob to an admin; to another tenant only as someone else's."""
    await make_queue(api, "other-q", "other")
    # The other tenant holds 56 of the 64 GPUs: ml, under its share, gets the rest held for its big gang.
    filler = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(queue="other-q", replicas=7)))).job.id
    for _ in range(100):
        if (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=filler))).status.phase == common_pb2.RUNNING:
            break
        await asyncio.sleep(0.1)
    big = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=2)))).job.id  # 16: room held
    # Longer than the big gang would wait for the filler to end: it may not take that room meanwhile.
    small = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(
        queue="other-q", replicas=1, annotations={"federation.dev/expected-duration": "10h"})))).job.id

    async def rows() -> dict[str, str]:
        explained = await api.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=small))
        return {c.cluster: c.reason for c in explained.clusters}

    for _ in range(100):  # a cycle reserves the free room for the big gang, first in line
        if "reserved for" in (await rows()).get("h100", ""):
            break
        api.server.scheduler.wake()
        await asyncio.sleep(0.1)
    assert (await rows()).get("h100") == f"the room it needs is reserved for {big}"  # the caller is an admin
    row = await api.server.scheduler.jobs.get(small)
    assert dict(await api.server.scheduler.explain(row))["h100"] == \
        "the room it needs is reserved for a job of another tenant"


async def test_a_maximum_run_time_is_what_the_forecast_counts_on_without_an_expected_one(api: Api) -> None:
    """Issue 46 (3): a running gang with only `federation.dev/max-run-time` ends by then at the latest (its agent
    stops it): the forecast counts on it as Slurm's backfill counts on --time; a bad one is refused by name."""
    from federation.store.jobs import JobStore

    await make_queue(api)
    store, admin = JobStore(api.server.engine), AdminStore(api.server.engine)
    await admin.register_cluster("east", {}, "0.1.0")
    async with api.server.engine.begin() as conn:
        await conn.execute(update(Cluster).where(Cluster.name == "east").values(inventory={
            "allocatable": {GPU: 32, "cpu": 64_000}, "used": {GPU: 32, "cpu": 16_000}, "topology": []}))
    bounded = spec(replicas=4, annotations={"federation.dev/max-run-time": "3h"})
    running = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=bounded))).job.id
    await store.dispatch({running: "east"})
    await store.apply_update("east", agent_pb2.JobUpdate(job_id=running, attempt=1, type=agent_pb2.BOUND))
    waiting = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(replicas=2)))).job.id
    submitted = datetime.now(UTC)
    for _ in range(100):
        status = (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=waiting))).status
        if status.expected_start_time.seconds:
            break
        await asyncio.sleep(0.1)
    hours = (status.expected_start_time.ToDatetime(UTC) - submitted).total_seconds() / 3600
    assert 2.95 <= hours <= 3.3, hours  # when the running gang's maximum runs out (the grid rounds up)
    bad = spec(replicas=1, annotations={"federation.dev/max-run-time": "forever"})
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=bad)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "annotations['federation.dev/max-run-time']" in err.details() and "forever" in err.details()
