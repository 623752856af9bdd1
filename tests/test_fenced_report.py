"""An agent that fenced a job (stopped it itself, cut off from the federation for longer than its fence) says
so with FENCED when it is back: the report is applied, the job is lost there and goes back to its queue, so the
federation and the cluster agree again about what runs where (it used to raise, and the agent crash-looped)."""

from sqlalchemy import text

from federation.store.jobs import JobStore
from federation.v1 import agent_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec


async def test_a_fenced_report_is_applied_and_the_job_is_back_in_its_queue(front_end: Api) -> None:
    api = front_end  # the test writes the scheduler's rows itself: no scheduler beside it
    await make_queue(api)
    job_id = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(max_retry=3)))).job.id
    store = JobStore(api.server.engine)
    await store.dispatch({job_id: "east"})
    await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.BOUND))
    await store.apply_update("east", agent_pb2.JobUpdate(
        job_id=job_id, attempt=1, type=agent_pb2.FENCED, reason="cut off from the federation for 300 s"))
    row = await store.get(job_id)
    assert (row["phase"], row["cluster"]) == ("PENDING", "")
    assert row["reason"] == ("stopped by the agent of cluster east: cut off from the federation for 300 s; "
                             "requeued (retry 1 of 3)")

    async def kinds() -> list[str]:
        async with api.server.engine.connect() as conn:
            return list((await conn.execute(text("SELECT type FROM job_events WHERE job_id = :id ORDER BY seq"),
                                            {"id": job_id})).scalars().all())

    logged = await kinds()
    assert logged[-1] == "Lost"
    # The same report again (the agent says it on every connection until told) changes nothing more.
    again = await store.apply_update("east", agent_pb2.JobUpdate(job_id=job_id, attempt=1, type=agent_pb2.FENCED))
    assert not again.stop and await kinds() == logged and await store.get(job_id) == row
