"""Pod lifecycles on a real API server with KWOK: lost nodes, pods stuck Pending or gone quiet, a completed
task ending the job, and an agent that restarts and finds its gang whole or in pieces."""

from __future__ import annotations

import json
from pathlib import Path

from kubernetes import client

from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from tests.kubehelp import GPU, JOBS, backend, core, eventually, gang, gpu_cluster, next_update, pods, ready_nodes


def _running(kube: Testbed, count: int) -> bool:
    now = pods(kube)
    return len(now) == count and all(p.status.phase == "Running" for p in now.values())


async def test_a_lost_node_fails_its_pods_and_a_cancel_deletes_the_gang(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        await agent.assign(gang("long", 2), attempt=1)
        seen: list[agent_pb2.JobUpdate] = []
        node = (await next_update(agent, agent_pb2.BOUND, seen)).placements[0].node
        core(kube).patch_node(node, {"metadata": {"annotations": {"federation.dev/testbed-not-ready": "true"}}})
        failed = await next_update(agent, agent_pb2.POD_FAILED, seen)
        assert failed.reason == f"Unknown: node {node} lost" and node not in agent.state.ready
        await agent.remove("long-1", 1, "cancelled")
        await eventually(lambda: not pods(kube), what="the gang's pods deleted")
    finally:
        await b.stop()


async def test_a_pod_stuck_pending_is_replaced_and_one_in_phase_unknown_is_lost(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 4))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        pending = common_pb2.LifecyclePolicy(events=["PodPending"], action="RestartPod")
        pending.timeout.FromMilliseconds(1500)
        # worker pods stay Pending for 30 s (an image that will not arrive); KWOK starts them after it
        template = json.dumps({"metadata": {"annotations": {"federation.dev/sim-start-delay": "30s"}},
                               "spec": {"containers": [{"name": "c", "image": "x"}]}})
        job = gang("long", 2, policies=[pending], template=template)
        await agent.assign(job, attempt=1)
        seen: list[agent_pb2.JobUpdate] = []
        restarted = await next_update(agent, agent_pb2.POD_RESTARTED, seen)
        assert restarted.reason.startswith("RestartPod after PodPending on worker[")
        assert "-r1" in " ".join(pods(kube))
        victim = next(iter(pods(kube)))
        core(kube).patch_namespaced_pod_status(victim, JOBS, {"status": {"phase": "Unknown"}})  # its kubelet is quiet
        lost = await next_update(agent, agent_pb2.POD_FAILED, seen)
        assert lost.reason == "Unknown: the pod's node stopped reporting"
        assert (await next_update(agent, agent_pb2.JOB_FAILED, seen)).job_id == "long-1"  # no policy for Unknown
    finally:
        await b.stop()


async def test_a_completed_task_completes_the_job_by_policy(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        job = gang("mpi", 2)  # workers run until stopped
        launcher = json.dumps({"metadata": {"annotations": {"federation.dev/sim-duration": "2s"}},
                               "spec": {"containers": [{"name": "c", "image": "x"}]}})
        job.spec.tasks.insert(0, common_pb2.TaskSpec(name="launcher", replicas=1, resources={"cpu": "1"},
                                                     pod_template_json=launcher))
        job.spec.tasks[0].policies.add(events=["TaskCompleted"], action="CompleteJob")
        await agent.assign(job, attempt=1)
        done = await next_update(agent, agent_pb2.JOB_SUCCEEDED, [])
        assert done.reason == "CompleteJob after TaskCompleted of launcher: all its pods succeeded"
        await eventually(lambda: not pods(kube), what="the workers stopped")
    finally:
        await b.stop()


async def test_a_restarted_agent_adopts_its_pods_and_counts_them_once(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    first = await backend(kube, tmp_path)
    try:
        await ready_nodes(first, 4)
        agent = Agent("east", {}, first)
        await agent.assign(gang("long", 2), attempt=1)
        bound = await next_update(agent, agent_pb2.BOUND, [])
        await eventually(lambda: _running(kube, 2), what="Running")
    finally:
        await first.stop()
    uids = {n: p.metadata.uid for n, p in pods(kube).items()}
    node = bound.placements[0].node
    b = await backend(kube, tmp_path)  # the agent restarted: it reads the cluster again
    again = Agent("east", {}, b)
    try:
        assert again.state.free[node][GPU] == 0  # an earlier run's pod holds it until adopted
        await again.assign(gang("long", 2), attempt=1)  # the server assigns what it was not told about
        adopted = await next_update(again, agent_pb2.BOUND, [])
        assert "adopted 2 running pods" in adopted.reason
        assert sorted((p.index, p.node) for p in adopted.placements) == sorted(
            (p.index, p.node) for p in bound.placements)
        assert {n: p.metadata.uid for n, p in pods(kube).items()} == uids  # nothing created or bound again
        assert again.state.free[node][GPU] == 0  # counted once: the job's now, not also an earlier run's
        await again.remove("long-1", 1, "done")
        await eventually(lambda: again.state.free[node][GPU] == 8, what="released")
    finally:
        await b.stop()


async def test_a_gang_that_completed_while_no_agent_watched_is_reported_succeeded_not_run_again(
        kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    job = gang("short", 2, duration="2s")
    first = await backend(kube, tmp_path)
    try:
        await ready_nodes(first, 4)
        await Agent("east", {}, first).assign(job, attempt=1)
        await eventually(lambda: len(pods(kube)) == 2, what="the gang made")
    finally:
        await first.stop()  # the agent is gone before its pods complete
    await eventually(lambda: [p.status.phase for p in pods(kube).values()] == ["Succeeded"] * 2, what="completed")
    b = await backend(kube, tmp_path)
    again = Agent("east", {}, b)
    try:
        await again.assign(job, attempt=1)  # the server, told nothing, assigns it again
        seen: list[agent_pb2.JobUpdate] = []
        done = await next_update(again, agent_pb2.JOB_SUCCEEDED, seen)
        assert done.reason == "all 2 pods had completed when the agent found them after a restart"
        assert not [u for u in seen if u.type in (agent_pb2.BOUND, agent_pb2.REJECTED)]  # nothing placed again
        await eventually(lambda: not pods(kube), what="the completed pods cleaned up")
        assert "short-1" not in again.desired and "short-1" not in again.jobs
    finally:
        await b.stop()


async def test_a_restarted_agent_restarts_what_its_gang_lost_under_job_unknown(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    job = gang("long", 2)
    job.spec.policies.add(events=["JobUnknown"], action="RestartPod")
    first = await backend(kube, tmp_path)
    try:
        await ready_nodes(first, 4)
        await Agent("east", {}, first).assign(job, attempt=1)
        await eventually(lambda: _running(kube, 2), what="Running")
    finally:
        await first.stop()
    core(kube).delete_namespaced_pod("long-1-a1-worker-1", JOBS,  # gone while no agent watched
                                     body=client.V1DeleteOptions(grace_period_seconds=0))
    await eventually(lambda: len(pods(kube)) == 1, what="the pod gone")
    b = await backend(kube, tmp_path)
    again = Agent("east", {}, b)
    try:
        await again.assign(job, attempt=1)
        seen: list[agent_pb2.JobUpdate] = []
        adopted = await next_update(again, agent_pb2.BOUND, seen)
        assert [p.index for p in adopted.placements] == [0]
        restarted = await next_update(again, agent_pb2.POD_RESTARTED, seen)
        assert restarted.retries == 1
        await eventually(lambda: set(pods(kube)) == {"long-1-a1-worker-0", "long-1-a1-worker-1-r1"},
                         what="the missing pod made again")
    finally:
        await b.stop()
