"""Issue 42 (2) on the simulated backend: a job that ends keeps its ended pods' logs for the agent's retention
(as a Kubernetes cluster keeps the pods: tests/test_kube_pods_logs.py), and says how each pod ended."""

from __future__ import annotations

import asyncio

from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.kubehelp import eventually

GPU = "nvidia.com/gpu"
RETENTION = 1.0


def _agent() -> Agent:
    backend = SimulatedBackend(load_cluster(tree("h", [1, 2], {GPU: "8", "cpu": "64"})), default_duration=0.2,
                               retention=RETENTION)
    return Agent("sim", {}, backend)


def _job() -> common_pb2.Job:
    return common_pb2.Job(id="short-1", spec=common_pb2.JobSpec(name="short", queue="q", tasks=[
        common_pb2.TaskSpec(name="worker", replicas=2, resources={GPU: "8"})]))


def _said(agent: Agent, into: list[agent_pb2.AgentMessage]) -> list[agent_pb2.AgentMessage]:
    while not agent.outbox.empty():
        into.append(agent.outbox.get_nowait())
    return into


async def _log(agent: Agent, stream: str) -> agent_pb2.LogChunk:
    """The whole answer to one log request, as one chunk (its data joined, its end and error)."""
    agent.open_logs(agent_pb2.LogsRequest(stream_id=stream, job_id="short-1", attempt=1, task="worker", index=1))
    chunks: list[agent_pb2.LogChunk] = []

    def done() -> bool:
        chunks.extend(m.log_chunk for m in _said(agent, []) if m.HasField("log_chunk"))
        return any(c.end for c in chunks)

    await eventually(done, timeout=10, what="the log's end")
    return agent_pb2.LogChunk(data=b"".join(c.data for c in chunks), end=True, error=chunks[-1].error)


async def test_an_ended_jobs_logs_are_read_until_its_retention_passes() -> None:
    agent = _agent()
    await agent.assign(_job(), attempt=1)
    said: list[agent_pb2.AgentMessage] = []
    await eventually(lambda: any(m.job_update.type == agent_pb2.JOB_SUCCEEDED for m in _said(agent, said)),
                     timeout=10, what="the job to succeed")
    assert "short-1" not in agent.jobs
    final = [m.job_update for m in said if m.job_update.type == agent_pb2.POD_STATUS][-1]
    assert [(p.name, p.phase) for p in final.pod_statuses] == [("short-1-worker-0", "Succeeded"),
                                                               ("short-1-worker-1", "Succeeded")]
    kept = await _log(agent, "a")
    assert not kept.error and kept.data.decode().splitlines()[-1] == "completed"
    assert kept.data.startswith(b"simulated pod short-1-worker-1 on node ")
    await asyncio.sleep(RETENTION + 0.2)
    gone = await _log(agent, "b")
    assert gone.error == "job short-1 has no pod worker[1] of attempt 1 here" and not gone.data
