"""Jobs in Postgres: what the API and the control loop read of them, and the history they move to once ended.

`JobStore` is the one object the rest of the server holds; its parts each own one concern: submission
(`submission.py`), the event log (`events.py`) and every phase change (`transitions.py`).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from psycopg.rows import dict_row
from sqlalchemy import and_, bindparam, case, delete, func, or_, select, text, union_all
from sqlalchemy.dialects.postgresql import distinct_on
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import aliased

from federation.errors import NotFound
from federation.kernel.jobspec import (
    CHECKPOINT_INTERVAL,
    EXPECTED_DURATION,
    MAX_RUN_TIME,
)
from federation.store.checks import AdmissionChecks
from federation.store.database import driver
from federation.store.events import EventLog
from federation.store.hyperjobs import HyperJobHolds
from federation.store.models import (
    Job,
    JobEvent,
    finished_jobs,
)
from federation.store.phases import ACTIVE_PHASES, TERMINAL_PHASES, WAITING_PHASES
from federation.store.submission import Submission
from federation.store.transitions import Requeueing, Transitions, history_rows

ARCHIVE_BATCH = 10_000  # jobs moved to the history, or expired from it, per transaction


@functools.cache
def _with_position() -> Any:
    """Jobs with `queue_position`: a waiting job's place in its queue (priority, then submission), from 1.

    Counted when read, over the queue's index, rather than stored: every dispatch moves every job
    behind it, and rewriting a large backlog's positions each cycle would cost more than the cycle.
    Made once (statements are immutable; `where` makes a new one): made per GetJob, its alias of the table left
    about 600 objects in reference cycles each time, for the interpreter's collector to find.
    """
    ahead = aliased(Job)
    position = select(func.count()).where(
        ahead.queue == Job.queue, ahead.phase.in_(WAITING_PHASES),
        or_(ahead.priority > Job.priority, and_(ahead.priority == Job.priority, ahead.seq <= Job.seq)),
    ).scalar_subquery()
    return select(Job, case((Job.phase.in_(WAITING_PHASES), position), else_=0).label("queue_position"))


# The reads that follow every job's arrival, dispatch and end into the scheduler's cache, sent by the driver
# (`database.driver`): SQLAlchemy's way of running a statement and making its rows cost more than PostgreSQL spent
# on them (a holding job's row 7 us of the scheduler's time, a waiting one's 11 us).
_HOLDING = ("SELECT id, queue, cluster, priority, priority_class, seq, request, phase, hypernode, preemptions, "
            "hyperjob AS \"group\", coalesce(started_at, dispatched_at) AS since, "
            # an expected run time, else the longest it may run (its agent stops it then)
            "coalesce(spec->'annotations'->>%s, spec->'annotations'->>%s) AS expected, "
            "spec->'annotations'->>%s AS checkpoint FROM jobs ")
_BY_ID, _ACTIVE = "WHERE id = ANY(%s)", "WHERE phase = ANY(%s)"
_ARRIVED = "SELECT id, queue, priority, seq, reason, phase, refusals, requeue_at, request, spec FROM jobs " + _BY_ID


async def _read(engine: AsyncEngine, statement: str, params: Sequence[Any]) -> list[dict[str, Any]]:
    async with engine.connect() as conn, conn.begin(), (await driver(conn)).cursor(row_factory=dict_row) as cur:
        await cur.execute(statement, params)
        return await cur.fetchall()


class JobStore(Submission, EventLog, Transitions, AdmissionChecks, HyperJobHolds):
    def __init__(self, engine: AsyncEngine, requeueing: Requeueing | None = None) -> None:
        self.engine = engine
        self.requeueing = requeueing or Requeueing()

    async def get(self, job_id: str) -> Job:
        """A job, live or finished and moved to the history (`archive`)."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(_with_position().where(Job.id == job_id))).mappings().first()
            if row is None:
                row = (await conn.execute(history_rows().where(finished_jobs.c.id == job_id))).mappings().first()
        if row is None:
            raise NotFound(f"job {job_id!r} not found")
        return row  # type: ignore[return-value]

    async def list(self, *, tenant: str = "", queue: str = "", phases: Sequence[str] = (),
                   after_seq: int = 0, limit: int = 100, newest_first: bool = False, history: bool = False,
                   cluster: str = "", hyperjob: str = "") -> list[Any]:
        """A page of jobs in submission order after `after_seq` (`newest_first`: before it, newest first); with
        `history`, the ended ones moved to the history too: each table gives its first page, merged by
        submission."""
        pages = []
        for query, columns in ((_with_position(), Job.__table__.c), (history_rows(), finished_jobs.c)):
            if columns is finished_jobs.c and (not history or (phases and not set(phases) & set(TERMINAL_PHASES))):
                continue  # only ended jobs are in the history
            if newest_first:
                query = query.order_by(columns.seq.desc()).limit(limit)
                if after_seq:
                    query = query.where(columns.seq < after_seq)
            else:
                query = query.where(columns.seq > after_seq).order_by(columns.seq).limit(limit)
            if tenant:
                query = query.where(columns.tenant == tenant)
            if queue:
                query = query.where(columns.queue == queue)
            if cluster:
                query = query.where(columns.cluster == cluster)
            if hyperjob:
                query = query.where(columns.hyperjob == hyperjob)
            if phases:
                query = query.where(columns.phase.in_(phases))
            pages.append(query)
        async with self.engine.connect() as conn:
            rows = [row for query in pages for row in (await conn.execute(query)).mappings().all()]
        rows.sort(key=lambda row: row["seq"], reverse=newest_first)
        return rows[:limit]

    async def phase_counts(self, *, tenant: str = "", queue: str = "", history: bool = False,
                           cluster: str = "") -> dict[str, int]:
        """How many jobs of the tenant (and queue) are in each phase (with `history`, the history's too)."""
        counts: Counter[str] = Counter()
        async with self.engine.connect() as conn:
            for columns in (Job.__table__.c, finished_jobs.c) if history else (Job.__table__.c,):
                query = select(columns.phase, func.count()).group_by(columns.phase)
                if tenant:
                    query = query.where(columns.tenant == tenant)
                if queue:
                    query = query.where(columns.queue == queue)
                if cluster:
                    query = query.where(columns.cluster == cluster)
                counts.update({str(phase): int(n) for phase, n in (await conn.execute(query)).all()})
        return dict(counts)

    async def seq_of(self, job_id: str, tenant: str = "") -> int | None:
        """A job's place in submission order (None: no such job, or not `tenant`'s), live or in the history."""
        async with self.engine.connect() as conn:
            for columns in (Job.__table__.c, finished_jobs.c):
                query = select(columns.seq).where(columns.id == job_id)
                if tenant:
                    query = query.where(columns.tenant == tenant)
                found = (await conn.execute(query)).scalar_one_or_none()
                if found is not None:
                    return found
        return None

    async def archive(self, ended_before: float, batch: int = ARCHIVE_BATCH) -> int:
        """Move jobs that ended more than `ended_before` seconds ago to the history, in one transaction: they leave
        the table the submit path and the scheduler read. How many moved (at most `batch`)."""
        columns = ", ".join(c.name for c in Job.__table__.columns)
        moved = text(f"""
            WITH ended AS (
                SELECT id FROM jobs WHERE phase IN :terminal AND finished_at < now() - make_interval(secs => :age)
                ORDER BY seq LIMIT :batch FOR UPDATE SKIP LOCKED),
            gone AS (DELETE FROM jobs WHERE id IN (SELECT id FROM ended) RETURNING {columns})
            INSERT INTO finished_jobs ({columns}) SELECT {columns} FROM gone""").bindparams(
            bindparam("terminal", expanding=True))
        async with self.engine.begin() as conn:
            result = await conn.execute(moved, {"terminal": list(TERMINAL_PHASES), "age": ended_before,
                                                "batch": batch})
        return result.rowcount

    async def expire(self, retention: float, batch: int = ARCHIVE_BATCH) -> int:
        """Delete finished jobs of the history, and their events, that ended more than `retention` seconds ago.
        How many went (at most `batch`)."""
        async with self.engine.begin() as conn:
            ids = (await conn.execute(
                select(finished_jobs.c.id)
                .where(finished_jobs.c.finished_at < func.now() - func.make_interval(0, 0, 0, 0, 0, 0, retention))
                .order_by(finished_jobs.c.finished_at).limit(batch).with_for_update(skip_locked=True))).scalars().all()
            if ids:
                await conn.execute(delete(JobEvent).where(JobEvent.job_id.in_(ids)))
                await conn.execute(delete(finished_jobs).where(finished_jobs.c.id.in_(ids)))
        return len(ids)

    async def by_ids(self, ids: Sequence[str]) -> dict[str, Any]:
        async with self.engine.connect() as conn:
            # One array parameter, not one per id: SQLAlchemy compiled thousands of them for a burst of orders.
            return {r["id"]: r for r in (await conn.execute(select(Job).where(Job.id == func.any(list(ids)))))
                    .mappings().all()}

    async def pending(self, limit: int) -> list[Any]:
        """Jobs waiting in their queues (Pending or Preempted), higher priority first, then by submission.

        Without their specs, which never change after submit: the scheduler keeps what it needs of
        each (`specs`) across cycles rather than decoding a hundred thousand of them every second.
        """
        query = (select(Job.id, Job.queue, Job.priority, Job.seq, Job.reason, Job.phase, Job.refusals, Job.requeue_at)
                 .where(Job.phase.in_(WAITING_PHASES)).order_by(Job.priority.desc(), Job.seq).limit(limit))
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def preemption_causes(self, ids: Sequence[str]) -> dict[str, str]:
        """Why each of these jobs was last preempted: its latest Preempted event's message."""
        if not ids:
            return {}
        query = (select(JobEvent.job_id, JobEvent.message).where(JobEvent.job_id == func.any(list(ids)),
                                                                  JobEvent.type == "Preempted")
                 .order_by(JobEvent.job_id, JobEvent.seq.desc()).ext(distinct_on(JobEvent.job_id)))
        async with self.engine.connect() as conn:
            return {r["job_id"]: r["message"] for r in (await conn.execute(query)).mappings().all()}

    async def specs(self, ids: Sequence[str]) -> dict[str, Any]:
        """Id, request and spec of each job."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(Job.id, Job.request, Job.spec).where(Job.id == func.any(list(ids))))
            return {r.id: r for r in rows.mappings()}

    async def mean_run_times(self, window: timedelta = timedelta(days=7)) -> dict[str, float]:
        """Per queue, the mean run time in seconds of its jobs that succeeded within `window` (live or in the
        history): what a job without an expected duration is assumed to take."""
        ended = union_all(*(select(c.queue, func.extract("epoch", c.finished_at - c.started_at).label("ran")).where(
            c.phase == "SUCCEEDED", c.started_at.is_not(None), c.finished_at > func.now() - window)
            for c in (Job.__table__.c, finished_jobs.c))).subquery()
        query = select(ended.c.queue, func.avg(ended.c.ran)).group_by(ended.c.queue)
        async with self.engine.connect() as conn:
            return {queue: float(seconds) for queue, seconds in (await conn.execute(query)).all()}

    async def holding(self, ids: Sequence[str] | None = None) -> list[Any]:
        """What the scheduler needs of the jobs that hold resources (Dispatched, Running, Restarting).

        `ids`: these jobs instead, whatever their phase now (the job cache knows their phase as of an event).
        """
        return await _read(self.engine, _HOLDING + (_BY_ID if ids is not None else _ACTIVE),
                           (EXPECTED_DURATION, MAX_RUN_TIME, CHECKPOINT_INTERVAL,
                            list(ids) if ids is not None else list(ACTIVE_PHASES)))

    async def arrived(self, ids: Sequence[str]) -> list[Any]:
        """Of these jobs, those waiting, as `pending` has them, with the request and spec `specs` gives: a job's
        arrival in the scheduler's cache is one read."""
        # The phase checked here: asked of PostgreSQL, it may look the jobs up by phase, all of them (`by_key`).
        return [r for r in await _read(self.engine, _ARRIVED, (list(ids),)) if r["phase"] in WAITING_PHASES]

    async def live_attempts(self, cluster: str, ids: Sequence[str]) -> dict[str, int]:
        """Of these jobs, those the federation runs in `cluster` now (Dispatched, Running or Restarting there),
        with their attempt: what an agent's reconciliation keeps."""
        if not ids:
            return {}
        query = select(Job.id, Job.attempt).where(Job.id == func.any(list(ids)), Job.cluster == cluster,
                                                 Job.phase.in_(ACTIVE_PHASES))
        async with self.engine.connect() as conn:
            return {r.id: r.attempt for r in (await conn.execute(query)).all()}

    async def active(self, cluster: str = "", phases: Sequence[str] = ACTIVE_PHASES) -> list[Any]:
        query = select(Job).where(Job.phase.in_(phases))
        if cluster:
            query = query.where(Job.cluster == cluster)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def moves_wanted(self) -> list[Any]:
        """Running gangs whose agents want them off degraded hardware they have no healthy room to replace."""
        query = select(Job.id, Job.cluster, Job.request, Job.spec, Job.move_wanted).where(
            Job.move_wanted != "", Job.phase == "RUNNING").order_by(Job.seq)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())
