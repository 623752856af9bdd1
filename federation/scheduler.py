"""The scheduling loop: snapshot in, one pure cycle, decisions written in one go, orders out.

It wakes on a short period and at once when something changes (a submit, a cancel, a job's end,
an agent's inventory). Decisions are written before any order is sent, so an order an agent
receives always matches what Postgres says; a crash in between leaves Dispatched jobs that are
re-sent when their agent reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from federation.api.convert import job_to_proto
from federation.connections import Connections
from federation.events import EventHub
from federation.resources import parse_resources
from federation.scheduling.cycle import (
    Decisions,
    PendingJob,
    QueueInfo,
    RunningJob,
    Snapshot,
    TenantInfo,
    schedule,
)
from federation.scheduling.fit import ClusterView, JobView, TierFree
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster, PriorityClass, Queue, Tenant
from federation.v1 import agent_pb2

log = logging.getLogger(__name__)

SCAN_LIMIT = 200_000
REJECTION_MEMORY = 30.0  # seconds a cluster's rejection keeps a job away from it


def job_view(row: Mapping[str, Any]) -> JobView:
    spec = row["spec"]
    topo = spec.get("network_topology", {})
    largest: dict[str, int] = {}
    for task in spec.get("tasks", []):
        for resource, amount in parse_resources(task.get("resources", {})).items():
            largest[resource] = max(largest.get(resource, 0), amount)
    return JobView(row["id"], row["request"], largest, spec.get("cluster_selector", {}), topo.get("mode", ""),
                   topo.get("highest_tier_allowed", 0), topo.get("highest_tier_name", ""))


def cluster_view(row: Mapping[str, Any], inflight: Mapping[str, int]) -> ClusterView:
    """A Ready cluster as its last inventory says, less what was dispatched and not yet bound there."""
    inv = row["inventory"] or {}
    allocatable, used = inv.get("allocatable", {}), inv.get("used", {})
    free = {r: a - used.get(r, 0) - inflight.get(r, 0) for r, a in allocatable.items()}
    tiers = [TierFree(t["tier"], t.get("tier_name", ""), t.get("max_free", {})) for t in inv.get("topology", [])]
    return ClusterView(row["name"], row["labels"], free, tiers)


class Scheduler:
    def __init__(self, jobs: JobStore, admin: AdminStore, connections: Connections, hub: EventHub,
                 period: float = 1.0) -> None:
        self.jobs, self.admin, self.connections, self.hub = jobs, admin, connections, hub
        self.period = period
        self.last: Decisions | None = None  # for queue status and metrics
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._refused: dict[str, dict[str, tuple[float, str]]] = {}  # job -> cluster -> (until, reason)

    def wake(self) -> None:
        self._wake.set()

    def rejected(self, job_id: str, cluster: str, reason: str) -> None:
        """An agent refused the job: do not offer it to that cluster again for a while."""
        until = asyncio.get_running_loop().time() + REJECTION_MEMORY
        self._refused.setdefault(job_id, {})[cluster] = (until, f"rejected it recently: {reason}")
        self.wake()

    def _recent_refusals(self) -> dict[str, dict[str, str]]:
        now = asyncio.get_running_loop().time()
        for job_id in list(self._refused):
            self._refused[job_id] = {c: v for c, v in self._refused[job_id].items() if v[0] > now}
            if not self._refused[job_id]:
                del self._refused[job_id]
        return {j: {c: v[1] for c, v in by.items()} for j, by in self._refused.items()}

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="scheduler")

    async def stop(self) -> None:
        """Let the current cycle finish (never cut a transaction short), then stop."""
        self._stopping = True
        self._wake.set()
        if self._task:
            await self._task

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period)
            self._wake.clear()
            if self._stopping:
                return
            try:
                await self.cycle()
            except Exception:
                log.exception("scheduling cycle failed; retrying")

    async def snapshot(self) -> tuple[Snapshot, list[Any]]:
        pending = await self.jobs.pending(SCAN_LIMIT)
        active = await self.jobs.active()
        classes = {c["name"]: c for c in await self.admin.list(PriorityClass)}
        connected = self.connections.connected()
        inflight: dict[str, dict[str, int]] = {}
        for row in active:
            if row["phase"] == "DISPATCHED":
                totals = inflight.setdefault(row["cluster"], {})
                for r, a in row["request"].items():
                    totals[r] = totals.get(r, 0) + a
        clusters = [c for c in await self.admin.list(Cluster)
                    if c["name"] in connected and c["status"] == "READY" and not c["cordoned"]]
        capacity: dict[str, int] = {}
        for c in clusters:
            for r, a in ((c["inventory"] or {}).get("allocatable") or {}).items():
                capacity[r] = capacity.get(r, 0) + a
        snapshot = Snapshot(
            tenants=[TenantInfo(t["name"], t["weight"], t["guarantee"], t["limit"], t["disabled"])
                     for t in await self.admin.list(Tenant)],
            queues=[QueueInfo(q["name"], q["tenant"], q["weight"], q["priority"], q["guarantee"], q["limit"],
                              q["reclaimable"], q["state"]) for q in await self.admin.list(Queue)],
            pending=[PendingJob(job_view(r), r["queue"], r["priority"], r["seq"]) for r in pending],
            running=[RunningJob(r["id"], r["queue"], r["cluster"], r["priority"], r["seq"], r["request"],
                                bool(classes.get(r["priority_class"], {}).get("preemptible", True)))
                     for r in active],
            clusters=[cluster_view(c, inflight.get(c["name"], {})) for c in clusters],
            capacity=capacity,
            refused=self._recent_refusals(),
        )
        return snapshot, pending

    async def cycle(self) -> Decisions:
        snapshot, pending = await self.snapshot()
        decisions = schedule(snapshot)
        self.last = decisions
        for row in await self.jobs.preempt(decisions.preempt):
            self.connections.send(row["cluster"], agent_pb2.ControlMessage(preempt=agent_pb2.Preempt(
                job_id=row["id"], attempt=row["attempt"], reason=decisions.preempt[row["id"]])))
        for row in await self.jobs.dispatch(decisions.assign):
            self.connections.send(row["cluster"], agent_pb2.ControlMessage(
                assign=agent_pb2.Assign(job=job_to_proto(row), attempt=row["attempt"])))
        await self.jobs.set_waiting([r for r in pending if r["id"] not in decisions.assign], decisions.waiting,
                                    decisions.positions)
        self.hub.notify()
        return decisions
