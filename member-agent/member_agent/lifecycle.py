"""Volcano lifecycle policies: what to do when a pod of a running gang fails, is evicted or is lost.

Pure: the agent asks `respond(spec, event)` and carries out the answer. The rules (DESIGN §6):
a policy of the pod's task that names the event wins over the job's; a policy's `timeout` means
"act only if the pod has not recovered by then"; every restart counts towards `maxRetry` (3 when
unset), and the restart that would exceed it fails the job instead. With no policy for the event,
the job fails: a gang that has lost a member cannot be trusted to finish, and Volcano leaves such
a job to fail unless a policy says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from federation.v1 import common_pb2
from federation.validation import DEFAULT_MAX_RETRY

POD_EVENTS = ("PodFailed", "PodEvicted", "Unknown")  # the events a pod of a running gang can raise
RESTARTS = ("RestartTask", "RestartPod", "RestartPartition", "RestartJob")
ENDINGS = {"AbortJob": False, "TerminateJob": False, "CompleteJob": True}  # action -> the job succeeded


@dataclass(frozen=True)
class PodEvent:
    kind: str  # one of POD_EVENTS
    task: str
    index: int
    reason: str


@dataclass(frozen=True)
class Response:
    """What to do: `action` after `timeout` seconds (0: at once), on `pods` (task, index)."""

    action: str  # a restart, an ending, or "FailJob" (no policy, or maxRetry reached)
    timeout: float
    pods: tuple[tuple[str, int], ...]
    reason: str


def max_retry(spec: common_pb2.JobSpec) -> int:
    return spec.max_retry if spec.HasField("max_retry") else DEFAULT_MAX_RETRY


def _policy(spec: common_pb2.JobSpec, task: str, kind: str) -> common_pb2.LifecyclePolicy | None:
    for t in spec.tasks:
        if t.name == task:
            for policy in t.policies:
                if kind in policy.events:
                    return policy
    for policy in spec.policies:
        if kind in policy.events:
            return policy
    return None


def _pods(spec: common_pb2.JobSpec, action: str, event: PodEvent) -> tuple[tuple[str, int], ...]:
    """The pods an action restarts: the failed one, its partition, or the whole gang."""
    if action == "RestartJob":
        return tuple((t.name, i) for t in spec.tasks for i in range(t.replicas))
    if action == "RestartPartition":
        task = next(t for t in spec.tasks if t.name == event.task)
        size = task.partition_policy.partition_size
        if size:
            first = event.index // size * size
            return tuple((event.task, i) for i in range(first, min(first + size, task.replicas)))
    return ((event.task, event.index),)


def respond(spec: common_pb2.JobSpec, event: PodEvent, retries: int) -> Response:
    """The response to `event` for a job that has been restarted `retries` times already."""
    what = f"{event.kind} on {event.task}[{event.index}]: {event.reason}"
    policy = _policy(spec, event.task, event.kind)
    if policy is None:
        return Response("FailJob", 0.0, (), f"{what}; no lifecycle policy handles {event.kind}")
    timeout = policy.timeout.ToTimedelta().total_seconds() if policy.HasField("timeout") else 0.0
    if policy.action in ENDINGS:
        return Response(policy.action, timeout, (), f"{policy.action} after {what}")
    if retries >= max_retry(spec):
        return Response("FailJob", timeout, (), f"{what}; maxRetry {max_retry(spec)} exhausted")
    return Response(policy.action, timeout, _pods(spec, policy.action, event),
                    f"{policy.action} after {what} (retry {retries + 1} of {max_retry(spec)})")
