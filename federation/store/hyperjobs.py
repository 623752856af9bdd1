"""A HyperJob's holds, reconciled: its sub-jobs sent together are committed together once every one's cluster holds
its room, or every hold is released when one cannot be had. A part of `JobStore`.

Level-triggered, as a controller's Reconcile: the leader looks at every HyperJob with a sub-job sent and not yet
committed, each in a transaction that locks its sub-jobs in id order, and from how they stand decides, whatever
happened before and however often it looks:
- a sub-job sent with them is back in its queue (its cluster refused it, went silent, or the hold ran out there):
  the others' holds are released, each back in its queue saying why (a HoldReleased event: its agent drops it);
- every one is HELD: each `hyperjob` check READY, and an Admitted event each: the order to bind it;
- they were sent longer ago than a hold lasts: released as above.
The sub-jobs sent together are those dispatched in one transaction (one `dispatched_at`).

A HyperJob whose restart policy is `whole` is looked at too once its sub-jobs have run: one failed, the others are
cancelled; one that ran with the others is back in its queue, the others go back too and all start again together."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from federation.control.leader import Fence
from federation.kernel.hyperjob import HELD, HOLD_CHECK, HOLD_SECONDS, WHOLE, Part, hold_state, part_of, with_hold
from federation.store.events import EventRecord, append_events
from federation.store.models import Job, JobEvent
from federation.store.phases import ACTIVE_PHASES, TERMINAL_PHASES, WAITING_PHASES
from federation.store.transitions import unplaced

OPEN = ("PENDING", HELD)  # a hold check's states before the commit


def _sent(row: Mapping[str, Any]) -> bool:
    """Sent with its HyperJob's latest round and not committed: its hold is open."""
    return row["phase"] == "DISPATCHED" and hold_state(row["admission_checks"]) in OPEN


class HyperJobHolds:
    engine: AsyncEngine

    async def settle_hyperjobs(self, fence: Fence | None = None, hold_seconds: float = HOLD_SECONDS) -> int:
        """Commit or release the open holds of every HyperJob that has some, and stop together the sub-jobs of those
        that restart whole; how many sub-jobs changed."""
        async with self.engine.connect() as conn:
            groups = (await conn.execute(select(Job.hyperjob).distinct().where(Job.hyperjob != "", or_(
                and_(Job.phase == "DISPATCHED", Job.admission_checks.contains([{"name": HOLD_CHECK}])),
                and_(Job.spec["hyperjob"]["restart"].astext == WHOLE, Job.attempt > 0,
                     Job.phase.in_((*WAITING_PHASES, "FAILED"))))))).scalars().all()
        changed = 0
        for group in sorted(groups):
            async with self.engine.begin() as conn:
                if fence is not None:
                    await fence.check(conn)
                changed += await self._settle(conn, group, hold_seconds)
        return changed

    async def _settle(self, conn: AsyncConnection, group: str, hold_seconds: float) -> int:
        rows = (await conn.execute(select(Job).where(Job.hyperjob == group).order_by(Job.id)
                                   .with_for_update())).mappings().all()
        open_ = [r for r in rows if _sent(r)]
        if not open_:
            return await _restart_whole(conn, rows) if _part(rows[0]).restart == WHOLE else 0
        round_ = max(r["dispatched_at"] for r in open_)
        name = _part(open_[0]).name
        back = [r for r in rows if r["phase"] in WAITING_PHASES and r["dispatched_at"] == round_]
        now = (await conn.execute(select(func.now()))).scalar_one()
        if back:
            said = f"sub-job {_part(back[0]).index} came back ({await _why_back(conn, back[0])})"
            return await _release(conn, open_, f"HyperJob {name}: {said}")
        if all(hold_state(r["admission_checks"]) == HELD for r in open_):
            return await _commit(conn, open_, name)
        if now - round_ > timedelta(seconds=hold_seconds):
            waiting = [f"{_part(r).index} in {r['cluster']}" for r in open_
                       if hold_state(r["admission_checks"]) != HELD]
            return await _release(conn, open_, f"HyperJob {name}: sub-job(s) {', '.join(waiting)} had no room held "
                                               f"within {hold_seconds:g} s")
        return 0


async def _restart_whole(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]]) -> int:
    """A HyperJob that starts and stops as one: a sub-job failed, the others are cancelled; a sub-job that ran with
    the others is back in its queue (lost with its cluster, preempted, not ready), the others go back too, to
    start again together. Those that ran together are those committed in one round (one `dispatched_at`)."""
    name = _part(rows[0]).name
    live = [r for r in rows if r["phase"] not in TERMINAL_PHASES]
    failed = [r for r in rows if r["phase"] == "FAILED"]
    if failed and live:
        why = (f"HyperJob {name} failed: sub-job {_part(failed[0]).index} failed ({failed[0]['reason']}); its "
               "restart policy is whole")
        return await _change(conn, live, "Cancelled", "CANCELLED", lambda r: why, lambda r: {"finished_at": func.now()})
    running = [r for r in rows if r["phase"] in ACTIVE_PHASES]
    if not running:
        return 0
    round_ = max(r["dispatched_at"] for r in running)
    back = [r for r in rows if r["phase"] in WAITING_PHASES and r["attempt"] > 0 and r["dispatched_at"] == round_]
    if not back:
        return 0
    why = (f"HyperJob {name}: sub-job {_part(back[0]).index} stopped ({await _why_back(conn, back[0])}); its "
           "restart policy is whole: every sub-job starts again together")
    return await _change(conn, running, "Requeued", "PENDING", lambda r: why, lambda r: unplaced(r["spec"]))


async def _commit(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]], name: str) -> int:
    clusters = ", ".join(sorted({r["cluster"] for r in rows}))
    return await _change(
        conn, rows, "Admitted", "DISPATCHED",
        lambda r: (f"dispatched to cluster {r['cluster']}; HyperJob {name} committed: every sub-job has room "
                   f"({clusters}); its agent is binding the gang"),
        lambda r: {"admission_checks": with_hold(r["admission_checks"], "READY",
                                                 f"committed with its HyperJob ({clusters})")})


async def _release(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]], why: str) -> int:
    reason = f"{why}; every hold released, back in its queue"
    return await _change(conn, rows, "HoldReleased", "PENDING", lambda r: reason, lambda r: unplaced(r["spec"]) | {
        "admission_checks": with_hold(r["admission_checks"], "RETRY", why)})


async def _change(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]], kind: str, phase: str,
                  reason: Callable[[Mapping[str, Any]], str],
                  values: Callable[[Mapping[str, Any]], dict[str, Any]]) -> int:
    """Move these sub-jobs to `phase`, each with its reason, its other values and an event of `kind` (Admitted,
    HoldReleased, Requeued and Cancelled are orders to the sub-job's cluster); how many."""
    events = []
    for r in rows:
        said = reason(r)
        await conn.execute(update(Job).where(Job.id == r["id"]).values(
            {"phase": phase, "reason": said, "updated_at": func.now(), **values(r)}))
        events.append(EventRecord(r["id"], r["tenant"], r["queue"], kind, phase, said, r["attempt"], r["cluster"]))
    await append_events(conn, events)
    return len(rows)


async def _why_back(conn: AsyncConnection, row: Mapping[str, Any]) -> str:
    """What sent a sub-job back to its queue: its latest event's words (its reason may be the cycle's since)."""
    said = (await conn.execute(select(JobEvent.message).where(JobEvent.job_id == row["id"])
                               .order_by(JobEvent.seq.desc()).limit(1))).scalar()
    return said or row["reason"]


def _part(row: Mapping[str, Any]) -> Part:
    part = part_of(row["spec"])
    assert part is not None  # every row read here is a sub-job
    return part
