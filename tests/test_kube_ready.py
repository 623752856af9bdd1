"""Ready or requeued (issue 46, 5), the agent's half on the real API server with KWOK nodes: a gang whose pods are
not all running within its `federation.dev/ready-timeout` after it was sent is deleted and given back to the
federation (PODS_NOT_READY, saying how many of each task ran); one whose pods start in time is no longer watched."""

from __future__ import annotations

import json
from pathlib import Path

from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from tests.kubehelp import GPU, backend, eventually, gpu_cluster, next_update, pods, ready_nodes


def template(start_delay: str = "") -> str:
    annotations = {"federation.dev/sim-start-delay": start_delay} if start_delay else {}
    return json.dumps({"metadata": {"annotations": annotations}, "spec": {"containers": [{"name": "c", "image": "x"}]}})


def job(name: str, timeout: str, worker_delay: str) -> common_pb2.Job:
    """A launcher that starts at once and two workers that start after `worker_delay`."""
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations={"federation.dev/sim-duration": "600s",
                                           "federation.dev/ready-timeout": timeout},
        tasks=[common_pb2.TaskSpec(name="launcher", replicas=1, resources={"cpu": "1"}, pod_template_json=template()),
               common_pb2.TaskSpec(name="worker", replicas=2, resources={GPU: "8"},
                                   pod_template_json=template(worker_delay))]))


async def test_a_gang_not_running_in_time_is_given_back_and_one_that_runs_is_kept(kube: Testbed,
                                                                                 tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 4))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 4)
        # Workers held Pending for ten minutes (an image that will not arrive), a ready timeout of 3 s.
        await agent.assign(job("stuck", "3s", "600s"), attempt=1)
        # Beside it, one whose workers start at once, with a minute to do it.
        await agent.assign(job("quick", "60s", ""), attempt=1)
        given_back = await next_update(agent, agent_pb2.PODS_NOT_READY, seen, timeout=120)
        assert given_back.job_id == "stuck-1" and given_back.attempt == 1
        assert given_back.reason == ("its pods were not all running 3s after it was sent here (launcher 1 of 1, "
                                     "worker 0 of 2 running; federation.dev/ready-timeout)")
        assert "stuck-1" not in agent.jobs
        await eventually(lambda: not [p for p in pods(kube).values() if p.metadata.name.startswith("stuck")
                                      and p.metadata.deletion_timestamp is None], what="the stuck gang's pods gone")
        # Its GPUs are free again: only the quick gang's two workers hold any.
        assert agent.state.used.get(GPU) == 16
        quick = agent.jobs["quick-1"]
        await eventually(lambda: quick.unready is None, what="the quick gang seen ready")
        assert quick.ran == set()  # no longer counted
        assert not [u for u in seen if u.type == agent_pb2.PODS_NOT_READY and u.job_id == "quick-1"]
    finally:
        await b.stop()
