"""Admission checks (Kueue's AdmissionCheckState): what an external check's controller says of a dispatched job,
and what the job then does. A part of `JobStore`.

A job's checks are written with its dispatch, one list per attempt (`transitions.Transitions.dispatch`). While
any but `provisioning` is not READY its Dispatched event orders nothing (`federation.relay.orders.admitted`); the
Admitted event appended when the last one passes is the order to its cluster. RETRY gives its room back and puts
it in its queue again; REJECTED ends it. Either is an order too: its agent drops whatever it began of it.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from federation.errors import FailedPrecondition, InvalidArgument, NotFound, Violation
from federation.kernel.admission import AGENTS_CHECKS, admitted, waiting_for
from federation.store.events import EventRecord, append_events
from federation.store.models import Job
from federation.store.transitions import minimum_of


class AdmissionChecks:
    engine: AsyncEngine

    async def set_check(self, job_id: str, name: str, state: str, message: str) -> Any:
        """Set how one of a dispatched job's admission checks stands; returns the job's row after."""
        async with self.engine.begin() as conn:
            row = (await conn.execute(select(Job).where(Job.id == job_id).with_for_update())).mappings().first()
            if row is None:
                raise NotFound(f"job {job_id!r} not found")
            checks = [dict(c) for c in row["admission_checks"]]
            names = [c["name"] for c in checks]
            if name in AGENTS_CHECKS:
                raise InvalidArgument([Violation("name", f"{name} is carried out by the agent of the job's "
                                                         "cluster, not set through the API")])
            if name not in names:
                has = f"its checks: {', '.join(names)}" if names else "it has none"
                raise FailedPrecondition(f"job {job_id!r} is {row['phase']} and has no admission check {name!r} "
                                         f"waiting ({has})")
            if row["phase"] != "DISPATCHED":
                raise FailedPrecondition(f"job {job_id!r} is {row['phase']}: its admission checks are decided")
            was = admitted(row)
            for check in checks:
                if check["name"] == name:
                    check.update(state=state, message=message)
            values: dict[str, Any] = {"admission_checks": checks}
            event = ""
            said = f"admission check {name}" + (f": {message}" if message else "")
            cluster = row["cluster"]
            if state == "READY" and not was and admitted({"admission_checks": checks}):
                values["reason"] = (f"dispatched to cluster {cluster}; its admission checks passed "
                                    f"({', '.join(n for n in names if n not in AGENTS_CHECKS)}); its agent is placing "
                                    "the gang")
                event = "Admitted"
            elif state == "RETRY":
                values |= {"phase": "PENDING", "cluster": "", "request": minimum_of(row["spec"]),
                           "reason": f"{said} (asked to retry; back in its queue)"}
                event = "CheckRetry"
            elif state == "REJECTED":
                values |= {"phase": "FAILED", "finished_at": func.now(), "reason": f"rejected by {said}"}
                event = "CheckRejected"
            elif state == "PENDING" or not was:
                waiting = waiting_for(checks)
                values["reason"] = (f"dispatched to cluster {cluster}; waiting for admission check(s) "
                                    f"{', '.join(waiting)}")
            await conn.execute(update(Job).where(Job.id == job_id).values({"updated_at": func.now(), **values}))
            if event:
                await append_events(conn, [EventRecord(row["id"], row["tenant"], row["queue"], event,
                                                       values.get("phase", row["phase"]), values["reason"],
                                                       row["attempt"], cluster)])
            return (await conn.execute(select(Job).where(Job.id == job_id))).mappings().one()
