"""A job's maximum run time (issue 46, 3), held by its agent on the real API server with KWOK nodes: past
`federation.dev/max-run-time`, counted from the attempt's start, its pods are stopped and the job fails saying why; a
job assigned again while it runs (its agent reconnected or restarted) has only what is left of it, a new attempt the
whole of it."""

from __future__ import annotations

import time
from pathlib import Path

from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from tests.kubehelp import GPU, backend, eventually, gpu_cluster, next_update, pods, ready_nodes


def job(name: str, limit: str, started: float | None = None, phase: int = common_pb2.RUNNING,
        on_overrun: str = "") -> common_pb2.Job:
    """`started`: the server's start time, sent with a job assigned again while it runs (`phase`)."""
    annotations = {"federation.dev/sim-duration": "600s", "federation.dev/max-run-time": limit}
    if on_overrun:
        annotations["federation.dev/on-max-run-time"] = on_overrun
    made = common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations=annotations,
        tasks=[common_pb2.TaskSpec(name="w", replicas=2, resources={GPU: "1"})]))
    made.status.phase = phase if started is not None else common_pb2.DISPATCHED
    if started is not None:
        made.status.start_time.FromSeconds(int(started))
    return made


async def test_a_job_past_its_maximum_run_time_is_stopped_and_fails(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 1))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 1)
        # Started an hour ago elsewhere, at most 30 minutes: stopped as soon as it is bound here. Beside it, one
        # started an hour ago with two hours: it keeps running.
        await agent.assign(job("late", "30m", time.time() - 3600), attempt=2)
        await agent.assign(job("long", "2h", time.time() - 3600), attempt=2)
        # A new attempt of a job whose earlier one started an hour ago: its 30 minutes count from now.
        await agent.assign(job("again", "30m", time.time() - 3600, common_pb2.DISPATCHED), attempt=3)
        failed = await next_update(agent, agent_pb2.JOB_FAILED, seen, timeout=120)
        assert failed.job_id == "late-1"
        assert "ran past its maximum run time of 30m (federation.dev/max-run-time)" in failed.reason
        # A fresh one of 3 s: bound, running, then stopped no sooner than 3 s after it was assigned.
        assigned = time.monotonic()
        await agent.assign(job("short", "3s"), attempt=1)
        failed = await next_update(agent, agent_pb2.JOB_FAILED, seen, timeout=120)
        assert failed.job_id == "short-1" and time.monotonic() - assigned >= 3.0
        await eventually(lambda: not [p for p in pods(kube).values() if p.metadata.name.startswith(("late", "short"))
                                      and p.metadata.deletion_timestamp is None], what="the stopped jobs' pods gone")
        assert "long-1" in agent.jobs and "again-1" in agent.jobs
        assert not [u for u in seen if u.type == agent_pb2.JOB_FAILED and u.job_id in ("long-1", "again-1")]
    finally:
        await b.stop()


async def test_a_job_past_its_maximum_run_time_with_the_requeue_policy_is_given_back(kube: Testbed,
                                                                                    tmp_path: Path) -> None:
    """`federation.dev/on-max-run-time: requeue`: stopped as the others, and handed back to run again elsewhere."""
    gpu_cluster(kube, (1, 1, 1))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 1)
        assigned = time.monotonic()
        await agent.assign(job("slot", "3s", on_overrun="requeue"), attempt=1)
        back = await next_update(agent, agent_pb2.RUN_TIME_EXCEEDED, seen, timeout=120)
        assert back.job_id == "slot-1" and time.monotonic() - assigned >= 3.0
        assert back.reason == "stopped: it ran past its maximum run time of 3s (federation.dev/max-run-time)"
        assert "slot-1" not in agent.jobs and not agent.state.used.get(GPU)
        await eventually(lambda: not [p for p in pods(kube).values() if p.metadata.deletion_timestamp is None],
                         what="its pods gone")
        assert not [u for u in seen if u.type == agent_pb2.JOB_FAILED]
    finally:
        await b.stop()
