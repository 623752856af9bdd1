"""A member cluster in memory, described by a KWOK-style YAML file of Nodes, HyperNodes and Pods.

Pods "run" for the duration the job asks for (annotation `federation.dev/sim-duration`, default
a few seconds) and then succeed, so demos and end-to-end tests finish on their own. Pods listed
in the file occupy their nodes for good, like other workloads in a real cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from federation.durations import parse_duration
from federation.resources import QuantityError, Resources, parse_amount
from member_agent.agent import AgentJob
from member_agent.placement import PodPlacement
from member_agent.state import ClusterState
from member_agent.topology import TopologyError, build, load_objects

DURATION_ANNOTATION = "federation.dev/sim-duration"
DEFAULT_DURATION = 5.0


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    total: Resources = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for resource, quantity in (((container or {}).get("resources") or {}).get("requests") or {}).items():
            total[resource] = total.get(resource, 0) + parse_amount(str(resource), quantity)
    return total


def load_cluster(objects: Iterable[Mapping[str, Any]]) -> ClusterState:
    """Build the cluster state from its objects; bound Pods take their share of their nodes."""
    nodes, hypernodes, pods = load_objects(objects)
    state = ClusterState(build(nodes, hypernodes))
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


class SimulatedBackend:
    def __init__(self, state: ClusterState, default_duration: float = DEFAULT_DURATION) -> None:
        self.state = state
        self.default_duration = default_duration
        self.running: dict[str, asyncio.TimerHandle] = {}
        self._on_finished: Callable[[str, int, bool, str], None] = lambda *_: None

    def set_listener(self, on_finished: Callable[[str, int, bool, str], None],
                     on_pod_failed: Callable[[str, str, int, str, str], object],
                     on_node: Callable[[str, bool], object]) -> None:
        """Faults in a simulation are injected through the agent itself, so only endings come from here."""
        self._on_finished = on_finished

    def duration(self, job: AgentJob) -> float:
        text = job.job.spec.annotations.get(DURATION_ANNOTATION)
        if not text:
            return self.default_duration
        try:
            return parse_duration(text)
        except ValueError:
            return self.default_duration

    async def bind(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        """The job runs for its duration from when all its pods are bound (again, after RestartJob);
        a single restarted pod rejoins the run under way."""
        if len(pods) < len(job.pods):
            return
        self._stop(job.job.id)
        loop = asyncio.get_running_loop()
        job_id, attempt = job.job.id, job.attempt
        self.running[job_id] = loop.call_later(self.duration(job), self._complete, job_id, attempt)

    def _complete(self, job_id: str, attempt: int) -> None:
        self.running.pop(job_id, None)
        self._on_finished(job_id, attempt, True, "all pods completed")

    async def delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None = None) -> None:
        if pods is None:
            self._stop(job.job.id)

    async def adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        return []  # simulated pods live in the agent's memory: none outlive it

    def _stop(self, job_id: str) -> None:
        handle = self.running.pop(job_id, None)
        if handle is not None:
            handle.cancel()
