"""A member cluster in memory, described by a KWOK-style YAML file of Nodes, HyperNodes and Pods.

Pods "run" for the duration their task or job asks for (annotation `federation.dev/sim-duration`
on the task's pod template or the job, default a few seconds) and then succeed, so demos and
end-to-end tests finish on their own (`infinity`: until cancelled, as `sleep infinity` runs);
`federation.dev/sim-start-delay` keeps new pods Pending that long first (an image pull). Pods listed in
the file occupy their nodes for good, like other workloads in a real cluster. Nodes have the labels a kubelet
gives every node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from federation.kernel.dra import DeviceRequest
from federation.kernel.durations import parse_duration
from federation.kernel.resources import QuantityError, Resources
from federation.v1 import common_pb2
from member_agent.clusters import kubelet_labels
from member_agent.errors import BindError
from member_agent.model import AgentJob, PodListener
from member_agent.placement import PodPlacement
from member_agent.pods import DURATION_ANNOTATION, START_DELAY_ANNOTATION, annotation, pod_requests
from member_agent.provisioning import Ask
from member_agent.state import ClusterState
from member_agent.topology import TopologyError, build, load_objects

DEFAULT_DURATION = 5.0
STOPPED_JOBS = 10_000
UNTIL_CANCELLED = "infinity"  # a duration annotation for pods that run until the job is cancelled

log = logging.getLogger(__name__)




def load_cluster(objects: Iterable[Mapping[str, Any]]) -> ClusterState:
    """Build the cluster state from its objects; bound Pods take their share of their nodes."""
    nodes, hypernodes, pods = load_objects(objects)
    nodes = [dataclasses.replace(n, labels=kubelet_labels(n.name, n.labels)) for n in nodes]
    state = ClusterState(build(nodes, hypernodes))
    for note in state.topology.notes:
        log.warning("%s", note)
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "?")
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in state.free:
            raise TopologyError(f"Pod {name!r} is bound to unknown node {node!r}")
        try:
            state.allocate(node, pod_requests(pod))
        except QuantityError as err:
            raise TopologyError(f"Pod {name!r}: {err}") from None
    return state


def read_cluster_file(path: Path) -> ClusterState:
    try:
        objects = [o for o in yaml.safe_load_all(path.read_text()) if o]
    except (OSError, yaml.YAMLError) as err:
        raise TopologyError(f"{path}: {err}") from None
    return load_cluster(objects)




def _running_for(seconds: float) -> str:
    return f"running for {seconds:g}s\n" if math.isfinite(seconds) else "running until cancelled\n"


def _seconds(text: str, default: float) -> float:
    if text.strip() == UNTIL_CANCELLED:
        return math.inf
    try:
        return parse_duration(text) if text else default
    except ValueError:
        return default


class SimulatedBackend:
    """Pods start after their task's start delay and complete, task by task, after its duration."""

    def __init__(self, state: ClusterState, default_duration: float = DEFAULT_DURATION,
                 retention: float = 0.0) -> None:
        self.state = state
        self.default_duration = default_duration
        self.retention = retention  # seconds an ended job's ended pods (their logs) are kept
        self.held: dict[str, AgentJob] = {}  # job id -> the job whose pods run here
        # Ended jobs whose ended pods are kept (the last STOPPED_JOBS), with when they go (loop time).
        self.kept: OrderedDict[str, tuple[AgentJob, float]] = OrderedDict()
        self.tasks: dict[tuple[str, str], asyncio.TimerHandle] = {}  # (job, task) -> its completion
        self.starting: dict[tuple[str, str, int], asyncio.Handle] = {}  # (job, task, index) -> its start
        self.members: dict[tuple[str, str], set[int]] = {}  # (job, task) -> the indices its completion ends
        # Pods deleted before they ended (a job's end stops the rest, as Volcano's does): gone, as from a cluster.
        # Of the last STOPPED_JOBS jobs: their final pod list is reported as they end.
        self.stopped: OrderedDict[str, set[tuple[str, int]]] = OrderedDict()
        self._on_pod: PodListener = lambda *_: None

    def set_listener(self, on_pod: PodListener,
                     on_node: Callable[..., object], on_change: Callable[[], object]) -> None:
        """Faults in a simulation are injected through the agent itself, so only pod phases come from here."""
        self._on_pod = on_pod

    def pod_statuses(self, job: AgentJob) -> list[common_pb2.PodStatus]:
        """As a Kubernetes cluster would say it: each pod named after its job, task and index."""
        job_id, namespace = job.job.id, job.job.spec.namespace or "default"
        out = []
        stopped = self.stopped.get(job_id, set())
        for p in sorted(job.pods, key=lambda p: (p.task, p.index)):
            key = (p.task, p.index)
            if key in stopped:
                continue
            phase = "Succeeded" if key in job.done else "Failed" if key in job.failed else \
                "Pending" if (job_id, p.task, p.index) in self.starting else "Running"
            out.append(common_pb2.PodStatus(task=p.task, index=p.index, name=f"{job_id}-{p.task}-{p.index}",
                                            namespace=namespace, node=p.node, phase=phase,
                                            message=job.failed.get(key, "")))
        return out

    def _kept_job(self, job_id: str) -> AgentJob | None:
        now = asyncio.get_running_loop().time()
        while self.kept and next(iter(self.kept.values()))[1] <= now:  # kept in the order they ended
            self.kept.popitem(last=False)
        kept = self.kept.get(job_id)
        return kept[0] if kept else None

    async def logs(self, job_id: str, attempt: int, task: str, index: int, follow: bool, previous: bool,
                   tail_lines: int) -> AsyncIterator[bytes]:
        """A simulated pod's log: a line when it started and, followed, one a second while it runs; how it
        ended, once it has."""
        job = self.held.get(job_id) or self._kept_job(job_id)
        pod = None if job is None or job.attempt != attempt else \
            next((p for p in job.pods if p.task == task and p.index == index), None)
        if job is None or pod is None:
            raise LookupError(f"job {job_id} has no pod {task}[{index}] of attempt {attempt} here")
        if previous:
            raise LookupError(f"pod {task}[{index}] of job {job_id} has not restarted: no previous log")
        lines = [f"simulated pod {job_id}-{task}-{index} on node {pod.node}, attempt {attempt}\n",
                 _running_for(self.duration(job, task))]
        if (task, index) in job.done:
            lines.append("completed\n")
        elif (task, index) in job.failed:
            lines.append(f"failed: {job.failed[(task, index)]}\n")
        yield "".join(lines[-tail_lines:] if tail_lines else lines).encode()
        beat = 0
        while follow and (job.job.id, task) in self.tasks:
            await asyncio.sleep(1)
            beat += 1
            yield f"still running ({beat}s)\n".encode()

    def duration(self, job: AgentJob, task: str) -> float:
        return _seconds(annotation(job.job.spec, task, DURATION_ANNOTATION), self.default_duration)

    async def bind(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        """Each pod runs after its task's start delay. A task runs for its duration from when all its
        pods are bound (again, after a restart of the whole task); a single restarted pod, or a replica
        joining a gang that started at its minimum, rejoins the run under way."""
        loop = asyncio.get_running_loop()
        job_id, attempt = job.job.id, job.attempt
        self.held[job_id] = job
        self.kept.pop(job_id, None)
        bound = {(p.task, p.index) for p in pods}
        if job_id in self.stopped:
            self.stopped[job_id] -= bound
        for task in sorted({p.task for p in pods}):
            delay = _seconds(annotation(job.job.spec, task, START_DELAY_ANNOTATION), 0.0)
            members = self.members.setdefault((job_id, task), set())
            for pod in pods:
                if pod.task == task:
                    members.add(pod.index)
                    self.starting[(job_id, task, pod.index)] = loop.call_later(
                        delay, self._started, job_id, attempt, task, pod.index)
            if all((p.task, p.index) in bound for p in job.pods if p.task == task):
                self._cancel(self.tasks.pop((job_id, task), None))
                # Never fires for a task that runs until cancelled (an infinite delay), which still has its
                # entry: its pods' logs follow while it runs.
                self.tasks[(job_id, task)] = loop.call_later(
                    delay + self.duration(job, task), self._complete, job_id, attempt, task)

    def _started(self, job_id: str, attempt: int, task: str, index: int) -> None:
        self.starting.pop((job_id, task, index), None)
        self._on_pod(job_id, attempt, task, index, "Running", "")

    def _complete(self, job_id: str, attempt: int, task: str) -> None:
        self.tasks.pop((job_id, task), None)
        for index in sorted(self.members.pop((job_id, task), set())):
            self._on_pod(job_id, attempt, task, index, "Succeeded", "completed")

    async def delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None = None) -> None:
        job_id = job.job.id
        for pod in job.pods if pods is None else pods:
            self._cancel(self.starting.pop((job_id, pod.task, pod.index), None))
            self.members.get((job_id, pod.task), set()).discard(pod.index)
            if (pod.task, pod.index) not in job.done and (pod.task, pod.index) not in job.failed:
                self.stopped.setdefault(job_id, set()).add((pod.task, pod.index))
                self.stopped.move_to_end(job_id)
                while len(self.stopped) > STOPPED_JOBS:
                    self.stopped.popitem(last=False)
        if pods is None:
            if self.held.get(job_id) is job:
                del self.held[job_id]
            for task in {t.name for t in job.job.spec.tasks}:
                self._cancel(self.tasks.pop((job_id, task), None))
                self.members.pop((job_id, task), None)

    async def end(self, job: AgentJob) -> None:
        await self.delete(job)
        if self.retention and (job.done or job.failed):
            self.kept[job.job.id] = (job, asyncio.get_running_loop().time() + self.retention)
            self.kept.move_to_end(job.job.id)
            while len(self.kept) > STOPPED_JOBS:
                self.kept.popitem(last=False)

    async def adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        return []  # simulated pods live in the agent's memory: none outlive it

    def managed(self) -> dict[tuple[str, int], int]:
        return {}  # every simulated pod belongs to a job the agent holds, and it reports those itself

    async def delete_attempt(self, job_id: str, attempt: int, anchor: bool, keep_ended: bool = False) -> int:
        return 0

    def unadopted(self) -> Resources:
        return {}

    def attempts(self, job_id: str) -> dict[int, int]:
        return {}

    def ended(self, job_id: str, attempt: int) -> tuple[int, int]:
        return 0, 0

    def waits_when_lost(self, job_id: str) -> bool:
        return False

    async def repartition(self, layouts: Mapping[str, str]) -> None:
        raise BindError("a simulated cluster has no MIG manager")

    async def provision(self, ask: Ask, tasks: Sequence[tuple[str, int, Mapping[str, str]]],
                        labels: Mapping[str, str]) -> None:
        raise BindError("a simulated cluster has no autoscaler")

    async def provisioned(self, name: str) -> tuple[str, str]:
        return "Failed", "a simulated cluster has no autoscaler"

    async def unprovision(self, name: str, tasks: Sequence[str]) -> None:
        return None

    async def cordon(self, nodes: Sequence[str], cordon: bool) -> None:
        """A cordoned node offers nothing new; its pods stay (as with `kubectl cordon`)."""
        for node in nodes:
            self.state.set_ready(node, not cordon and node not in self.state.failed)

    def narrowing(self, requests: Sequence[DeviceRequest]) -> None:
        return None  # a simulated cluster publishes no DRA devices

    @staticmethod
    def _cancel(handle: asyncio.Handle | None) -> None:
        if handle is not None:
            handle.cancel()
