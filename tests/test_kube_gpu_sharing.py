"""Shared GPUs on the real API server with KWOK nodes (issue 31): fractional pods land on one device each, the
device index given to the pod (annotation, and NVIDIA_VISIBLE_DEVICES as NVIDIA's runtime reads it); a gang mixing
whole and fractional pods never shares a device past its whole; a restarted agent reads the devices back."""

from __future__ import annotations

import json
from pathlib import Path

from federation.kernel.gpuask import FRACTION, WHOLE
from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.devices import ASSIGNED, ASSIGNED_SHARE, VISIBLE
from tests.kubehelp import GPU, backend, eventually, gpu_cluster, next_update, pods, ready_nodes


def sharing_job(name: str, halves: int, whole: int) -> common_pb2.Job:
    template = json.dumps({"metadata": {"annotations": {FRACTION: "0.5"}},
                           "spec": {"containers": [{"name": "infer", "image": "x",
                                                    "resources": {"requests": {"cpu": "1"}}}]}})
    tasks = [common_pb2.TaskSpec(name="infer", replicas=halves, resources={"cpu": "1"}, pod_template_json=template)]
    if whole:
        tasks.append(common_pb2.TaskSpec(name="train", replicas=1, resources={GPU: str(whole), "cpu": "4"}))
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations={"federation.dev/sim-duration": "600s"}, tasks=tasks))


async def test_fractional_pods_land_on_one_device_each_and_a_restart_reads_them_back(
        kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 1))  # one node of 8 GPUs
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 1)
        await agent.assign(sharing_job("mix", halves=3, whole=5), attempt=1)
        await next_update(agent, agent_pb2.BOUND, [])
        made = pods(kube)
        assert len(made) == 4
        given: dict[int, int] = {}  # device -> share given on the node
        for name, pod in made.items():
            annotations = pod.metadata.annotations
            devices = [int(d) for d in annotations[ASSIGNED].split(",")]
            share = int(annotations[ASSIGNED_SHARE])
            env = {e.name: e.value for e in pod.spec.containers[0].env or []}
            if "-infer-" in name:
                assert len(devices) == 1 and share == 500  # one device, never split
                assert env[VISIBLE] == str(devices[0])
            else:
                assert len(devices) == 5 and share == WHOLE and VISIBLE not in env  # the device plugin's to give
            for d in devices:
                given[d] = given.get(d, 0) + share
        assert all(total <= WHOLE for total in given.values()), given
        assert sum(given.values()) == 3 * 500 + 5 * WHOLE
        assert len(given) == 7  # the three halves packed on two devices; one device left wholly free
    finally:
        await b.stop()
    later = await backend(kube, tmp_path)  # a restarted agent: our pods of an earlier run, counted by device
    try:
        node = next(iter(later.state.devices))
        await eventually(lambda: later.state.devices[node] == [WHOLE - given.get(d, 0) for d in range(8)],
                         what="the devices booked as the pods say")
        assert later.state.free[node][GPU] == sum(1 for d in range(8) if d not in given)
    finally:
        await later.stop()
