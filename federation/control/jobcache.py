"""The jobs a scheduling cycle looks at, kept in memory and brought up to date from the job event log.

Reading a hundred thousand waiting jobs and every running one from PostgreSQL every second would
cost more than deciding about them. Every phase change of a job appends an event in the same
transaction, and events commit in sequence order, so a job waits exactly when its latest event
left it Pending or Preempted, and holds resources exactly when that event left it Dispatched,
Running or Restarting: each cycle reads only the events since the last one, and the rows of the
jobs they name (Kueue's cache and queue manager fed by informers, with the event log as the informer).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.protobuf import json_format

from federation.kernel import gangs
from federation.kernel.durations import seconds_or_none
from federation.kernel.gpuask import AskError, GpuAsk, ask_of, template_annotations
from federation.kernel.hyperjob import part_of
from federation.kernel.jobspec import EXPECTED_DURATION, MAX_RUN_TIME, NODE_OWN_LABEL
from federation.kernel.resources import GPU, SHARE, Resources, parse_resources, with_share
from federation.scheduling.cycle import PendingJob
from federation.scheduling.fit import JobView
from federation.scheduling.queues import QueueManager
from federation.store.events import SENT_BACK_EVENTS
from federation.store.jobs import JobStore
from federation.store.phases import ACTIVE_PHASES, WAITING_PHASES
from federation.v1 import common_pb2

SCAN_LIMIT = 200_000
BATCH = 10_000


def job_view(row: Mapping[str, Any]) -> JobView:
    """What the cycle needs of a job: from its id, whole-gang request and spec."""
    spec = row["spec"]
    topo = spec.get("network_topology", {})
    largest: dict[str, int] = {}
    # The label pairs its pods select nodes by, but the node's own name (no agent reports every node's).
    node_selector = sorted({f"{k}={v}" for task in spec.get("tasks", []) for k, v in
                            task.get("node_selector", {}).items() if k != NODE_OWN_LABEL})
    templates = spec.get("resource_claim_templates_json")
    claims = gangs.claim_templates(templates) if templates else None
    sizes: set[int] = set()  # whole GPUs per pod, over its tasks that ask for some
    partition: tuple[int, dict[str, int], dict[str, Any]] | None = None  # the largest hard partition
    memory: list[tuple[str, int, int]] = []  # (task, devices, MiB) of its tasks whose pods ask for GPU memory
    for task in spec.get("tasks", []):
        request = parse_resources(task.get("resources", {}))
        if request.get(GPU, 0):
            sizes.add(request[GPU])
        request.update(gangs.counted(task.get("pod_template_json", ""), request.get(GPU, 0), claims))
        if SHARE in request and (ask := _memory_ask(task)) is not None:
            memory.append((task.get("name", ""), ask.devices, ask.memory))
            request.pop(SHARE)  # fitted per cluster (`fit.sized`), by its device memory
        for resource, amount in request.items():
            largest[resource] = max(largest.get(resource, 0), amount)
        policy = task.get("partition_policy", {})
        part_topo = policy.get("network_topology", {})
        if policy.get("partition_size") and part_topo.get("mode") == "hard" and (
                part_topo.get("highest_tier_name") or part_topo.get("highest_tier_allowed")):
            # (GPU shares left out: whole GPUs are what HyperNodes' free amounts are compared in)
            amounts = {r: a * int(policy["partition_size"]) for r, a in request.items() if a and r != SHARE}
            if partition is None or amounts.get(GPU, 0) > partition[0]:
                partition = (amounts.get(GPU, 0), amounts, part_topo)
    parts: tuple[tuple[tuple[str, int], ...], int, str] = ((), 0, "")
    if partition is not None:
        parts = (tuple(sorted(partition[1].items())), int(partition[2].get("highest_tier_allowed", 0)),
                 str(partition[2].get("highest_tier_name", "")))
    asks: tuple[tuple[int, int, int], ...] = ()
    if memory:  # as many of its pods as its gang's minimum counts (what `request` is)
        need = gangs.minimum_pods(json_format.ParseDict(spec, common_pb2.JobSpec(), ignore_unknown_fields=True))
        asks = tuple((need.get(task, 0), devices, mib) for task, devices, mib in memory if need.get(task, 0))
    return JobView(row["id"], with_share(row["request"]), largest, spec.get("cluster_selector", {}),
                   topo.get("mode", ""), topo.get("highest_tier_allowed", 0), topo.get("highest_tier_name", ""),
                   tuple(node_selector), sizes.pop() if len(sizes) == 1 else 0, *parts, asks, part_of(spec))


def _memory_ask(task: Mapping[str, Any]) -> GpuAsk | None:
    """The GPU memory each pod of the task asks for (KAI's gpu-memory), if that is how it asks for GPUs."""
    try:
        ask = ask_of(template_annotations(task.get("pod_template_json", "")), 0)
    except AskError:
        return None
    return ask if ask is not None and ask.memory else None


@dataclass(frozen=True, slots=True)
class HoldingJob:
    """A Dispatched, Running or Restarting job: it holds resources in its cluster."""

    id: str
    queue: str
    cluster: str
    priority: int
    priority_class: str
    seq: int
    request: Mapping[str, int]
    phase: str
    since: datetime | None = None  # started, else sent to its cluster
    expected: str | None = None  # its expected-duration annotation, as written
    checkpoint: str | None = None  # its checkpoint-interval annotation, as written
    hypernode: str = ""  # the lowest HyperNode holding its pods, once placed
    preemptions: int = 0  # times it was preempted or reclaimed before
    group: str = ""  # the HyperJob it is a sub-job of ("": none)
    # Worked out once, not each cycle: every cycle turns every holding job into a running gang.
    expected_seconds: float | None = field(init=False, compare=False)
    checkpoint_seconds: float | None = field(init=False, compare=False)
    since_epoch: float | None = field(init=False, compare=False)  # `since` in seconds since the epoch

    def __post_init__(self) -> None:
        object.__setattr__(self, "request", with_share(self.request))  # a job stored before GPU shares were counted
        object.__setattr__(self, "expected_seconds", seconds_or_none(self.expected))
        object.__setattr__(self, "checkpoint_seconds", seconds_or_none(self.checkpoint))
        object.__setattr__(self, "since_epoch", self.since.timestamp() if self.since else None)


class JobCache:
    def __init__(self, jobs: JobStore, clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.jobs = jobs
        self.clock = clock  # compared with the requeue times PostgreSQL wrote
        # Waiting jobs in their queues' order, kept across cycles from the events (the cycle walks its heads).
        self.backlog = QueueManager()
        self.version = 0  # how often `backlog` changed: a cycle reads it only as its snapshot saw it
        self.generation = 0  # how often it was loaded whole (what a leader wrote before may be unknown since)
        self.touched: set[str] = set()  # jobs with an event since the leader last took them (`take_touched`)
        self.holding: dict[str, HoldingJob] = {}
        # Holding jobs added, replaced or gone since the scheduler last took them (`take_holding_changed`); a load
        # changes `generation` instead: everything then is new.
        self.holding_changed: set[str] = set()
        # Per cluster, the requests of its holding jobs dispatched and not yet up (what its inventory does not count
        # yet), and of those running (what its agent should report): kept as jobs come and go, read every cycle.
        self.dispatched_to: dict[str, Resources] = {}
        self.running_in: dict[str, Resources] = {}
        # The reason PostgreSQL holds for each waiting job; None when an event may have changed it.
        self.reasons: dict[str, str | None] = {}
        self.expected: dict[str, float] = {}  # waiting job -> its expected-duration annotation, seconds
        self.refusals: dict[str, dict[str, str]] = {}  # waiting job -> clusters that refused it for good, and why
        # (job, cluster, why, event) a cluster sent back (rejected, not for good, evacuated, not ready) since the last
        # `take_sent_back`
        self.sent_back: list[tuple[str, str, str, str]] = []
        self.room_made: list[tuple[str, str]] = []  # (job, cluster) room is being made in, since `take_room_made`
        self.submitted: list[str] = []  # jobs submitted since `take_submitted`, in the order their events came
        # Waiting jobs out of every queue until their backoff after a requeue ends (the row's requeue_at): each
        # refresh puts those whose time has come in `backlog`.
        self.backing_off: dict[str, datetime] = {}
        self._cursor: int | None = None
        self._lock = asyncio.Lock()

    @property
    def waiting(self) -> Mapping[str, PendingJob]:
        return self.backlog.jobs

    async def refresh(self, upto: int | None = None) -> bool:
        """Bring `waiting`, `holding` and `reasons` up to date with PostgreSQL, as of the event numbered
        `upto` if given (not before the last refresh), else of the latest; True if it read them all."""
        async with self._lock:
            try:
                if self._cursor is None:
                    await self._load()
                    return True
                await self._catch_up(upto)
                return False
            except BaseException:
                self._cursor = None  # half caught up: read it all again next time
                raise

    async def _load(self) -> None:
        cursor = await self.jobs.last_event_seq()  # before the rows: later events are applied again
        self.holding, self.reasons, self.expected, self.refusals = {}, {}, {}, {}
        self.dispatched_to, self.running_in = {}, {}
        self.backing_off = {}
        self.backlog = QueueManager()
        self.version += 1
        self.generation += 1
        self.touched.clear()
        self.submitted.clear()
        self.holding_changed.clear()
        await self._add_waiting(await self.jobs.pending(SCAN_LIMIT))
        self._add_holding(await self.jobs.holding())
        self._cursor = cursor

    async def _catch_up(self, upto: int | None) -> None:
        assert self._cursor is not None
        if upto is None:
            upto = await self.jobs.last_event_seq()
        latest: dict[str, Any] = {}  # job -> its latest event
        # Jobs to read again though they may still be waiting here (sent and given back between two refreshes): a
        # refusal's row says which clusters refused them for good, a requeue's until when it waits out a backoff.
        reread: set[str] = set()
        cursor = self._cursor
        async for events in self._events(cursor, upto):
            for event in events:
                latest[event["job_id"]] = event
                if event["type"] in ("Rejected", "NotReady"):
                    reread.add(event["job_id"])
                if event["type"] == "MakingRoom":
                    self.room_made.append((event["job_id"], event["cluster"]))
                if event["type"] in SENT_BACK_EVENTS and " for good: " not in event["message"]:
                    self.sent_back.append((event["job_id"], event["cluster"], event["message"].partition(": ")[2],
                                           event["type"]))
            cursor = events[-1]["seq"]
        now = self.clock()
        arrived = [job_id for job_id, at in self.backing_off.items() if at <= now and job_id not in latest]
        for job_id in arrived:
            del self.backing_off[job_id]
        held: dict[str, Any] = {}
        self.touched.update(latest)
        for job_id, event in latest.items():
            phase = event["phase"]
            self.reasons[job_id] = None
            self.backing_off.pop(job_id, None)
            if phase not in WAITING_PHASES:
                if self.backlog.remove(job_id) is not None:
                    self.version += 1
                self.reasons.pop(job_id, None)
                self.expected.pop(job_id, None)
                self.refusals.pop(job_id, None)
            elif job_id not in self.waiting or job_id in reread:
                arrived.append(job_id)
            if (gone := self.holding.pop(job_id, None)) is not None:
                self._count(gone, -1)
                self.holding_changed.add(job_id)
            if phase in ACTIVE_PHASES:
                held[job_id] = event
        for start in range(0, len(arrived), BATCH):  # one no longer waiting has a later event, read next time
            await self._add_waiting(await self.jobs.arrived(arrived[start:start + BATCH]))
        self.submitted += [job_id for job_id, event in latest.items()
                           if event["type"] == "Submitted" and job_id in self.waiting]
        ids = list(held)
        for start in range(0, len(ids), BATCH):
            # Phase and cluster as of the event, to match inventories read at that moment: the row
            # may be further on already.
            for r in await self.jobs.holding(ids[start:start + BATCH]):
                event = held[r["id"]]
                self._hold(HoldingJob(**{**r, "phase": event["phase"], "cluster": event["cluster"]}))
        self._cursor = cursor

    async def _events(self, after: int, upto: int) -> AsyncIterator[list[Any]]:
        """The job events numbered after `after` up to `upto`, a batch at a time, oldest first."""
        while after < upto:
            events = await self.jobs.phases_after(after, upto, limit=BATCH)
            if not events:
                return
            yield events
            after = events[-1]["seq"]

    async def _add_waiting(self, rows: list[Any]) -> None:
        """Add these waiting jobs, with the views made from their specs (and, for preempted ones, why); those
        waiting out a backoff are held back until it ends. Rows with a spec (`JobStore.arrived`) are their own specs;
        the rest's are read."""
        now = self.clock()
        later = {r["id"]: r["requeue_at"] for r in rows if r["requeue_at"] is not None and r["requeue_at"] > now}
        if later:
            self.backing_off.update(later)
            for job_id in later:
                self.reasons.pop(job_id, None)
                if self.backlog.remove(job_id) is not None:  # sent and given back since the last refresh
                    self.version += 1
            rows = [r for r in rows if r["id"] not in later]
        added = []
        for start in range(0, len(rows), BATCH):
            batch = rows[start:start + BATCH]
            specs = {r["id"]: r for r in batch} if batch and "spec" in batch[0] else \
                await self.jobs.specs([r["id"] for r in batch])
            causes = await self.jobs.preemption_causes([r["id"] for r in batch if r["phase"] == "PREEMPTED"])
            # Off the loop that renews the lease: a view compiles the job's CEL selectors (bounded, but many)
            views = await asyncio.to_thread(_views, [specs[r["id"]] for r in batch])
            for r, view in zip(batch, views, strict=True):
                added.append(PendingJob(view, r["queue"], r["priority"], r["seq"], causes.get(r["id"], "")))
                self.reasons[r["id"]] = r["reason"]
                if r["refusals"]:
                    self.refusals[r["id"]] = dict(r["refusals"])
                annotations = specs[r["id"]]["spec"].get("annotations", {})
                expected = seconds_or_none(annotations.get(EXPECTED_DURATION, annotations.get(MAX_RUN_TIME)))
                if expected is not None:
                    self.expected[r["id"]] = expected
        self.backlog.extend(added)  # sorted once on a load, not job by job
        self.version += 1

    @property
    def cursor(self) -> int | None:
        """The last event the cache has read (None: it reads everything at its next refresh)."""
        return self._cursor

    async def peek_submitted(self, after: int, limit: int) -> tuple[int, list[PendingJob]]:
        """The jobs submitted after event `after` and still waiting, as they would join the backlog, without
        changing the cache: admission on arrival reads them while a cycle walks the backlog, which must not
        change under it. Returns the last event read and the jobs (at most `limit`, oldest first)."""
        upto = await self.jobs.last_event_seq()
        latest: dict[str, Any] = {}
        cursor = after
        async for events in self._events(cursor, upto):
            for event in events:
                latest[event["job_id"]] = event
            cursor = events[-1]["seq"]
            if len(latest) >= BATCH:
                break
        ids = [job_id for job_id, event in latest.items() if event["type"] == "Submitted"][:limit]
        if not ids:
            return cursor, []
        rows = [r for r in await self.jobs.arrived(ids) if r["requeue_at"] is None]
        views = await asyncio.to_thread(_views, rows)
        order = {job_id: i for i, job_id in enumerate(ids)}
        jobs = [PendingJob(view, r["queue"], r["priority"], r["seq"]) for r, view in zip(rows, views, strict=True)]
        return cursor, sorted(jobs, key=lambda job: order[job.id])

    def _add_holding(self, rows: list[Any]) -> None:
        for r in rows:
            self._hold(HoldingJob(**r))

    def _hold(self, job: HoldingJob) -> None:
        self.holding[job.id] = job
        self.holding_changed.add(job.id)
        self._count(job, 1)

    def _count(self, job: HoldingJob, sign: int) -> None:
        """Add (sign 1) or take (-1) the job's request to its cluster's sum for its phase; a cluster's sum goes
        when it is all zeros, as if never added to."""
        sums = self.dispatched_to if job.phase == "DISPATCHED" else self.running_in
        into = sums.setdefault(job.cluster, {})
        for r, a in job.request.items():
            into[r] = into.get(r, 0) + sign * a
        if sign < 0 and not any(into.values()):
            del sums[job.cluster]

    async def reread_reasons(self) -> None:
        """Take the reasons PostgreSQL holds now: a leader writes them without events, so a replica
        that was not leading has only those it read when each job arrived."""
        async with self._lock:
            if self._cursor is None:
                return  # the next refresh loads them
            current = {r["id"]: r["reason"] for r in await self.jobs.pending(SCAN_LIMIT)}
            self.reasons = {job_id: current.get(job_id) for job_id in self.waiting}

    def take_sent_back(self) -> list[tuple[str, str, str, str]]:
        """The (job, cluster, why, event type) sent back by a cluster since the last call, oldest first."""
        sent, self.sent_back = self.sent_back, []
        return sent

    def take_room_made(self) -> list[tuple[str, str]]:
        """The (job, cluster) some leader evicted gangs in to make room for the job, since the last call."""
        made, self.room_made = self.room_made, []
        return made

    def take_submitted(self) -> list[str]:
        """The jobs submitted since the last call and waiting when they were read, oldest event first."""
        submitted, self.submitted = self.submitted, []
        return submitted

    def take_holding_changed(self) -> set[str]:
        """The holding jobs added, replaced or gone since the last call (of this `generation`)."""
        changed, self.holding_changed = self.holding_changed, set()
        return changed

    def take_touched(self) -> set[str]:
        """The jobs with an event since the last call: their reasons in PostgreSQL may be anything."""
        touched, self.touched = self.touched, set()
        return touched

    def changed_reasons(self, reasons: Mapping[str, str]) -> dict[str, str]:
        """Of these reasons for waiting jobs, those PostgreSQL does not hold yet."""
        return {job_id: why for job_id, why in reasons.items()
                if job_id in self.reasons and self.reasons[job_id] != why}

    def reasons_written(self, reasons: Mapping[str, str]) -> None:
        """`reasons`, from `changed_reasons`, are what PostgreSQL holds now; but for the jobs with an event since
        they were worked out (read by a refresh while they were written): those may hold anything."""
        for job_id, why in reasons.items():
            if job_id in self.reasons and job_id not in self.touched:
                self.reasons[job_id] = why


def _views(specs: list[Any]) -> list[JobView]:
    return [job_view(spec) for spec in specs]
