"""What a scheduling cycle is given and what it decides: plain data, shared by the cycle's modules."""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from federation.kernel.resources import Resources
from federation.scheduling import native
from federation.scheduling.fairshare import Tree
from federation.scheduling.fit import ClusterView, JobView
from federation.scheduling.flavors import FlavorInfo, Flavors
from federation.scheduling.forecast import remaining
from federation.scheduling.provisioning import Provision

RESOURCE_FOR_FEWEST = "nvidia.com/gpu"  # a victim's work lost is counted in these
# A move for a gang may lose at most this long of the gang's own GPUs in others' work.
MOVE_BUDGET_SECONDS = 300.0
# Seconds a gang back from a preemption is spared by reclaim (RunningJob.protected): the hysteresis that stops
# queue priority and reclaim handing one gang back and forth.
REPREEMPT_GRACE = 120.0
NO_READY_CLUSTER = "no member cluster is ready"


@dataclass(frozen=True)
class TenantInfo:
    name: str
    weight: int = 1
    guarantee: Mapping[str, int] = field(default_factory=dict)
    limit: Mapping[str, int] = field(default_factory=dict)  # empty: no limit
    disabled: bool = False
    # The most of its unused guarantee other tenants may use (Kueue's lendingLimit); a resource absent: all of it.
    lending_limit: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class QueueInfo:
    name: str
    tenant: str
    weight: int = 1
    priority: int = 0
    guarantee: Mapping[str, int] = field(default_factory=dict)
    limit: Mapping[str, int] = field(default_factory=dict)
    reclaimable: bool = True
    state: str = "OPEN"
    flavors: tuple[str, ...] = ()  # the flavors its jobs may use, in order of preference; () = any
    parent: str = ""  # a queue of the same tenant whose share this one takes part of ("" = the tenant's)
    # The most of its unused guarantee its sibling queues may use (Kueue's lendingLimit); absent: all of it.
    lending_limit: Mapping[str, int] = field(default_factory=dict)
    # Admission checks its jobs pass before their cluster runs them (`provisioning` lets them be sent to capacity a
    # cluster's autoscaler can add).
    admission_checks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingJob:
    view: JobView
    queue: str
    priority: int
    seq: int
    cause: str = ""  # why it was preempted, when it was: kept at the front of its reason until it runs again
    # Derived, as fields rather than properties: read hundreds of thousands of times a cycle.
    id: str = field(init=False, compare=False)
    rank: tuple[int, int] = field(init=False, compare=False)  # place in its queue: priority, then submission

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", self.view.id)
        object.__setattr__(self, "rank", (-self.priority, self.seq))


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: str
    queue: str
    cluster: str
    priority: int
    seq: int
    request: Mapping[str, int]
    preemptible: bool
    # What evicting it costs is worked out against the snapshot's clock (`Snapshot.now`: the edge reads the clock, the
    # core does not), so that a gang is the same object from one cycle to the next while it runs.
    started: float | None = None  # when it started (or was sent to its cluster), seconds since the epoch; None: now
    checkpoint: float | None = None  # seconds between its checkpoints (its annotation); None: it keeps none
    expected: float | None = None  # expected whole run in seconds (annotation, or its queue's past jobs); None: unknown
    protected_run: float = 0.0  # the first seconds of its run, in which no other queue may reclaim it (its priority
    # class's protected run time)
    hypernode: str = ""  # the lowest HyperNode holding all its pods ("" unknown)
    preempted_before: bool = False  # it was preempted or reclaimed before this run: see `protected`
    group: str = ""  # the HyperJob it is a sub-job of ("": none)

    def ran_for(self, now: float) -> float:
        """Seconds it has run at `now` (seconds since the epoch)."""
        return max(now - self.started, 0.0) if self.started is not None else 0.0

    def protected(self, now: float) -> bool:
        """Spared by reclaim: in its priority class's protected run time, or back from a preemption less than
        REPREEMPT_GRACE ago. The second is hysteresis: a gang reclaimed for one queue and placed again by its
        own queue's priority is not reclaimed again at once for the same shortfall (the two rules would
        otherwise hand it back and forth every cycle while capacity frees up)."""
        ran = self.ran_for(now)
        return ran < self.protected_run or (self.preempted_before and ran < REPREEMPT_GRACE)

    def since_checkpoint(self, now: float) -> float:
        """Seconds of its work that evicting it at `now` would lose (all it did, without checkpoints)."""
        ran = self.ran_for(now)
        return ran % self.checkpoint if self.checkpoint else ran

    def at_risk(self, now: float) -> float:
        """GPU-seconds of work lost if it is evicted at `now`."""
        return self.since_checkpoint(now) * self.request.get(RESOURCE_FOR_FEWEST, 0)

    def pays_to_reclaim(self, now: float) -> bool:
        """Whether evicting it at `now` gains its queue's rival more than it costs: the work lost since its last
        checkpoint against the time the rival would otherwise wait for it to end (its expected remaining run).
        Unknown run times do not hold reclaim back."""
        return self.expected is None or self.since_checkpoint(now) < remaining(self.expected, self.ran_for(now))


@dataclass(frozen=True)
class Snapshot:
    tenants: Sequence[TenantInfo]
    queues: Sequence[QueueInfo]
    pending: Sequence[PendingJob]
    # Dispatched or Running: they hold resources. A `running.Running` kept across cycles, or any collection of them.
    running: Collection[RunningJob]
    clusters: Sequence[ClusterView]  # Ready and not cordoned
    capacity: Mapping[str, int]  # of those clusters, for deserved shares
    refused: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # job -> cluster -> agent's reason
    # job -> cluster where gangs were preempted for it and may not have exited yet (the agent's
    # inventory still counts them): it waits there instead of preempting again.
    making_room: Mapping[str, str] = field(default_factory=dict)
    flavors: Sequence[FlavorInfo] = ()
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # every member cluster's, Ready or not
    # At most this many dispatches per cycle (Armada's scheduling burst; 0: no limit): the cycle stops there, the
    # jobs it did not reach keep their reasons, and the next cycle goes on in the same order.
    burst: int = 0
    now: float = 0.0  # when it was taken, seconds since the epoch: how long each running gang has run
    # Tenant, and queue, -> what ordering adds to its usage now for its past usage (`usage.mean`, weighted): empty
    # when history does not count. Ordering only: shares, limits and reclaim go by what is held now.
    past_tenants: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    past_queues: Mapping[str, Mapping[str, float]] = field(default_factory=dict)


class JobIds(Protocol):
    """A set of job ids as `Decisions` holds one: a set, or a walk's lazy one (`queues.Impossible`)."""

    def add(self, job_id: str) -> None: ...
    def __contains__(self, job_id: object) -> bool: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...


@dataclass
class Decisions:
    assign: dict[str, str] = field(default_factory=dict)  # job -> cluster
    # dispatched job -> what people should know of the choice ("on healthy hardware; passed over b: it fits ...")
    notes: dict[str, str] = field(default_factory=dict)
    preempt: dict[str, str] = field(default_factory=dict)  # running job -> reason
    making_room: dict[str, str] = field(default_factory=dict)  # waiting job -> cluster preempted for it
    lost: dict[str, float] = field(default_factory=dict)  # preempted job -> GPU-seconds of work lost by it
    # pending job -> why it waits, in the order the cycle met them (from a walk over the queue manager: worked
    # out only for the jobs asked about)
    waiting: MutableMapping[str, str] = field(default_factory=dict)
    reserved: dict[str, str] = field(default_factory=dict)  # waiting job -> cluster whose room is held for it
    # waiting jobs no cluster or quota could run as things stand
    cannot_run: JobIds = field(default_factory=set)
    # waiting job -> the limit holding it: (its owner, "queue NAME", "tenant NAME" or "federation" when others'
    # lending limits keep the room back; how much of each resource that owner must free before the job fits under
    # it; the reason): the forecast and ExplainJob read it
    limited: MutableMapping[str, tuple[str, Resources, str]] = field(default_factory=dict)
    shares: Tree | None = None
    usage: dict[str, Resources] = field(default_factory=dict)  # queue -> in use after this cycle
    tenant_usage: dict[str, Resources] = field(default_factory=dict)  # tenant -> in use after this cycle
    cut_short: bool = False  # the burst ran out before every queue was served: run another cycle soon
    # the compiled victim search failed in this cycle and the Python search decided instead: what it raised
    compiled_failure: str = ""
    checks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # dispatched job -> its admission checks there
    # dispatched job -> the new nodes its cluster is to provision for it (it fitted no cluster as it was)
    provisioning: dict[str, Provision] = field(default_factory=dict)


def queue_chains(queues: Sequence[QueueInfo]) -> dict[str, list[str]]:
    """Each queue, then its parent, its parent's parent and so on. A parent that is missing, of another tenant
    or on a loop ends the chain (the admin API refuses them; this keeps a cycle safe whatever it is given)."""
    by_name = {q.name: q for q in queues}
    chains: dict[str, list[str]] = {}
    for q in queues:
        chain = [q.name]
        parent = by_name.get(q.parent)
        while parent is not None and parent.tenant == q.tenant and parent.name not in chain:
            chain.append(parent.name)
            parent = by_name.get(parent.parent)
        chains[q.name] = chain
    return chains


K = TypeVar("K", bound=Hashable)


def summed_by(keys: list[K], amounts: list[Mapping[str, int]]) -> dict[K, dict[str, int]]:
    """Per key, the sum of the amounts beside it, as `add_into` one by one would give it (a resource some amount of
    the key names is in its sum, even at 0): a cycle adds up tens of thousands of running gangs this way, several
    times. Compiled where `make` built native/ (the largest piece of a steady cycle's own Python at 1,000 clusters),
    else `summed_in_python`, the oracle. (Arrays were tried: gathering the columns cost more than the sums.)"""
    compiled = getattr(native.compiled, "summed_by", None)  # None too in a build of native/ from before it
    if compiled is not None and (found := compiled(keys, amounts)) is not None:
        return found  # type: ignore[no-any-return]
    return summed_in_python(keys, amounts)


def summed_in_python(keys: Iterable[K], amounts: Iterable[Mapping[str, int]]) -> dict[K, dict[str, int]]:
    """`summed_by` in one pass without a call per gang."""
    out: dict[K, dict[str, int]] = {}
    found = out.get
    for key, amount in zip(keys, amounts, strict=True):
        into = found(key)
        if into is None:
            out[key] = dict(amount)
        else:
            for r, a in amount.items():
                into[r] = into.get(r, 0) + a
    return out


def add_into(into: dict[str, int], amounts: Mapping[str, int], sign: int = 1) -> None:
    """Add (or with sign -1 take) `amounts` into `into`, in place: the cycle's bookkeeping, done thousands of times."""
    for r, a in amounts.items():
        into[r] = into.get(r, 0) + sign * a


class Wants:
    """What each waiting job asks for, counted as shares and quotas count it (its flavor included): worked out once
    per job and cycle, as head order, shares and quotas all ask."""

    def __init__(self, flavors: Flavors, queues: Mapping[str, QueueInfo]) -> None:
        self.flavors = flavors
        self.queues = queues
        self._of: dict[str, Resources] = {}

    def of(self, job: PendingJob) -> Resources:
        if not self.flavors:
            return job.view.request
        found = self._of.get(job.id)
        if found is None:
            queue = self.queues.get(job.queue)
            found = self._of[job.id] = self.flavors.wanted(job.view, queue.flavors if queue else ())
        return found
