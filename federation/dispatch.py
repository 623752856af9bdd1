"""Interim dispatch: Pending jobs to the first Ready cluster that fits them, by priority then age.

This is the placeholder the fair-share scheduler replaces; it shares that scheduler's edges
(a snapshot in, decisions written in one transaction, orders to the agents after the commit)
and its pure fit check, `federation.scheduling.fit`.
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
from federation.scheduling.fit import ClusterView, JobView, TierFree, first_fit
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster
from federation.v1 import agent_pb2

log = logging.getLogger(__name__)

SCAN_LIMIT = 5000
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
    inv = row["inventory"] or {}
    allocatable, used = inv.get("allocatable", {}), inv.get("used", {})
    free = {r: a - used.get(r, 0) - inflight.get(r, 0) for r, a in allocatable.items()}
    tiers = [TierFree(t["tier"], t.get("tier_name", ""), t.get("max_free", {})) for t in inv.get("topology", [])]
    return ClusterView(row["name"], row["labels"], free, tiers)


class Dispatcher:
    def __init__(self, jobs: JobStore, admin: AdminStore, connections: Connections, hub: EventHub,
                 period: float = 1.0) -> None:
        self.jobs, self.admin, self.connections, self.hub = jobs, admin, connections, hub
        self.period = period
        self._wake = asyncio.Event()
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
        self._task = asyncio.create_task(self._run(), name="dispatcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.period)
            self._wake.clear()
            try:
                await self.cycle()
            except Exception:
                log.exception("dispatch cycle failed; retrying")

    async def cycle(self) -> None:
        pending = await self.jobs.pending(SCAN_LIMIT)
        if not pending:
            return
        connected = self.connections.connected()
        inflight: dict[str, dict[str, int]] = {}
        for row in await self.jobs.active(phases=("DISPATCHED",)):
            totals = inflight.setdefault(row["cluster"], {})
            for r, a in row["request"].items():
                totals[r] = totals.get(r, 0) + a
        clusters = [cluster_view(c, inflight.get(c["name"], {})) for c in await self.admin.list(Cluster)
                    if c["name"] in connected and c["status"] == "READY" and not c["cordoned"]]
        chosen, waiting = first_fit([job_view(r) for r in pending], clusters, self._recent_refusals())
        for row in await self.jobs.dispatch(chosen):
            self.connections.send(row["cluster"], agent_pb2.ControlMessage(
                assign=agent_pb2.Assign(job=job_to_proto(row), attempt=row["attempt"])))
        await self.jobs.set_reasons(waiting)
        self.hub.notify()
