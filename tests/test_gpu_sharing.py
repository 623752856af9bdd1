"""Shared GPUs in the agent's placement core (issue 31): placement gives devices, not counts; fractions of one
device pack together and are never split; whole-GPU pods get wholly free devices only; a gang may mix both; what
the agent books follows the devices (the node's whole GPUs free are its wholly free devices)."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.kernel.gpuask import FRACTION, GPU, MEMORY, NUM_DEVICES, WHOLE, GpuAsk
from federation.kernel.resources import SHARE
from federation.v1 import common_pb2
from member_agent import clusters
from member_agent.devices import MEMORY_LABEL
from member_agent.gang import task_request
from member_agent.placement import GangRequest, Placement, Rejection, TaskRequest, place
from member_agent.state import ClusterState
from member_agent.topology import build, load_objects


def cluster(nodes: int = 2, gpus: int = 4, memory: int = 80_000) -> ClusterState:
    objs = clusters.tree("n", [1, nodes], {GPU: str(gpus), "cpu": "64", "memory": "512Gi"},
                         labels={MEMORY_LABEL: str(memory)})
    found, hypernodes, _ = load_objects(objs)
    return ClusterState(build(found, hypernodes))


def fraction(name: str, replicas: int, share: int, devices: int = 1, **more: int) -> TaskRequest:
    ask = GpuAsk(devices, share)
    return TaskRequest(name, replicas, {"cpu": 1000, SHARE: share * devices, **more}, gpu=ask)


def placed(result: Placement | Rejection) -> Placement:
    assert isinstance(result, Placement), result
    return result


def book(state: ClusterState, placement: Placement, requests: dict[str, dict[str, int]]) -> None:
    for pod in placement.pods:
        state.allocate(pod.node, requests[pod.task], 1, pod.devices, pod.share)


def test_fractions_of_one_device_pack_together() -> None:
    state = cluster(nodes=1, gpus=4)
    halves = fraction("half", 2, 500)
    first = placed(place(state, GangRequest((halves,))))
    assert [(p.devices, p.share) for p in first.pods] == [((0,), 500), ((0,), 500)]
    book(state, first, {"half": halves.request})
    assert state.devices["n0-0"] == [0, WHOLE, WHOLE, WHOLE]
    assert state.free["n0-0"][GPU] == 3  # one device is taken, whatever took it
    quarter = fraction("quarter", 1, 250)
    second = placed(place(state, GangRequest((quarter,))))
    assert second.pods[0].devices == (1,)


def test_a_fraction_is_never_split_across_devices() -> None:
    state = cluster(nodes=1, gpus=2)
    state.allocate("n0-0", {}, 1, (0,), 600)
    state.allocate("n0-0", {}, 1, (1,), 600)  # 0.8 GPU free on the node, 0.4 on each device
    outcome = place(state, GangRequest((fraction("big", 1, 500),)))
    assert isinstance(outcome, Rejection), outcome


def test_whole_gpu_pods_take_only_wholly_free_devices() -> None:
    state = cluster(nodes=1, gpus=4)
    state.allocate("n0-0", {}, 1, (2,), 100)
    four = TaskRequest("train", 1, {GPU: 4})  # 3.9 GPUs free on the node, 3 of its devices wholly
    assert isinstance(place(state, GangRequest((four,))), Rejection)
    three = placed(place(state, GangRequest((TaskRequest("train", 1, {GPU: 3}),))))
    assert three.pods[0].devices == (0, 1, 3)


def test_a_gang_mixes_whole_and_fractional_pods() -> None:
    state = cluster(nodes=1, gpus=4)
    gang = GangRequest((TaskRequest("trainer", 1, {GPU: 3}), fraction("eval", 3, 300)))
    result = placed(place(state, gang))
    trainer = {d for p in result.pods if p.task == "trainer" for d in p.devices}
    evals = {p.devices for p in result.pods if p.task == "eval"}
    assert len(trainer) == 3 and len(evals) == 1  # the three fractions share the fourth device
    assert not trainer & set(next(iter(evals)))
    book(state, result, {"trainer": {GPU: 3}, "eval": gang.tasks[1].request})
    assert sorted(state.devices["n0-0"]) == [0, 0, 0, 100]
    assert state.free["n0-0"][GPU] == 0 and state.free["n0-0"][SHARE] == 100


def test_multi_device_fractions_take_distinct_devices() -> None:
    state = cluster(nodes=1, gpus=4)
    result = placed(place(state, GangRequest((fraction("wide", 2, 500, devices=2),))))
    for pod in result.pods:
        assert len(set(pod.devices)) == 2
    book(state, result, {"wide": fraction("wide", 2, 500, devices=2).request})
    assert sum(WHOLE - f for f in state.devices["n0-0"]) == 2 * 2 * 500


def test_memory_asks_take_their_share_of_the_node_s_devices() -> None:
    state = cluster(nodes=1, gpus=2, memory=40_000)
    ask = TaskRequest("mem", 1, {"cpu": 1000, SHARE: 1}, gpu=GpuAsk(1, WHOLE, 10_000))
    result = placed(place(state, GangRequest((ask,))))
    assert result.pods[0].share == 250


def test_release_gives_the_devices_back() -> None:
    state = cluster(nodes=1, gpus=2)
    task = fraction("half", 3, 500)
    result = placed(place(state, GangRequest((task,))))
    book(state, result, {"half": task.request})
    assert state.free["n0-0"][GPU] == 0
    for pod in result.pods:
        state.release(pod.node, task.request, pod.devices, pod.share)
    assert state.devices["n0-0"] == [WHOLE, WHOLE]
    assert state.free["n0-0"][GPU] == 2 and state.free["n0-0"][SHARE] == 2 * WHOLE
    assert state.free["n0-0"]["cpu"] == 64_000


def test_task_requests_read_kai_annotations_from_the_pod_template() -> None:
    template = {"metadata": {"annotations": {FRACTION: "0.25", NUM_DEVICES: "2"}}}
    task = common_pb2.TaskSpec(name="t", replicas=1, resources={"cpu": "1"}, pod_template_json=json.dumps(template))
    request, ask = task_request(task)
    assert ask == GpuAsk(2, 250) and request[SHARE] == 500
    whole = common_pb2.TaskSpec(name="t", replicas=1, resources={GPU: "2"})
    assert task_request(whole) == ({GPU: 2}, None)
    memory = common_pb2.TaskSpec(name="t", replicas=1, pod_template_json=json.dumps(
        {"metadata": {"annotations": {MEMORY: "1000"}}}))
    assert task_request(memory)[1] == GpuAsk(1, WHOLE, 1000)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10_000))
def test_random_mixes_never_share_a_device_past_its_whole(seed: int) -> None:
    """Pods of random asks placed and released in random order: no device ever given past its whole, and the
    node's whole GPUs free are always its wholly free devices."""
    rng = random.Random(seed)
    state = cluster(nodes=2, gpus=4)
    live: list[tuple[TaskRequest, Placement]] = []
    for step in range(40):
        if live and rng.random() < 0.3:
            task, result = live.pop(rng.randrange(len(live)))
            for pod in result.pods:
                state.release(pod.node, task.request, pod.devices, pod.share)
        else:
            if rng.random() < 0.3:
                task = TaskRequest(f"w{step}", rng.randint(1, 2), {GPU: rng.randint(1, 3)})
            else:
                task = fraction(f"f{step}", rng.randint(1, 3), rng.choice([100, 250, 300, 500, 700]),
                                rng.choice([1, 1, 2]))
            result = place(state, GangRequest((task,)))
            if isinstance(result, Placement):
                for pod in result.pods:
                    assert pod.devices and pod.share == (task.ask.share if task.gpu else WHOLE)  # type: ignore[union-attr]
                book(state, result, {task.name: task.request})
                live.append((task, result))
        for node, table in state.devices.items():
            assert all(0 <= f <= WHOLE for f in table), (node, table)
            assert state.free[node][GPU] == table.count(WHOLE)
            assert state.free[node][SHARE] == sum(table)
