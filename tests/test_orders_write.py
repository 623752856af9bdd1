"""A cycle's orders on real PostgreSQL: its preemptions and dispatches are one transaction, their events numbered
together (Preempted, then MakingRoom, then Dispatched) and written under the lease, or none of them is."""

import pytest
from sqlalchemy import insert, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from federation.control.leader import Fence, NotLeader
from federation.store.database import async_engine
from federation.store.jobs import JobStore
from federation.store.models import Cluster, JobEvent, Queue, Tenant
from federation.store.submission import NewJob

SPEC = {"queue": "q1", "tasks": [{"name": "worker", "replicas": 1, "resources": {"nvidia.com/gpu": "8"}}]}


async def test_a_cycles_preemptions_and_dispatches_are_one_transaction(db_url: URL) -> None:
    engine = async_engine(db_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(insert(Cluster), [{"name": c, "labels": {}, "status": "READY"} for c in ("c1", "c2")])
            await conn.execute(insert(Tenant), [{"name": "t1"}])
            await conn.execute(insert(Queue), [{"name": "q1", "tenant": "t1"}])
            await conn.execute(text("INSERT INTO leader_lease (id, holder, epoch, expires_at) "
                                    "VALUES (1, 'me', 2, now() + interval '1 hour')"))
        store = JobStore(engine)
        running, urgent, ready = [r.job_id for r in await store.submit(
            [NewJob(name, "t1", "q1", "", 0, {"nvidia.com/gpu": 8}, SPEC, "", "") for name in ("a", "b", "c")])]
        await store.dispatch({running: "c1"})
        before = (await store.events_after(0))[-1]["seq"]

        def phases() -> list[str]:
            return [r["phase"] for r in rows]

        # A replica whose lease was taken over writes none of its orders.
        with pytest.raises(NotLeader):
            await store.orders({running: "reclaimed"}, {ready: "c2"}, Fence("me", 1, 3600), {urgent: "c1"})
        rows = [await store.get(j) for j in (running, urgent, ready)]
        assert phases() == ["DISPATCHED", "PENDING", "PENDING"]
        assert (await store.events_after(before)) == []

        # A dispatch PostgreSQL refuses (here a trigger's doing) takes the preemption beside it back with it.
        async with engine.begin() as conn:
            await conn.execute(text(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN RAISE EXCEPTION 'refused'; END $$"))
            await conn.execute(text(
                "CREATE TRIGGER refuse BEFORE UPDATE ON jobs FOR EACH ROW "
                "WHEN (NEW.phase = 'DISPATCHED' AND OLD.phase = 'PENDING') EXECUTE FUNCTION refuse()"))
        with pytest.raises(DBAPIError, match="refused"):
            await store.orders({running: "reclaimed"}, {ready: "c2"}, Fence("me", 2, 3600), {urgent: "c1"})
        rows = [await store.get(j) for j in (running, urgent, ready)]
        assert phases() == ["DISPATCHED", "PENDING", "PENDING"]
        assert (await store.events_after(before)) == []
        async with engine.begin() as conn:
            await conn.execute(text("DROP TRIGGER refuse ON jobs"))

        preempted, dispatched = await store.orders({running: "reclaimed"}, {ready: "c2"}, Fence("me", 2, 3600),
                                                   {urgent: "c1"})
        assert [(r["id"], r["cluster"]) for r in preempted] == [(running, "c1")]  # as it was: its agent stops it
        assert [(r["id"], r["cluster"]) for r in dispatched] == [(ready, "c2")]
        rows = [await store.get(j) for j in (running, urgent, ready)]
        assert phases() == ["PREEMPTED", "PENDING", "DISPATCHED"]
        async with engine.connect() as conn:
            events = (await conn.execute(select(JobEvent.seq, JobEvent.type, JobEvent.job_id)
                                         .where(JobEvent.seq > before).order_by(JobEvent.seq))).all()
        assert [(t, j) for _, t, j in events] == [("Preempted", running), ("MakingRoom", urgent),
                                                  ("Dispatched", ready)]
        assert [s for s, _, _ in events] == [before + 1, before + 2, before + 3]  # numbered at once
    finally:
        await engine.dispose()
