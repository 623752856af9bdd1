"""Jobs and their event log in Postgres.

Every state change of a job appends to `job_events` in the same transaction. Event numbers come
from the single `event_counter` row, updated last in the transaction: its row lock makes writers
commit in sequence order, so a reader that has seen event N has seen every event below N, which
is what lets `WatchJobs` resume from a number without gaps or repeats. Each tenant's events are also
numbered on their own (`tenant_event_counters`, locked after the federation's counter), which is what a
tenant sees: nothing in what a tenant reads counts another tenant's work.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format
from sqlalchemy import Table, and_, bindparam, case, delete, func, literal, or_, select, text, union_all, update
from sqlalchemy.dialects.postgresql import distinct_on, insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.orm import aliased

from federation import failpoints
from federation.control.leader import Fence
from federation.errors import FailedPrecondition, NotFound
from federation.kernel import gangs
from federation.kernel.jobspec import (
    CHECKPOINT_INTERVAL,
    DEFAULT_MAX_RETRY,
    EXPECTED_DURATION,
    MAX_RUN_TIME,
    ON_CLUSTER_LOST,
)
from federation.store.models import (
    Cluster,
    EventCounter,
    Job,
    JobEvent,
    SubmitKey,
    TenantEventCounter,
    finished_jobs,
)
from federation.v1 import agent_pb2, common_pb2
from federation.validation import pods_problem

TERMINAL_PHASES = ("SUCCEEDED", "FAILED", "CANCELLED")
ACTIVE_PHASES = ("DISPATCHED", "RUNNING", "RESTARTING")
WAITING_PHASES = ("PENDING", "PREEMPTED")  # in a queue, waiting to be scheduled
ARCHIVE_BATCH = 10_000  # jobs moved to the history, or expired from it, per transaction
REASON_BATCH = 5_000  # waiting reasons written per transaction
OFF_LOOP_ROWS = 64  # rows from which an insert's JSON document is encoded on a worker thread
SENT_BACK_EVENTS = ("Rejected", "Evacuated", "NotReady")  # a cluster sent the job back: its message says why
LAST_EVENT_SEQ = select(EventCounter.last_seq).where(EventCounter.id == 1)
POD_FAILED_NAMED = 8  # pods a PodFailed event names (then "and N more"): an event is replayed to every watcher
# Events that are orders to an agent (federation.relay.orders relays them).
ORDER_EVENTS = ("Dispatched", "Preempted", "Cancelled", "Requeued", "Lost")

_jobs = Job.__table__
_events = JobEvent.__table__


@dataclass(frozen=True)
class NewJob:
    """A validated job, ready to store."""

    name: str
    tenant: str
    queue: str
    priority_class: str
    priority: int
    request: dict[str, int]
    spec: dict[str, Any]  # JobSpec as protobuf JSON
    request_id: str
    reason: str


@dataclass(frozen=True)
class SubmitResult:
    job_id: str
    duplicate: bool


@dataclass(frozen=True)
class Applied:
    """What applying an agent's update means for the agent (the scheduler reads the events it appended)."""

    stop: str = ""  # the agent runs what it must not (cancelled, preempted or moved meanwhile): why it must stop
    refused: str = ""  # why the update was not used (its pods are not the job's): nothing of it stored
    event: str = ""  # the job event it appended that changed the job's phase or pods ("Running", "Rejected")
    queue: str = ""
    waited: float | None = None  # seconds from submission to running, when it started the job


@dataclass(frozen=True)
class EventRecord:
    job_id: str
    tenant: str
    queue: str
    type: str
    phase: str
    message: str = ""
    attempt: int = 0
    cluster: str = ""


async def insert_rows(conn: AsyncConnection, table: Table, rows: Sequence[dict[str, Any]]) -> None:
    """Insert a batch in one statement, PostgreSQL expanding the rows from one JSON document: an executemany
    sends a statement per row, each with its parameters encoded one by one, which cost a submission more
    of the server's time than everything else it does."""
    defaults = _scalar_defaults(table)
    quote = conn.dialect.identifier_preparer.quote
    columns = ", ".join(quote(c) for c in {**defaults, **rows[0]})
    name = quote(table.name)
    statement = text(f"INSERT INTO {name} ({columns}) SELECT {columns} FROM "
                     f"jsonb_populate_recordset(NULL::{name}, CAST(:rows AS jsonb))")

    def encode() -> str:
        return json.dumps([{**defaults, **row} for row in rows])

    # A batch of 1,000 job specs is megabytes of JSON: encoded on a worker thread, not the serving loop.
    document = encode() if len(rows) < OFF_LOOP_ROWS else await asyncio.to_thread(encode)
    await conn.execute(statement, {"rows": document})


@functools.cache
def _scalar_defaults(table: Table) -> dict[str, Any]:
    """The model's own defaults (SQLAlchemy fills them in its inserts; PostgreSQL does not know them)."""
    return {c.name: c.default.arg for c in table.columns if c.default is not None and c.default.is_scalar}


async def append_events(conn: AsyncConnection, events: Sequence[EventRecord]) -> int:
    """Number and insert events; call last in the transaction (it takes the counters' row locks: the
    federation's first, then each tenant's in name order, the same order in every writer)."""
    if not events:
        return 0
    last = (await conn.execute(
        update(EventCounter).where(EventCounter.id == 1)
        .values(last_seq=EventCounter.last_seq + len(events)).returning(EventCounter.last_seq)
    )).scalar_one()
    first = last - len(events) + 1
    per_tenant = Counter(e.tenant for e in events)
    next_of: dict[str, int] = {}
    for tenant in sorted(per_tenant):
        upsert = insert(TenantEventCounter).values(tenant=tenant, last_seq=per_tenant[tenant])
        tenant_last = (await conn.execute(upsert.on_conflict_do_update(
            index_elements=[TenantEventCounter.tenant],
            set_={"last_seq": TenantEventCounter.last_seq + per_tenant[tenant]},
        ).returning(TenantEventCounter.last_seq))).scalar_one()
        next_of[tenant] = tenant_last - per_tenant[tenant] + 1
    rows = []
    for i, e in enumerate(events):
        rows.append({"seq": first + i, "tenant_seq": next_of[e.tenant], "job_id": e.job_id, "tenant": e.tenant,
                     "queue": e.queue, "type": e.type, "phase": e.phase, "message": e.message,
                     "attempt": e.attempt, "cluster": e.cluster})
        next_of[e.tenant] += 1
    await insert_rows(conn, _events, rows)
    for kind in sorted({e.type for e in events}):
        failpoints.reached(f"events:{kind}")  # holding both counters' row locks, before the commit
    return last


def _pod_statuses(u: agent_pb2.JobUpdate) -> list[dict[str, Any]]:
    return [json_format.MessageToDict(p, preserving_proto_field_name=True) for p in u.pod_statuses]


def _placements(u: agent_pb2.JobUpdate) -> list[dict[str, Any]]:
    return [{"task": p.task, "index": p.index, "node": p.node} for p in u.placements]


def _spec(stored: dict[str, Any]) -> common_pb2.JobSpec:
    return json_format.ParseDict(stored, common_pb2.JobSpec(), ignore_unknown_fields=True)


def _held(row: Any, u: agent_pb2.JobUpdate) -> dict[str, int]:
    """What a job's placed pods hold, from an agent's report of them (its minimum if it named none)."""
    return gangs.bound(_spec(row["spec"]), _placements(u)) if u.placements else row["request"]


def _minimum(stored: dict[str, Any]) -> dict[str, int]:
    """A job's `request` while it waits or is being placed: what its gang needs to start. Once bound, it
    is what its placed pods hold (`gangs.bound`), so usage counts what runs."""
    return gangs.minimum(_spec(stored))


def _unplaced(spec: dict[str, Any]) -> dict[str, Any]:
    """The columns of a job no cluster holds any more, back to needing its gang's minimum."""
    return {"cluster": "", "hypernode": "", "tier": 0, "placements": [], "pods": [], "request": _minimum(spec)}


def _lost(row: Any, why: str) -> dict[str, Any]:
    """A running job's new state once its cluster no longer runs it through no fault of its own: a retry
    counted, back to its queue while `max_retry` allows, else failed."""
    allowed = row["spec"].get("max_retry", DEFAULT_MAX_RETRY)
    values = _unplaced(row["spec"]) | {"updated_at": func.now()}
    if row["retries"] < allowed:
        return values | {"phase": "PENDING", "retries": row["retries"] + 1,
                         "reason": f"{why}; requeued (retry {row['retries'] + 1} of {allowed})"}
    return values | {"phase": "FAILED", "finished_at": func.now(), "reason": f"{why}; maxRetry {allowed} exhausted"}


@dataclass(frozen=True)
class Requeueing:
    """How a job whose pods were not all running within its ready timeout goes back to its queue (Kueue's
    waitForPodsReady.requeuingStrategy): after `base` seconds, doubling with each requeue up to `ceiling`; past
    `limit` requeues (None: no limit) it fails instead."""

    base: float = 60.0
    ceiling: float = 3600.0
    limit: int | None = None

    def backoff(self, requeues: int) -> float:
        """Seconds the job waits out after its `requeues`-th requeue (from 1)."""
        return min(self.base * 2 ** min(requeues - 1, 64), self.ceiling)


def _not_ready(row: Any, cluster: str, why: str, requeueing: Requeueing) -> dict[str, Any]:
    """A job its cluster gave back because its pods did not start in time: back to its queue after a backoff,
    counted, or failed once it was requeued `limit` times."""
    values = _unplaced(row["spec"]) | {"move_wanted": ""}
    said = f"not ready in cluster {cluster}: {why}"
    count = row["requeues"] + 1
    if requeueing.limit is not None and count > requeueing.limit:
        return values | {"phase": "FAILED", "finished_at": func.now(),
                         "reason": f"{said}; requeued {row['requeues']} time(s) already, the most allowed"}
    wait = requeueing.backoff(count)
    return values | {"phase": "PENDING", "requeues": count, "requeue_at": func.now() + timedelta(seconds=wait),
                     "reason": f"{said}; requeued (requeue {count}), back in its queue after {wait:g} s"}


def _silent_clusters(seconds: float) -> Any:
    """Names of the clusters not heard from for `seconds`."""
    return select(Cluster.name).where(or_(Cluster.last_heartbeat.is_(None),
                                          Cluster.last_heartbeat < func.now() - timedelta(seconds=seconds)))


def _finished() -> Any:
    """Jobs of the history, as `_with_position` gives live ones (an ended job has no place in a queue)."""
    return select(finished_jobs, literal(0).label("queue_position"))


def _with_position() -> Any:
    """Jobs with `queue_position`: a waiting job's place in its queue (priority, then submission), from 1.

    Counted when read, over the queue's index, rather than stored: every dispatch moves every job
    behind it, and rewriting a large backlog's positions each cycle would cost more than the cycle.
    """
    ahead = aliased(Job)
    position = select(func.count()).where(
        ahead.queue == Job.queue, ahead.phase.in_(WAITING_PHASES),
        or_(ahead.priority > Job.priority, and_(ahead.priority == Job.priority, ahead.seq <= Job.seq)),
    ).scalar_subquery()
    return select(Job, case((Job.phase.in_(WAITING_PHASES), position), else_=0).label("queue_position"))


ID_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generateName: no vowels, no look-alikes
ID_SUFFIX = 8
ID_ATTEMPTS = 5
_ID_SPACE = len(ID_ALPHABET) ** ID_SUFFIX


def job_ids(names: Sequence[str], taken: Collection[str] = ()) -> list[str]:
    """For each name, `name-` and a random suffix, as Kubernetes' generateName: the id says nothing about how many
    jobs the federation (or any other tenant) has. 27^8 suffixes per name make a clash rare; none is drawn twice
    in a batch nor from `taken`, and `submit` retries the batch when one clashes with a live job. The entropy is
    drawn at once: a thousand draws of their own cost a submission's loop milliseconds."""
    entropy = secrets.token_bytes(8 * len(names))
    given = set(taken)
    out = []
    for i, name in enumerate(names):
        draw = int.from_bytes(entropy[8 * i:8 * i + 8], "big") % _ID_SPACE  # 27^8 in 2^64: no bias worth a name
        while True:
            suffix = []
            for _ in range(ID_SUFFIX):
                draw, digit = divmod(draw, len(ID_ALPHABET))
                suffix.append(ID_ALPHABET[digit])
            candidate = f"{name}-{''.join(suffix)}"
            if candidate not in given:
                break
            draw = secrets.randbelow(_ID_SPACE)
        given.add(candidate)
        out.append(candidate)
    return out


class JobStore:
    def __init__(self, engine: AsyncEngine, requeueing: Requeueing | None = None) -> None:
        self.engine = engine
        self.requeueing = requeueing or Requeueing()

    async def submit(self, jobs: Sequence[NewJob]) -> list[SubmitResult]:
        """Store jobs atomically; a request_id already seen for the tenant yields its first job.

        Concurrent submits of one request_id serialise on the key's unique index: the loser's
        insert waits for the winner's commit, conflicts, and reads the winner's job id. A job id that
        happens to exist already (see `job_id`) undoes the batch, which is tried again with new ids.
        """
        for _ in range(ID_ATTEMPTS - 1):
            try:
                return await self._submit(jobs)
            except IntegrityError as err:
                if getattr(err.orig, "diag", None) is None or err.orig.diag.constraint_name != "jobs_pkey":
                    raise
        return await self._submit(jobs)

    async def _submit(self, jobs: Sequence[NewJob]) -> list[SubmitResult]:
        first_of: dict[tuple[str, str], int] = {}
        for i, job in enumerate(jobs):
            if job.request_id:
                first_of.setdefault((job.tenant, job.request_id), i)
        fresh = [i for i, job in enumerate(jobs) if not job.request_id or first_of[(job.tenant, job.request_id)] == i]
        async with self.engine.begin() as conn:
            seqs = (await conn.execute(
                text("SELECT nextval(pg_get_serial_sequence('jobs', 'seq')) FROM generate_series(1, :n)"),
                {"n": len(fresh)},
            )).scalars().all()
            seq_of = dict(zip(fresh, seqs, strict=True))
            id_of = dict(zip(fresh, job_ids([jobs[i].name for i in fresh]), strict=True))
            # An id the history holds is not given again (a live one undoes the batch on the primary key).
            while taken := set((await conn.execute(
                    select(finished_jobs.c.id).where(finished_jobs.c.id.in_(list(id_of.values()))))).scalars()):
                again = [i for i, candidate in id_of.items() if candidate in taken]
                kept = {c for c in id_of.values() if c not in taken}
                id_of.update(zip(again, job_ids([jobs[i].name for i in again], kept | taken), strict=True))

            # Keys in a fixed order, so that concurrent batches cannot deadlock on them.
            keys = sorted(first_of)
            seen_before: dict[tuple[str, str], str] = {}
            if keys:
                won = (await conn.execute(
                    insert(SubmitKey).values([
                        {"tenant": t, "request_id": r, "job_id": id_of[first_of[(t, r)]]} for t, r in keys
                    ]).on_conflict_do_nothing().returning(SubmitKey.tenant, SubmitKey.request_id)
                )).all()
                for t, r in set(keys) - {(t, r) for t, r in won}:
                    seen_before[(t, r)] = (await conn.execute(
                        select(SubmitKey.job_id).where(SubmitKey.tenant == t, SubmitKey.request_id == r)
                    )).scalar_one()

            results: list[SubmitResult] = []
            rows: list[dict[str, Any]] = []
            events: list[EventRecord] = []
            for i, job in enumerate(jobs):
                key = (job.tenant, job.request_id)
                if key in seen_before:
                    results.append(SubmitResult(seen_before[key], True))
                elif i not in id_of:  # repeats a request_id met earlier in this batch
                    results.append(SubmitResult(id_of[first_of[key]], True))
                else:
                    results.append(SubmitResult(id_of[i], False))
                    rows.append({
                        "id": id_of[i], "seq": seq_of[i], "name": job.name, "tenant": job.tenant,
                        "queue": job.queue, "priority_class": job.priority_class, "priority": job.priority,
                        "phase": "PENDING", "reason": job.reason, "request": job.request, "spec": job.spec,
                        "placements": [], "pods": [],
                    })
                    events.append(EventRecord(id_of[i], job.tenant, job.queue, "Submitted", "PENDING", job.reason))
            if rows:
                await insert_rows(conn, _jobs, rows)
            await append_events(conn, events)
        return results

    async def get(self, job_id: str) -> Job:
        """A job, live or finished and moved to the history (`archive`)."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(_with_position().where(Job.id == job_id))).mappings().first()
            if row is None:
                row = (await conn.execute(_finished().where(finished_jobs.c.id == job_id))).mappings().first()
        if row is None:
            raise NotFound(f"job {job_id!r} not found")
        return row  # type: ignore[return-value]

    async def list(self, *, tenant: str = "", queue: str = "", phases: Sequence[str] = (),
                   after_seq: int = 0, limit: int = 100, newest_first: bool = False, history: bool = False,
                   cluster: str = "") -> list[Any]:
        """A page of jobs in submission order after `after_seq` (`newest_first`: before it, newest first); with
        `history`, the ended ones moved to the history too: each table gives its first page, merged by
        submission."""
        pages = []
        for query, columns in ((_with_position(), Job.__table__.c), (_finished(), finished_jobs.c)):
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

    async def seq_of_tenant_event(self, tenant: str, tenant_seq: int) -> int:
        """The federation's number of the tenant's last event numbered `tenant_seq` or below (0: none)."""
        query = (select(JobEvent.seq).where(JobEvent.tenant == tenant, JobEvent.tenant_seq <= tenant_seq)
                 .order_by(JobEvent.tenant_seq.desc()).limit(1))
        async with self.engine.connect() as conn:
            return (await conn.execute(query)).scalar_one_or_none() or 0

    async def cancel(self, job_id: str, reason: str) -> Any:
        """Cancel a job that has not ended; cancelling a cancelled job again is harmless."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(select(Job).where(Job.id == job_id).with_for_update())).mappings().first()
            if row is None:  # ended long ago, in the history, or no such job
                row = (await conn.execute(_finished().where(finished_jobs.c.id == job_id))).mappings().first()
            if row is None:
                raise NotFound(f"job {job_id!r} not found")
            if row["phase"] == "CANCELLED":
                return row
            if row["phase"] in TERMINAL_PHASES:
                raise FailedPrecondition(f"job {job_id!r} already ended ({row['phase']})")
            reason = reason or "cancelled by user"
            await conn.execute(update(Job).where(Job.id == job_id).values(
                phase="CANCELLED", reason=reason,
                finished_at=func.now(), updated_at=func.now()))
            await append_events(conn, [EventRecord(job_id, row["tenant"], row["queue"], "Cancelled", "CANCELLED",
                                                   reason, row["attempt"], row["cluster"])])
            return (await conn.execute(select(Job).where(Job.id == job_id))).mappings().one()

    async def events_after(self, after_seq: int, upto: int | None = None, limit: int = 1000) -> list[Any]:
        query = select(JobEvent).where(JobEvent.seq > after_seq).order_by(JobEvent.seq).limit(limit)
        if upto is not None:
            query = query.where(JobEvent.seq <= upto)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def phases_after(self, after_seq: int, upto: int, limit: int) -> list[Any]:
        """Sequence number, job, type, phase and cluster of the events after `after_seq` up to `upto`, in order;
        the message too of those that send a job back from a cluster (Rejected, Evacuated): the scheduler keeps the
        job away from that cluster for a while, whichever replica heard the agent."""
        message = case((JobEvent.type.in_(SENT_BACK_EVENTS), JobEvent.message), else_="").label("message")
        query = (select(JobEvent.seq, JobEvent.job_id, JobEvent.type, JobEvent.phase, JobEvent.cluster, message)
                 .where(JobEvent.seq > after_seq, JobEvent.seq <= upto).order_by(JobEvent.seq).limit(limit))
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def order_events(self, after_seq: int, upto: int, clusters: Sequence[str]) -> list[Any]:
        """Events that are orders to the agents of `clusters` (see `federation.relay.orders`), in order."""
        query = (select(JobEvent).where(JobEvent.seq > after_seq, JobEvent.seq <= upto,
                                        JobEvent.type.in_(ORDER_EVENTS),
                                        JobEvent.cluster.in_(clusters)).order_by(JobEvent.seq))
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def by_ids(self, ids: Sequence[str]) -> dict[str, Any]:
        async with self.engine.connect() as conn:
            return {r["id"]: r for r in (await conn.execute(select(Job).where(Job.id.in_(ids)))).mappings().all()}

    async def last_event_seq(self) -> int:
        async with self.engine.connect() as conn:
            return (await conn.execute(LAST_EVENT_SEQ)).scalar_one()


    async def pending(self, limit: int, ids: Sequence[str] | None = None) -> list[Any]:
        """Jobs waiting in their queues (Pending or Preempted), higher priority first, then by submission.

        Without their specs, which never change after submit: the scheduler keeps what it needs of
        each (`specs`) across cycles rather than decoding a hundred thousand of them every second.
        `ids`: only those of these jobs that are waiting.
        """
        query = (select(Job.id, Job.queue, Job.priority, Job.seq, Job.reason, Job.phase, Job.refusals, Job.requeue_at)
                 .where(Job.phase.in_(WAITING_PHASES)).order_by(Job.priority.desc(), Job.seq).limit(limit))
        if ids is not None:
            query = query.where(Job.id == func.any(list(ids)))
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
        annotations = Job.spec["annotations"]
        query = select(Job.id, Job.queue, Job.cluster, Job.priority, Job.priority_class, Job.seq, Job.request,
                       Job.phase, Job.hypernode, Job.preemptions,
                       func.coalesce(Job.started_at, Job.dispatched_at).label("since"),
                       # an expected run time, else the longest it may run (its agent stops it then)
                       func.coalesce(annotations[EXPECTED_DURATION].astext,
                                     annotations[MAX_RUN_TIME].astext).label("expected"),
                       annotations[CHECKPOINT_INTERVAL].astext.label("checkpoint"))
        query = query.where(Job.phase.in_(ACTIVE_PHASES) if ids is None else Job.id == func.any(list(ids)))
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def live_attempts(self, cluster: str, ids: Sequence[str]) -> dict[str, int]:
        """Of these jobs, those the federation runs in `cluster` now (Dispatched, Running or Restarting there),
        with their attempt: what an agent's reconciliation keeps."""
        if not ids:
            return {}
        query = select(Job.id, Job.attempt).where(Job.id == func.any(list(ids)), Job.cluster == cluster,
                                                 Job.phase.in_(ACTIVE_PHASES))
        async with self.engine.connect() as conn:
            return {r.id: r.attempt for r in (await conn.execute(query)).all()}

    async def cluster_back(self, cluster: str) -> None:
        """A cluster's agent is back: its jobs that waited for it (on-cluster-lost: wait) say they run again."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(Job).where(Job.cluster == cluster, Job.phase == "RUNNING",
                                  Job.reason.like(f"lost with cluster {cluster},%"))
                .values(reason=func.concat(f"running in cluster {cluster} under ", Job.hypernode, " (tier ",
                                           Job.tier, ")")))

    async def active(self, cluster: str = "", phases: Sequence[str] = ACTIVE_PHASES) -> list[Any]:
        query = select(Job).where(Job.phase.in_(phases))
        if cluster:
            query = query.where(Job.cluster == cluster)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def dispatch(self, decisions: dict[str, str], fence: Fence | None = None,
                       notes: Mapping[str, str] | None = None) -> list[Any]:
        """Move still-waiting jobs to their chosen cluster with a new attempt; returns the moved rows. `notes`:
        what to say of a job's choice besides (its reason and its Dispatched event carry it).

        One statement for the whole batch: a first cycle may dispatch tens of thousands of jobs.
        """
        if not decisions:
            return []
        ids = sorted(decisions)
        async with self.engine.begin() as conn:
            if fence is not None:  # only under the lease: a stale leader's decisions are not written
                await fence.check(conn)
            moved = (await conn.execute(text(
                "UPDATE jobs SET phase = 'DISPATCHED', cluster = v.cluster, attempt = jobs.attempt + 1, "
                "reason = 'dispatched to cluster ' || v.cluster || v.note || '; its agent is placing the gang', "
                "dispatched_at = now(), updated_at = now() "
                "FROM unnest(CAST(:ids AS text[]), CAST(:clusters AS text[]), CAST(:notes AS text[])) "
                "AS v(id, cluster, note) "
                "WHERE jobs.id = v.id AND jobs.phase IN ('PENDING', 'PREEMPTED') "
                "RETURNING jobs.id, jobs.tenant, jobs.queue, jobs.attempt, jobs.cluster, jobs.reason"),
                {"ids": ids, "clusters": [decisions[i] for i in ids],
                 "notes": [f" ({notes[i]})" if notes and i in notes else "" for i in ids]})).mappings().all()
            await append_events(conn, [EventRecord(r["id"], r["tenant"], r["queue"], "Dispatched", "DISPATCHED",
                                                   r["reason"], r["attempt"], r["cluster"]) for r in moved])
        return list(moved)

    async def preempt(self, reasons: dict[str, str], fence: Fence | None = None,
                      making_room: Mapping[str, str] | None = None) -> list[Any]:
        """Return running gangs to their queues (phase Preempted, keeping their submission order). `making_room`:
        the waiting jobs they make room for, and where; each gets a MakingRoom event (in the same transaction), so
        any replica that leads next knows the room is being made and does not evict for it again.

        Returns the rows as they were, so the caller can tell each one's agent which attempt to stop.
        """
        if not reasons:
            return []
        ids = sorted(reasons)
        async with self.engine.begin() as conn:
            if fence is not None:  # only under the lease: a stale leader's decisions are not written
                await fence.check(conn)
            rows = (await conn.execute(
                select(Job.id, Job.tenant, Job.queue, Job.attempt, Job.cluster, Job.spec)
                .where(Job.id.in_(ids), Job.phase.in_(ACTIVE_PHASES)).order_by(Job.id)
                .with_for_update())).mappings().all()
            await conn.execute(text(
                "UPDATE jobs SET phase = 'PREEMPTED', cluster = '', hypernode = '', tier = 0, "
                "placements = '[]'::jsonb, pods = '[]'::jsonb, reason = v.reason, request = v.request, "
                "updated_at = now(), move_wanted = '', "
                "preemptions = preemptions + 1 "
                "FROM unnest(CAST(:ids AS text[]), CAST(:reasons AS text[]), CAST(:requests AS jsonb[])) "
                "AS v(id, reason, request) WHERE jobs.id = v.id"),
                {"ids": [r["id"] for r in rows], "reasons": [reasons[r["id"]] for r in rows],
                 "requests": [json.dumps(_minimum(r["spec"])) for r in rows]})
            await append_events(conn, [EventRecord(r["id"], r["tenant"], r["queue"], "Preempted", "PREEMPTED",
                                                   reasons[r["id"]], r["attempt"], r["cluster"]) for r in rows])
            if making_room:
                owed = (await conn.execute(select(Job.id, Job.tenant, Job.queue, Job.phase, Job.attempt).where(
                    Job.id.in_(sorted(making_room)), Job.phase.in_(WAITING_PHASES)))).mappings().all()
                await append_events(conn, [EventRecord(
                    o["id"], o["tenant"], o["queue"], "MakingRoom", o["phase"],
                    f"gangs are leaving cluster {making_room[o['id']]} to make room for it", o["attempt"],
                    making_room[o["id"]]) for o in owed])
        return list(rows)

    async def moves_wanted(self) -> list[Any]:
        """Running gangs whose agents want them off degraded hardware they have no healthy room to replace."""
        query = select(Job.id, Job.cluster, Job.request, Job.spec, Job.move_wanted).where(
            Job.move_wanted != "", Job.phase == "RUNNING").order_by(Job.seq)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def set_waiting(self, reasons: dict[str, str], fence: Fence | None = None) -> None:
        """Why each of these jobs waits, for those still waiting: a statement per REASON_BATCH of them, each in a
        transaction of its own, so no writer holds these rows (or the lease, when fenced) for a whole rewrite."""
        ids = sorted(reasons)
        for start in range(0, len(ids), REASON_BATCH):
            batch = ids[start:start + REASON_BATCH]
            async with self.engine.begin() as conn:
                if fence is not None:  # only under the lease: a stale leader's decisions are not written
                    await fence.check(conn)
                await conn.execute(text(
                    "UPDATE jobs SET reason = v.reason, updated_at = now() "
                    "FROM unnest(CAST(:ids AS text[]), CAST(:reasons AS text[])) AS v(id, reason) "
                    "WHERE jobs.id = v.id AND jobs.phase IN ('PENDING', 'PREEMPTED')"),
                    {"ids": batch, "reasons": [reasons[i] for i in batch]})

    async def requeue_from_silent(self, heartbeat_timeout: float, grace: float,
                                  fence: Fence | None = None) -> list[Any]:
        """Take work back from clusters whose agents have gone silent; returns the jobs moved.

        Silent past `heartbeat_timeout`: the cluster is NotReady and its Dispatched jobs, never bound
        there, go back to their queues at once. Silent past the timeout plus `grace` as well: its
        Running jobs are lost; each loss counts as a retry, and while `max_retry` allows the job goes
        back to its queue for another cluster, else it fails. The attempt number is kept and the next
        dispatch raises it, so whatever the silent agent still runs of a job is fenced off as stale.
        """
        silent = _silent_clusters(heartbeat_timeout)
        gone = _silent_clusters(heartbeat_timeout + grace)
        async with self.engine.begin() as conn:
            if fence is not None:  # only under the lease: a stale leader's decisions are not written
                await fence.check(conn)
            await conn.execute(update(Cluster).where(Cluster.name.in_(silent), Cluster.status == "READY")
                               .values(status="NOT_READY"))
            rows = (await conn.execute(
                select(Job.id, Job.tenant, Job.queue, Job.attempt, Job.cluster, Job.phase, Job.retries, Job.spec,
                       Job.reason)
                .where(or_(and_(Job.phase == "DISPATCHED", Job.cluster.in_(silent)),
                           and_(Job.phase.in_(("RUNNING", "RESTARTING")), Job.cluster.in_(gone))))
                .order_by(Job.id).with_for_update())).mappings().all()
            events, moved = [], []
            for r in rows:
                if r["phase"] == "DISPATCHED":
                    values: dict[str, Any] = _unplaced(r["spec"]) | {
                        "updated_at": func.now(), "phase": "PENDING",
                        "reason": f"requeued: cluster {r['cluster']} went silent before placing it"}
                    kind = "Requeued"
                else:
                    lost = f"lost with cluster {r['cluster']}, silent for over {heartbeat_timeout + grace:g} s"
                    if (r["spec"].get("annotations") or {}).get(ON_CLUSTER_LOST) == "wait":
                        waiting = f"{lost}; waiting for it ({ON_CLUSTER_LOST}: wait)"
                        if r["reason"] != waiting:  # said once, without an event: nothing changed hands
                            await conn.execute(update(Job).where(Job.id == r["id"]).values(reason=waiting))
                        continue
                    values, kind = _lost(r, lost), "Lost"
                await conn.execute(update(Job).where(Job.id == r["id"]).values(**values))
                events.append(EventRecord(r["id"], r["tenant"], r["queue"], kind, values["phase"], values["reason"],
                                          r["attempt"], r["cluster"]))
                moved.append(r)
            await append_events(conn, events)
        return moved

    async def apply_update(self, cluster: str, u: agent_pb2.JobUpdate) -> Applied:
        """Apply an agent's JobUpdate, fenced by cluster and attempt; a repeat or a stale one changes nothing."""
        return (await self.apply_updates(cluster, [u]))[0]

    async def apply_updates(self, cluster: str, updates: Sequence[agent_pb2.JobUpdate],
                            cluster_values: Mapping[str, Any] | None = None) -> list[Applied]:
        """Apply updates an agent sent one after the other, in order, in one transaction: what a stream brings
        while the last batch was written costs one commit, not one each (a burst of bindings reports thousands).
        `cluster_values`: written to the cluster's row in the same transaction, first (its latest inventory)."""
        async with self.engine.begin() as conn:
            if cluster_values:
                await conn.execute(update(Cluster).where(Cluster.name == cluster).values(**cluster_values))
            return [await self._apply(conn, cluster, u) for u in updates]

    async def _apply(self, conn: AsyncConnection, cluster: str, u: agent_pb2.JobUpdate) -> Applied:
        row = (await conn.execute(select(Job).where(Job.id == u.job_id).with_for_update())).mappings().first()
        if u.type == agent_pb2.ORPHANS_DELETED:  # about an attempt no longer live there: said on the job
            if row is not None:
                await append_events(conn, [EventRecord(
                    row["id"], row["tenant"], row["queue"], "OrphansDeleted", row["phase"],
                    f"cluster {cluster} deleted {u.pods} pod(s) of attempt {u.attempt}, which no longer runs "
                    f"there: {u.reason}", u.attempt, cluster)])
            return Applied()
        if row is not None and (problem := pods_problem(row["spec"], u)):
            return Applied(refused=problem)
        if u.type == agent_pb2.POD_STATUS:  # what users see of their pods: no event, the job's row only
            if row is not None and row["cluster"] == cluster and row["attempt"] == u.attempt:
                await conn.execute(update(Job).where(Job.id == row["id"]).values(pods=_pod_statuses(u)))
            return Applied()
        alive = u.type in (agent_pb2.BOUND, agent_pb2.POD_FAILED, agent_pb2.POD_RESTARTED, agent_pb2.PODS_ADDED,
                           agent_pb2.DRAIN_PLANNED, agent_pb2.DRAINED, agent_pb2.PREPARING, agent_pb2.MOVE_WANTED)
        if row is None or row["cluster"] != cluster or row["attempt"] != u.attempt:
            # Stale: another attempt, or another cluster, owns the job now (it was preempted or
            # moved while this agent was away); whatever the agent still runs of it must stop.
            return Applied(stop="the job was preempted or moved to another cluster" if alive else "")
        phase, kind = row["phase"], u.type
        if phase in TERMINAL_PHASES:
            return Applied(stop="the job was cancelled" if alive and phase == "CANCELLED" else "")
        values: dict[str, Any] = {}
        event = message = ""
        if kind == agent_pb2.REJECTED and phase == "DISPATCHED":
            values = {"phase": "PENDING", "cluster": "", "reason": f"cluster {cluster} rejected it: {u.reason}",
                      "request": _minimum(row["spec"])}
            if u.permanent:  # never offered to that cluster again (the scheduler reads `refusals`)
                values |= {"refusals": {**row["refusals"], cluster: u.reason},
                           "reason": f"cluster {cluster} refused it for good: {u.reason}"}
            event = "Rejected"
        elif kind == agent_pb2.FENCED and phase in ACTIVE_PHASES:
            values = _lost(row, f"stopped by the agent of cluster {cluster}: {u.reason}")
            event = "Lost"
        elif kind == agent_pb2.BOUND and phase == "DISPATCHED":
            running = f"running in cluster {cluster} under {u.hypernode} (tier {u.tier})"
            values = {"phase": "RUNNING", "hypernode": u.hypernode, "tier": u.tier, "started_at": func.now(),
                      "placements": _placements(u), "request": _held(row, u),
                      "reason": f"{running}; {u.reason}" if u.reason else running}
            event = "Running"
        elif kind == agent_pb2.PREPARING and phase == "DISPATCHED":
            values = {"phase": phase, "reason": f"cluster {cluster} is preparing for it: {u.reason}"}
            event = "Preparing"
        elif kind == agent_pb2.JOB_SUCCEEDED:
            values = {"phase": "SUCCEEDED", "finished_at": func.now(), "reason": u.reason or "succeeded"}
            event = "Succeeded"
        elif kind == agent_pb2.JOB_FAILED:
            values = {"phase": "FAILED", "finished_at": func.now(), "reason": u.reason or "failed"}
            event = "Failed"
        elif kind == agent_pb2.POD_RESTARTED and phase == "RUNNING" and u.retries > row["retries"]:
            # The agent counts restarts over the job's life: a resent (older) report changes nothing.
            values = {"phase": "RUNNING", "hypernode": u.hypernode, "tier": u.tier, "retries": u.retries,
                      "placements": _placements(u), "request": _held(row, u),
                      "reason": f"running in cluster {cluster} under {u.hypernode} (tier {u.tier}); "
                                f"restarted {u.retries} time(s), last: {u.reason}"}
            event, message = "PodRestarted", u.reason
        elif kind == agent_pb2.PODS_ADDED and phase == "RUNNING" and len(u.placements) > len(row["placements"]):
            values = {"phase": "RUNNING", "hypernode": u.hypernode, "tier": u.tier,
                      "placements": _placements(u), "request": _held(row, u),
                      "reason": f"running in cluster {cluster} under {u.hypernode} (tier {u.tier}); "
                                f"{len(u.placements)} pods"}
            event, message = "PodsAdded", u.reason
        elif kind == agent_pb2.DRAINED and phase == "RUNNING":
            # Moved off degraded or drained hardware inside the cluster: not the job's fault, no retry counted.
            values = {"phase": "RUNNING", "hypernode": u.hypernode, "tier": u.tier,
                      "placements": _placements(u), "request": _held(row, u),
                      "reason": f"running in cluster {cluster} under {u.hypernode} (tier {u.tier}); {u.reason}"}
            event, message = "Drained", u.reason
        elif kind == agent_pb2.EVACUATED and phase in ACTIVE_PHASES:
            values = _unplaced(row["spec"]) | {"move_wanted": "", "phase": "PENDING",
                                               "reason": f"evacuated from cluster {cluster}: {u.reason}"}
            event = "Evacuated"
        elif kind == agent_pb2.RUN_TIME_EXCEEDED and phase in ACTIVE_PHASES:
            values = _lost(row, f"{u.reason} in cluster {cluster}")
            event = "RunTimeExceeded"
        elif kind == agent_pb2.PODS_NOT_READY and phase in ACTIVE_PHASES:
            values = _not_ready(row, cluster, u.reason, self.requeueing)
            event = "NotReady"
        elif kind == agent_pb2.MOVE_WANTED and phase == "RUNNING":
            if u.reason == row["move_wanted"]:
                return Applied()  # said before
            await conn.execute(update(Job).where(Job.id == row["id"]).values(move_wanted=u.reason))
            said = (u.reason + "; it keeps running here until a cluster has healthy room for it") if u.reason else \
                "its hardware recovered: it stays"
            await append_events(conn, [EventRecord(row["id"], row["tenant"], row["queue"],
                                                   "MoveWanted" if u.reason else "MoveCalledOff", phase, said,
                                                   row["attempt"], cluster)])
            return Applied()
        elif kind == agent_pb2.DRAIN_PLANNED and phase == "RUNNING":
            await append_events(conn, [EventRecord(row["id"], row["tenant"], row["queue"], "DrainPlanned", phase,
                                                   u.reason, row["attempt"], cluster)])
            return Applied()
        elif kind == agent_pb2.POD_FAILED:
            named = [f"{p.task}[{p.index}] on {p.node}" for p in u.placements[:POD_FAILED_NAMED]]
            more = len(u.placements) - len(named)
            pods = ", ".join(named) + (f" and {more} more" if more else "")
            await append_events(conn, [EventRecord(row["id"], row["tenant"], row["queue"], "PodFailed", phase,
                                                   f"{pods}: {u.reason}", row["attempt"], cluster)])
            return Applied()
        if not values:
            return Applied()  # a repeat of something already applied
        # `values` may name updated_at itself (a loss's, from _lost): one keyword, not two.
        await conn.execute(update(Job).where(Job.id == row["id"]).values({"updated_at": func.now(), **values}))
        await append_events(conn, [EventRecord(row["id"], row["tenant"], row["queue"], event, values["phase"],
                                               message or values["reason"], row["attempt"], cluster)])
        waited = (datetime.now(UTC) - row["created_at"]).total_seconds() if event == "Running" else None
        return Applied(event=event, queue=row["queue"], waited=waited)
