"""Helpers for the tests that run the member agent against the real API server of the test bed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.kube import KubernetesBackend
from member_agent.kubeapi import Kube

GPU = "nvidia.com/gpu"
JOBS = "federation-jobs"  # where the agent's role lets it make pods (deploy/kubernetes/agent/rbac.yaml)
NODE = {GPU: "8", "cpu": "64", "memory": "512Gi", "pods": "110"}


def gpu_cluster(kube: Testbed, fanout: Sequence[int] = (1, 2, 2), prefix: str = "n") -> list[str]:
    """Spines x leaves x nodes of 8 GPUs each (tier-2 spine, tier-1 leaf HyperNodes); the node names."""
    objects = clusters.tree(prefix, list(fanout), NODE, {"pool": "gpu"}, ["spine", "leaf"])
    kube.apply(objects)
    return [o["metadata"]["name"] for o in objects if o["kind"] == "Node"]


def core(kube: Testbed) -> client.CoreV1Api:
    return client.CoreV1Api(kube.admin())


def pods(kube: Testbed, namespace: str = JOBS) -> dict[str, Any]:
    return {p.metadata.name: p for p in core(kube).list_namespaced_pod(namespace).items}


async def backend(kube: Testbed, tmp_path: Path, topology_labels: Sequence[str] = ()) -> KubernetesBackend:
    """The agent's backend as the agent's ServiceAccount (deploy/kubernetes/agent/rbac.yaml), started."""
    config = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig")
    b = KubernetesBackend(await Kube.connect(str(config)), "east", JOBS, "federation-agent", topology_labels)
    await b.check_access()
    await b.start()
    return b


async def eventually(check: Callable[[], Any], timeout: float = 30, what: str = "the condition") -> Any:
    """Poll `check` until it returns something truthy; that value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError(f"{what} did not hold within {timeout:.0f} s")


async def ready_nodes(b: KubernetesBackend, count: int) -> None:
    """KWOK marks new nodes Ready a moment after they are made."""
    await eventually(lambda: len(b.state.ready) == count, what=f"{count} nodes Ready in the agent's state")


def gang(name: str, pods: int, mode: str = "hard", tier: int = 1, duration: str = "", gpus: str = "8",
         policies: Sequence[common_pb2.LifecyclePolicy] = (), template: str = "", **spec: Any) -> common_pb2.Job:
    annotations = {"federation.dev/sim-duration": duration} if duration else {}
    task = common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: gpus, "cpu": "4"},
                               pod_template_json=template)
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations=annotations, policies=list(policies),
        network_topology=common_pb2.NetworkTopology(mode=mode, highest_tier_allowed=tier) if mode else None,
        tasks=[task], **spec))


def drain(agent: Agent) -> list[agent_pb2.JobUpdate]:
    """The agent's job updates so far, but its pod statuses (what users see, not what the federation decides on:
    tests/test_kube_pods_logs.py)."""
    out = []
    while not agent.outbox.empty():
        message = agent.outbox.get_nowait()
        if message.HasField("job_update") and message.job_update.type != agent_pb2.POD_STATUS:
            out.append(message.job_update)
    return out


async def next_update(agent: Agent, kind: int, seen: list[agent_pb2.JobUpdate], timeout: float = 30
                      ) -> agent_pb2.JobUpdate:
    """Wait for the agent's next update of this type; every update drained meanwhile is added to `seen`."""
    def found() -> agent_pb2.JobUpdate | None:
        seen.extend(drain(agent))
        return next((u for u in seen if u.type == kind), None)

    update = await eventually(found, timeout, f"an update {agent_pb2.JobUpdateType.Name(kind)}")
    seen.remove(update)
    return update
