"""The waiting jobs, kept in memory between cycles and brought up to date from the job event log.

Reading a backlog of a hundred thousand jobs from PostgreSQL every second would cost more than
deciding about it. Every phase change of a job appends an event in the same transaction, and
events commit in sequence order, so the waiting set is exactly the jobs whose latest event left
them Pending or Preempted: each cycle reads only the events since the last one, and the rows of
the jobs they name (Kueue's cache fed by informers, with the event log as the informer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from federation.resources import parse_resources
from federation.scheduling.fit import JobView
from federation.store.jobs import WAITING_PHASES, JobStore

SCAN_LIMIT = 200_000
BATCH = 10_000


def job_view(row: Mapping[str, Any]) -> JobView:
    """What the cycle needs of a job: from its id, whole-gang request and spec."""
    spec = row["spec"]
    topo = spec.get("network_topology", {})
    largest: dict[str, int] = {}
    for task in spec.get("tasks", []):
        for resource, amount in parse_resources(task.get("resources", {})).items():
            largest[resource] = max(largest.get(resource, 0), amount)
    return JobView(row["id"], row["request"], largest, spec.get("cluster_selector", {}), topo.get("mode", ""),
                   topo.get("highest_tier_allowed", 0), topo.get("highest_tier_name", ""))


class Backlog:
    def __init__(self, jobs: JobStore) -> None:
        self.jobs = jobs
        self._rows: dict[str, dict[str, Any]] | None = None  # id -> id, queue, priority, seq, reason
        self._views: dict[str, JobView] = {}
        self._cursor = 0
        self._lock = asyncio.Lock()

    async def waiting(self) -> tuple[list[dict[str, Any]], dict[str, JobView]]:
        """The waiting jobs (higher priority first, then by submission) and each one's view."""
        async with self._lock:
            if self._rows is None:
                cursor = await self.jobs.last_event_seq()  # before the rows: later events are applied again
                self._rows = {r["id"]: dict(r) for r in await self.jobs.pending(SCAN_LIMIT)}
                self._cursor = cursor
            else:
                try:
                    await self._catch_up(self._rows)
                except BaseException:
                    self._rows = None  # half caught up: read it all again next time
                    raise
            missing = [job_id for job_id in self._rows if job_id not in self._views]
            for start in range(0, len(missing), BATCH):
                specs = await self.jobs.specs(missing[start:start + BATCH])
                self._views.update((job_id, job_view(row)) for job_id, row in specs.items())
            self._views = {job_id: self._views[job_id] for job_id in self._rows if job_id in self._views}
            rows = sorted(self._rows.values(), key=lambda r: (-r["priority"], r["seq"]))
            return rows, self._views

    async def _catch_up(self, rows: dict[str, dict[str, Any]]) -> None:
        upto = await self.jobs.last_event_seq()
        latest: dict[str, str] = {}  # job -> its phase after its latest event
        cursor = self._cursor
        while cursor < upto:
            events = await self.jobs.events_after(cursor, upto, limit=BATCH)
            if not events:
                break
            for event in events:
                latest[event["job_id"]] = event["phase"]
            cursor = events[-1]["seq"]
        for job_id, phase in latest.items():
            if phase not in WAITING_PHASES:
                rows.pop(job_id, None)
        arrived = [job_id for job_id, phase in latest.items() if phase in WAITING_PHASES]
        for start in range(0, len(arrived), BATCH):
            batch = arrived[start:start + BATCH]
            found = {r["id"]: dict(r) for r in await self.jobs.pending(SCAN_LIMIT, ids=batch)}
            for job_id in batch:  # one no longer waiting has a later event, read next time
                if job_id in found:
                    rows[job_id] = found[job_id]
                else:
                    rows.pop(job_id, None)
        self._cursor = cursor

    def reasons_written(self, reasons: Mapping[str, str]) -> None:
        if self._rows is not None:
            for job_id, reason in reasons.items():
                if job_id in self._rows:
                    self._rows[job_id]["reason"] = reason
