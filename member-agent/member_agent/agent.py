"""The agent's core: assignments in, placements and pod events out, whatever runs the pods.

Every state change is fenced by (job id, attempt): a repeated Assign is answered with what was
already done, an older attempt is ignored, a newer one replaces the old pods. The latest report
of every job is kept, so a reconnecting agent can give the server its full state at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from federation.kernel.dra import DeviceRequest, class_resource
from federation.kernel.durations import parse_duration, seconds_or_none
from federation.kernel.gangs import claim_templates, minimum, minimum_pods
from federation.kernel.gpuask import MAX_MEMORY_MIB
from federation.kernel.jobspec import (
    CHECKPOINT_INTERVAL,
    MAX_REASON,
    MAX_REPORTED_HYPERNODES,
    MAX_RUN_TIME,
    ON_CLUSTER_LOST,
    ON_MAX_RUN_TIME,
    READY_TIMEOUT,
)
from federation.kernel.resources import Resources
from federation.kernel.tiers import TierFree
from federation.kernel.versions import RELEASE
from federation.v1 import agent_pb2, common_pb2
from member_agent import mig
from member_agent.drain import drain_timing
from member_agent.errors import BindError
from member_agent.faults import Fault
from member_agent.gang import gang_request, narrowed_requests, task_request
from member_agent.holds import Hold, holds_from, kept
from member_agent.lifecycle import ENDINGS, POD_EVENTS, Event, Response, answers, respond
from member_agent.metrics import (
    BIND_SECONDS,
    FENCED_GANGS,
    INVENTORY_AGE,
    ORPHAN_PODS_DELETED,
    PLACEMENTS,
    PODS_BOUND,
    TRANSIENT_RETRIES,
)
from member_agent.nodeasks import NodeAsks
from member_agent.nodehealth import DEFAULT_FAILURE_RATE, DEGRADED, FAILED, NodeHealth, summary
from member_agent.placement import GangRequest, Placement, PodPlacement, Rejection, place
from member_agent.provisioning import Ask, NodeGroup
from member_agent.state import ClusterState
from member_agent.topology import ROOT

log = logging.getLogger(__name__)
T = TypeVar("T")
# A job's DRA classes narrowed by its claims' own selectors, per node how many devices of each it could be given, and
# why no device of the cluster could ever meet one of its requests
Narrowed = tuple[set[str], dict[str, Resources], list[str]] | None

OUTBOX_LIMIT = 10_000
LOG_CHUNK = 64 * 1024  # bytes of a pod's log per message
INVENTORY_DELAY = 0.2  # seconds a burst of cluster changes is gathered into one inventory
MAX_IN_FLIGHT = 32  # orders carried out at once (each gang's binds are themselves many calls at once)
# Seconds cut off from the federation after which the agent stops its gangs, until a server says otherwise
# at registration: the server's default --lost-grace (federation.control.scheduler.LOST_GRACE; a test keeps them equal).
DEFAULT_FENCE = 300.0
MIG_WAIT = 600.0  # seconds a gang waits for repartitioned nodes to report their new MIG layout
PROVISION_TIMEOUT = 900.0  # seconds a gang waits for the nodes it asked the autoscaler for (Kueue's default is 15 min)
ENDED_POD_RETENTION = 86_400.0  # seconds an ended job's ended pods are kept, by default


@dataclass(frozen=True)
class Desired:
    """An attempt the federation runs in this cluster, as its last Assign said."""

    job: common_pb2.Job
    attempt: int


@dataclass
class Preparing:
    """A gang waiting here while NVIDIA's MIG manager repartitions idle GPUs for it."""

    attempt: int
    layouts: dict[str, str]  # node -> the MIG manager configuration asked for
    timer: asyncio.TimerHandle | None = None  # looks again when the wait is over, whatever the nodes said
    expired: bool = False  # the wait is over

    @property
    def said(self) -> str:
        return ", ".join(f"node {n} to {c}" for n, c in sorted(self.layouts.items()))


@dataclass
class AgentJob:
    job: common_pb2.Job
    attempt: int
    pods: list[PodPlacement]
    requests: dict[str, Resources]  # per task, one replica
    hypernode: str
    tier: int
    retries: int = 0  # restarts by lifecycle policy, counted against max_retry
    done: set[tuple[str, int]] = field(default_factory=set)  # pods that completed
    failed: dict[tuple[str, int], str] = field(default_factory=dict)  # pods that failed (until restarted), and why
    # Events a policy will answer, by pod ((task, -1) for a task's or the gang's), with the timer of
    # the policy's timeout (None: acting now). A pod that recovers takes its event off.
    waiting: dict[tuple[str, int], tuple[Event, asyncio.TimerHandle | None]] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)  # when it last started (its checkpoints count from it)
    accepted: frozenset[str] = frozenset()  # degraded nodes it was placed on knowingly (nothing healthy fitted)
    consumes: str = ""  # the ProvisioningRequest whose nodes it was placed on, said on its pods
    moved: str = ""  # drawn at each move off degraded hardware: its new pods' names differ from those still going
    overrun: asyncio.TimerHandle | None = None  # its maximum run time running out
    # Pods seen running (or done) since it was bound, while its ready timeout runs (`unready`): once its gang's
    # minimum of every task has run, the timer is off and they are no longer counted.
    ran: set[tuple[str, int]] = field(default_factory=set)
    unready: asyncio.TimerHandle | None = None
    _held: tuple[tuple[int, int], Resources] | None = None  # `held`, and the pod list it was summed from

    @property
    def gang(self) -> int:
        return gang_size(self.job.spec)

    def held(self) -> Resources:
        """What its pods hold. Every inventory sums it over every job held (thousands, in a burst of bindings),
        so it is summed again only when the pod list is another or of another length (a pod replaced keeps its
        task, and so what it holds)."""
        key = (id(self.pods), len(self.pods))
        if self._held is None or self._held[0] != key:
            total: dict[str, int] = {}
            for pod in self.pods:
                for resource, amount in self.requests[pod.task].items():
                    total[resource] = total.get(resource, 0) + amount
            self._held = (key, total)
        return self._held[1]


def gang_size(spec: common_pb2.JobSpec) -> int:
    """Its pods, as the pod mix counts gangs (`fragmentation.PodMix`)."""
    return sum(t.replicas for t in spec.tasks)


def _placements(pods: Sequence[PodPlacement]) -> list[common_pb2.PodPlacement]:
    return [common_pb2.PodPlacement(task=p.task, index=p.index, node=p.node) for p in pods]


def _task_requests(spec: common_pb2.JobSpec) -> dict[str, Resources]:
    """Per task, what one replica requests (as the placement core counts it)."""
    claims = claim_templates(spec.resource_claim_templates_json)
    return {t.name: task_request(t, claims)[0] for t in spec.tasks}


class Backend(Protocol):
    """Where pods really run: a simulation, or a Kubernetes API server."""

    state: ClusterState

    async def bind(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        """Create and bind these pods of the job (all of them, on its first bind)."""

    async def delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None = None) -> None:
        """Delete these pods of the job; None: all of them."""

    async def end(self, job: AgentJob) -> None:
        """The job ended: stop its pods still running, keep those that ended (and their logs) for a while."""

    async def adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        """Live pods of this attempt that an earlier run of the agent created, if pods outlive it here."""

    def managed(self) -> dict[tuple[str, int], int]:
        """(job id, attempt) -> pods of it the cluster holds that this agent manages, where pods outlive it."""

    def attempts(self, job_id: str) -> dict[int, int]:
        """Attempt -> pods of the job the cluster holds (those not already going), where pods outlive the agent."""

    def ended(self, job_id: str, attempt: int) -> tuple[int, int]:
        """Pods of this attempt that succeeded and that failed, found in the cluster (none held by this agent)."""

    def waits_when_lost(self, job_id: str) -> bool:
        """Whether the job's pods say it waits for its cluster when the cluster is lost (on-cluster-lost: wait)."""

    async def delete_attempt(self, job_id: str, attempt: int, anchor: bool, keep_ended: bool = False) -> int:
        """Delete the pods of an attempt no job of the agent holds (and with `anchor`, what the job's plugins
        made; with `keep_ended`, pods that ended are kept as an ended job's are); how many pods were deleted."""

    def unadopted(self) -> Resources:
        """What the pods this agent manages that no job of it holds (yet) hold."""

    def set_listener(self, on_pod: Callable[[str, int, str, int, str, str], object],
                     on_node: Callable[..., object], on_change: Callable[[], object]) -> None:
        """Where to report a pod's phase (job id, attempt, task, index, phase, reason), a node's readiness,
        and any other change of what is free or where (other workloads' pods, cordons, new nodes)."""

    def pod_statuses(self, job: AgentJob) -> list[common_pb2.PodStatus]:
        """The job's pods as the cluster has them now: names, phases, restarts, last messages."""

    def logs(self, job_id: str, attempt: int, task: str, index: int, follow: bool, previous: bool,
             tail_lines: int) -> AsyncIterator[bytes]:
        """One pod's log, as the cluster serves it, while the job runs or its ended pods are kept (LookupError:
        the attempt has no such pod here)."""

    async def repartition(self, layouts: Mapping[str, str]) -> None:
        """Ask NVIDIA's MIG manager to apply these layouts (node -> configuration name); BindError if it cannot
        be asked (or the cluster has no MIG manager)."""

    async def cordon(self, nodes: Sequence[str], cordon: bool) -> None:
        """Mark these nodes unschedulable (or schedulable again), as `kubectl cordon` does."""

    async def provision(self, ask: Ask, tasks: Sequence[tuple[str, int, Mapping[str, str]]],
                        labels: Mapping[str, str]) -> None:
        """Ask the cluster's autoscaler for these nodes, for these pods (task, how many, one's requests), on nodes
        with these labels; BindError if it cannot be asked."""

    async def provisioned(self, name: str) -> tuple[str, str]:
        """How an ask stands: ("Provisioned" | "Failed" | "", what the autoscaler said)."""

    async def unprovision(self, name: str, tasks: Sequence[str]) -> None:
        """Withdraw an ask (its request and templates)."""

    def narrowing(self, requests: Sequence[DeviceRequest]
                  ) -> Callable[[], tuple[dict[str, Resources], list[str]]] | None:
        """Where DRA requests have selectors of their own: a function, to call off the loop, counting per node the
        devices of their classes they could be given, and saying which requests no device of the cluster could
        ever meet (`claims.matching`); None where the cluster has no DRA."""


@dataclass
class Agent(NodeAsks):
    cluster: str
    labels: dict[str, str]
    backend: Backend
    version: str = RELEASE
    jobs: dict[str, AgentJob] = field(default_factory=dict)  # actual: the gangs this agent holds
    desired: dict[str, Desired] = field(default_factory=dict)  # the attempt the federation runs here, per job
    reports: dict[str, agent_pb2.JobUpdate] = field(default_factory=dict)
    outbox: asyncio.Queue[agent_pb2.AgentMessage] = field(default_factory=lambda: asyncio.Queue(OUTBOX_LIMIT))
    overflowed: bool = False  # the outbox dropped a message: the next connection must resync
    _acting: set[asyncio.Task[Any]] = field(default_factory=set)  # lifecycle actions under way
    _action_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Gangs being bound: the phases their pods reported meanwhile, (task, index, phase, reason).
    _binding: dict[str, list[tuple[str, int, str, str]]] = field(default_factory=dict)
    _orders: dict[str, tuple[asyncio.Lock, int]] = field(default_factory=dict)  # job -> its lock, orders pending
    _in_flight: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_IN_FLIGHT))
    _pods_said: dict[str, tuple[int, list[bytes]]] = field(default_factory=dict)  # job -> its pods as last reported
    _log_streams: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # stream id -> its reader

    _inventory_due: asyncio.TimerHandle | None = None
    _inventory_sent: float = field(default_factory=time.monotonic)
    # This process, for the server's one-agent-per-cluster rule: a reconnect of ours replaces our own stream.
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)
    fence_after: float | None = None  # seconds cut off before stopping the gangs; None: as the server says
    server_fence: float | None = None  # what the last server said at registration
    last_contact: float = field(default_factory=time.monotonic)  # when a heartbeat the server recorded was sent
    fenced: bool = False  # the gangs were stopped for being cut off; contact again ends it
    _beats: deque[float] = field(default_factory=deque)  # heartbeats sent on this stream and not acknowledged
    holds: list[Hold] = field(default_factory=list)  # gangs the federation holds room for here, as it last said
    _round: int = 0
    _drains: dict[str, tuple[asyncio.TimerHandle, frozenset[str]]] = field(default_factory=dict)  # job -> its move
    # Gangs on degraded hardware with no healthy room here, and why: the federation moves them when it can.
    _move_wanted: dict[str, str] = field(default_factory=dict)
    draining: dict[str, float | None] = field(default_factory=dict)  # nodes an operator drains -> deadline
    _health_seen: tuple[int, int] = (0, 0)  # the state and its health version the drains were planned on
    _rounds: dict[int, list[agent_pb2.Attempt]] = field(default_factory=dict)  # reconcile round -> what it reported
    _preparing: dict[str, Preparing] = field(default_factory=dict)  # job -> the repartitioning it waits for
    mig_wait: float = MIG_WAIT
    node_groups: list[NodeGroup] = field(default_factory=list)  # what the cluster's autoscaler can grow
    provision_timeout: float = PROVISION_TIMEOUT
    _asks: dict[str, Ask] = field(default_factory=dict)  # job -> the nodes it waits for
    # What the gangs' pods hold, summed, kept as gangs come and go and their pods change (`_count_held`): every
    # inventory reports it, and a burst of bindings sends an inventory per gang (summing thousands of gangs each).
    _held_total: dict[str, int] = field(default_factory=dict)
    # Messages put in the outbox so far, and the last inventory put there with its number: while the stream has not
    # taken it (fewer taken than its number), a binding brings it up to date instead of queueing one more.
    _puts: int = 0
    _queued_inventory: tuple[int, agent_pb2.AgentMessage] | None = None

    def __post_init__(self) -> None:
        self.backend.set_listener(self.pod_phase, self.node_ready, self.capacity_changed)
        INVENTORY_AGE.set_function(lambda: time.monotonic() - self._inventory_sent)

    @property
    def state(self) -> ClusterState:
        return self.backend.state

    # -- messages out --------------------------------------------------------------------

    def _send(self, message: agent_pb2.AgentMessage) -> None:
        try:
            self.outbox.put_nowait(message)
            self._puts += 1
        except asyncio.QueueFull:
            self.overflowed = True

    def _queue_inventory(self, coalesce: bool = False) -> None:
        """Queue the cluster's inventory. `coalesce` (a gang just bound): when the last inventory queued still
        waits, bring it up to date instead: it is ahead of every update queued since, and showing more in use than
        when it was queued is what those updates need (a job reported bound is never seen without its usage). So
        a burst of bindings sends an inventory per stream write rather than one per gang, and does not overflow
        the outbox. Not after resources were freed (`_forget`): an inventory ahead of the update ending a job must
        not show what the job held as free."""
        queued = self._queued_inventory
        if coalesce and queued is not None and self._puts - self.outbox.qsize() < queued[0]:
            queued[1].CopyFrom(self.inventory())
            return
        message = self.inventory()
        self._send(message)
        self._queued_inventory = (self._puts, message)

    def report_pod_statuses(self) -> int:
        """Send the pods of each gang whose statuses changed since last said (level-triggered, every few
        seconds: what users see of their pods, not what the federation decides on); how many were sent."""
        sent = 0
        for job_id, job in list(self.jobs.items()):
            statuses = self.backend.pod_statuses(job)
            said = [s.SerializeToString(deterministic=True) for s in statuses]
            if self._pods_said.get(job_id) == (job.attempt, said):
                continue
            self._pods_said[job_id] = (job.attempt, said)
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=job_id, attempt=job.attempt, type=agent_pb2.POD_STATUS, pod_statuses=statuses)))
            sent += 1
        for gone in self._pods_said.keys() - self.jobs.keys():
            del self._pods_said[gone]
        return sent

    def open_logs(self, request: agent_pb2.LogsRequest) -> None:
        """Stream a pod's log back as LogChunks until it ends, fails, or the server cancels it."""
        task = self._spawn(self._stream_logs(request))
        self._log_streams[request.stream_id] = task
        task.add_done_callback(lambda _: self._log_streams.pop(request.stream_id, None))

    def close_logs(self, stream_id: str) -> None:
        task = self._log_streams.pop(stream_id, None)
        if task is not None:
            task.cancel()

    async def _stream_logs(self, request: agent_pb2.LogsRequest) -> None:
        def chunk(**fields: Any) -> agent_pb2.AgentMessage:
            return agent_pb2.AgentMessage(log_chunk=agent_pb2.LogChunk(stream_id=request.stream_id, **fields))

        error = ""
        try:
            async for data in self.backend.logs(request.job_id, request.attempt, request.task, request.index,
                                                request.follow, request.previous, request.tail_lines):
                for start in range(0, len(data), LOG_CHUNK):
                    # A log read faster than the stream drains waits here, rather than overflow the outbox
                    # (which would cost this cluster's stream a resynchronisation).
                    while self.outbox.qsize() > OUTBOX_LIMIT // 2:
                        await asyncio.sleep(0.05)
                    self._send(chunk(data=data[start:start + LOG_CHUNK]))
        except LookupError as err:
            error = str(err)
        except asyncio.CancelledError:
            return  # the server stopped asking
        except Exception as err:  # the member cluster could not serve it: the user hears why
            error = f"reading the log failed: {err}"
        self._send(chunk(end=True, error=error))

    def _report(self, update: agent_pb2.JobUpdate) -> None:
        self.reports[update.job_id] = update
        self._send(agent_pb2.AgentMessage(job_update=update))

    def register(self) -> agent_pb2.AgentMessage:
        """The first message of every connection: who we are, the last word on every job, and every attempt
        the cluster holds pods of (reconcile round 0, answered in Registered)."""
        self._rounds = {0: self.running()}
        return agent_pb2.AgentMessage(register=agent_pb2.Register(
            cluster=self.cluster, labels=self.labels, agent_version=self.version, jobs=list(self.reports.values()),
            instance=self.instance, running=self._rounds[0]))

    # -- reconciliation ----------------------------------------------------------------------

    def running(self) -> list[agent_pb2.Attempt]:
        """Every attempt the cluster holds pods of that this agent manages, whether a job of this run holds it
        or not; gangs being bound are left out until they are (their outcome is reported then)."""
        found = dict(self.backend.managed())
        for job in self.jobs.values():
            found.setdefault((job.job.id, job.attempt), len(job.pods))
        return [agent_pb2.Attempt(job_id=job_id, attempt=attempt, pods=pods)
                for (job_id, attempt), pods in sorted(found.items()) if job_id not in self._binding]

    def reconcile_request(self) -> agent_pb2.AgentMessage:
        """A periodic account of what runs here, for the server to answer with what is live."""
        self._round += 1
        self._rounds[self._round] = running = self.running()
        for old in [r for r in self._rounds if r < self._round - 8]:  # answers lost with a stream never come
            del self._rounds[old]
        return agent_pb2.AgentMessage(reconcile=agent_pb2.Reconcile(round=self._round, running=running))

    async def reconcile(self, answer: agent_pb2.Reconciled) -> int:
        """Desired state (the attempts the federation runs here) against actual (what this agent reported the
        cluster holds in that round): delete every reported attempt that is not live, the whole gang, each
        in its job's turn with its orders. Returns when done, with how many pods were deleted."""
        reported = self._rounds.pop(answer.round, [])
        live = {(a.job_id, a.attempt) for a in answer.live}
        stale = [a for a in reported if (a.job_id, a.attempt) not in live]
        deleted = await asyncio.gather(*(self._serially(a.job_id, self._delete_stale(a)) for a in stale))
        return sum(deleted)

    def spawn_reconcile(self, answer: agent_pb2.Reconciled) -> None:
        self._spawn(self.reconcile(answer))

    async def _delete_stale(self, stale: agent_pb2.Attempt) -> int:
        want = self.desired.get(stale.job_id)
        if want is not None and want.attempt == stale.attempt:  # the federation has moved on from it
            del self.desired[stale.job_id]
        pods = await self.reconcile_job(stale.job_id, {stale.attempt})
        report = self.reports.get(stale.job_id)
        if report is not None and report.attempt <= stale.attempt:
            del self.reports[stale.job_id]  # settled: not worth resending on every connection
        if pods:
            ORPHAN_PODS_DELETED.inc(pods)
            log.warning("deleted %d pod(s) of job %s attempt %d: the federation no longer runs it here", pods,
                        stale.job_id, stale.attempt)
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=stale.job_id, attempt=stale.attempt, type=agent_pb2.ORPHANS_DELETED, pods=pods,
                reason="the federation no longer runs this attempt here (found by reconciliation)")))
        return pods

    # -- fencing ------------------------------------------------------------------------------

    def fence_seconds(self) -> float:
        return self.fence_after if self.fence_after is not None else self.server_fence or DEFAULT_FENCE

    def heartbeat_sent(self) -> None:
        self._beats.append(time.monotonic())

    def unheard_for(self) -> float:
        """Seconds since the oldest heartbeat on this stream that the server has not acknowledged (0: none)."""
        return time.monotonic() - self._beats[0] if self._beats else 0.0

    def heartbeat_acknowledged(self, holds: Iterable[Any] = ()) -> None:
        """The server recorded our oldest unacknowledged heartbeat: the federation heard us when it was sent. With
        it come the gangs the federation holds room for here, the whole set (`holds`)."""
        self.holds = holds_from(holds)
        if self._beats:
            self.last_contact = max(self.last_contact, self._beats.popleft())
            self.fenced = False

    async def check_fence(self) -> int:
        """Stop every gang once cut off from every server for the fence time: the server runs them elsewhere
        a heartbeat timeout later, and a job must never run twice while its agent lives. Each stopped job is
        reported FENCED on the next connection. How many gangs were stopped."""
        if self.fenced or time.monotonic() - self.last_contact <= self.fence_seconds():
            return 0
        self.fenced = True
        # A job that waits for its cluster when it is lost is never run elsewhere: nothing to fence.
        attempts = [a for a in self.running() if not self._waits_when_lost(a.job_id)]
        if not attempts:
            return 0
        log.error("cut off from the federation for over %.0f s: stopping the %d gang(s) this cluster runs",
                  self.fence_seconds(), len(attempts))
        await asyncio.gather(*(self._serially(a.job_id, self._fence(a)) for a in attempts))
        FENCED_GANGS.inc(len(attempts))
        return len(attempts)

    def _waits_when_lost(self, job_id: str) -> bool:
        held = self.jobs.get(job_id)
        if held is not None:
            return held.job.spec.annotations.get(ON_CLUSTER_LOST) == "wait"
        return self.backend.waits_when_lost(job_id)

    async def _fence(self, attempt: agent_pb2.Attempt) -> None:
        why = f"cut off from the federation for over {self.fence_seconds():g} s, the agent stopped the gang"
        want = self.desired.get(attempt.job_id)
        if want is not None and want.attempt == attempt.attempt:
            del self.desired[attempt.job_id]
        await self.reconcile_job(attempt.job_id, {attempt.attempt})
        self._report(agent_pb2.JobUpdate(job_id=attempt.job_id, attempt=attempt.attempt, type=agent_pb2.FENCED,
                                         reason=why))

    def capacity_changed(self) -> None:
        """The cluster changed under us: send a fresh inventory soon, once for a burst of changes; and see
        whether replicas beyond a gang's minimum fit now."""
        if self._inventory_due is None:
            self._inventory_due = asyncio.get_running_loop().call_later(INVENTORY_DELAY, self._send_inventory)

    def _send_inventory(self) -> None:
        self._inventory_due = None
        if (id(self.state), self.state.health_version) != self._health_seen:
            self.health_changed()
        self._queue_inventory()
        if any(_short(job) for job in self.jobs.values()):
            self._spawn(self._grow())
        for job_id in [*self._preparing, *self._asks]:  # repartitioned or new nodes may be there
            self._serially(job_id, self.reconcile_job(job_id))

    async def _grow(self) -> None:
        """Place the replicas a running gang was started without (it started at its minimum), where they
        fit under the HyperNode holding the rest, as Volcano binds them when room comes."""
        async with self._action_lock:
            for job in list(self.jobs.values()):
                if not _short(job) or job.waiting or job.done or self.jobs.get(job.job.id) is not job:
                    continue
                narrowed = await self._narrowed(job.job.spec)
                if self.jobs.get(job.job.id) is not job:
                    continue
                placement = self._fit(gang_request(job.job.spec, self.state.topology, running=job.pods), narrowed,
                                      job.job.id)
                if isinstance(placement, Rejection) or not placement.pods:
                    continue
                for pod in placement.pods:
                    self.state.allocate(pod.node, job.requests[pod.task], 1, pod.devices, pod.share, job.gang)
                try:
                    await self.backend.bind(job, placement.pods)
                except BindError as err:
                    for pod in placement.pods:
                        self.state.release(pod.node, job.requests[pod.task], pod.devices, pod.share)
                    log.info("job %s: %d more replicas could not be bound: %s", job.job.id, len(placement.pods), err)
                    continue
                if self.jobs.get(job.job.id) is not job:  # removed while binding: its new pods go too
                    await self.backend.delete(job, placement.pods)
                    continue
                PODS_BOUND.inc(len(placement.pods))
                self._count_held(job, -1)
                job.pods += placement.pods
                self._count_held(job, 1)
                job.hypernode, job.tier = placement.hypernode, placement.tier
                self._queue_inventory()
                self._report(agent_pb2.JobUpdate(
                    job_id=job.job.id, attempt=job.attempt, type=agent_pb2.PODS_ADDED,
                    reason=f"{len(placement.pods)} more replicas joined ({len(job.pods)} running)",
                    hypernode=job.hypernode, tier=job.tier, retries=job.retries, placements=_placements(job.pods)))

    def _count_held(self, job: AgentJob, sign: int) -> None:
        """Add (1) or take off (-1) what the gang's pods hold now to the gangs' total, around a change of them."""
        for resource, amount in job.held().items():
            self._held_total[resource] = self._held_total.get(resource, 0) + sign * amount

    def inventory(self) -> agent_pb2.AgentMessage:
        self._inventory_sent = time.monotonic()
        capacity, allocatable, used = self.state.totals()
        topology = _tier_messages(self.state.summary())
        domains = [d for d in self.state.topology.domains.values() if d.name != ROOT]
        if len(domains) > MAX_REPORTED_HYPERNODES:  # too many to send every time: only the tiers' summary
            domains = []
        hypernodes = [agent_pb2.HyperNodeFree(
            name=d.name, tier=d.tier, parent=d.parent if d.parent and d.parent != ROOT else "",
            free=agent_pb2.ResourceAmounts(amounts=self.state.domain_free[d.name]),
            allocatable=agent_pb2.ResourceAmounts(amounts=self.state.domain_allocatable[d.name]))
            for d in sorted(domains, key=lambda d: (-d.tier, d.name))]
        managed = dict(self.backend.unadopted())
        for resource, amount in self._held_total.items():
            if amount:
                managed[resource] = managed.get(resource, 0) + amount
        state = self.state
        health = agent_pb2.ClusterHealth(
            degraded_nodes=len(state.degraded), failed_nodes=len(state.failed),
            summary=[line[:MAX_REASON] for line in summary({**state.failed, **state.degraded})],
            degraded_hypernodes=sorted(state.degraded_links)[:MAX_REPORTED_HYPERNODES])
        if state.degraded or state.degraded_links:
            health.healthy_topology.extend(_tier_messages(state.summary(healthy=True)))
        pairs = state.node_label_pairs
        return agent_pb2.AgentMessage(inventory=agent_pb2.Inventory(
            node_labels=agent_pb2.NodeLabels(pairs=pairs) if pairs is not None else None,
            gpu_free_nodes=state.gpu_free_nodes(),
            gpu_device_memory=min(max(state.device_memory.values(), default=0), MAX_MEMORY_MIB),
            health=health, managed=agent_pb2.ResourceAmounts(amounts=managed),
            capacity=agent_pb2.ResourceAmounts(amounts=capacity),
            allocatable=agent_pb2.ResourceAmounts(amounts=allocatable),
            used=agent_pb2.ResourceAmounts(amounts=used), healthy=bool(self.state.ready),
            nodes=len(self.state.free), ready_nodes=len(self.state.ready), topology=topology, hypernodes=hypernodes,
            partitionable=_tier_messages(mig.partitionable(self.state)), node_groups=self.node_group_messages()))

    def drain_outbox(self) -> None:
        """A new connection starts from full state, so nothing queued for the old one matters."""
        while not self.outbox.empty():
            self.outbox.get_nowait()
        self._queued_inventory = None
        self.overflowed = False
        self._beats.clear()  # acknowledgements of the old stream's heartbeats never come
        self._pods_said.clear()  # said again on the new stream (the server may have missed the last)
        for stream_id in list(self._log_streams):  # their readers were on the old stream
            self.close_logs(stream_id)

    # -- control in ----------------------------------------------------------------------

    def dispatch(self, message: agent_pb2.ControlMessage) -> None:
        """Carry out an order in the background: one job's orders in the order they came, different jobs'
        side by side (at most MAX_IN_FLIGHT), so binding one gang does not hold up the next. Placement is
        still one gang at a time: it never awaits, and books what it chose before binding starts."""
        order = getattr(message, message.WhichOneof("msg") or "assign", None)
        job_id = order.job.id if isinstance(order, agent_pb2.Assign) else getattr(order, "job_id", "")
        if isinstance(order, agent_pb2.NodeOrder):
            job_id = NODE_ORDERS  # one after another, beside the gangs' orders rather than before them
        self._serially(job_id, self.handle(message))

    def _serially(self, job_id: str, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `work` after whatever is under way or waiting for the same job (at most MAX_IN_FLIGHT at once)."""
        lock, pending = self._orders.get(job_id, (asyncio.Lock(), 0))
        self._orders[job_id] = (lock, pending + 1)

        async def carry_out() -> T:
            try:
                async with lock, self._in_flight:
                    return await work
            finally:
                lock_now, left = self._orders[job_id]
                if left == 1:
                    del self._orders[job_id]
                else:
                    self._orders[job_id] = (lock_now, left - 1)

        return self._spawn(carry_out())

    async def handle(self, message: agent_pb2.ControlMessage) -> None:
        kind = message.WhichOneof("msg")
        if kind == "assign":
            await self.assign(message.assign.job, message.assign.attempt)
        elif kind in ("cancel", "preempt"):
            order = getattr(message, kind)
            await self.remove(order.job_id, order.attempt, order.reason)
        elif kind == "logs":
            self.open_logs(message.logs)
        elif kind == "logs_cancel":
            self.close_logs(message.logs_cancel.stream_id)
        elif kind == "node_order":
            done = await self.order_node(message.node_order)
            log.info("operator order: %s", done.message)
            self._send(agent_pb2.AgentMessage(node_order_done=done))

    async def assign(self, job: common_pb2.Job, attempt: int) -> None:
        """The federation runs this attempt here: record it as desired and reconcile the job. A repeat, or an
        older attempt, is answered with what was already done."""
        held, report = self.jobs.get(job.id), self.reports.get(job.id)
        if held is not None and attempt <= held.attempt:
            if attempt == held.attempt and report is not None:
                self._send(agent_pb2.AgentMessage(job_update=report))
            return
        if held is None and report is not None and report.attempt >= attempt:
            self._send(agent_pb2.AgentMessage(job_update=report))
            return
        self.desired[job.id] = Desired(job, attempt)
        await self.reconcile_job(job.id)

    async def reconcile_job(self, job_id: str, stale: Collection[int] = ()) -> int:
        """Make what runs of the job in this cluster what the federation wants, from desired state (the attempt
        it last assigned here, if any) and actual state (the attempt this agent holds, and the attempts whose
        pods the cluster holds): an attempt held and not wanted is released; pods of an older attempt, or of
        one the server said is not live (`stale`), are deleted; the wanted attempt, when not held, is adopted
        from the pods it already has, or placed and bound. Idempotent, as controller-runtime's Reconcile: every
        order, reconciliation answer and restart comes here. Returns how many pods of `stale` were deleted."""
        want, held = self.desired.get(job_id), self.jobs.get(job_id)
        deleted, released = 0, None
        prep = self._preparing.get(job_id)
        if prep is not None and (want is None or want.attempt != prep.attempt):
            self._stop_preparing(job_id)
        ask = self._asks.get(job_id)
        if ask is not None and (want is None or want.attempt != ask.attempt):
            await self.drop_ask(job_id)
        if held is not None and (want is None or want.attempt != held.attempt):
            deleted += len(held.pods) if held.attempt in stale else 0
            released = held.attempt
            await self._release(held)
            self._send_inventory()
        found = self.backend.attempts(job_id)
        for attempt in sorted(found):
            if attempt != released and (attempt in stale or (want is not None and attempt < want.attempt)):
                last = want is None and job_id not in self.jobs and set(found) <= {attempt, *stale}
                deleted += await self.backend.delete_attempt(job_id, attempt, anchor=last)
        if want is not None and job_id not in self.jobs:
            if await self._adopt(want.job, want.attempt):
                PLACEMENTS.labels("adopted").inc()
                return deleted
            succeeded, failed = self.backend.ended(job_id, want.attempt)
            if succeeded or failed:  # its pods ended while no agent watched
                whole = not failed and succeeded >= sum(minimum_pods(want.job.spec).values())
                await self.backend.delete_attempt(job_id, want.attempt, anchor=whole, keep_ended=whole)
                if whole:  # at least the gang's minimum completed, none failed: it is done
                    del self.desired[job_id]
                    self._report(agent_pb2.JobUpdate(
                        job_id=job_id, attempt=want.attempt, type=agent_pb2.JOB_SUCCEEDED,
                        reason=f"all {succeeded} pods had completed when the agent found them after a restart"))
                    return deleted
            await self._place(want.job, want.attempt)  # a remnant lost unwatched is not the job's fault: whole again
        return deleted

    async def _narrowed(self, spec: common_pb2.JobSpec) -> Narrowed:
        """Where the job's DRA claims have CEL selectors of their own, only some of their classes' devices can be
        its pods': those classes, and per node how many of their devices the pods could be given (counted off the
        event loop); None where there are none, or the cluster has no DRA."""
        requests = narrowed_requests(spec)
        work = self.backend.narrowing(requests) if requests else None
        if work is None:
            return None
        counts, never = await asyncio.to_thread(work)
        return {class_resource(r.device_class) for r in requests}, counts, never

    def _fit(self, gang: GangRequest, narrowed: Narrowed, placing: str | None = None) -> Placement | Rejection:
        """Where the gang fits now, its narrowed DRA classes counted as its pods could be given them. `placing`:
        the job whose new pods these are, kept off the nodes kept for the gangs the federation holds room for
        (`holds`); None for pods a running gang gets back (restarts and moves keep what it had)."""
        held = kept(self.state, self.holds, placing) if placing is not None and self.holds else {}
        with self.state.lowered(held):
            if narrowed is None:
                return place(self.state, gang)
            with self.state.narrowed(narrowed[0], narrowed[1]):
                return place(self.state, gang)

    async def _place(self, job: common_pb2.Job, attempt: int) -> None:
        """Place the gang and bind all its pods or none; report the outcome."""
        started = time.monotonic()
        request = gang_request(job.spec, self.state.topology)
        narrowed = await self._narrowed(job.spec)
        if narrowed is not None and narrowed[2]:  # whatever is free: never offered this cluster again
            PLACEMENTS.labels("rejected").inc()
            self.desired.pop(job.id, None)
            self._report(agent_pb2.JobUpdate(job_id=job.id, attempt=attempt, type=agent_pb2.REJECTED,
                                             reason="; ".join(narrowed[2]), permanent=True))
            return
        placement = self._fit(request, narrowed, job.id)
        if isinstance(placement, Rejection) and self.holds and isinstance(self._fit(request, narrowed), Placement):
            # (whose gangs is not said: another tenant's, maybe)
            placement = Rejection(f"{placement.reason}; the nodes it would fit are kept for a gang the federation "
                                  "holds room for here")
        if isinstance(placement, Rejection):
            if self.wants_nodes(job):
                why = await self.ask_for_nodes(job, attempt, placement.reason, _task_requests(job.spec))
            else:
                why = await self._repartition(job, attempt, placement.reason, request)
            if why is None:  # waits here for its slices or its nodes
                return
            PLACEMENTS.labels("rejected").inc()
            self.desired.pop(job.id, None)  # the server takes it back
            self._report(agent_pb2.JobUpdate(job_id=job.id, attempt=attempt, type=agent_pb2.REJECTED, reason=why))
            return
        prep = self._stop_preparing(job.id)
        ask = self._asks.get(job.id)
        requests = _task_requests(job.spec)
        # Restarts count over the job's whole life (the server's count so far), not per attempt.
        bound = AgentJob(job, attempt, list(placement.pods), requests, placement.hypernode, placement.tier,
                         retries=job.status.retries, accepted=self._knowingly(placement),
                         consumes=ask.name if ask is not None else "")
        for pod in bound.pods:
            self.state.allocate(pod.node, requests[pod.task], 1, pod.devices, pod.share, gang_size(job.spec))
        self._binding[job.id] = early = []
        try:
            async for trying in AsyncRetrying(retry=retry_if_exception(_transient), wait=BIND_BACKOFF,
                                              stop=stop_after_attempt(BIND_TRIES), reraise=True,
                                              before_sleep=_retrying(job.id)):
                with trying:
                    await self.backend.bind(bound, bound.pods)
        except BindError as err:
            for pod in bound.pods:
                self.state.release(pod.node, requests[pod.task], pod.devices, pod.share)
            PLACEMENTS.labels("rejected").inc()
            self.desired.pop(job.id, None)
            tries = "" if err.permanent else f" (after {BIND_TRIES} tries)"
            self._report(agent_pb2.JobUpdate(job_id=job.id, attempt=attempt, type=agent_pb2.REJECTED,
                                             reason=f"{err}{tries}", permanent=err.permanent))
            return
        finally:
            del self._binding[job.id]
        PLACEMENTS.labels("bound").inc()
        PODS_BOUND.inc(len(bound.pods))
        BIND_SECONDS.observe(time.monotonic() - started)
        self.jobs[job.id] = bound
        self._count_held(bound, 1)
        self._limit_run(bound)
        self._await_ready(bound)
        self._queue_inventory(coalesce=True)  # before the update, so the server never sees the job without its usage
        said = f"placed after NVIDIA's MIG manager repartitioned {prep.said}" if prep else \
            f"placed once the autoscaler provisioned {ask.said}" if ask else ""
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.BOUND, hypernode=placement.hypernode,
            tier=placement.tier, placements=_placements(bound.pods), reason=said))
        if ask is not None:  # its pods hold the nodes now: the request has done its part
            self._spawn(self.drop_ask(job.id))
        self._watch_pending(bound, bound.pods)
        for phase in early:  # what the pods did while the gang was being bound
            self.pod_phase(job.id, attempt, *phase)

    async def _repartition(self, job: common_pb2.Job, attempt: int, rejected: str, request: GangRequest
                           ) -> str | None:
        """A gang that does not fit for want of MIG slices waits here while idle MIG-capable GPUs are cut into
        them (said to the federation); None while it waits, else why it is rejected after all."""
        prep = self._preparing.get(job.id)
        if prep is not None and prep.attempt == attempt:
            nodes = {n: self.state.topology.nodes[n].labels for n in prep.layouts if n in self.state.topology.nodes}
            failed = sorted(n for n, labels in nodes.items() if labels.get(mig.STATE_LABEL) == mig.FAILED)
            busy = sorted(n for n, labels in nodes.items() if mig.reconfiguring(labels))
            if not failed and busy and not prep.expired:
                return None
            self._stop_preparing(job.id)
            if failed:
                return f"{rejected}; NVIDIA's MIG manager failed to repartition node(s) {', '.join(failed)}"
            if busy:
                return (f"{rejected}; node(s) {', '.join(busy)} did not report their new MIG layout within "
                        f"{self.mig_wait:g} s")
            return f"{rejected} (after repartitioning {prep.said})"
        wanted = minimum(job.spec)
        layouts = mig.plan_for(wanted, self.state, request.highest_tier if request.mode == "hard" else None)
        if layouts is None:
            return rejected
        nodes = self.state.topology.nodes
        try:  # a node being cut into it already is waited for as it is (relabelling it could undo its success)
            await self.backend.repartition({n: c for n, c in layouts.items()
                                            if nodes[n].labels.get(mig.CONFIG_LABEL) != c})
        except BindError as err:
            return f"{rejected}; repartitioning GPUs for it failed: {err}"
        for node in layouts:  # nothing new goes there while it is cut (its labels will say so too)
            self.state.set_ready(node, False)
        self._preparing[job.id] = prep = Preparing(attempt, layouts)

        def expire() -> None:
            prep.expired = True
            self._serially(job.id, self.reconcile_job(job.id))

        prep.timer = asyncio.get_running_loop().call_later(self.mig_wait, expire)
        asked = ", ".join(f"{a} {r}" for r, a in sorted(wanted.items()) if mig.profile_of(r))
        log.info("job %s: repartitioning %s for %s", job.id, prep.said, asked)
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.PREPARING,
            reason=f"NVIDIA's MIG manager is repartitioning {prep.said} for its {asked}; it is placed "
                   "when they report their new layout"))
        return None

    def _stop_preparing(self, job_id: str) -> Preparing | None:
        prep = self._preparing.pop(job_id, None)
        if prep is not None and prep.timer is not None:
            prep.timer.cancel()
        return prep

    async def _adopt(self, job: common_pb2.Job, attempt: int) -> bool:
        """Take over the pods this attempt already has, as a restarted agent must, instead of making more.

        A gang found whole is the job's again, counted by its tasks' requests. A gang found in pieces
        raises JobUnknown: a policy may keep the survivors and restart the missing pods, or end the
        job; with none, the pieces are deleted and the gang placed afresh, since pods lost while no
        agent watched are not the job's fault and a whole gang is the safe start.
        """
        found = await self.backend.adopt(job.id, attempt)
        if not found:
            return False
        requests = _task_requests(job.spec)
        for pod in found:
            self.state.allocate(pod.node, requests[pod.task], 1, pod.devices, pod.share, gang_size(job.spec))
        hypernode = self.state.topology.lowest_common_domain(p.node for p in found)
        adopted = AgentJob(job, attempt, found, requests, hypernode, self.state.topology.domains[hypernode].tier,
                           retries=job.status.retries)
        have = {(p.task, p.index) for p in found}
        missing = tuple((t.name, i) for t in job.spec.tasks for i in range(t.replicas) if (t.name, i) not in have)
        unknown = Event("JobUnknown", "", missing,
                        f"the agent restarted and found {len(found)} of the gang's {len(found) + len(missing)} pods")
        if missing and respond(job.spec, unknown, adopted.retries) is None:
            await self.backend.delete(adopted)
            for pod in found:
                self.state.release(pod.node, requests[pod.task], pod.devices, pod.share)
            return False
        self.jobs[job.id] = adopted
        self._count_held(adopted, 1)
        self._limit_run(adopted)
        self._await_ready(adopted, {(p.task, p.index) for p in self.backend.pod_statuses(adopted)
                                    if p.phase in ("Running", "Succeeded")})
        self._queue_inventory()
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.BOUND, hypernode=hypernode, tier=adopted.tier,
            reason=f"adopted {len(found)} running pods after the agent restarted",
            placements=_placements(found)))
        log.info("adopted %d pods of job %s attempt %d", len(found), job.id, attempt)
        if missing:
            self._raise(adopted, unknown)
        return True

    async def remove(self, job_id: str, attempt: int, reason: str) -> None:
        """The federation no longer runs this attempt here (cancelled, preempted, moved): reconcile the job."""
        want = self.desired.get(job_id)
        if want is not None and want.attempt == attempt:
            del self.desired[job_id]
        prep = self._preparing.get(job_id)
        if prep is not None and prep.attempt == attempt:
            self._stop_preparing(job_id)
        ask = self._asks.get(job_id)
        if ask is not None and ask.attempt == attempt:
            await self.drop_ask(job_id)
        current = self.jobs.get(job_id)
        if current is None or current.attempt != attempt:
            return
        await self.reconcile_job(job_id)
        log.info("removed job %s attempt %d: %s", job_id, attempt, reason)

    async def _release(self, job: AgentJob) -> None:
        await self.backend.delete(job)
        self._forget(job)

    def _forget(self, job: AgentJob) -> None:
        """Release the job's resources, once: a cancel and a policy's ending may both be under way."""
        if self.jobs.get(job.job.id) is not job:
            return
        self._queued_inventory = None  # what it frees must not show in an inventory ahead of its end's update
        if job.overrun is not None:
            job.overrun.cancel()
        if job.unready is not None:
            job.unready.cancel()
        for pod in job.pods:
            self.state.release(pod.node, job.requests[pod.task], pod.devices, pod.share)
        for key in list(job.waiting):
            self._stand_down(job, key)
        self._move_wanted.pop(job.job.id, None)
        self._count_held(job, -1)
        del self.jobs[job.job.id]

    def _finish(self, job: AgentJob, succeeded: bool, reason: str) -> None:
        if self.jobs.get(job.job.id) is not job:
            return
        # Its pods as they ended (a user reads them after the job too, and the cluster keeps them for a while),
        # then the end itself. Pods it stopped are going, and not listed.
        self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
            job_id=job.job.id, attempt=job.attempt, type=agent_pb2.POD_STATUS,
            pod_statuses=[p for p in self.backend.pod_statuses(job) if p.phase in ENDED_PODS])))
        self._forget(job)
        want = self.desired.get(job.job.id)
        if want is not None and want.attempt == job.attempt:  # ended here: nothing more to run
            del self.desired[job.job.id]
        # The update before the inventory, so the server never sees the freed resources while it still
        # counts them as the job's: that would hand them to whoever is next, not to the queue they are owed to.
        self._report(agent_pb2.JobUpdate(job_id=job.job.id, attempt=job.attempt, reason=reason,
                                         type=agent_pb2.JOB_SUCCEEDED if succeeded else agent_pb2.JOB_FAILED))
        self._send_inventory()

    # -- pod events and faults -------------------------------------------------------------

    def pod_phase(self, job_id: str, attempt: int, task: str, index: int, phase: str, reason: str) -> None:
        """The backend saw a pod of ours change phase (a Kubernetes phase, or Evicted)."""
        job = self.jobs.get(job_id)
        if job is None and job_id in self._binding:
            self._binding[job_id].append((task, index, phase, reason))
        if job is None or job.attempt != attempt:
            return
        if phase in ("Running", "Succeeded") and job.unready is not None:
            job.ran.add((task, index))
            if _ready(job):
                job.unready.cancel()
                job.unready, job.ran = None, set()
        if phase == "Running":
            self.pod_recovered(job_id, task, index)
        elif phase == "Succeeded":
            self._pod_succeeded(job, task, index)
        elif phase in PHASE_EVENTS:
            self.pod_failed(job_id, task, index, reason, PHASE_EVENTS[phase])

    def pod_failed(self, job_id: str, task: str, index: int, reason: str, kind: str = "PodFailed") -> bool:
        """Report a pod's failure, eviction or loss, and answer it with the job's lifecycle policy."""
        job = self.jobs.get(job_id)
        pod = _live(job, task, index) if job else None
        if job is None or pod is None:
            return False
        job.failed[(task, index)] = f"{kind}: {reason}"
        self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
            job_id=job_id, attempt=job.attempt, type=agent_pb2.POD_FAILED, reason=f"{kind}: {reason}",
            placements=_placements([pod]))))
        waiting = job.waiting.get((task, index))
        if waiting is None or waiting[0].kind != kind:  # else already waiting to act on this pod
            self._raise(job, Event.of_pod(kind, task, index, reason))
        return True

    def pod_recovered(self, job_id: str, task: str, index: int) -> bool:
        """The pod runs (it started, its container restarted, its node came back): a waiting policy stands down."""
        job = self.jobs.get(job_id)
        if job is None or not self._stand_down(job, (task, index)):
            return False
        job.failed.pop((task, index), None)
        log.info("job %s: %s[%d] runs before its policy acted", job_id, task, index)
        return True

    def _pod_succeeded(self, job: AgentJob, task: str, index: int) -> None:
        """A pod completed. Its share stays the job's until the job ends, as the server counts it."""
        if _live(job, task, index) is None:
            return
        self._stand_down(job, (task, index))
        job.done.add((task, index))
        if len(job.done) == len(job.pods):  # the job is done: what it left in the cluster goes
            self._spawn(self._end(job, True, "all pods completed"))
        elif all((p.task, p.index) in job.done for p in job.pods if p.task == task):
            self._raise(job, Event("TaskCompleted", task, tuple(sorted(k for k in job.done if k[0] == task)),
                                   "all its pods succeeded"))

    def _watch_pending(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        """New pods are Pending until their backend says they run; a PodPending policy waits for that."""
        if not answers(job.job.spec, "PodPending"):
            return  # the common case: nothing to watch, no work per pod
        for pod in pods:
            self._raise(job, Event.of_pod("PodPending", pod.task, pod.index, "created, not running"))

    def _raise(self, job: AgentJob, event: Event) -> None:
        """Answer an event with the job's policy: at once, or when its timeout passes unless it stood down."""
        response = respond(job.job.spec, event, job.retries)
        if response is None:
            return
        key = _key(event)
        self._stand_down(job, key)
        timer = None
        if response.timeout > 0:
            timer = asyncio.get_running_loop().call_later(response.timeout, self._start_acting, job, key)
        job.waiting[key] = (event, timer)
        if timer is None:
            self._start_acting(job, key)

    @staticmethod
    def _stand_down(job: AgentJob, key: tuple[str, int]) -> bool:
        waiting = job.waiting.pop(key, None)
        if waiting is not None and waiting[1] is not None:
            waiting[1].cancel()
        return waiting is not None

    def _start_acting(self, job: AgentJob, key: tuple[str, int]) -> None:
        self._spawn(self._act(job, key))

    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(work)
        self._acting.add(task)
        task.add_done_callback(self._acting.discard)
        return task

    async def _act(self, job: AgentJob, key: tuple[str, int]) -> None:
        """One action at a time, decided when it is taken: a node's loss fails several pods at once,
        and each restart must see the retries and the placement the one before left. An event that
        stood down meanwhile (the pod recovered, or a restart replaced it) is no longer there."""
        async with self._action_lock:
            waiting = job.waiting.pop(key, None) if self.jobs.get(job.job.id) is job else None
            response = respond(job.job.spec, waiting[0], job.retries) if waiting else None
            if response is not None:
                await self._carry_out(job, response)

    async def _carry_out(self, job: AgentJob, response: Response) -> None:
        if response.action in ENDINGS or response.action == "FailJob":
            await self._end(job, ENDINGS.get(response.action, False), response.reason)
            return
        failure = await self._restart(job, set(response.pods))
        if failure:
            await self._end(job, False, f"{response.reason}; the restart failed: {failure}")
            return
        self._queue_inventory()
        self._report(agent_pb2.JobUpdate(
            job_id=job.job.id, attempt=job.attempt, type=agent_pb2.POD_RESTARTED, reason=response.reason,
            hypernode=job.hypernode, tier=job.tier, retries=job.retries,
            placements=_placements(job.pods)))

    def _limit_run(self, job: AgentJob) -> None:
        """Stop the job when its maximum run time runs out, counted from when this attempt started: the server's
        start time when the job is assigned again while it runs (an agent reconnected or restarted: it adopts the
        pods), else now (a new attempt, whatever an earlier one ran). The job fails, as Kueue's
        maximumExecutionTimeSeconds deactivates a workload."""
        limit = seconds_or_none(job.job.spec.annotations.get(MAX_RUN_TIME))
        if limit is None or limit <= 0:
            return
        status = job.job.status
        running = status.phase in (common_pb2.RUNNING, common_pb2.RESTARTING) and status.HasField("start_time")
        started = status.start_time.ToMicroseconds() / 1e6 if running else time.time()
        left = max(started + limit - time.time(), 0.0)
        text = job.job.spec.annotations[MAX_RUN_TIME]

        def overran() -> None:
            if self.jobs.get(job.job.id) is not job:
                return
            log.info("job %s attempt %d ran past its maximum run time of %s", job.job.id, job.attempt, text)
            why = f"stopped: it ran past its maximum run time of {text} ({MAX_RUN_TIME})"
            if job.job.spec.annotations.get(ON_MAX_RUN_TIME) == "requeue":
                self._serially(job.job.id, self._give_back(job, agent_pb2.RUN_TIME_EXCEEDED, why))
            else:
                self._spawn(self._end(job, False, why))

        job.overrun = asyncio.get_running_loop().call_later(left, overran)

    def _await_ready(self, job: AgentJob, ran: Collection[tuple[str, int]] = ()) -> None:
        """Give the gang back to the federation when its pods are not all running within its ready timeout, counted
        from when this attempt was sent here (Kueue's waitForPodsReady): a gang that cannot start here (an image
        that never arrives, a node that never takes its pods) holds its GPUs for nothing, and the federation may
        have a cluster where it starts. Only the first start is watched: a pod that fails later is its lifecycle
        policy's."""
        limit = seconds_or_none(job.job.spec.annotations.get(READY_TIMEOUT))
        if limit is None or limit <= 0:
            return
        job.ran = set(ran)
        if _ready(job):
            return
        status = job.job.status
        sent = status.dispatch_time.ToMicroseconds() / 1e6 if status.HasField("dispatch_time") else time.time()
        left = max(sent + limit - time.time(), 0.0)
        job.unready = asyncio.get_running_loop().call_later(left, self._start_giving_back, job)

    def _start_giving_back(self, job: AgentJob) -> None:
        if self.jobs.get(job.job.id) is job and job.unready is not None:
            self._serially(job.job.id, self._give_back_unready(job))

    async def _give_back_unready(self, job: AgentJob) -> None:
        """The gang did not start in time: the federation is told (PODS_NOT_READY) to requeue it."""
        if self.jobs.get(job.job.id) is not job or job.unready is None or _ready(job):
            return
        need = minimum_pods(job.job.spec)
        short = ", ".join(f"{task} {min(sum(1 for t, _ in job.ran if t == task), n)} of {n}"
                          for task, n in need.items() if n)
        text = job.job.spec.annotations[READY_TIMEOUT]
        why = f"its pods were not all running {text} after it was sent here ({short} running; {READY_TIMEOUT})"
        log.info("job %s attempt %d: %s", job.job.id, job.attempt, why)
        await self._give_back(job, agent_pb2.PODS_NOT_READY, why)

    async def _give_back(self, job: AgentJob, kind: int, why: str) -> None:
        """Delete the gang's pods and hand the job back to the federation (`kind` says why it is to run again)."""
        if self.jobs.get(job.job.id) is not job:
            return
        await self.backend.delete(job)
        if self.jobs.get(job.job.id) is not job:
            return
        self._forget(job)
        want = self.desired.get(job.job.id)
        if want is not None and want.attempt == job.attempt:
            del self.desired[job.job.id]
        self._report(agent_pb2.JobUpdate(job_id=job.job.id, attempt=job.attempt, type=kind, reason=why))
        self._send_inventory()

    async def _end(self, job: AgentJob, succeeded: bool, reason: str) -> None:
        """Stop every pod of the job still running and report its end, as its policy decided."""
        await self.backend.end(job)
        self._finish(job, succeeded, reason)

    async def _restart(self, job: AgentJob, keys: set[tuple[str, int]], retry: bool = True,
                       avoid_degraded: bool = False) -> str:
        """Recreate these pods of the job, back under the HyperNode holding the rest; why not, if it fails.
        A restart by policy counts as a retry; a move off degraded hardware does not, and avoids it."""
        job.retries += retry
        if not retry:
            job.moved = uuid.uuid4().hex[:5]
        old = [p for p in job.pods if (p.task, p.index) in keys]
        await self.backend.delete(job, old)
        narrowed = await self._narrowed(job.job.spec)
        if self.jobs.get(job.job.id) is not job:
            return "the job was removed meanwhile"
        for pod in old:
            self.state.release(pod.node, job.requests[pod.task], pod.devices, pod.share)
            self._stand_down(job, (pod.task, pod.index))
        job.done -= keys
        for key in keys:
            job.failed.pop(key, None)
        self._count_held(job, -1)
        job.pods = [p for p in job.pods if p not in old]
        self._count_held(job, 1)
        gang = gang_request(job.job.spec, self.state.topology, running=job.pods)
        placement = self._fit(replace(gang, avoid_degraded=True) if avoid_degraded else gang, narrowed)
        if isinstance(placement, Rejection):
            return placement.reason
        for pod in placement.pods:
            self.state.allocate(pod.node, job.requests[pod.task], 1, pod.devices, pod.share, job.gang)
        job.accepted |= self._knowingly(placement)
        self._count_held(job, -1)
        job.pods += placement.pods
        self._count_held(job, 1)
        job.hypernode, job.tier = placement.hypernode, placement.tier
        self._watch_pending(job, placement.pods)  # before binding: they may start before it returns
        try:
            await self.backend.bind(job, placement.pods)
        except BindError as err:
            return f"binding failed: {err}"
        PODS_BOUND.inc(len(placement.pods))
        if self.jobs.get(job.job.id) is not job:  # removed while binding: its new pods must go too
            await self.backend.delete(job, placement.pods)
            return "the job was removed meanwhile"
        return ""

    def node_ready(self, node: str, ready: bool, why: str = "") -> bool:
        """A lost (or failed) node offers nothing and its pods fail (event Unknown); back, its pods recover."""
        if node not in self.state.free:
            return False
        self.state.set_ready(node, ready)
        for job in list(self.jobs.values()):
            for pod in job.pods:
                if pod.node != node or (pod.task, pod.index) in job.done:
                    continue
                if ready:
                    self.pod_recovered(job.job.id, pod.task, pod.index)
                else:
                    self.pod_failed(job.job.id, pod.task, pod.index, why or f"node {node} lost", kind="Unknown")
        self._queue_inventory()
        return True


    # -- health: moving gangs off degraded or drained hardware ----------------------------------

    def _knowingly(self, placement: Placement) -> frozenset[str]:
        """The unsound nodes a placement used: nothing healthy fitted, so its gang is not moved off them."""
        return frozenset(p.node for p in placement.pods if p.node in self.state.degraded
                         or p.node in self.state.behind_links)

    def _unsound(self) -> dict[str, tuple[float, str]]:
        """Nodes gangs should leave -> (their failure rate per hour, why)."""
        state = self.state
        out = {n: (DEFAULT_FAILURE_RATE, f"HyperNode {d} links degraded ({state.degraded_links[d]})")
               for n, d in state.behind_links.items()}
        out |= {n: (h.failure_rate, f"node {n} degraded ({', '.join(h.reasons)})") for n, h in state.degraded.items()}
        out |= {n: (0.0, f"node {n} drained by an operator") for n in self.draining}
        return out

    def health_changed(self) -> None:
        """Plan, for every gang on hardware that turned degraded or is being drained, when it moves (at its next
        checkpoint, or at once when waiting risks more work: `drain.drain_timing`); call off the move of a gang
        whose hardware recovered. Level-triggered: the whole plan from the state as it is now."""
        self._health_seen = (id(self.state), self.state.health_version)
        unsound, now = self._unsound(), time.monotonic()
        for job_id in [j for j in self._drains if j not in self.jobs]:
            self._drains.pop(job_id)[0].cancel()
        for job in list(self.jobs.values()):
            on = frozenset(p.node for p in job.pods if (p.task, p.index) not in job.done and p.node in unsound
                           and (p.node not in job.accepted or p.node in self.draining))
            planned = self._drains.get(job.job.id)
            if planned is not None and planned[1] == on:
                continue
            if planned is not None:
                planned[0].cancel()
                del self._drains[job.job.id]
            if not on:
                self._call_off_move(job)
                continue
            timing = drain_timing(now - job.started, _checkpoint(job), max(unsound[n][0] for n in on))
            delay = timing.delay
            deadlines = [d for n in on if (d := self.draining.get(n)) is not None]
            if deadlines and min(deadlines) - now < delay:
                delay = max(0.0, min(deadlines) - now)
            why = "; ".join(sorted({unsound[n][1] for n in on}))
            timer = asyncio.get_running_loop().call_later(delay, self._start_drain, job)
            self._drains[job.job.id] = (timer, on)
            log.info("job %s: %s: %s", job.job.id, why, timing.why)
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=job.job.id, attempt=job.attempt, type=agent_pb2.DRAIN_PLANNED,
                reason=f"{why}; {timing.why if delay == timing.delay else f'moving in {delay:.0f}s (drain grace)'}")))

    def _start_drain(self, job: AgentJob) -> None:
        self._serially(job.job.id, self._drain(job))

    def _fits_without(self, job: AgentJob, keys: set[tuple[str, int]], narrowed: Narrowed) -> bool:
        """Whether these pods of the job could be placed again on healthy hardware, the rest staying."""
        old = [p for p in job.pods if (p.task, p.index) in keys]
        for pod in old:
            self.state.release(pod.node, job.requests[pod.task], pod.devices, pod.share)
        try:
            rest = [p for p in job.pods if p not in old]
            gang = replace(gang_request(job.job.spec, self.state.topology, running=rest), avoid_degraded=True)
            return isinstance(self._fit(gang, narrowed), Placement)
        finally:
            for pod in old:
                self.state.allocate(pod.node, job.requests[pod.task], 1, pod.devices, pod.share, job.gang)

    async def _drain(self, job: AgentJob) -> None:
        """Move the gang off unsound hardware now: its pods there alone when healthy room under its HyperNode
        takes them, else the whole gang elsewhere in this cluster, else back to the federation (EVACUATED)."""
        async with self._action_lock:
            planned = self._drains.pop(job.job.id, None)
            if self.jobs.get(job.job.id) is not job or planned is None:
                return
            unsound = self._unsound()
            live = {(p.task, p.index) for p in job.pods if (p.task, p.index) not in job.done}
            moving = {(p.task, p.index) for p in job.pods if (p.task, p.index) in live and p.node in planned[1]
                      and p.node in unsound}
            if not moving:
                return
            why = "; ".join(sorted({unsound[p.node][1] for p in job.pods if (p.task, p.index) in moving}))
            narrowed = await self._narrowed(job.job.spec)
            keys = moving if self._fits_without(job, moving, narrowed) else \
                live if self._fits_without(job, live, narrowed) else None
            drained = any(p.node in self.draining for p in job.pods if (p.task, p.index) in moving)
            if keys is None and not drained:
                # Degraded, not drained: moved only to better hardware, which the federation alone can find
                # (`federation.scheduling.moves`); meanwhile it runs on here.
                want = f"{why}; no healthy room in this cluster"
                if self._move_wanted.get(job.job.id) != want:
                    self._move_wanted[job.job.id] = want
                    log.info("job %s: %s: asking the federation for healthier hardware", job.job.id, want)
                    self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                        job_id=job.job.id, attempt=job.attempt, type=agent_pb2.MOVE_WANTED, reason=want)))
                return
            self._call_off_move(job)
            failure = "no healthy room in this cluster" if keys is None else \
                await self._restart(job, keys, retry=False, avoid_degraded=True)
            if not failure:
                job.started = time.monotonic()  # restarted from its checkpoint
                job.accepted = frozenset()
                self._queue_inventory()
                self._report(agent_pb2.JobUpdate(
                    job_id=job.job.id, attempt=job.attempt, type=agent_pb2.DRAINED, hypernode=job.hypernode,
                    tier=job.tier, retries=job.retries, placements=_placements(job.pods),
                    reason=f"moved {len(keys or ())} pod(s) off: {why}"))
                return
            await self._give_back(job, agent_pb2.EVACUATED, f"{why}; {failure}: run it elsewhere")

    def _call_off_move(self, job: AgentJob) -> None:
        """The gang no longer needs another cluster (its hardware recovered, or room here took it): said once."""
        if self._move_wanted.pop(job.job.id, None) is not None:
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=job.job.id, attempt=job.attempt, type=agent_pb2.MOVE_WANTED)))

    def inject(self, fault: Fault) -> bool:
        """A hardware fault, injected (a simulated cluster's fault schedule or admin port): the node or HyperNode
        turns degraded, failed or healthy as a health monitor would report it. False: no such node here."""
        state = self.state
        if fault.kind == "hypernode":
            if fault.name not in state.topology.domains or fault.name == ROOT:
                return False
            links = dict(state.link_faults)
            links.pop(fault.name, None)
            if fault.state == DEGRADED:
                links[fault.name] = fault.reason or "LinkDegraded"
            state.set_health(dict(state.degraded), links)
        else:
            if fault.name not in state.free:
                return False
            degraded = {n: h for n, h in state.degraded.items() if n != fault.name}
            was_failed = state.failed.pop(fault.name, None) is not None
            reason = fault.reason or fault.state
            if fault.state == DEGRADED:
                rate = DEFAULT_FAILURE_RATE if fault.rate is None else fault.rate
                degraded[fault.name] = NodeHealth(DEGRADED, (reason,), failure_rate=rate)
            elif fault.state == FAILED:
                state.failed[fault.name] = NodeHealth(FAILED, (reason,))
            state.set_health(degraded, dict(state.link_faults))
            if fault.state == FAILED and not was_failed:
                self.node_ready(fault.name, False, f"node {fault.name} failed ({reason})")
            elif was_failed and fault.state != FAILED:
                self.node_ready(fault.name, fault.name not in self.draining)
        self.health_changed()
        self._send_inventory()
        return True

    async def order_node(self, order: agent_pb2.NodeOrder) -> agent_pb2.NodeOrderDone:
        """An operator's cordon, drain or uncordon of a node or HyperNode: what was done, or why nothing was.
        The inventory follows once for a burst of orders, as for any change of the cluster."""
        try:
            nodes = [order.name] if order.kind == "node" else self.state.nodes_under(order.name)
        except KeyError:
            nodes = []
        if not nodes or any(n not in self.state.free for n in nodes):
            return agent_pb2.NodeOrderDone(order_id=order.order_id, done=False,
                                           message=f"{order.kind} {order.name} is not in cluster {self.cluster}")
        await self.backend.cordon(nodes, order.action != "uncordon")
        if order.action == "drain":
            deadline = time.monotonic() + order.grace_seconds if order.grace_seconds > 0 else None
            self.draining.update(dict.fromkeys(nodes, deadline))
        elif order.action == "uncordon":
            for node in nodes:
                self.draining.pop(node, None)
        self.health_changed()
        self.capacity_changed()
        return agent_pb2.NodeOrderDone(order_id=order.order_id, done=True, message=(
            f"{order.action} of {order.kind} {order.name} ({len(nodes)} node{'s' if len(nodes) > 1 else ''})"))


def _tier_messages(tiers: Sequence[TierFree]) -> list[agent_pb2.TierFree]:
    return [agent_pb2.TierFree(tier=t.tier, tier_name=t.tier_name,
                               max_free=agent_pb2.ResourceAmounts(amounts=t.max_free),
                               max_capacity=agent_pb2.ResourceAmounts(amounts=t.max_capacity)) for t in tiers]


def _checkpoint(job: AgentJob) -> float | None:
    try:
        return parse_duration(job.job.spec.annotations.get(CHECKPOINT_INTERVAL, "")) or None
    except ValueError:
        return None


NODE_ORDERS = "node orders"  # their own line of _serially (no job id has a space)
PHASE_EVENTS = {"Failed": "PodFailed", "Evicted": "PodEvicted", "Unknown": "Unknown"}
ENDED_PODS = ("Succeeded", "Failed")
BIND_TRIES = 4  # a transient refusal is tried again this many times in all, within the same assignment
BIND_BACKOFF = wait_exponential(multiplier=0.5, max=4)  # 0.5 s, 1 s, 2 s between them


def _transient(err: BaseException) -> bool:
    return isinstance(err, BindError) and not err.permanent


def _retrying(job_id: str) -> Callable[[RetryCallState], None]:
    def note(state: RetryCallState) -> None:
        TRANSIENT_RETRIES.inc()
        log.info("job %s: the cluster refused for now (%s); trying again", job_id,
                 state.outcome.exception() if state.outcome else "")
    return note


def _short(job: AgentJob) -> bool:
    """Whether the gang runs fewer replicas than it has (it started at its minimum)."""
    return len(job.pods) < sum(t.replicas for t in job.job.spec.tasks)


def _ready(job: AgentJob) -> bool:
    """Whether as many of each task's pods have run as its gang's minimum needs (Kueue's PodsReady)."""
    ran: dict[str, int] = {}
    for task, _ in job.ran:
        ran[task] = ran.get(task, 0) + 1
    return all(ran.get(task, 0) >= n for task, n in minimum_pods(job.job.spec).items())


def _live(job: AgentJob, task: str, index: int) -> PodPlacement | None:
    """The job's pod (task, index) when it is there and has not completed."""
    if (task, index) in job.done:
        return None
    return next((p for p in job.pods if p.task == task and p.index == index), None)


def _key(event: Event) -> tuple[str, int]:
    """What a waiting event is filed under: its pod, or its task (-1) for the events of a task or gang."""
    return event.pods[0] if event.kind in POD_EVENTS else (event.task, -1)
