"""GPUs shared by NVIDIA's device plugin (MPS, time-slicing) on the real API server with KWOK nodes (issue 45, 3):
nodes labelled and with allocatable as the plugin and GPU Feature Discovery make them. Replicas are never booked past
what a node publishes; an MPS node never gets a pod asking more than one replica (the plugin would fail it at
admission), while a time-slicing node does, and the inventory the federation checks pods against says so; the agent
leaves which replica to the kubelet (no device of its own written on the pod), and keeps fractions, which it places by
device, off shared devices."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from federation.kernel.gpuask import FRACTION
from federation.scheduling.fit import pods_room
from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.devices import ASSIGNED, VISIBLE
from member_agent.sharing import SHARED, node_sharing
from tests.kubehelp import GPU, backend, next_update, pods, ready_nodes

NODE = {"cpu": "256", "memory": "2Ti", "pods": "110"}


def gfd_labels(strategy: str, replicas: int, devices: int = 8, renamed: bool = False) -> dict[str, str]:
    """The labels GPU Feature Discovery writes on a node whose devices the plugin shares."""
    return {"nvidia.com/gpu.sharing-strategy": strategy, "nvidia.com/gpu.replicas": str(replicas),
            "nvidia.com/gpu.count": str(devices),
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3" + ("" if renamed else "-SHARED"),
            "nvidia.com/gpu.memory": "81559"}


def job(name: str, tasks: list[common_pb2.TaskSpec]) -> common_pb2.Job:
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations={"federation.dev/sim-duration": "600s"}, tasks=tasks))


def test_the_plugins_labels_say_how_a_node_is_shared() -> None:
    mps = node_sharing(gfd_labels("mps", 4), {GPU: 32})
    assert mps is not None and (mps.strategy, mps.replicas, mps.devices, mps.resource) == ("mps", 4, 8, GPU)
    assert mps.refuses({GPU: 1}) is None and "at most 1 replica" in (mps.refuses({GPU: 2}) or "")
    sliced = node_sharing(gfd_labels("time-slicing", 4, renamed=True), {SHARED: 32})
    assert sliced is not None and sliced.resource == SHARED and sliced.refuses({SHARED: 3}) is None
    assert node_sharing({**gfd_labels("none", 1)}, {GPU: 8}) is None
    assert node_sharing(gfd_labels("mps", 1), {GPU: 8}) is None  # one replica: not shared
    assert node_sharing({**gfd_labels("mps", 4), "nvidia.com/gpu.replicas": "\u0664"}, {GPU: 32}) is None
    assert node_sharing(gfd_labels("mps", 4), {}) is None  # nothing published


async def test_mps_replicas_are_never_overbooked_and_never_two_to_a_pod(kube: Testbed, tmp_path: Path) -> None:
    kube.apply(clusters.tree("mps", [1, 1, 2], {**NODE, GPU: "32"}, gfd_labels("mps", 4), ["spine", "leaf"]))
    kube.apply(clusters.tree("ts", [1, 1, 1], {**NODE, GPU: "16"}, gfd_labels("time-slicing", 2), ["tspine", "tleaf"]))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 3)
        hist = b.state.gpu_free_nodes()  # the time-slicing node's 16 replicas hold eight two-GPU pods
        assert pods_room(hist, 1) == 80 and pods_room(hist, 2) == 8, hist
        # 70 single-replica pods: the two MPS nodes' 64 replicas and the time-slicing node's 16 hold them
        await agent.assign(job("infer", [common_pb2.TaskSpec(name="server", replicas=70, resources={GPU: "1"})]),
                           attempt=1)
        await next_update(agent, agent_pb2.BOUND, seen, timeout=120)
        made = pods(kube)
        per_node = Counter(p.spec.node_name for p in made.values())
        assert sum(per_node.values()) == 70
        assert all(n <= 32 for node, n in per_node.items() if node.startswith("mps")), per_node
        assert all(n <= 16 for node, n in per_node.items() if node.startswith("ts")), per_node
        for pod in made.values():  # which replica is the kubelet's and the plugin's to give
            assert ASSIGNED not in (pod.metadata.annotations or {})
            assert VISIBLE not in {e.name for c in pod.spec.containers for e in (c.env or [])}
            assert pod.spec.containers[0].resources.requests[GPU] == "1"

        # Two replicas to a pod: never on an MPS node; on the time-slicing node while it has them, then refused.
        await agent.assign(job("pair", [common_pb2.TaskSpec(name="w", replicas=1, resources={GPU: "2"})]), attempt=1)
        await next_update(agent, agent_pb2.BOUND, seen, timeout=120)
        (pair,) = [p for p in pods(kube).values() if p.metadata.name.startswith("pair")]
        assert pair.spec.node_name.startswith("ts")
        await agent.assign(job("more", [common_pb2.TaskSpec(name="w", replicas=8, resources={GPU: "2"})]), attempt=1)
        rejected = await next_update(agent, agent_pb2.REJECTED, seen, timeout=120)
        assert rejected.job_id == "more-1"
        assert not [p for p in pods(kube).values() if p.metadata.name.startswith("more")]
    finally:
        await b.stop()


async def test_an_mps_only_cluster_refuses_two_replicas_saying_why_and_keeps_fractions_off(
        kube: Testbed, tmp_path: Path) -> None:
    kube.apply(clusters.tree("mps", [1, 1, 1], {**NODE, GPU: "32"}, gfd_labels("mps", 4), ["spine", "leaf"]))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 1)
        # What the federation checks a gang's pods against, node by node: its 32 replicas hold 32 one-GPU pods and
        # no two-GPU one, so the federation does not send it one.
        hist = b.state.gpu_free_nodes()
        assert pods_room(hist, 1) == 32 and pods_room(hist, 2) == 0, hist
        await agent.assign(job("pair", [common_pb2.TaskSpec(name="w", replicas=1, resources={GPU: "2"})]), attempt=1)
        rejected = await next_update(agent, agent_pb2.REJECTED, seen, timeout=120)
        assert "MPS gives a pod at most 1 replica" in rejected.reason, rejected.reason
        template = json.dumps({"metadata": {"annotations": {FRACTION: "0.5"}},
                               "spec": {"containers": [{"name": "infer", "image": "x",
                                                        "resources": {"requests": {"cpu": "1"}}}]}})
        await agent.assign(job("half", [common_pb2.TaskSpec(name="infer", replicas=1, resources={"cpu": "1"},
                                                             pod_template_json=template)]), attempt=1)
        await next_update(agent, agent_pb2.REJECTED, seen, timeout=120)
        assert not pods(kube)
    finally:
        await b.stop()
