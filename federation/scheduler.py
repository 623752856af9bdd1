"""The scheduling loop: snapshot in, one pure cycle, decisions written to Postgres.

It wakes on a short period and at once when something changes (a submit, a cancel, a job's end,
an agent's inventory), on the leader replica only. It never talks to agents: each decision is a
job event, and the replica holding the agent's stream relays it as an order (`federation.orders`),
so an order always matches what Postgres says, whichever replica leads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from federation import metrics
from federation.backlog import Backlog, job_view
from federation.loop import WakeLoop
from federation.resources import format_resources
from federation.scheduling.cycle import (
    Decisions,
    PendingJob,
    QueueInfo,
    RunningJob,
    Snapshot,
    TenantInfo,
    schedule,
    shares,
)
from federation.scheduling.fairshare import dominant_share
from federation.scheduling.fit import ClusterState, ClusterView, TierFree, explain
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import PriorityClass, Queue, Tenant
from federation.v1 import admin_pb2

log = logging.getLogger(__name__)
K = TypeVar("K")
V = TypeVar("V")

REJECTION_MEMORY = 30.0  # seconds a cluster's rejection keeps a job away from it
ROOM_MEMORY = 60.0  # seconds a job waits for the gangs preempted for it before it may preempt again
HEARTBEAT_TIMEOUT = 30.0  # seconds of silence after which an agent's cluster gets nothing new


def cluster_view(row: Mapping[str, Any], inflight: Mapping[str, int]) -> ClusterView:
    """A Ready cluster as its last inventory says, less what was dispatched and not yet bound there."""
    inv = row["inventory"] or {}
    allocatable, used = inv.get("allocatable", {}), inv.get("used", {})
    free = {r: a - used.get(r, 0) - inflight.get(r, 0) for r, a in allocatable.items()}
    tiers = [TierFree(t["tier"], t.get("tier_name", ""), t.get("max_free", {})) for t in inv.get("topology", [])]
    return ClusterView(row["name"], row["labels"], free, tiers)


def _inflight(active: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per cluster, what was dispatched there and is not in its agent's inventory yet."""
    out: dict[str, dict[str, int]] = {}
    for row in active:
        if row["phase"] == "DISPATCHED":
            totals = out.setdefault(row["cluster"], {})
            for r, a in row["request"].items():
                totals[r] = totals.get(r, 0) + a
    return out


class _Expiring(Generic[K, V]):
    """Values forgotten `ttl` seconds (of the event loop's clock) after they were put."""

    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._items: dict[K, tuple[float, V]] = {}

    def put(self, key: K, value: V) -> None:
        self._items[key] = (asyncio.get_running_loop().time() + self.ttl, value)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def live(self) -> dict[K, V]:
        now = asyncio.get_running_loop().time()
        self._items = {k: v for k, v in self._items.items() if v[0] > now}
        return {k: value for k, (_, value) in self._items.items()}


class Scheduler:
    def __init__(self, jobs: JobStore, admin: AdminStore, is_leader: Callable[[], bool],
                 on_change: Callable[[], None], period: float = 1.0,
                 heartbeat_timeout: float = HEARTBEAT_TIMEOUT) -> None:
        self.jobs, self.admin = jobs, admin
        self.is_leader = is_leader
        self.on_change = on_change  # relays the orders written, wakes watchers, tells the other replicas
        self.heartbeat_timeout = heartbeat_timeout
        self._loop = WakeLoop("scheduler", period, self._pass)
        self.wake, self.start, self.stop = self._loop.wake, self._loop.start, self._loop.stop
        self._refused: _Expiring[tuple[str, str], str] = _Expiring(REJECTION_MEMORY)  # (job, cluster) -> why
        self._making_room: _Expiring[str, str] = _Expiring(ROOM_MEMORY)  # job -> cluster preempted for it
        self.backlog = Backlog(jobs)

    def rejected(self, job_id: str, cluster: str, reason: str) -> None:
        """An agent refused the job: do not offer it to that cluster again for a while."""
        self._refused.put((job_id, cluster), f"rejected it recently: {reason}")
        self.wake()

    def _recent_refusals(self) -> dict[str, dict[str, str]]:
        """Per job, the clusters that refused it recently and why."""
        out: dict[str, dict[str, str]] = {}
        for (job_id, cluster), why in self._refused.live().items():
            out.setdefault(job_id, {})[cluster] = why
        return out

    async def _pass(self) -> None:
        if self.is_leader():
            await self.cycle()

    async def snapshot(self) -> tuple[Snapshot, list[Any]]:
        pending, views = await self.backlog.waiting()
        active = await self.jobs.holding()
        classes = {c["name"]: c for c in await self.admin.list(PriorityClass)}
        inflight = _inflight(active)
        clusters = [c for c in await self.admin.clusters(self.heartbeat_timeout) if c["live"] and not c["cordoned"]]
        capacity: dict[str, int] = {}
        for c in clusters:
            inv = c["inventory"] or {}
            for r, a in (inv.get("allocatable") or {}).items():
                capacity[r] = capacity.get(r, 0) + a
                metrics.CLUSTER_UTILISATION.labels(c["name"], r).set((inv.get("used") or {}).get(r, 0) / a if a else 0)
        snapshot = Snapshot(
            tenants=[TenantInfo(t["name"], t["weight"], t["guarantee"], t["limit"], t["disabled"])
                     for t in await self.admin.list(Tenant)],
            queues=[QueueInfo(q["name"], q["tenant"], q["weight"], q["priority"], q["guarantee"], q["limit"],
                              q["reclaimable"], q["state"]) for q in await self.admin.list(Queue)],
            pending=[PendingJob(views[r["id"]], r["queue"], r["priority"], r["seq"]) for r in pending
                     if r["id"] in views],  # a job gone between the two reads waits for the next cycle
            running=[RunningJob(r["id"], r["queue"], r["cluster"], r["priority"], r["seq"], r["request"],
                                bool(classes.get(r["priority_class"], {}).get("preemptible", True)))
                     for r in active],
            clusters=[cluster_view(c, inflight.get(c["name"], {})) for c in clusters],
            capacity=capacity,
            refused=self._recent_refusals(),
            making_room=self._making_room.live(),
        )
        return snapshot, pending

    async def cycle(self) -> Decisions:
        started = time.perf_counter()
        snapshot, pending = await self.snapshot()
        decisions = schedule(snapshot)
        for job_id, cluster in decisions.making_room.items():
            self._making_room.put(job_id, cluster)
        for job_id in decisions.assign:
            self._making_room.pop(job_id)
        self._record(snapshot, decisions, time.perf_counter() - started)
        # Preempted and Dispatched events are the orders; the replicas holding the agents relay them.
        await self.jobs.preempt(decisions.preempt)
        await self.jobs.dispatch(decisions.assign)
        await self.jobs.set_waiting([r for r in pending if r["id"] not in decisions.assign], decisions.waiting)
        self.backlog.reasons_written(decisions.waiting)
        if decisions.assign or decisions.preempt:
            self.on_change()
        return decisions

    def _record(self, snapshot: Snapshot, decisions: Decisions, seconds: float) -> None:
        metrics.CYCLE_SECONDS.observe(seconds)
        metrics.JOBS_SCHEDULED.inc(len(decisions.assign))
        metrics.JOBS_PREEMPTED.inc(len(decisions.preempt))
        waiting: dict[str, int] = {q.name: 0 for q in snapshot.queues}
        for job in snapshot.pending:
            if job.id not in decisions.assign:
                waiting[job.queue] = waiting.get(job.queue, 0) + 1
        for queue, count in waiting.items():
            metrics.QUEUE_PENDING.labels(queue).set(count)
        assert decisions.shares is not None
        for queue, usage in decisions.usage.items():
            share = dominant_share(usage, decisions.shares.queues.get(queue, {}))
            metrics.QUEUE_DOMINANT_SHARE.labels(queue).set(share if share != float("inf") else -1)

    async def queue_status(self, name: str) -> admin_pb2.QueueStatus:
        """Usage, deserved share and counts of one queue, computed now as a cycle would."""
        queue = await self.admin.get(Queue, name)
        snapshot, _ = await self.snapshot()
        tree, usage, _ = shares(snapshot)
        deserved = {r: round(a) for r, a in tree.queues.get(name, {}).items()}
        share = dominant_share(usage.get(name, {}), tree.queues.get(name, {}))
        return admin_pb2.QueueStatus(
            queue=name, tenant=queue["tenant"], usage=format_resources(usage.get(name, {})),
            deserved=format_resources({r: a for r, a in deserved.items() if a}),
            dominant_share=share if share != float("inf") else -1.0,
            pending=sum(1 for j in snapshot.pending if j.queue == name),
            running=sum(1 for j in snapshot.running if j.queue == name))

    async def explain(self, row: Mapping[str, Any]) -> list[tuple[str, str | None]]:
        """For a waiting job, each cluster and why it does not fit there now (None: it does)."""
        inflight = _inflight(await self.jobs.active(phases=("DISPATCHED",)))
        states = [ClusterState(cluster_view(c, inflight.get(c["name"], {})), c["live"], c["cordoned"])
                  for c in await self.admin.clusters(self.heartbeat_timeout)]
        return explain(job_view(row), states, self._recent_refusals().get(row["id"], {}))
