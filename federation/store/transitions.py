"""Every change of a job's phase after submission, each in one transaction with its event: cancel, dispatch,
preemption, waiting reasons, work taken back from silent clusters, and the agents' updates."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf import json_format
from sqlalchemy import and_, bindparam, func, literal, or_, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql import functions
from sqlalchemy.sql.elements import ClauseElement

from federation.control.leader import Fence
from federation.errors import FailedPrecondition, NotFound
from federation.kernel import gangs
from federation.kernel.admission import PROVISIONING, waiting_for
from federation.kernel.hyperjob import held_said, hold_state
from federation.kernel.jobspec import (
    DEFAULT_MAX_RETRY,
    ON_CLUSTER_LOST,
)
from federation.store.database import by_key
from federation.store.events import EventRecord, append_events
from federation.store.models import (
    Cluster,
    Job,
    finished_jobs,
)
from federation.store.phases import ACTIVE_PHASES, TERMINAL_PHASES, WAITING_PHASES
from federation.v1 import agent_pb2, common_pb2
from federation.validation import pods_problem

REASON_BATCH = 5_000  # waiting reasons written per transaction

# A cycle's dispatches and reasons: each a batch of ids joined to the jobs still waiting, by key (`by_key`: the
# phase asked `IS TRUE`, which no index answers). The phase is a condition on the row updated, checked again on the row
# a concurrent write left (a job cancelled meanwhile is not dispatched).
DISPATCH = text(
    "UPDATE jobs SET phase = 'DISPATCHED', cluster = v.cluster, attempt = jobs.attempt + 1, "
    "reason = 'dispatched to cluster ' || v.cluster || v.note || v.next, "
    "dispatched_at = now(), updated_at = now(), admission_checks = CAST(v.checks AS jsonb) "
    "FROM unnest(CAST(:ids AS text[]), CAST(:clusters AS text[]), CAST(:notes AS text[]), "
    "CAST(:checks AS text[]), CAST(:nexts AS text[])) AS v(id, cluster, note, checks, next) "
    "WHERE jobs.id = v.id AND (jobs.phase IN ('PENDING', 'PREEMPTED')) IS TRUE "
    "RETURNING jobs.id, jobs.tenant, jobs.queue, jobs.attempt, jobs.cluster, jobs.reason")
REASONS = text("UPDATE jobs SET reason = v.reason, updated_at = now() "
               "FROM unnest(CAST(:ids AS text[]), CAST(:reasons AS text[])) AS v(id, reason) "
               "WHERE jobs.id = v.id AND (jobs.phase IN ('PENDING', 'PREEMPTED')) IS TRUE")


async def _preempting(conn: AsyncConnection, reasons: Mapping[str, str],
                      making_room: Mapping[str, str]) -> tuple[list[Any], list[EventRecord]]:
    """The preemptions of `Transitions.orders`, in its transaction: the rows as they were, and their events."""
    # (the phase checked here, not by PostgreSQL: see `by_key`)
    rows = [r for r in (await conn.execute(
        select(Job.id, Job.tenant, Job.queue, Job.attempt, Job.cluster, Job.spec, Job.phase)
        .where(Job.id == func.any(sorted(reasons))).order_by(Job.id).with_for_update())).mappings().all()
        if r["phase"] in ACTIVE_PHASES]
    await conn.execute(text(
        "UPDATE jobs SET phase = 'PREEMPTED', cluster = '', hypernode = '', tier = 0, "
        "placements = '[]'::jsonb, pods = '[]'::jsonb, reason = v.reason, request = v.request, "
        "updated_at = now(), move_wanted = '', "
        "preemptions = preemptions + 1 "
        "FROM unnest(CAST(:ids AS text[]), CAST(:reasons AS text[]), CAST(:requests AS jsonb[])) "
        "AS v(id, reason, request) WHERE jobs.id = v.id"),
        {"ids": [r["id"] for r in rows], "reasons": [reasons[r["id"]] for r in rows],
         "requests": [json.dumps(minimum_of(r["spec"])) for r in rows]})
    events = [EventRecord(r["id"], r["tenant"], r["queue"], "Preempted", "PREEMPTED", reasons[r["id"]],
                          r["attempt"], r["cluster"]) for r in rows]
    if making_room:
        owed = [o for o in (await conn.execute(select(Job.id, Job.tenant, Job.queue, Job.phase, Job.attempt)
                                               .where(Job.id == func.any(sorted(making_room))))).mappings()
                if o["phase"] in WAITING_PHASES]
        events += [EventRecord(o["id"], o["tenant"], o["queue"], "MakingRoom", o["phase"],
                               f"gangs are leaving cluster {making_room[o['id']]} to make room for it",
                               o["attempt"], making_room[o["id"]]) for o in owed]
    return rows, events


POD_FAILED_NAMED = 8  # pods a PodFailed event names (then "and N more"): an event is replayed to every watcher


@dataclass(frozen=True)
class Applied:
    """What applying an agent's update means for the agent (the scheduler reads the events it appended)."""

    stop: str = ""  # the agent runs what it must not (cancelled, preempted or moved meanwhile): why it must stop
    refused: str = ""  # why the update was not used (its pods are not the job's): nothing of it stored
    event: str = ""  # the job event it appended that changed the job's phase or pods ("Running", "Rejected")
    queue: str = ""
    waited: float | None = None  # seconds from submission to running, when it started the job


class _Batch:
    """A batch of agent updates being applied: its jobs' rows as the updates so far left them, what is to be
    written to each, and the events to append."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows
        self.changed: dict[str, dict[str, Any]] = {}
        self.events: list[EventRecord] = []

    def set(self, job_id: str, values: Mapping[str, Any]) -> None:
        self.rows[job_id].update(values)  # the next update of this job in the batch reads what this one left
        self.changed.setdefault(job_id, {}).update(values)

    async def write(self, conn: AsyncConnection) -> None:
        """One UPDATE per changed job, the updates setting the same columns (to values, or to now()) run as one
        executemany; any other SQL expression (a requeue's time) in an UPDATE of its own. Then the events."""
        alike: dict[tuple[tuple[str, ...], tuple[str, ...]], list[dict[str, Any]]] = {}
        for job_id, values in self.changed.items():
            if any(isinstance(v, ClauseElement) and not isinstance(v, functions.now) for v in values.values()):
                await conn.execute(update(Job).where(Job.id == job_id).values(values))
                continue
            now = tuple(sorted(k for k, v in values.items() if isinstance(v, ClauseElement)))
            plain = {f"v_{k}": v for k, v in values.items() if k not in now}
            alike.setdefault((tuple(sorted(plain)), now), []).append({"v_id": job_id, **plain})
        for (plain, now), params in alike.items():
            columns = {name[2:]: bindparam(name, type_=Job.__table__.c[name[2:]].type) for name in plain}
            statement = update(Job).where(Job.id == bindparam("v_id")).values(
                {**columns, **{k: func.now() for k in now}})
            await conn.execute(statement, params)
        await append_events(conn, self.events)


def _pod_statuses(u: agent_pb2.JobUpdate) -> list[dict[str, Any]]:
    return [json_format.MessageToDict(p, preserving_proto_field_name=True) for p in u.pod_statuses]


def _placements(u: agent_pb2.JobUpdate) -> list[dict[str, Any]]:
    return [{"task": p.task, "index": p.index, "node": p.node} for p in u.placements]


def spec_of(stored: dict[str, Any]) -> common_pb2.JobSpec:
    return json_format.ParseDict(stored, common_pb2.JobSpec(), ignore_unknown_fields=True)


def _held(row: Any, u: agent_pb2.JobUpdate) -> dict[str, int]:
    """What a job's placed pods hold, from an agent's report of them (its minimum if it named none)."""
    return gangs.bound(spec_of(row["spec"]), _placements(u)) if u.placements else row["request"]


def minimum_of(stored: dict[str, Any]) -> dict[str, int]:
    """A job's `request` while it waits or is being placed: what its gang needs to start. Once bound, it
    is what its placed pods hold (`gangs.bound`), so usage counts what runs."""
    return gangs.minimum(spec_of(stored))


def unplaced(spec: dict[str, Any]) -> dict[str, Any]:
    """The columns of a job no cluster holds any more, back to needing its gang's minimum."""
    return {"cluster": "", "hypernode": "", "tier": 0, "placements": [], "pods": [], "request": minimum_of(spec)}


def _lost(row: Any, why: str) -> dict[str, Any]:
    """A running job's new state once its cluster no longer runs it through no fault of its own: a retry
    counted, back to its queue while `max_retry` allows, else failed."""
    allowed = row["spec"].get("max_retry", DEFAULT_MAX_RETRY)
    values = unplaced(row["spec"]) | {"updated_at": func.now()}
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
    values = unplaced(row["spec"]) | {"move_wanted": ""}
    said = f"not ready in cluster {cluster}: {why}"
    count = row["requeues"] + 1
    if requeueing.limit is not None and count > requeueing.limit:
        return values | {"phase": "FAILED", "finished_at": func.now(),
                         "reason": f"{said}; requeued {row['requeues']} time(s) already, the most allowed"}
    wait = requeueing.backoff(count)
    return values | {"phase": "PENDING", "requeues": count, "requeue_at": func.now() + timedelta(seconds=wait),
                     "reason": f"{said}; requeued (requeue {count}), back in its queue after {wait:g} s"}


def _then(checks: Sequence[Mapping[str, Any]]) -> str:
    """What a job dispatched with these admission checks does next, for its reason."""
    waiting = waiting_for(checks)
    if waiting:
        return f"; waiting for admission check(s) {', '.join(waiting)} before its cluster is told to run it"
    return "; its agent is placing the gang"


def _provisioning_said(checks: Sequence[Mapping[str, Any]], kind: int, reason: str) -> list[dict[str, Any]]:
    """The job's admission checks after what its agent said of the nodes it asked for: still asking (PREPARING),
    placed on them (BOUND: passed), or given up (REJECTED: to retry elsewhere)."""
    state = {agent_pb2.BOUND: "READY", agent_pb2.REJECTED: "RETRY"}.get(kind)
    return [{**c, "state": state or c["state"], "message": reason or c["message"]}
            if c["name"] == PROVISIONING and c["state"] == "PENDING" else dict(c) for c in checks]


def history_rows() -> Any:
    """Jobs of the history, as `_with_position` gives live ones (an ended job has no place in a queue)."""
    return select(finished_jobs, literal(0).label("queue_position"))


def _silent_clusters(seconds: float) -> Any:
    """Names of the clusters not heard from for `seconds`."""
    return select(Cluster.name).where(or_(Cluster.last_heartbeat.is_(None),
                                          Cluster.last_heartbeat < func.now() - timedelta(seconds=seconds)))


class Transitions:
    """Phase changes (a part of `JobStore`)."""

    engine: AsyncEngine
    requeueing: Requeueing

    async def cancel(self, job_id: str, reason: str) -> Any:
        """Cancel a job that has not ended; cancelling a cancelled job again is harmless."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(select(Job).where(Job.id == job_id).with_for_update())).mappings().first()
            if row is None:  # ended long ago, in the history, or no such job
                row = (await conn.execute(history_rows().where(finished_jobs.c.id == job_id))).mappings().first()
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

    async def cluster_back(self, cluster: str) -> None:
        """A cluster's agent is back: its jobs that waited for it (on-cluster-lost: wait) say they run again."""
        async with self.engine.begin() as conn:
            await conn.execute(
                update(Job).where(Job.cluster == cluster, Job.phase == "RUNNING",
                                  Job.reason.like(f"lost with cluster {cluster},%"))
                .values(reason=func.concat(f"running in cluster {cluster} under ", Job.hypernode, " (tier ",
                                           Job.tier, ")")))

    async def dispatch(self, decisions: dict[str, str], fence: Fence | None = None,
                       notes: Mapping[str, str] | None = None,
                       checks: Mapping[str, list[dict[str, str]]] | None = None) -> list[Any]:
        """Move still-waiting jobs to their chosen cluster with a new attempt; returns the moved rows (`orders`)."""
        return (await self.orders({}, decisions, fence, notes=notes, checks=checks))[1]

    async def preempt(self, reasons: dict[str, str], fence: Fence | None = None,
                      making_room: Mapping[str, str] | None = None) -> list[Any]:
        """Return running gangs to their queues; returns the rows as they were (`orders`)."""
        return (await self.orders(reasons, {}, fence, making_room))[0]

    async def orders(self, preempt: dict[str, str], dispatch: dict[str, str], fence: Fence | None = None,
                     making_room: Mapping[str, str] | None = None, notes: Mapping[str, str] | None = None,
                     checks: Mapping[str, list[dict[str, str]]] | None = None) -> tuple[list[Any], list[Any]]:
        """A cycle's orders in one transaction: one lease check, one numbering of their events (Preempted, then
        MakingRoom, then Dispatched), one commit (each a round trip more the cycle would wait for).

        `preempt`: running gangs to return to their queues (phase Preempted, keeping their submission order), with
        why. `making_room`: the waiting jobs they make room for, and where; each gets a MakingRoom event, so any
        replica that leads next knows the room is being made and does not evict for it again.

        `dispatch`: still-waiting jobs to move to their chosen cluster with a new attempt, in one statement (a first
        cycle may dispatch tens of thousands). `notes`: what to say of a job's choice besides (its reason and its
        Dispatched event carry it). `checks`: the admission checks of each job's new attempt, as they stand (none:
        it has none).

        Returns the preempted rows as they were (the caller tells each one's agent which attempt to stop) and the
        dispatched rows.
        """
        if not preempt and not dispatch:
            return [], []
        async with self.engine.begin() as conn:
            await by_key(conn, fence)
            rows, events = await _preempting(conn, preempt, making_room or {}) if preempt else ([], [])
            moved = []
            if dispatch:
                ids = sorted(dispatch)
                moved = (await conn.execute(DISPATCH, {
                    "ids": ids, "clusters": [dispatch[i] for i in ids],
                    "notes": [f" ({notes[i]})" if notes and i in notes else "" for i in ids],
                    "checks": [json.dumps(checks.get(i, []) if checks else []) for i in ids],
                    "nexts": [_then(checks.get(i, []) if checks else []) for i in ids]})).mappings().all()
                events += [EventRecord(r["id"], r["tenant"], r["queue"], "Dispatched", "DISPATCHED", r["reason"],
                                       r["attempt"], r["cluster"]) for r in moved]
            await append_events(conn, events)  # numbered at once, last
        return rows, list(moved)

    async def set_waiting(self, reasons: dict[str, str], fence: Fence | None = None) -> None:
        """Why each of these jobs waits, for those still waiting: a statement per REASON_BATCH of them, each in a
        transaction of its own, so no writer holds these rows (or the lease, when fenced) for a whole rewrite."""
        ids = sorted(reasons)
        for start in range(0, len(ids), REASON_BATCH):
            batch = ids[start:start + REASON_BATCH]
            async with self.engine.begin() as conn:
                await by_key(conn, fence)
                await conn.execute(REASONS, {"ids": batch, "reasons": [reasons[i] for i in batch]})

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
                    values: dict[str, Any] = unplaced(r["spec"]) | {
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
        `cluster_values`: written to the cluster's row in the same transaction, first (its latest inventory).

        The batch's jobs are read (and locked, in id order) in one statement, each update is judged against its
        job as the updates before it in the batch left it, and what they change is written at the end: one
        UPDATE per job (in a pipeline, those alike in one executemany) and the events in one append, instead of
        five round trips per update."""
        async with self.engine.begin() as conn:
            if cluster_values:
                await conn.execute(update(Cluster).where(Cluster.name == cluster).values(**cluster_values))
            ids = sorted({u.job_id for u in updates})
            read = await conn.execute(select(Job).where(Job.id == func.any(ids)).order_by(Job.id).with_for_update())
            batch = _Batch({r["id"]: dict(r) for r in read.mappings()})
            applied = [self._apply(batch, cluster, u) for u in updates]
            await batch.write(conn)
            return applied

    def _apply(self, batch: _Batch, cluster: str, u: agent_pb2.JobUpdate) -> Applied:
        row = batch.rows.get(u.job_id)
        if u.type == agent_pb2.ORPHANS_DELETED:  # about an attempt no longer live there: said on the job
            if row is not None:
                batch.events.append(EventRecord(
                    row["id"], row["tenant"], row["queue"], "OrphansDeleted", row["phase"],
                    f"cluster {cluster} deleted {u.pods} pod(s) of attempt {u.attempt}, which no longer runs "
                    f"there: {u.reason}", u.attempt, cluster))
            return Applied()
        if row is not None and (problem := pods_problem(row["spec"], u)):
            return Applied(refused=problem)
        if u.type == agent_pb2.POD_STATUS:  # what users see of their pods: no event, the job's row only
            if row is not None and row["cluster"] == cluster and row["attempt"] == u.attempt:
                batch.set(row["id"], {"pods": _pod_statuses(u)})
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
                      "request": minimum_of(row["spec"])}
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
        elif kind == agent_pb2.HELD and phase == "DISPATCHED" and hold_state(row["admission_checks"]) == "PENDING":
            values = {"phase": phase, "admission_checks": held_said(row["admission_checks"], cluster, u.reason),
                      "reason": f"dispatched to cluster {cluster}, which holds its room: waiting for its HyperJob's "
                                "other sub-jobs to have theirs"}
            event = "Held"
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
            values = unplaced(row["spec"]) | {"move_wanted": "", "phase": "PENDING",
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
            batch.set(row["id"], {"move_wanted": u.reason})
            said = (u.reason + "; it keeps running here until a cluster has healthy room for it") if u.reason else \
                "its hardware recovered: it stays"
            batch.events.append(EventRecord(row["id"], row["tenant"], row["queue"],
                                            "MoveWanted" if u.reason else "MoveCalledOff", phase, said,
                                            row["attempt"], cluster))
            return Applied()
        elif kind == agent_pb2.DRAIN_PLANNED and phase == "RUNNING":
            batch.events.append(EventRecord(row["id"], row["tenant"], row["queue"], "DrainPlanned", phase,
                                            u.reason, row["attempt"], cluster))
            return Applied()
        elif kind == agent_pb2.POD_FAILED:
            named = [f"{p.task}[{p.index}] on {p.node}" for p in u.placements[:POD_FAILED_NAMED]]
            more = len(u.placements) - len(named)
            pods = ", ".join(named) + (f" and {more} more" if more else "")
            batch.events.append(EventRecord(row["id"], row["tenant"], row["queue"], "PodFailed", phase,
                                            f"{pods}: {u.reason}", row["attempt"], cluster))
            return Applied()
        if not values:
            return Applied()  # a repeat of something already applied
        if kind in (agent_pb2.PREPARING, agent_pb2.BOUND, agent_pb2.REJECTED) and row["admission_checks"]:
            values["admission_checks"] = _provisioning_said(row["admission_checks"], kind, u.reason)
        # `values` may name updated_at itself (a loss's, from _lost): one key, not two.
        batch.set(row["id"], {"updated_at": func.now(), **values})
        batch.events.append(EventRecord(row["id"], row["tenant"], row["queue"], event, values["phase"],
                                        message or values["reason"], row["attempt"], cluster))
        waited = (datetime.now(UTC) - row["created_at"]).total_seconds() if event == "Running" else None
        return Applied(event=event, queue=row["queue"], waited=waited)
