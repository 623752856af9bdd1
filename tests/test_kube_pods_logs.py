"""Issue 28 (1) on a real API server with KWOK: the agent reports each pod as kubectl shows it (name, namespace,
node, phase, container restarts), and streams a pod's log from the API server, which reads it from the node's
kubelet API (KWOK's, serving the test bed's pod.log) — the path `fedctl logs` takes through the federation."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from federation.testbed.cluster import Testbed, cri_log_line
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.kube import KubernetesBackend
from member_agent.kubeapi import Kube
from tests.kubehelp import JOBS, backend, eventually, gang, gpu_cluster, next_update, pods, ready_nodes

RETENTION = 4.0  # seconds: long enough to read the kept pod, short enough to see it go


async def test_pods_reported_as_kubectl_shows_them_and_their_logs_read_from_the_kubelet(
        kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        # The test bed's HyperNode CRD (volcano.sh/apis v1.14.0) keeps spec.tierName: tiers have their names.
        assert b.state.topology.tier_names == {"spine": 2, "leaf": 1}
        await agent.assign(gang("logged", 2, duration="600s"), attempt=1)
        seen: list[agent_pb2.JobUpdate] = []
        bound = await next_update(agent, agent_pb2.BOUND, seen)
        job = agent.jobs["logged-1"]

        def running() -> list[object]:
            statuses = b.pod_statuses(job)
            return statuses if len(statuses) == 2 and all(s.phase == "Running" for s in statuses) else []

        statuses = await eventually(running, what="both pods Running in the cache")
        assert {(s.task, s.index, s.node) for s in statuses} == {(p.task, p.index, p.node) for p in bound.placements}
        assert all(s.namespace == JOBS and s.name.startswith("logged-1-") for s in statuses)
        assert agent.report_pod_statuses() == 1 and agent.report_pod_statuses() == 0  # said once, until it changes
        said = [m.job_update for m in drain_outbox(agent) if m.job_update.type == agent_pb2.POD_STATUS]
        assert [len(u.pod_statuses) for u in said] == [2]

        expected = "".join(line.split(" ", 3)[3] + "\n" for line in kube.pod_log.read_text().splitlines())
        read = b"".join([chunk async for chunk in b.logs("logged-1", 1, "worker", 1, follow=False, previous=False,
                                                          tail_lines=0)])
        assert read.decode() == expected
        tail = b"".join([chunk async for chunk in b.logs("logged-1", 1, "worker", 0, follow=False, previous=False,
                                                          tail_lines=2)])
        assert tail.decode().splitlines() == expected.splitlines()[-2:]
        # Followed: a line the kubelet's log gains later arrives on the open stream.
        followed = b.logs("logged-1", 1, "worker", 0, follow=True, previous=False, tail_lines=1)
        first = await asyncio.wait_for(anext(followed), 30)
        assert b"line 5" in first
        with kube.pod_log.open("a") as log:
            log.write(cri_log_line("written while followed"))
        more = b""
        while b"written while followed" not in more:
            more += await asyncio.wait_for(anext(followed), 30)
        await followed.aclose()
        try:
            async for _ in b.logs("logged-1", 1, "worker", 9, follow=False, previous=False, tail_lines=0):
                pass
            raise AssertionError("a pod the job does not have was read")
        except LookupError as err:
            assert "has no pod worker[9] of attempt 1" in str(err)
    finally:
        await b.stop()


async def test_an_ended_job_keeps_its_ended_pods_and_their_logs_for_the_retention_and_stops_the_rest(
        kube: Testbed, tmp_path: Path) -> None:
    """Issue 42 (2): as Volcano keeps a finished job's pods, so `kubectl`, `fedctl get pods` and `fedctl logs`
    still show how it ended; the pods still running when it ended are stopped at once."""
    gpu_cluster(kube)
    config = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig")
    b = KubernetesBackend(await Kube.connect(str(config)), "east", JOBS, "federation-agent", (), retention=RETENTION)
    await b.start()
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        job = gang("mpi", 2)  # workers run until stopped; the launcher completes, which completes the job
        launcher = json.dumps({"metadata": {"annotations": {"federation.dev/sim-duration": "1s"}},
                               "spec": {"containers": [{"name": "c", "image": "x"}]}})
        job.spec.tasks.insert(0, common_pb2.TaskSpec(name="launcher", replicas=1, resources={"cpu": "1"},
                                                     pod_template_json=launcher))
        job.spec.tasks[0].policies.add(events=["TaskCompleted"], action="CompleteJob")
        await agent.assign(job, attempt=1)
        said: list[agent_pb2.JobUpdate] = []

        def ended() -> bool:
            said.extend(m.job_update for m in drain_outbox(agent) if m.HasField("job_update"))
            return any(u.type == agent_pb2.JOB_SUCCEEDED for u in said)

        await eventually(ended, what="the job completed")
        final = [u for u in said if u.type == agent_pb2.POD_STATUS][-1]  # said just before the end
        assert [(p.task, p.index, p.phase) for p in final.pod_statuses] == [("launcher", 0, "Succeeded")]
        await eventually(lambda: {n: p.status.phase for n, p in pods(kube).items()} == {
            "mpi-1-a1-launcher-0": "Succeeded"}, what="the workers stopped and the launcher kept")
        assert ("mpi-1", 1) not in b.managed()  # it holds nothing: reconciliation leaves it alone

        # Its log, the way `fedctl logs` reaches it: through the agent's stream.
        agent.open_logs(agent_pb2.LogsRequest(stream_id="s", job_id="mpi-1", attempt=1, task="launcher", index=0,
                                              tail_lines=1))
        chunks: list[agent_pb2.LogChunk] = []

        def read() -> bool:
            chunks.extend(m.log_chunk for m in drain_outbox(agent) if m.HasField("log_chunk"))
            return any(c.end for c in chunks)

        await eventually(read, what="the kept pod's log")
        assert b"".join(c.data for c in chunks) == b"test bed pod log, line 5\n" and not chunks[-1].error
        await eventually(lambda: not pods(kube), timeout=RETENTION + 30, what="the kept pod deleted at last")
    finally:
        await b.stop()


def drain_outbox(agent: Agent) -> list[agent_pb2.AgentMessage]:
    out = []
    while not agent.outbox.empty():
        out.append(agent.outbox.get_nowait())
    return out
