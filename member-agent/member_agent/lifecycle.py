"""Volcano lifecycle policies: what to do when a pod of a running gang fails, is lost, stays Pending,
when a task completes, or when the gang's state could not be known.

Pure: the agent asks `respond(spec, event, retries)` and carries out the answer. The rules
(docs/architecture.md, Lifecycle policies):
a policy of the task that names the event wins over the job's (JobUnknown concerns no one task, so
only the job's policies answer it); a policy's `timeout` means "act only if the pod has not recovered by
then"; every restart counts towards `maxRetry` (3 when unset), and the restart that would exceed it
fails the job instead.

Without a policy for the event: a failed, evicted or lost pod fails the job (a gang that has lost a
member cannot be trusted to finish, and Volcano leaves such a job to fail unless a policy says
otherwise); a Pending pod is left to start; a completed task waits for the rest of the job; and a
gang found in pieces (JobUnknown) is left to the agent, which places it again whole.
"""

from __future__ import annotations

from dataclasses import dataclass

from federation.kernel.jobspec import DEFAULT_MAX_RETRY
from federation.v1 import common_pb2

FAILURES = ("PodFailed", "PodEvicted", "Unknown")  # a member of the gang is gone: no policy fails the job
POD_EVENTS = (*FAILURES, "PodPending")  # the events of one pod, as against a task's or the gang's
ENDINGS = {"AbortJob": False, "TerminateJob": False, "CompleteJob": True}  # action -> the job succeeded

Pod = tuple[str, int]  # (task, index)


@dataclass(frozen=True)
class Event:
    """An event of one job: `kind` is a Volcano event name; `pods` are the pods it concerns (the failed
    or Pending pod, a completed task's pods, the pods a gang in pieces is missing)."""

    kind: str
    task: str  # "" for JobUnknown
    pods: tuple[Pod, ...]
    reason: str

    @classmethod
    def of_pod(cls, kind: str, task: str, index: int, reason: str) -> Event:
        return cls(kind, task, ((task, index),), reason)

    def describe(self) -> str:
        if self.kind == "TaskCompleted":
            return f"TaskCompleted of {self.task}: {self.reason}"
        if self.kind == "JobUnknown":
            return f"JobUnknown: {self.reason}"
        task, index = self.pods[0]
        return f"{self.kind} on {task}[{index}]: {self.reason}"


@dataclass(frozen=True)
class Response:
    """What to do: `action` after `timeout` seconds (0: at once), on `pods` (task, index)."""

    action: str  # a restart, an ending, or "FailJob" (no policy for a failure, or maxRetry reached)
    timeout: float
    pods: tuple[Pod, ...]
    reason: str


def max_retry(spec: common_pb2.JobSpec) -> int:
    return spec.max_retry if spec.HasField("max_retry") else DEFAULT_MAX_RETRY


def _policy(spec: common_pb2.JobSpec, event: Event) -> common_pb2.LifecyclePolicy | None:
    for t in spec.tasks:
        if t.name == event.task:
            for policy in t.policies:
                if event.kind in policy.events:
                    return policy
    for policy in spec.policies:
        if event.kind in policy.events:
            return policy
    return None


def answers(spec: common_pb2.JobSpec, kind: str) -> bool:
    """Whether any policy of the job or of one of its tasks answers events of `kind`."""
    return any(kind in p.events for p in [*spec.policies, *(p for t in spec.tasks for p in t.policies)])


def _pods(spec: common_pb2.JobSpec, action: str, event: Event) -> tuple[Pod, ...]:
    """The pods an action restarts, as Volcano defines the actions: RestartPod the event's pod,
    RestartTask every pod of the event's task, RestartPartition the partitions holding the event's
    pods, RestartJob the whole gang."""
    if action == "RestartJob":
        return tuple((t.name, i) for t in spec.tasks for i in range(t.replicas))
    if action == "RestartTask":
        tasks = {task for task, _ in event.pods} or {event.task}
        return tuple((t.name, i) for t in spec.tasks if t.name in tasks for i in range(t.replicas))
    if action == "RestartPartition":
        sizes = {t.name: (t.partition_policy.partition_size, t.replicas) for t in spec.tasks}
        pods: dict[Pod, None] = {}
        for task, index in event.pods:
            size, replicas = sizes[task]
            first = index // size * size if size else index
            pods.update(((task, i), None) for i in range(first, min(first + size, replicas) if size else index + 1))
        return tuple(pods)
    return event.pods


def respond(spec: common_pb2.JobSpec, event: Event, retries: int) -> Response | None:
    """The response to `event` for a job that has been restarted `retries` times already; None: nothing."""
    policy = _policy(spec, event)
    if policy is None and event.kind not in FAILURES:
        return None
    what = event.describe()
    if policy is None:
        return Response("FailJob", 0.0, (), f"{what}; no lifecycle policy handles {event.kind}")
    timeout = policy.timeout.ToTimedelta().total_seconds() if policy.HasField("timeout") else 0.0
    if timeout and event.kind == "PodPending":
        what = f"{what} (still Pending after {timeout:g}s)"
    if policy.action in ENDINGS:
        return Response(policy.action, timeout, (), f"{policy.action} after {what}")
    if retries >= max_retry(spec):
        return Response("FailJob", timeout, (), f"{what}; maxRetry {max_retry(spec)} exhausted")
    return Response(policy.action, timeout, _pods(spec, policy.action, event),
                    f"{policy.action} after {what} (retry {retries + 1} of {max_retry(spec)})")
