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

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from federation.control.leader import Fence
from federation.kernel.hyperjob import HELD, HOLD_CHECK, HOLD_SECONDS, WHOLE, hold_state, with_hold
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
            return await _restart_whole(conn, rows) if _restart(rows) == WHOLE else 0
        round_ = max(r["dispatched_at"] for r in open_)
        name = open_[0]["spec"].get("hyperjob", {}).get("name", group)
        back = [r for r in rows if r["phase"] in WAITING_PHASES and r["dispatched_at"] == round_]
        now = (await conn.execute(select(func.now()))).scalar_one()
        if back:
            said = f"sub-job {_index(back[0])} came back ({await _why_back(conn, back[0])})"
            return await _release(conn, open_, f"HyperJob {name}: {said}")
        if all(hold_state(r["admission_checks"]) == HELD for r in open_):
            return await _commit(conn, open_, name)
        if now - round_ > timedelta(seconds=hold_seconds):
            waiting = [f"{_index(r)} in {r['cluster']}" for r in open_ if hold_state(r["admission_checks"]) != HELD]
            return await _release(conn, open_, f"HyperJob {name}: sub-job(s) {', '.join(waiting)} had no room held "
                                               f"within {hold_seconds:g} s")
        return 0


def _restart(rows: Sequence[Mapping[str, Any]]) -> str:
    return str(rows[0]["spec"].get("hyperjob", {}).get("restart", "")) if rows else ""


async def _restart_whole(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]]) -> int:
    """A HyperJob that starts and stops as one: a sub-job failed, the others are cancelled; a sub-job that ran with
    the others is back in its queue (lost with its cluster, preempted, not ready), the others go back too, to
    start again together. Those that ran together are those committed in one round (one `dispatched_at`)."""
    name = rows[0]["spec"].get("hyperjob", {}).get("name", rows[0]["hyperjob"])
    live = [r for r in rows if r["phase"] not in TERMINAL_PHASES]
    failed = [r for r in rows if r["phase"] == "FAILED"]
    if failed and live:
        why = (f"HyperJob {name} failed: sub-job {_index(failed[0])} failed ({failed[0]['reason']}); its restart "
               "policy is whole")
        await _stop(conn, live, "CANCELLED", "Cancelled", why)
        return len(live)
    running = [r for r in rows if r["phase"] in ACTIVE_PHASES]
    if not running:
        return 0
    round_ = max(r["dispatched_at"] for r in running)
    back = [r for r in rows if r["phase"] in WAITING_PHASES and r["attempt"] > 0 and r["dispatched_at"] == round_]
    if not back:
        return 0
    why = (f"HyperJob {name}: sub-job {_index(back[0])} stopped ({await _why_back(conn, back[0])}); its restart "
           "policy is whole: every sub-job starts again together")
    await _stop(conn, running, "PENDING", "Requeued", why)
    return len(running)


async def _stop(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]], phase: str, kind: str, why: str) -> None:
    """These sub-jobs stop where they run (the event is the order to their clusters): back to their queue, or ended."""
    events = []
    for r in rows:
        values = {"phase": phase, "reason": why, "updated_at": func.now()}
        values |= {"finished_at": func.now()} if phase in TERMINAL_PHASES else unplaced(r["spec"])
        await conn.execute(update(Job).where(Job.id == r["id"]).values(values))
        events.append(EventRecord(r["id"], r["tenant"], r["queue"], kind, phase, why, r["attempt"], r["cluster"]))
    await append_events(conn, events)


async def _why_back(conn: AsyncConnection, row: Mapping[str, Any]) -> str:
    """What sent a sub-job back to its queue: its latest event's words (its reason may be the cycle's since)."""
    said = (await conn.execute(select(JobEvent.message).where(JobEvent.job_id == row["id"])
                               .order_by(JobEvent.seq.desc()).limit(1))).scalar()
    return said or row["reason"]


def _index(row: Mapping[str, Any]) -> int:
    return int(row["spec"].get("hyperjob", {}).get("index", 0))


async def _commit(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]], name: str) -> int:
    clusters = ", ".join(sorted({r["cluster"] for r in rows}))
    events = []
    for r in rows:
        reason = (f"dispatched to cluster {r['cluster']}; HyperJob {name} committed: every sub-job has room "
                  f"({clusters}); its agent is binding the gang")
        await conn.execute(update(Job).where(Job.id == r["id"]).values(
            admission_checks=with_hold(r["admission_checks"], "READY", f"committed with its HyperJob ({clusters})"),
            reason=reason, updated_at=func.now()))
        events.append(EventRecord(r["id"], r["tenant"], r["queue"], "Admitted", "DISPATCHED", reason, r["attempt"],
                                  r["cluster"]))
    await append_events(conn, events)
    return len(rows)


async def _release(conn: AsyncConnection, rows: Sequence[Mapping[str, Any]], why: str) -> int:
    events = []
    for r in rows:
        reason = f"{why}; every hold released, back in its queue"
        await conn.execute(update(Job).where(Job.id == r["id"]).values(
            unplaced(r["spec"]) | {"phase": "PENDING", "reason": reason, "updated_at": func.now(),
                                    "admission_checks": with_hold(r["admission_checks"], "RETRY", why)}))
        events.append(EventRecord(r["id"], r["tenant"], r["queue"], "HoldReleased", "PENDING", reason, r["attempt"],
                                  r["cluster"]))
    await append_events(conn, events)
    return len(rows)
