"""The scheduling loop: snapshot in, one pure cycle, decisions written to Postgres.

It wakes on a short period and at once when something changes (a submit, a cancel, a job's end,
an agent's inventory), on the leader replica only. It never talks to agents: each decision is a
job event, and the replica holding the agent's stream relays it as an order (`federation.relay.orders`),
so an order always matches what Postgres says, whichever replica leads.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import ChainMap, Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import chain, islice
from typing import Any, Generic, TypeVar

from google.protobuf.timestamp_pb2 import Timestamp

from federation import failpoints, metrics
from federation.control.drift import DriftWatch, difference, signed
from federation.control.jobcache import HoldingJob, JobCache, job_view
from federation.control.leader import Fence, NotLeader
from federation.control.loop import WakeLoop
from federation.control.rejections import FLOOR, Rejections
from federation.control.usage import PastUsage
from federation.kernel import heap
from federation.kernel.admission import PROVISIONING
from federation.kernel.hyperjob import HOLD_CHECK
from federation.kernel.resources import GPU, add, format_resources, with_share
from federation.scheduling import outlook
from federation.scheduling.arrival import Admitted, Arrivals, Arriving
from federation.scheduling.cycle import (
    Decisions,
    PendingJob,
    QueueInfo,
    RunningJob,
    Snapshot,
    TenantInfo,
    queue_chains,
    schedule,
    shares,
    walk_backlog,
)
from federation.scheduling.fairshare import dominant_share
from federation.scheduling.fit import (
    ClusterState,
    ClusterView,
    DomainFree,
    JobView,
    NodeGroupRoom,
    TierFree,
    cannot_run,
    explain,
)
from federation.scheduling.flavors import FlavorInfo
from federation.scheduling.forecast import Holding, after_cycle, remaining
from federation.scheduling.model import summed_by
from federation.scheduling.moves import healthier
from federation.scheduling.queues import QueueManager, Reasons, Settled
from federation.scheduling.quotas import over_own_limit
from federation.scheduling.running import Running
from federation.scheduling.usage import Decay
from federation.store.admin import AdminStore
from federation.store.inventories import Inventories
from federation.store.jobs import JobStore
from federation.store.usage import UsageStore
from federation.v1 import admin_pb2

log = logging.getLogger(__name__)

HISTORY_STEP = 30.0  # seconds between the samples of a queue's share the dashboard charts
HISTORY_SAMPLES = 120  # an hour of them
K = TypeVar("K")
V = TypeVar("V")

ROOM_MEMORY = 60.0  # seconds a job waits for the gangs preempted for it before it may preempt again
HEAP_SETTLE_CYCLES = 60  # the heap is settled after the first cycle (the cache's load), then every this many
DRIFT_AFTER = 60.0  # seconds a difference between an agent's report and the federation's belief lasts to be drift
HEARTBEAT_TIMEOUT = 30.0  # seconds of silence after which an agent's cluster gets nothing new
LOST_GRACE = 300.0  # seconds more after which the running jobs of a silent cluster are lost and retried elsewhere
FORECAST_PERIOD = 15.0  # seconds between two runs of the start-time forecast (the leader's, after a cycle)
FORECAST_SPACING = 10.0  # the forecast runs again only once this many times its last run has passed
FORECAST_JOBS = 2_000  # waiting jobs, in the order they would be served, that get an expected start time
RUN_TIMES_PERIOD = 300.0  # seconds between two reads of what each queue's past jobs took
DEFAULT_RUN_TIME = 3600.0  # seconds a job is assumed to run when neither it nor any past job says otherwise
ARRIVALS_AT_ONCE = 2_000  # submitted jobs judged on arrival in one pass at most; the rest are the cycle's
CYCLE_REST = 1.0  # after a cycle, wait this many times as long before the next: the API keeps half the loop


def cluster_view(row: Mapping[str, Any], inflight: Mapping[str, int]) -> ClusterView:
    """A Ready cluster as its last inventory says, less what was dispatched and not yet bound there."""
    inv = row["inventory"] or {}
    allocatable, used = with_share(inv.get("allocatable", {})), with_share(inv.get("used", {}))
    free = {r: a - used.get(r, 0) - inflight.get(r, 0) for r, a in allocatable.items()}
    # MIG slices its agent would cut idle GPUs into count as free (not as capacity: the same GPUs are counted whole).
    partitionable = {t["tier"]: t for t in inv.get("partitionable", [])}
    whole = partitionable[max(partitionable)] if partitionable else {}  # its top tier: the whole cluster
    if whole:
        free = add(free, whole["max_free"])
    tiers = [_tier_free(t, partitionable) for t in inv.get("topology", [])]
    domains = [DomainFree(h["name"], h["tier"], h["parent"], with_share(h["free"])) for h in inv.get("hypernodes", [])]
    health = inv.get("health") or {}
    healthy = [_tier_free(t, partitionable) for t in health.get("healthy_topology", [])] or None
    node_labels = inv.get("node_labels")
    return ClusterView(row["name"], row["labels"], free, tiers, capacity=allocatable, domains=domains,
                       healthy_tiers=healthy, health=health.get("summary", []),
                       partitionable=whole.get("max_capacity", {}),
                       node_labels=frozenset(node_labels) if node_labels is not None else None,
                       gpu_free_nodes=tuple(inv["gpu_free_nodes"]) if inv.get("gpu_free_nodes") else None,
                       gpu_memory=int(inv.get("gpu_device_memory", 0)),
                       node_groups=tuple(NodeGroupRoom(g["name"], with_share(g["per_node"]), g["can_add"])
                                         for g in inv.get("node_groups", ())))


def _checks(decisions: Decisions) -> dict[str, list[dict[str, str]]]:
    """Each dispatched job's admission checks as they stand at dispatch: `provisioning` passed where its room was free,
    pending where its cluster is to add nodes for it; every other check pending its controller."""
    out = {}
    for job_id, names in decisions.checks.items():
        grow = decisions.provisioning.get(job_id)
        out[job_id] = [
            {"name": n, "state": "PENDING", "message": f"asks node group {grow.group} for {grow.nodes} node(s)"}
            if n == PROVISIONING and grow else
            {"name": n, "state": "READY", "message": "its room was free"} if n == PROVISIONING else
            {"name": n, "state": "PENDING", "message": "its cluster is to hold its room until every sub-job has room"}
            if n == HOLD_CHECK else
            {"name": n, "state": "PENDING", "message": ""} for n in names]
    return out


def _whole_view(row: Mapping[str, Any]) -> ClusterView:
    """A cluster as its inventory says, nothing in flight: what a submission is judged against."""
    return cluster_view(row, {})


def _tier_free(t: Mapping[str, Any], partitionable: Mapping[int, Mapping[str, Any]]) -> TierFree:
    free, capacity = with_share(t.get("max_free", {})), with_share(t.get("max_capacity", {}))
    more = partitionable.get(t["tier"])
    if more:  # MIG slices its idle GPUs could be cut into, beside those published (cluster views are built every cycle)
        free, capacity = add(free, more["max_free"]), add(capacity, more["max_capacity"])
    return TierFree(t["tier"], t.get("tier_name", ""), free, capacity)


def _inflight(active: Sequence[HoldingJob]) -> dict[str, dict[str, int]]:
    """Per cluster, what was dispatched there and is not in its agent's inventory yet."""
    dispatched = [job for job in active if job.phase == "DISPATCHED"]
    return summed_by([job.cluster for job in dispatched], [job.request for job in dispatched])


def node_hold(view: JobView) -> tuple[int, int] | None:
    """What an agent keeps nodes for, for a gang whose room is held in its cluster: (pods, whole GPUs each); None
    for a gang of no whole GPUs. Pods of different sizes are held as pods of the largest."""
    gpus = view.request.get(GPU, 0)
    per = view.pod_gpus or view.largest_pod.get(GPU, 0)
    if gpus <= 0 or per <= 0:
        return None
    return -(-gpus // per), per


def _tenant_info(t: Mapping[str, Any]) -> TenantInfo:
    return TenantInfo(t["name"], t["weight"], with_share(t["guarantee"]), with_share(t["limit"]), t["disabled"],
                      with_share(t["lending_limit"]))


def _queue_info(q: Mapping[str, Any]) -> QueueInfo:
    return QueueInfo(q["name"], q["tenant"], q["weight"], q["priority"], with_share(q["guarantee"]),
                     with_share(q["limit"]), q["reclaimable"], q["state"], tuple(q["flavors"]), q["parent"] or "",
                     with_share(q["lending_limit"]), tuple(q.get("admission_checks") or ()))


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


class _Steps:
    """Wall-clock seconds of each step of one cycle, also observed as a metric."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._last = time.perf_counter()

    def step(self, name: str) -> None:
        now = time.perf_counter()
        self.seconds[name] = now - self._last
        self._last = now
        metrics.CYCLE_STEP_SECONDS.labels(name).observe(self.seconds[name])


@dataclass(frozen=True)
class _Walked:
    """What the cycle's decide step returns: enough to write its orders, and to explain the rest meanwhile."""

    decisions: Decisions
    waiting: Counter[str]  # per queue, the jobs still waiting after the cycle
    pending: Mapping[str, PendingJob]  # the jobs it decided over, by id
    walked: bool  # whether it walked the kept backlog (False: decided from scratch on the snapshot's list)
    arrivals: Arrivals | None  # what the cycle left, for jobs admitted on arrival (None: decided from scratch)


@dataclass(frozen=True)
class _Decided:
    """What a cycle's explain step adds to its decisions (`_Walked`), for the loop that writes them."""

    reasons: dict[str, str]  # the waiting jobs' reasons PostgreSQL does not hold yet
    walk: tuple[Mapping[str, Sequence[Settled]], set[str]] | None  # the walk's settled ranges and owed jobs
    order: list[str]  # the waiting jobs the forecast looks at, in the order they would be served
    jobs: dict[str, PendingJob]  # those, and the jobs dispatched or holding room, by id
    forecast: Decisions  # the decisions as the forecast reads them
    holds: dict[str, str]
    held: dict[str, tuple[dict[str, int], list[tuple[str, str]]]]
    lost_queues: dict[str, str]  # the queue of each gang it preempted that lost work (the gangs change after it)


class Scheduler:
    def __init__(self, jobs: JobStore, admin: AdminStore, is_leader: Callable[[], bool],
                 on_change: Callable[[], None], period: float = 1.0,
                 heartbeat_timeout: float = HEARTBEAT_TIMEOUT, lost_grace: float = LOST_GRACE,
                 fence: Callable[[], Fence | None] = lambda: None, drift_after: float = DRIFT_AFTER,
                 burst: int = 0, usage: UsageStore | None = None, decay: Decay | None = None,
                 admit_on_arrival: bool = True) -> None:
        self.jobs, self.admin = jobs, admin
        self.is_leader = is_leader
        self.fence = fence  # the lease every write of a cycle is made under
        self.on_change = on_change  # relays the orders written, wakes watchers, tells the other replicas
        self.heartbeat_timeout = heartbeat_timeout
        self.burst = burst  # dispatches per cycle at most (0: no limit): see Snapshot.burst
        self.lost_grace = lost_grace
        self._loop = WakeLoop("scheduler", period, self.tick, rest=CYCLE_REST)
        # What the last cycle left, for jobs admitted on arrival until the next cycle starts (None: a cycle is
        # under way, or none finished since this replica leads), and when its snapshot was taken.
        self._arrivals: Arrivals | None = None
        self.admit_on_arrival = admit_on_arrival  # off: every job waits for a cycle (the benchmarks' baseline)
        self._arrivals_at = 0.0
        # While a cycle decides: the last cycle's `Arrivals`, judging the jobs submitted since the deciding cycle's
        # snapshot (None: not now), the event that snapshot read up to (the jobs after it are not the cycle's),
        # the jobs seen since and still waiting, and those dispatched, to be counted into the cycle's outcome.
        self._meanwhile: Arrivals | None = None
        self._meanwhile_cursor = 0
        self._meanwhile_waiting: list[PendingJob] = []
        self._meanwhile_sent: list[tuple[PendingJob, str]] = []
        self._admitting = asyncio.Lock()  # held while such jobs are judged and written
        self._writing = False  # a cycle whose orders are written is writing its reasons (and holds)
        self._arriving = asyncio.Event()  # set by every change: admit what arrived, then wake the cycle
        self._missed = False  # a change came while a cycle was under way: look at arrivals once it is written
        self._stopping = False
        self._arrival_task: asyncio.Task[None] | None = None
        self._forecasting: asyncio.Task[None] | None = None  # the forecast under way beside the loop, if one is
        self._refused = Rejections()  # (job, cluster) -> why, until the cluster reports a change
        self._inventories: dict[str, int] = {}  # cluster -> its inventory version, as the last snapshot read it
        self._making_room: _Expiring[str, str] = _Expiring(ROOM_MEMORY)  # job -> cluster preempted for it
        self.cache = JobCache(jobs)
        self.steps: dict[str, float] = {}  # of the last cycle: seconds per step
        # cluster -> room reserved there by the last cycle, and for which (job, tenant)
        self.held: dict[str, tuple[dict[str, int], list[tuple[str, str]]]] = {}
        self.holds: dict[str, str] = {}  # waiting job -> what holds it whatever is free, by the last cycle
        self._cycles = 0
        self._snapshot_version = -1  # the job cache's version the last snapshot saw
        self._deciding = asyncio.Lock()  # held from a cycle's snapshot to the end of its decisions
        # The last walk whose reasons were all written (the cache's generation, its ranges per queue), and the jobs
        # it decided first: the next cycle writes only what may differ from it. None: unknown, write all.
        self._written: tuple[int, Mapping[str, Sequence[Settled]]] | None = None
        self._owed: set[str] = set()
        self._leading = False
        self._history: dict[str, deque[tuple[float, float]]] = {}  # queue -> (unix time, dominant share)
        self.forecast: dict[str, tuple[datetime, str]] = {}  # waiting job -> expected start, and cluster
        self._forecast_at = float("-inf")
        self._forecast_asked: set[str] = set()
        self._forecast_seconds = 0.0  # how long the last forecast took
        self._run_times: dict[str, float] = {}  # queue -> mean run time of its recent jobs, seconds
        self._run_times_at = float("-inf")
        self._series = metrics.Series(metrics.CLUSTER_UTILISATION, metrics.CLUSTER_READY,
                                      metrics.CLUSTER_HEARTBEAT_AGE, metrics.CLUSTER_DRIFT)
        self.drift = DriftWatch(drift_after)
        self.past = PastUsage(usage, decay or Decay())  # each tenant's and queue's usage history, on the leader
        self._holds: dict[str, list[list[Any]]] | None = None  # per cluster, the holds last written (None: unknown)
        # The holding jobs as running gangs, with what cycles sum over them, and the priority classes, past run times
        # and job cache's generation they were made with (`_running`).
        self._kept = Running()
        self._gangs_of: tuple[Mapping[str, Any], Mapping[str, float], int] | None = None

    def wake(self) -> None:
        """Something changed: jobs submitted are judged on arrival first, then the cycle is woken."""
        self._arriving.set()

    def start(self) -> None:
        self._loop.start()
        self._arrival_task = asyncio.create_task(self._arrive(), name="arrivals")

    async def _arrive(self) -> None:
        while True:
            await self._arriving.wait()
            self._arriving.clear()
            if self._stopping:
                return
            try:
                if self.is_leader() and self._leading:
                    await self.follow()
            except NotLeader as err:
                log.warning("%s; jobs admitted on arrival were not written", err)
                self._arrivals = None
            except Exception:  # a database hiccup: the cycle decides them
                log.exception("admitting jobs on arrival failed; the next cycle decides them")
            self._loop.wake()

    async def follow(self) -> dict[str, str]:
        """What the leader does on every change between cycles: read the events since the last look into the job
        cache, as an informer's watch does, so that a cycle reads only those that came after; and, with admission on
        arrival, dispatch the jobs among them that fit (`admit_arrivals`). Returns those, job -> cluster."""
        if self.admit_on_arrival:
            return await self.admit_arrivals()
        if not self._deciding.locked():  # (a deciding cycle's backlog must not change under it)
            async with self._deciding:
                await self._catch_up()
        return {}

    async def _catch_up(self) -> None:
        """Read the events since the last look into the job cache, and keep the running gangs up with the jobs that
        changed among them (`_running`, with the priority classes the last snapshot read; a snapshot that reads
        others makes them all again), so that the next snapshot has only what came after. Under `_deciding`: a
        cycle's pure part reads the gangs, and the arrivals admitted between cycles read only what the last cycle
        worked out from them, never the gangs themselves."""
        await self.cache.refresh()
        if self._gangs_of is not None and self._gangs_of[2] == self.cache.generation:
            await asyncio.to_thread(self._running, self._gangs_of[0])

    async def admit_arrivals(self) -> dict[str, str]:
        """Dispatch at once each job submitted since the last look that fits what the last cycle left
        (`scheduling.arrival`); returns them, job -> cluster. The rest wait for the next cycle."""
        if self._deciding.locked():
            return await self._admit_meanwhile()
        async with self._deciding:
            await self._catch_up()  # whatever comes of them: the next cycle reads only what follows
            arrivals = self._arrivals
            if arrivals is None:
                self._missed = True  # a cycle is under way: look again once it is written
                return {}
            if self._stale():
                return {}
            submitted = [job for job_id in self.cache.take_submitted()
                         if (job := self.cache.waiting.get(job_id)) is not None]
            if not submitted:
                return {}
            sent = await self._admit(arrivals, self.cache.backlog, submitted)
        if sent:
            self.on_change()
        return sent

    async def _admit_meanwhile(self) -> dict[str, str]:
        """The jobs submitted while a cycle decides, judged against what the cycle before it left, with the backlog
        as the deciding cycle's snapshot found it (`scheduling.arrival.Arriving`); those sent are counted into that
        cycle's outcome before it is written (`cycle`)."""
        async with self._admitting:
            self._missed = True  # those passed over are looked at again once the cycle is written
            arrivals = self._meanwhile
            if arrivals is None or self._stale():
                return {}  # the cycle is reading its snapshot, or writing its decisions
            self._meanwhile_cursor, submitted = await self.cache.peek_submitted(self._meanwhile_cursor,
                                                                              ARRIVALS_AT_ONCE)
            if not submitted:
                return {}
            waiting = self._meanwhile_waiting + submitted
            sent = await self._admit(arrivals, Arriving(self.cache.backlog, waiting), waiting)
            self._meanwhile_waiting = [job for job in waiting if job.id not in sent]
            self._meanwhile_sent += [(job, sent[job.id]) for job in waiting if job.id in sent]
        if sent:
            self.on_change()
        return sent

    def _stale(self) -> bool:
        """Whether the clusters as the last cycle saw them are too old to send anything on: the cycle's turn. Never
        while that cycle still writes: its view is the newest there is, however long its reasons take."""
        return not self._writing and \
            time.monotonic() - self._arrivals_at > 2 * (self._loop.period + sum(self.steps.values()))

    async def _admit(self, arrivals: Arrivals, backlog: QueueManager | Arriving, submitted: Sequence[PendingJob]
                     ) -> dict[str, str]:
        """Judge these jobs on arrival and dispatch those admitted: job -> cluster, of those dispatched."""
        # Read after the jobs: a cordon that came before a job's submission is seen.
        usable = await self.admin.usable(self.heartbeat_timeout)
        # Pure Python, as long as the burst of submissions: off the loop, like the cycle.
        judged = await asyncio.to_thread(arrivals.admit_all, backlog, submitted[:ARRIVALS_AT_ONCE], usable)
        admitted = {job_id: found for job_id, found in judged.items() if isinstance(found, Admitted)}
        if not admitted:
            return {}
        decisions = Decisions(assign={j: a.cluster for j, a in admitted.items()},
                              notes={j: a.note for j, a in admitted.items()},
                              checks={j: a.checks for j, a in admitted.items() if a.checks})
        moved = await self.jobs.dispatch(decisions.assign, self.fence(), decisions.notes, _checks(decisions))
        metrics.JOBS_ON_ARRIVAL.inc(len(moved))
        metrics.JOBS_SCHEDULED.inc(len(moved))
        return {r["id"]: r["cluster"] for r in moved}

    async def stop(self) -> None:
        self._stopping = True
        self._arriving.set()
        if self._arrival_task is not None:
            await self._arrival_task
        await self._loop.stop()
        if self._forecasting is not None:
            await self._forecasting

    def _sent_back(self) -> None:
        """Jobs a cluster rejected (not for good) or evacuated, read from the event log whichever replica heard the
        agent: not offered to that cluster again for a while; and the room a leader is making for jobs (gangs
        evicted for them, still leaving), whichever replica led: not made again by the next leader."""
        now = self.cache.clock()
        for job_id, cluster, reason, event in self.cache.take_sent_back():
            if event == "NotReady":  # passed over while it waits out its backoff and as long again once back
                back = self.cache.backing_off.get(job_id)
                hold = max(2 * (back - now).total_seconds(), FLOOR) if back is not None else FLOOR
                self._refused.put(job_id, cluster, f"gave it back not ready recently: {reason}", now.timestamp(), hold)
            else:
                # Against the cluster as the last snapshot before the rejection saw it: a change since then,
                # even one before this snapshot, lifts it (read now, it would be taken for the rejection's own).
                self._refused.put(job_id, cluster, f"rejected it recently: {reason}", now.timestamp(),
                                  seen=self._inventories.get(cluster))
        for job_id, cluster in self.cache.take_room_made():  # whichever replica led: the room is owed to the job
            self._making_room.put(job_id, cluster)

    def _refusals(self, rows: Sequence[Mapping[str, Any]] | None = None) -> dict[str, dict[str, str]]:
        """Per job, the clusters that refused it recently (a transient refusal, until the cluster's inventory
        changes: `rows`, the clusters as now read) or for good, and why."""
        out: dict[str, dict[str, str]] = {}
        inventories = None
        if rows is not None:  # also the baseline of the rejections read by the next snapshot
            inventories = self._inventories = {c["name"]: c["inventory_version"] for c in rows}
        # (jobs waiting out a backoff keep theirs: the cluster that gave one back is not offered it first thing)
        live = self._refused.live(self.cache.clock().timestamp(), inventories,
                                  ChainMap(self.cache.waiting, self.cache.backing_off) if rows is not None else None)
        for (job_id, cluster), why in live.items():
            out.setdefault(job_id, {})[cluster] = why
        for job_id, refusals in self.cache.refusals.items():
            for cluster, why in refusals.items():
                out.setdefault(job_id, {})[cluster] = f"refused it for good: {why}"
        return out

    async def tick(self) -> None:
        """One pass of the loop: a cycle on the leader; elsewhere a hot standby's catch-up, so that
        taking over costs reading the reasons rather than loading every job."""
        if not self.is_leader():
            self._leading = False
            if await self.cache.refresh():
                heap.settle()
            self.cache.take_touched()  # a standby writes no reasons: nothing to keep for it
            self.cache.take_submitted()  # nor admits on arrival
            self._sent_back()  # but remembers what clusters sent back, for when it leads
            return
        if not self._leading:
            await self.cache.reread_reasons()  # the last leader rewrote them without events
            await self.past.load()  # and went on counting history
            self._holds = None  # and held room: every cluster's holds are written again
            self._written = None
            self._leading = True
        try:
            if await self.jobs.requeue_from_silent(self.heartbeat_timeout, self.lost_grace, self.fence()):
                self.on_change()
            if await self.jobs.settle_hyperjobs(self.fence()):  # commit or release HyperJobs' holds
                self.on_change()
            await self.cycle()
        except NotLeader as err:  # the lease passed on while this cycle ran: its decisions are dropped
            log.warning("%s; this cycle's decisions were not written", err)
            self._leading = False

    async def snapshot(self) -> Snapshot:
        await self.cache.refresh()  # the bulk: the events since the last cycle (every job, on the first)
        # The federation's objects, and the clusters as of the event numbered `upto`, in one snapshot
        view = await self.admin.for_scheduling(self.heartbeat_timeout)
        rows, upto = view.clusters, view.last_event
        await self.cache.refresh(upto)  # and those up to the moment of the inventories, no further
        self._sent_back()
        pending = list(self.cache.waiting.values())
        self._snapshot_version = self.cache.version
        classes = {c["name"]: c for c in view.classes}
        if time.monotonic() - self._run_times_at >= RUN_TIMES_PERIOD:
            self._run_times = await self.jobs.mean_run_times()
            self._run_times_at = time.monotonic()
        inflight = self.cache.dispatched_to
        clusters = [c for c in rows if c["live"] and not c["cordoned"] and not c["problem"]]
        capacity: dict[str, int] = {}
        utilisation = set()
        for c in clusters:
            inv = c["inventory"] or {}
            for r, a in with_share(inv.get("allocatable") or {}).items():
                capacity[r] = capacity.get(r, 0) + a
                used = with_share(inv.get("used") or {}).get(r, 0)
                metrics.CLUSTER_UTILISATION.labels(c["name"], r).set(used / a if a else 0)
                utilisation.add((c["name"], r))
        self._series.keep(metrics.CLUSTER_UTILISATION, utilisation)
        now = datetime.now(UTC)
        for c in rows:
            metrics.CLUSTER_READY.labels(c["name"]).set(1 if c in clusters else 0)
            if c["last_heartbeat"] is not None:
                metrics.CLUSTER_HEARTBEAT_AGE.labels(c["name"]).set((now - c["last_heartbeat"]).total_seconds())
        self._series.keep(metrics.CLUSTER_READY, {(c["name"],) for c in rows})
        self._series.keep(metrics.CLUSTER_HEARTBEAT_AGE, {(c["name"],) for c in rows if c["last_heartbeat"]})
        await self._watch_drift(rows)
        past_tenants, past_queues = self.past.ordering()
        epoch = now.timestamp()
        # Off the loop: after a load every holding job becomes a gang (most of a second at 150,000); the cycle holds
        # `_deciding`, so nothing refreshes the cache meanwhile.
        running = await asyncio.to_thread(self._running, classes)
        return Snapshot(
            tenants=[_tenant_info(t) for t in view.tenants],
            queues=[_queue_info(q) for q in view.queues],
            pending=pending,
            running=running,
            clusters=[cluster_view(c, inflight.get(c["name"], {})) for c in clusters],
            capacity=capacity,
            refused=self._refusals(rows),
            making_room=self._making_room.live(),
            flavors=[FlavorInfo(f["name"], f["resource"], f["cluster_selector"], tuple(f["admission_checks"]))
                     for f in view.flavors],
            labels={c["name"]: c["labels"] for c in rows},
            burst=self.burst,
            past_tenants=past_tenants,
            past_queues=past_queues,
            now=epoch,
        )

    async def _watch_drift(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Compare what each live agent says its gangs hold with what the federation believes runs there (its
        Running jobs, as of the same moment as the inventories); record a difference that lasts."""
        believed = self.cache.running_in
        now, changed, series = time.monotonic(), {}, set()
        for c in rows:
            inv = c["inventory"] or {}
            if c["live"] and "managed" in inv:
                drift = self.drift.observe(c["name"], difference(inv["managed"], believed.get(c["name"], {})), now)
            else:  # nothing to compare: not heard from, or an agent too old to say
                self.drift.forget(c["name"])
                drift = {}
            for resource, amount in drift.items():
                metrics.CLUSTER_DRIFT.labels(c["name"], resource).set(amount)
                series.add((c["name"], resource))
            if drift != (c["drift"] or {}):
                changed[c["name"]] = drift
                if drift:
                    log.warning("cluster %s drifts from the federation's view: its agent reports %s against what "
                                "the federation believes runs there", c["name"], signed(drift))
        self._series.keep(metrics.CLUSTER_DRIFT, series)
        if changed:
            await self.admin.set_drift(changed)

    async def cycle(self) -> Decisions:
        clock = _Steps()
        # The snapshot and the decisions over it are one step no other reader of the cache may cut into: the
        # decisions (and their reasons) are read from the backlog, which a refresh changes.
        async with self._deciding:
            last, self._arrivals = self._arrivals, None  # what the last cycle left is this one's to decide now
            snapshot = await self.snapshot()
            self.cache.take_submitted()  # in this cycle's backlog: its to decide
            started = time.monotonic()
            clock.step("snapshot")
            if self.admit_on_arrival and self.cache.cursor is not None:
                # Jobs submitted from here on are not this cycle's: judged on arrival while it decides, against
                # what the last cycle left (none after a cycle dropped below: the next one always finishes).
                self._meanwhile, self._meanwhile_cursor = last, self.cache.cursor
            try:
                # Pure Python for as long as the backlog makes it: off the event loop, which keeps serving RPCs,
                # heartbeats and the lease's renewal meanwhile.
                walked = await asyncio.to_thread(self._decide, snapshot, clock)
            finally:
                async with self._admitting:
                    self._meanwhile, self._meanwhile_waiting = None, []
                    sent, self._meanwhile_sent = self._meanwhile_sent, []
            # This cycle did not see the jobs sent meanwhile: counted into what it left, or it decides nothing.
            if sent and (walked.arrivals is None or
                         not await asyncio.to_thread(walked.arrivals.took, sent, self.cache.backlog)):
                log.info("jobs sent on arrival while this cycle decided took room it gave or a share it counted on: "
                         "its decisions are not written; the next cycle decides again, with them")
                self.wake()
                return Decisions()
            decisions = walked.decisions
            for job_id, cluster in decisions.making_room.items():
                self._making_room.put(job_id, cluster)
            for job_id in decisions.assign:
                self._making_room.pop(job_id)
            # The orders go out while the rest is explained: PostgreSQL writes them on a core of its own, and the
            # reasons need nothing of them (they are the waiting jobs', the orders the others').
            fence = self.fence()
            orders = asyncio.create_task(self._write_orders(snapshot, decisions, fence), name="orders")
            try:
                d = await asyncio.to_thread(self._explain, snapshot, walked)
            except BaseException:
                await asyncio.gather(orders, return_exceptions=True)  # written or not: the next cycle reads which
                raise
            clock.step("explain")
            generation = self.cache.generation  # the cache it decided on (arrivals may refresh it while it writes)
        waiting, reasons, order, jobs = walked.waiting, d.reasons, d.order, d.jobs
        self.holds, self.held = d.holds, d.held
        # The reasons are written beside the orders, in a transaction of their own: their rows are other jobs'.
        self._writing = True
        explained = asyncio.create_task(self.jobs.set_waiting(reasons, fence), name="reasons")
        try:
            await orders
            clock.step("write")
            # Its orders written: what it left is offered to jobs arriving from now until the next cycle starts
            # (their orders come after its own), while it writes the reasons of those that wait (seconds, for a
            # large backlog whose reasons all name a cluster's free room that changed).
            self._arrivals, self._arrivals_at = walked.arrivals, started
            if self._missed and walked.arrivals is not None:
                self._missed = False
                self._arriving.set()
            # The room it holds, after its orders: an agent gets a cycle's orders while the room held before still
            # stands, so a job sent there cannot take the node a gang's hold let go of in the same cycle.
            await self._write_holds(snapshot, decisions, d, fence)
            await explained
        finally:
            if not explained.done():  # the orders or the holds failed: the reasons' own outcome is not the cycle's
                await asyncio.gather(explained, return_exceptions=True)
            self._writing = False
        self.cache.reasons_written(reasons)
        if d.walk is not None:
            self._written = (generation, d.walk[0])
            self._owed = d.walk[1]  # decided on their own: not what the ranges around them say
        clock.step("reasons")
        self._cycles += 1
        if self._cycles % HEAP_SETTLE_CYCLES == 1:
            heap.settle()
            clock.step("heap")
        # Every FORECAST_PERIOD, and at once for a job new to it, but never more than a tenth of the time; beside
        # the loop, not in it: the next cycle does not wait for it (one runs at a time).
        since, spacing = time.monotonic() - self._forecast_at, FORECAST_SPACING * self._forecast_seconds
        new_jobs = not self._forecast_asked.issuperset(order)
        due = since >= max(FORECAST_PERIOD, spacing) or (new_jobs and since >= spacing)
        if due and (self._forecasting is None or self._forecasting.done()):
            self._forecasting = asyncio.create_task(self._forecast(snapshot, d.forecast, order, jobs), name="forecast")
        self.steps = clock.seconds
        self._record(decisions, waiting, d.lost_queues, sum(clock.seconds.values()))
        self.past.age(decisions.usage, decisions.tenant_usage)
        await self.past.save_if_due(fence)
        return decisions

    async def _write_orders(self, snapshot: Snapshot, decisions: Decisions, fence: Fence | None) -> None:
        """The cycle's orders: its preemptions and dispatches (the Preempted and Dispatched events the replicas
        holding the agents relay), and the moves off degraded hardware."""
        await self.jobs.orders(decisions.preempt, decisions.assign, fence, decisions.making_room, decisions.notes,
                               _checks(decisions))
        moved = await self._move_off_degraded(snapshot, decisions, fence)
        if decisions.assign or decisions.preempt or moved:
            self.on_change()
        if decisions.cut_short:
            self.wake()  # the burst ran out: the rest of the queues next, without waiting for the period
        if decisions.compiled_failure:
            log.error("the compiled victim search failed; this cycle's reclaim was decided by the Python search: %s",
                      decisions.compiled_failure)

    async def _move_off_degraded(self, snapshot: Snapshot, decisions: Decisions, fence: Fence | None) -> bool:
        """Send back the running gangs whose agents want them off degraded hardware (and have no healthy room for
        them) when another cluster would run them on healthy hardware now; the rest keep running where they are
        (`scheduling.moves`). Level-triggered: asked again every cycle while the agent wants it."""
        wanted = await self.jobs.moves_wanted()
        if not wanted:
            return False
        busy = set(decisions.assign.values())
        reasons = {}
        for row in wanted:
            if row["id"] in decisions.preempt:
                continue
            to = healthier(job_view(row), snapshot.clusters, row["cluster"], snapshot.refused.get(row["id"], {}), busy)
            if to is not None:
                reasons[row["id"]] = (f"moved off degraded hardware in cluster {row['cluster']} "
                                      f"({row['move_wanted']}): cluster {to} has healthy room for it")
                busy.add(to)
        await self.jobs.preempt(reasons, fence)
        return bool(reasons)

    def _decide(self, snapshot: Snapshot, clock: _Steps) -> _Walked:
        """The cycle's pure part: decisions over the snapshot and the backlog. Run in a worker thread while the
        cycle holds `_deciding`, so nothing refreshes the cache meanwhile."""
        backlog = self.cache.backlog
        walked = self.cache.version == self._snapshot_version
        arrivals = None
        if walked:
            cycle = walk_backlog(snapshot, backlog)
            decisions, arrivals = cycle.out, Arrivals(cycle)
            pending: Mapping[str, PendingJob] = self.cache.waiting
            waiting = Counter({q.name: 0 for q in snapshot.queues} | {q: backlog.count(q) for q in backlog.order})
        else:  # another reader caught the cache up since the snapshot: decide on the snapshot's own list
            decisions = schedule(snapshot)
            pending = {job.id: job for job in snapshot.pending}
            waiting = Counter({q.name: 0 for q in snapshot.queues})
            waiting.update(job.queue for job in snapshot.pending)
        waiting.subtract(pending[j].queue for j in decisions.assign)
        if decisions.assign:
            failpoints.reached("cycle:dispatching")  # a cycle that decided something, still computing
        clock.step("decide")
        return _Walked(decisions, waiting, pending, walked, arrivals)

    def _explain(self, snapshot: Snapshot, walked: _Walked) -> _Decided:
        """The rest of the pure part, while the orders are written: what changed of the reasons, the forecast's
        jobs and the room held. In a worker thread, the cycle still holding `_deciding`."""
        decisions, pending = walked.decisions, walked.pending
        # The walk's reasons come from the backlog, which the next refresh changes: read them now. Only those that
        # may have changed since the last written walk are looked at (see Reasons.changed_since).
        touched = self.cache.take_touched() | self._owed
        written, self._written = self._written, None  # known again once these are written
        if walked.walked and isinstance(decisions.waiting, Reasons) and written is not None \
                and written[0] == self.cache.generation:
            candidates: Mapping[str, str] = decisions.waiting.changed_since(written[1], touched)
        else:
            candidates = decisions.waiting
        reasons = self.cache.changed_reasons(candidates)
        walk = decisions.waiting.walk if walked.walked and isinstance(decisions.waiting, Reasons) else None
        order = list(islice((j for j in decisions.waiting if j not in decisions.cannot_run), FORECAST_JOBS))
        jobs = {j: pending[j] for j in chain(decisions.assign, decisions.reserved, order)}
        forecast = replace(decisions, waiting={}, cannot_run=set(),
                           limited={j: held for j in order if (held := decisions.limited.get(j)) is not None})
        tenant_of = {q.name: q.tenant for q in snapshot.queues}
        held = {cluster: (room, [(j, tenant_of.get(jobs[j].queue, "")) for j in holders])
                for cluster, (room, holders) in outlook.reserved_room(decisions, jobs).items()}
        # Read now: once the cycle lets go of the cache, `follow` keeps its running gangs up with the events.
        lost_queues = {}
        for job_id in decisions.lost:
            gang = self._kept.get(job_id)
            assert gang is not None  # a preempted gang is one of the snapshot's (`_kept`, as the cycle read it)
            lost_queues[job_id] = gang.queue
        return _Decided(reasons, None if walk is None else (walk.settled, set(walk.owed)), order, jobs, forecast,
                        outlook.holds(decisions), held, lost_queues)

    def _running(self, classes: Mapping[str, Mapping[str, Any]]) -> Running:
        """The job cache's holding jobs as running gangs, kept across cycles (`Running`: what the cycle sums over
        them follows the gangs that changed). A gang is made when its job changes, not every cycle, and all of them
        again when the priority classes, the queues' past run times or the cache's load change (what it costs to
        evict is counted to the snapshot's clock, not kept in it); only the jobs the cache says changed are looked
        at."""
        holding, changed = self.cache.holding, self.cache.take_holding_changed()
        if (classes, self._run_times, self.cache.generation) != self._gangs_of:
            self._gangs_of = (classes, self._run_times, self.cache.generation)
            self._kept, changed = Running(), set(holding)
        running = self._kept
        for job_id in changed:
            job = holding.get(job_id)
            if job is None:
                running.discard(job_id)
            else:  # a job the cache holds anew (each event that changes it makes a new HoldingJob)
                running.add(self._gang(job, classes.get(job.priority_class, {})))
        return running

    def _gang(self, job: HoldingJob, priority_class: Mapping[str, Any]) -> RunningJob:
        expected = job.expected_seconds
        if expected is None:
            expected = self._run_times.get(job.queue)
        return RunningJob(job.id, job.queue, job.cluster, job.priority, job.seq, job.request,
                          bool(priority_class.get("preemptible", True)), job.since_epoch, job.checkpoint_seconds,
                          expected, float(priority_class.get("protected_run_seconds", 0)), job.hypernode,
                          preempted_before=job.preemptions > 0, group=job.group)

    def run_time(self, queue: str, annotated: float | None) -> float:
        """How long a job is expected to run: its annotation, else its queue's recent mean, else all queues'."""
        if annotated is not None:
            return annotated
        if queue in self._run_times:
            return self._run_times[queue]
        return sum(self._run_times.values()) / len(self._run_times) if self._run_times else DEFAULT_RUN_TIME

    async def _forecast(self, snapshot: Snapshot, decisions: Decisions, order: Sequence[str],
                        pending: Mapping[str, PendingJob]) -> None:
        """Expected start times for `order`: the first FORECAST_JOBS waiting jobs in the order this cycle served
        them (those that could never run left out). Run every FORECAST_PERIOD, and as soon as a job joins them.
        `pending`: those jobs, and the ones the cycle dispatched or reserved room for, by id."""
        started, now = time.monotonic(), datetime.now(UTC)
        sent = [Holding(cluster, pending[job_id].view.request,
                        self.run_time(pending[job_id].queue, self.cache.expected.get(job_id)), pending[job_id].queue)
                for job_id, cluster in decisions.assign.items()]
        held = [Holding(h.cluster, h.request, remaining(self.run_time(h.queue, h.expected_seconds),
                                                        (now - h.since).total_seconds() if h.since else 0.0), h.queue)
                for h in self.cache.holding.values() if h.id not in decisions.preempt]
        waiting = outlook.waiting(snapshot, decisions, order,
                                  lambda job: self.run_time(job.queue, self.cache.expected.get(job.id)), [*sent, *held],
                                  pending)
        try:
            starts = await asyncio.to_thread(after_cycle, snapshot.clusters, sent, held, waiting)
        except Exception:  # an estimate: a failure must not end the scheduler; the next one tries again
            log.exception("the start-time forecast failed")
            return
        self.forecast = {j: (now + timedelta(seconds=s.seconds), s.cluster) for j, s in starts.items()}
        self._forecast_at = time.monotonic()
        self._forecast_asked = set(order)
        self._forecast_seconds = self._forecast_at - started

    async def _write_holds(self, snapshot: Snapshot, decisions: Decisions, d: _Decided, fence: Fence | None) -> None:
        """Per member cluster, the gangs this cycle holds room for there, for its agent to keep nodes for (written
        where they changed)."""
        holds: dict[str, list[list[Any]]] = {name: [] for name in snapshot.labels}  # every member cluster
        for job_id, cluster in decisions.reserved.items():
            if (hold := node_hold(d.jobs[job_id].view)) is not None and cluster in holds:
                holds[cluster].append([job_id, *hold])
        changed = {c: h for c, h in holds.items() if self._holds is None or self._holds.get(c) != h}
        if changed:
            await self.admin.set_holds(changed, fence)
        self._holds = holds

    def _record(self, decisions: Decisions, waiting: Counter[str], lost_queues: Mapping[str, str],
                seconds: float) -> None:
        """Metrics of one cycle. `waiting`: per queue, the jobs still waiting after it; `lost_queues`: the queue of
        each gang it preempted that lost work."""
        metrics.CYCLE_SECONDS.observe(seconds)
        metrics.JOBS_SCHEDULED.inc(len(decisions.assign))
        metrics.JOBS_PREEMPTED.inc(len(decisions.preempt))
        for job_id, lost in decisions.lost.items():
            metrics.PREEMPTION_LOST_GPU_HOURS.labels(lost_queues[job_id]).inc(lost / 3600)
            metrics.LOST_GPU_HOURS.inc(lost / 3600)
        metrics.PENDING.set(sum(waiting.values()))
        assert decisions.shares is not None
        metrics.QUEUES.publish(waiting, decisions.usage, decisions.shares.queues, dominant_share)
        self._sample_history(decisions, time.time())

    def _sample_history(self, decisions: Decisions, now: float) -> None:
        """One dominant share per queue every HISTORY_STEP seconds, an hour of them (the dashboard's chart)."""
        assert decisions.shares is not None
        for queue in list(self._history):
            if queue not in decisions.usage:
                del self._history[queue]  # deleted: its history with it
        for queue, usage in decisions.usage.items():
            samples = self._history.setdefault(queue, deque(maxlen=HISTORY_SAMPLES))
            if samples and now - samples[-1][0] < HISTORY_STEP:
                continue
            share = dominant_share(usage, decisions.shares.queues.get(queue, {}))
            samples.append((now, share if share != float("inf") else -1.0))

    async def queue_status(self, queue: Mapping[str, Any]) -> admin_pb2.QueueStatus:
        """Usage, deserved share and counts of one queue (its row), computed now as a cycle would."""
        name = queue["name"]
        async with self._deciding:  # a cycle's decisions are read from the backlog this refreshes
            snapshot = await self.snapshot()
            tree, usage, _ = await asyncio.to_thread(shares, snapshot, self.cache.backlog)
            pending = self.cache.backlog.count(name)
        deserved = {r: round(a) for r, a in tree.queues.get(name, {}).items()}
        share = dominant_share(usage.get(name, {}), tree.queues.get(name, {}))
        return admin_pb2.QueueStatus(
            queue=name, tenant=queue["tenant"], usage=format_resources(usage.get(name, {})),
            deserved=format_resources({r: a for r, a in deserved.items() if a}),
            dominant_share=share if share != float("inf") else -1.0,
            history=[admin_pb2.ShareSample(time=Timestamp(seconds=int(t), nanos=int(t % 1 * 1e9)), dominant_share=v)
                     for t, v in self._history.get(name, ())],
            pending=pending,
            running=sum(1 for j in snapshot.running if j.queue == name))

    @staticmethod
    def inadmissible(jobs: Sequence[tuple[JobView, str, Mapping[str, Any]]], queues: Sequence[Mapping[str, Any]],
                     rows: Sequence[Mapping[str, Any]], inventories: Inventories) -> list[str]:
        """For each (job, its queue, tenant row), why it could not run as the federation stands ("" if it
        could): what SubmitJob tells the submitter, and refuses when asked to. `queues`: every queue's row
        (a parent's limit counts too); `rows`: every cluster's, with `live` (`AdminStore.clusters`), each one's
        view built once per change of it (`inventories`). A batch's jobs of one shape are judged against the
        clusters once."""
        views = [inventories.derived(c, _whole_view) for c in rows
                 if c["live"] and not c["cordoned"] and not c["problem"]]
        infos = {q["name"]: _queue_info(q) for q in queues}
        chains = queue_chains(list(infos.values()))
        anywhere: dict[Any, str | None] = {}
        out = []
        for view, queue, t in jobs:
            if view.shape not in anywhere:
                anywhere[view.shape] = cannot_run(view, views)
            out.append(anywhere[view.shape] or over_own_limit(view, [infos[q] for q in chains[queue]],
                                                               _tenant_info(t)) or "")
        return out

    async def explain(self, row: Mapping[str, Any], name_holders: bool = False) -> list[tuple[str, str | None]]:
        """For a waiting job, each cluster and why it does not fit there now (None: it does). The job room is
        reserved for is named when it is of the same tenant, or with `name_holders` (an admin asks)."""
        inflight = _inflight([HoldingJob(**r) for r in await self.jobs.holding()])
        states = [ClusterState(cluster_view(c, inflight.get(c["name"], {})), c["live"], c["cordoned"], c["problem"])
                  for c in (await self.admin.clusters(self.heartbeat_timeout))[0]]
        held = {}
        for cluster, (room, holders) in self.held.items():
            others = [(h, t) for h, t in holders if h != row["id"]]
            if others:  # what the job would find free were it not held for the others
                mine = any(h == row["id"] for h, _ in holders) and row["id"] in self.cache.waiting
                own = self.cache.waiting[row["id"]].view.request if mine else {}
                holder, tenant = others[0]
                named = holder if name_holders or tenant == row["tenant"] else "a job of another tenant"
                held[cluster] = ({r: a - own.get(r, 0) for r, a in room.items()}, named)
        return explain(job_view(row), states, self._refusals().get(row["id"], {}), held, self.holds.get(row["id"]))
