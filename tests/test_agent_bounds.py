"""Issue 41 (1, 2, 3): what a member cluster reports is bounded. Of a job, by what it was given: placements and pod
statuses name the job's tasks and indexes below their replicas (a pod once; a status at most twice, a pod and its
replacement); an update that does not is not used, nothing of it is stored, and the agent's stream goes on. Of its
health, by what a cluster can have: a few summary lines, as many degraded HyperNodes as it may report, no negative
count; an inventory that breaks them leaves the cluster out with the reason until a valid one replaces it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

from federation.kernel.jobspec import MAX_REPORTED_HYPERNODES
from federation.kernel.resources import WHOLE, format_resources, parse_shown
from federation.store.jobs import JobStore
from federation.v1 import admin_pb2, agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2
from federation.validation import (
    MAX_CLUSTER_GPUS,
    MAX_CLUSTER_NODES,
    MAX_HEALTH_SUMMARY,
    inventory_problem,
    pods_problem,
)
from tests.conftest import Api, make_queue

GPU = "nvidia.com/gpu"
SPEC = {"tasks": [{"name": "w", "replicas": 2}, {"name": "ps", "replicas": 1}]}


def placed(*pods: tuple[str, int]) -> list[common_pb2.PodPlacement]:
    return [common_pb2.PodPlacement(task=task, index=index, node=f"n{index}") for task, index in pods]


def statuses(*pods: tuple[str, int]) -> list[common_pb2.PodStatus]:
    return [common_pb2.PodStatus(task=task, index=index, name=f"{task}-{index}", phase="Running")
            for task, index in pods]


def test_pods_are_judged_against_the_jobs_tasks_and_replicas() -> None:
    def problem(**fields: object) -> str:
        return pods_problem(SPEC, agent_pb2.JobUpdate(job_id="j", **fields))

    assert problem(placements=placed(("w", 0), ("w", 1), ("ps", 0))) == ""
    assert problem(pod_statuses=statuses(("w", 0), ("w", 0), ("w", 1))) == ""  # one being replaced
    assert problem(placements=placed(*[("w", i % 2) for i in range(4)])) == \
        "job_update.placements names 4 pods, the job has 3"
    assert problem(pod_statuses=statuses(*[("w", 0)] * 7)) == "job_update.pod_statuses names 7 pods, the job has 3"
    assert problem(placements=placed(("w", 0), ("w", 0))) == "job_update.placements[1] names w[0] again"
    assert problem(pod_statuses=statuses(("w", 1), ("w", 1), ("w", 1))) == \
        "job_update.pod_statuses[2] names w[1] again"
    assert problem(placements=placed(("evil", 0))) == "job_update.placements[0].task: the job has no task 'evil'"
    assert problem(placements=placed(("ps", 1))) == \
        "job_update.placements[0].index: 1 is not below task ps's 1 replicas"
    assert problem(pod_statuses=statuses(("w", -1))) == \
        "job_update.pod_statuses[0].index: -1 is not below task w's 2 replicas"


async def test_a_rogue_agents_oversized_reports_are_not_stored_and_its_stream_goes_on(api: Api) -> None:
    await make_queue(api)
    orders: asyncio.Queue[agent_pb2.ControlMessage] = asyncio.Queue()
    updates: asyncio.Queue[agent_pb2.JobUpdate] = asyncio.Queue()

    async def messages() -> AsyncIterator[agent_pb2.AgentMessage]:
        yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="rogue", instance="r"))
        yield agent_pb2.AgentMessage(inventory=agent_pb2.Inventory(
            allocatable=agent_pb2.ResourceAmounts(amounts={GPU: 64}), healthy=True, nodes=8, ready_nodes=8))
        while True:  # connected until the test ends
            try:
                update = await asyncio.wait_for(updates.get(), 0.2)
            except TimeoutError:
                yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
            else:
                yield agent_pb2.AgentMessage(job_update=update)

    call = agent_pb2_grpc.AgentServiceStub(api.channel).Connect(messages())

    async def relay() -> None:
        async for order in call:
            if order.HasField("assign"):
                await orders.put(order)

    async def until(what: str, done: Callable[[common_pb2.Job], bool]) -> common_pb2.Job:
        deadline = time.monotonic() + 60
        while not done(job := await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))):
            assert time.monotonic() < deadline, f"{what}: {job.status}"
            await asyncio.sleep(0.1)
        return job

    relaying = asyncio.create_task(relay())
    try:
        spec = common_pb2.JobSpec(name="j", queue="train",
                                  tasks=[common_pb2.TaskSpec(name="w", replicas=2, resources={GPU: "4"})])
        job_id = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec))).job.id
        order = await asyncio.wait_for(orders.get(), 60)
        attempt = order.assign.attempt

        def update(kind: agent_pb2.JobUpdateType, **fields: object) -> None:
            updates.put_nowait(agent_pb2.JobUpdate(job_id=job_id, attempt=attempt, type=kind, hypernode="s0",
                                                   tier=1, **fields))

        flood = [("w", i) for i in range(20_000)]
        update(agent_pb2.BOUND, placements=placed(*flood))  # 20,000 placements for 2 replicas
        update(agent_pb2.BOUND, placements=placed(("w", 0), ("w", 0)))
        update(agent_pb2.BOUND, placements=placed(("w", 0), ("ps", 0)))  # a task the job has not
        update(agent_pb2.BOUND, placements=placed(("w", 0), ("w", 1)), reason="bound")
        job = await until("the honest BOUND to be applied", lambda j: j.status.phase == common_pb2.RUNNING)
        assert [(p.task, p.index) for p in job.status.placements] == [("w", 0), ("w", 1)]

        update(agent_pb2.POD_STATUS, pod_statuses=statuses(*flood))
        update(agent_pb2.POD_FAILED, placements=placed(*flood), reason="flood")
        update(agent_pb2.POD_STATUS, pod_statuses=statuses(("w", 0), ("w", 1)))
        job = await until("the honest POD_STATUS to be stored", lambda j: len(j.status.pods) == 2)
        assert [(p.task, p.index) for p in job.status.pods] == [("w", 0), ("w", 1)]
        # The flood's POD_FAILED came before the status just seen on the same stream: it was read, and refused.
        events = [e for e in await JobStore(api.server.engine).events_after(0, limit=100) if e["job_id"] == job_id]
        assert [e["type"] for e in events if e["type"] in ("Running", "PodFailed")] == ["Running"]
        assert max(len(e["message"]) for e in events) < 1_000
        assert not call.done()  # the same stream all along
    finally:
        relaying.cancel()
        call.cancel()


def health(**fields: object) -> agent_pb2.Inventory:
    return agent_pb2.Inventory(allocatable=agent_pb2.ResourceAmounts(amounts={GPU: 64}), healthy=True, nodes=8,
                               ready_nodes=8, health=agent_pb2.ClusterHealth(**fields))


def test_a_health_report_is_bounded_and_its_counts_are_not_negative() -> None:
    assert inventory_problem(health(degraded_nodes=2, summary=["2 nodes degraded (XID 79)"],
                                    degraded_hypernodes=["leaf-3"])) == ""
    assert inventory_problem(health(summary=["x"] * (MAX_HEALTH_SUMMARY + 1))) == \
        f"health.summary has {MAX_HEALTH_SUMMARY + 1} lines, at most {MAX_HEALTH_SUMMARY}"
    assert inventory_problem(health(summary=["x" * 1_025])).startswith("health.summary[0] is")
    hypernodes = [f"leaf-{i}" for i in range(MAX_REPORTED_HYPERNODES + 1)]
    assert inventory_problem(health(degraded_hypernodes=hypernodes)) == \
        f"{len(hypernodes)} degraded HyperNodes reported, at most {MAX_REPORTED_HYPERNODES}"
    assert inventory_problem(health(failed_nodes=-1)) == "negative node counts"
    assert inventory_problem(health(healthy_topology=[agent_pb2.TierFree(tier=99)])) == \
        "health.healthy_topology[0].tier 99 is out of range (0-17)"


def test_amounts_and_counts_are_within_what_a_real_cluster_has() -> None:
    """A cluster of 2^53 GPUs was accepted, and the dashboard's clusters page, reading GPUs in thousandths,
    answered 500 for everyone."""
    def inventory(gpus: int, nodes: int = 8) -> agent_pb2.Inventory:
        return agent_pb2.Inventory(allocatable=agent_pb2.ResourceAmounts(amounts={GPU: gpus}), nodes=nodes)

    assert inventory_problem(inventory(MAX_CLUSTER_GPUS)) == ""
    assert inventory_problem(inventory(2**53)) == \
        f"allocatable['{GPU}'] = {2**53} is out of range (0-{MAX_CLUSTER_GPUS:,})"
    assert inventory_problem(inventory(8, nodes=MAX_CLUSTER_NODES + 1)) == \
        f"{MAX_CLUSTER_NODES + 1:,} nodes reported, at most {MAX_CLUSTER_NODES:,}"
    shown = format_resources({GPU: MAX_CLUSTER_GPUS})[GPU]  # as ListClusters says it, as the page reads it
    assert parse_shown(GPU, shown) == MAX_CLUSTER_GPUS * WHOLE


async def test_a_flooded_health_report_leaves_the_cluster_out_and_listing_clusters_whole(api: Api) -> None:
    inventories: asyncio.Queue[agent_pb2.Inventory] = asyncio.Queue()

    async def messages() -> AsyncIterator[agent_pb2.AgentMessage]:
        yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="rogue", instance="r"))
        while True:
            try:
                inv = await asyncio.wait_for(inventories.get(), 0.2)
            except TimeoutError:
                yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
            else:
                yield agent_pb2.AgentMessage(inventory=inv)

    async def problem_becomes(done: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + 60
        while True:
            listed = (await api.admin.ListClusters(admin_pb2.ListClustersRequest())).clusters
            if listed and done(listed[0].problem):
                return listed[0].problem
            assert time.monotonic() < deadline, listed
            await asyncio.sleep(0.1)

    call = agent_pb2_grpc.AgentServiceStub(api.channel).Connect(messages())
    reading = asyncio.create_task(call.read())
    try:
        inventories.put_nowait(health(degraded_nodes=3_000, summary=[f"node {i} degraded" for i in range(3_000)],
                                      degraded_hypernodes=[f"leaf-{i}" for i in range(100_000)]))
        said = await problem_becomes(bool)
        assert said == "its agent reported an inventory that cannot be used: health.summary has 3000 lines, " \
                       f"at most {MAX_HEALTH_SUMMARY}"
        inventories.put_nowait(health(degraded_nodes=1, summary=["1 node degraded (XID 79)"]))
        assert await problem_becomes(lambda p: p == "") == ""
        (cluster,) = (await api.admin.ListClusters(admin_pb2.ListClustersRequest())).clusters
        assert cluster.name == "rogue" and not call.done()
    finally:
        reading.cancel()
        call.cancel()


def test_node_labels_and_free_gpus_per_node_are_reported_and_bounded() -> None:
    """Issue 42 (1, 10): what the server now checks pods against, as an agent reports it, and what it refuses."""
    from member_agent import clusters
    from member_agent.agent import Agent
    from member_agent.simulated import SimulatedBackend, load_cluster

    state = load_cluster(clusters.tree("n", [1, 4], {GPU: "8", "cpu": "64"}, {"pool": "a"}))
    state.allocate("n0-0", {GPU: 3, "cpu": 1})
    state.allocate("n0-1", {GPU: 8, "cpu": 1})
    state.set_ready("n0-3", False)
    inv = Agent("c", {}, SimulatedBackend(state)).inventory().inventory
    assert list(inv.gpu_free_nodes) == [1, 0, 0, 0, 0, 1, 0, 0, 1]  # 0 free, 5 free, 8 free; n0-3 not ready
    assert {"pool=a", "kubernetes.io/os=linux", "kubernetes.io/arch=amd64"} <= set(inv.node_labels.pairs)
    assert not any(p.startswith("kubernetes.io/hostname=") for p in inv.node_labels.pairs)
    assert inventory_problem(inv) == ""
    too_many = health()
    too_many.gpu_free_nodes.extend([1] * 1_026)
    assert inventory_problem(too_many) == "gpu_free_nodes has 1026 entries, at most 1025"
    negative = health()
    negative.gpu_free_nodes.extend([2, -1])
    assert inventory_problem(negative).startswith("gpu_free_nodes counts nodes out of range")
    odd = health()
    odd.node_labels.pairs.extend(["no-equals-sign"])
    assert inventory_problem(odd) == "node_labels.pairs[0] is not a label pair (key=value)"
    held = health()
    held.held.extend(f"job-{i}" for i in range(1_000))
    assert inventory_problem(held) == ""
    held.held.append("one-more")
    assert inventory_problem(held) == "1001 held gangs reported, at most 1000"
    long_id = health()
    long_id.held.append("j" * 81)
    assert inventory_problem(long_id) == "held names a job id longer than 80 characters"
