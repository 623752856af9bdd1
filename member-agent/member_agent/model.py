"""The agent's model, which its parts share: the attempt the federation wants here (`Desired`), the gang it
holds (`AgentJob`), the backend that runs pods, and the bounds and helpers every part reads."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from federation.kernel.dra import DeviceRequest
from federation.kernel.gangs import claim_templates
from federation.kernel.resources import Resources
from federation.v1 import agent_pb2, common_pb2
from member_agent.gang import task_request
from member_agent.lifecycle import Event
from member_agent.placement import PodPlacement
from member_agent.provisioning import Ask
from member_agent.state import ClusterState

ENDED_PODS = ("Succeeded", "Failed")  # a pod that ran to its end, either way
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
class Renewal:
    """Pods of the running attempt to be made anew, and why: a lifecycle policy's restart (a retry; wherever they fit
    under the gang's HyperNode) or a move off unsound hardware (not a retry; on sound nodes only)."""

    pods: frozenset[tuple[str, int]]  # (task, index)
    reason: str
    move: bool = False


@dataclass(frozen=True)
class Ending:
    """The attempt is to end here, and how (`kind`, the update that says so): JOB_SUCCEEDED or JOB_FAILED stop its
    pods and keep those that ended; RUN_TIME_EXCEEDED, PODS_NOT_READY or EVACUATED delete them and give the job back
    to the federation to run again."""

    kind: int
    reason: str

    @property
    def ends_the_job(self) -> bool:
        return self.kind in (agent_pb2.JOB_SUCCEEDED, agent_pb2.JOB_FAILED)


@dataclass(frozen=True)
class Desired:
    """What should run of a job in this cluster: the attempt the federation runs here, as its last Assign said, with
    every pod of the gang up to its replicas (those it started without are added as room comes); and what the agent
    itself decided of that attempt since: pods to make anew (`renewal`), or its end (`ending`). Policies, drains,
    timers and growth change only this; `JobLoop.reconcile_job` makes the pods so."""

    job: common_pb2.Job
    attempt: int
    renewal: Renewal | None = None
    ending: Ending | None = None


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
    # Its pods the cluster runs, each (task, index) -> (the pod's name, its phase as last heard): a pod the agent
    # deletes, or one that failed, leaves it, so what the cluster says of that pod next is not taken for the gang's.
    live: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)
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

    @functools.cached_property
    def replicas(self) -> int:
        """All its tasks' replicas (its spec never changes): read for every gang each time room may have come."""
        return sum(t.replicas for t in self.job.spec.tasks)

    def unfollow(self, pods: Iterable[tuple[str, int]] | None = None) -> None:
        """Stop taking the cluster's word on these pods (None: all the gang's): the agent deletes them."""
        if pods is None:
            self.live.clear()
        for key in pods or ():
            self.live.pop(key, None)

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


def placements_of(pods: Sequence[PodPlacement]) -> list[common_pb2.PodPlacement]:
    return [common_pb2.PodPlacement(task=p.task, index=p.index, node=p.node) for p in pods]


def task_requests(spec: common_pb2.JobSpec) -> dict[str, Resources]:
    """Per task, what one replica requests (as the placement core counts it)."""
    claims = claim_templates(spec.resource_claim_templates_json)
    return {t.name: task_request(t, claims)[0] for t in spec.tasks}


class PodListener(Protocol):
    """Told each change of a pod the agent manages: its job, attempt, task, index, phase and why; and the pod's
    name where the cluster names pods ("" where the backend reports only the gang's live pods)."""

    def __call__(self, job_id: str, attempt: int, task: str, index: int, phase: str, reason: str,
                 name: str = "") -> object: ...


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

    def set_listener(self, on_pod: PodListener, on_node: Callable[..., object], on_change: Callable[[], object]
                     ) -> None:
        """Where to report a pod's phase, a node's readiness, and any other change of what is free or where
        (other workloads' pods, cordons, new nodes)."""

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


def runs_short(job: AgentJob) -> bool:
    """Whether the gang runs fewer replicas than it has (it started at its minimum)."""
    return len(job.pods) < job.replicas
