"""A HyperJob's holds, reconciled: its sub-jobs sent together are committed together once every one's cluster holds
its room, or every hold is released when one cannot be had. A part of `JobStore`.

Level-triggered, as a controller's Reconcile: the leader looks at every HyperJob with a sub-job sent and not yet
committed, each in a transaction that locks its sub-jobs in id order, and from how they stand decides, whatever
happened before and however often it looks:
- a sub-job sent with them is back in its queue (its cluster refused it, went silent, or the hold ran out there):
  the others' holds are released, each back in its queue saying why (a HoldReleased event: its agent drops it);
- every one is HELD: each `hyperjob` check READY, and an Admitted event each: the order to bind it;
- they were sent longer ago than a hold lasts: released as above.
The sub-jobs sent together are those dispatched in one transaction (one `dispatched_at`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from federation.control.leader import Fence
from federation.kernel.hyperjob import HELD, HOLD_CHECK, HOLD_SECONDS, hold_state, with_hold
from federation.store.events import EventRecord, append_events
from federation.store.models import Job
from federation.store.phases import WAITING_PHASES
from federation.store.transitions import unplaced

OPEN = ("PENDING", HELD)  # a hold check's states before the commit


def _sent(row: Mapping[str, Any]) -> bool:
    """Sent with its HyperJob's latest round and not committed: its hold is open."""
    return row["phase"] == "DISPATCHED" and hold_state(row["admission_checks"]) in OPEN


class HyperJobHolds:
    engine: AsyncEngine

    async def settle_hyperjobs(self, fence: Fence | None = None, hold_seconds: float = HOLD_SECONDS) -> int:
        """Commit or release the open holds of every HyperJob that has some; how many sub-jobs changed."""
        async with self.engine.connect() as conn:
            groups = (await conn.execute(select(Job.hyperjob).distinct().where(
                Job.hyperjob != "", Job.phase == "DISPATCHED",
                Job.admission_checks.contains([{"name": HOLD_CHECK}])))).scalars().all()
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
            return 0
        round_ = max(r["dispatched_at"] for r in open_)
        name = open_[0]["spec"].get("hyperjob", {}).get("name", group)
        back = [r for r in rows if r["phase"] in WAITING_PHASES and r["dispatched_at"] == round_]
        now = (await conn.execute(select(func.now()))).scalar_one()
        if back:
            said = f"sub-job {_index(back[0])} came back ({back[0]['reason']})"
            return await _release(conn, open_, f"HyperJob {name}: {said}")
        if all(hold_state(r["admission_checks"]) == HELD for r in open_):
            return await _commit(conn, open_, name)
        if now - round_ > timedelta(seconds=hold_seconds):
            waiting = [f"{_index(r)} in {r['cluster']}" for r in open_ if hold_state(r["admission_checks"]) != HELD]
            return await _release(conn, open_, f"HyperJob {name}: sub-job(s) {', '.join(waiting)} had no room held "
                                               f"within {hold_seconds:g} s")
        return 0


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
