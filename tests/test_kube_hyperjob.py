"""A HyperJob across two member clusters, each a real API server of its own (KWOK running the pods): Volcano
Global's own example, 256 one-GPU pods in two sub-jobs of 128, through `fedctl submit`. While one cluster has only
120 GPUs free (another workload holds 8), it waits holding nothing: no pod in either cluster. Once the room is
there, each cluster holds its sub-job's room, both are committed and all 256 pods run, 128 in each."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.testbed.build import Tools
from federation.testbed.cluster import running
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.kubehelp import GPU, JOBS, core, gpu_cluster, pods
from tests.processes import fedctl
from tests.test_e2e_agents import wait_for
from tests.test_e2e_health import events
from tests.test_e2e_hyperjob import CORPUS

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # two API servers, 256 pods on a two-core machine
EXAMPLE = CORPUS / "volcano_hyperjob-multi-cluster-job-splitting_0.yaml"  # llm-training: 2 x 128 GPUs


def test_a_256_gpu_hyperjob_runs_across_two_128_gpu_clusters_or_waits_holding_nothing(
        db_url: URL, testbed_tools: Tools, tmp_path: Path) -> None:
    with running(tmp_path / "east", testbed_tools) as east, running(tmp_path / "west", testbed_tools) as west:
        beds = {"east": east, "west": west}
        nodes = {name: gpu_cluster(bed, (1, 2, 8), prefix=name) for name, bed in beds.items()}  # 16 nodes of 8 GPUs
        # Another workload holds 8 of west's GPUs: it has 120 free.
        core(west).create_namespaced_pod("default", {
            "metadata": {"name": "other-team"},
            "spec": {"nodeName": nodes["west"][0], "containers": [{"name": "c", "image": "x", "resources": {
                "requests": {GPU: "8"}, "limits": {GPU: "8"}}}]}})
        server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
        agents: list[AgentProcess] = []
        try:
            for name, bed in beds.items():
                agents.append(AgentProcess(name, server.address, "--kubeconfig",
                                           str(bed.agent_kubeconfig(tmp_path / f"{name}.kubeconfig")),
                                           "--namespace", JOBS, "--heartbeat", "0.5"))
            channel = grpc.insecure_channel(server.address)
            jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)

            def used() -> dict[str, str]:
                return {c.name: c.used.get(GPU, "0") for c in admin.ListClusters(admin_pb2.ListClustersRequest())
                        .clusters if c.status == admin_pb2.READY and c.allocatable.get(GPU) == "128"}

            wait_for("both clusters Ready, west with 8 GPUs taken", lambda: used() == {"east": "0", "west": "8"},
                     timeout=120)
            submitted = fedctl(server.address, "submit", "-f", str(EXAMPLE))
            assert submitted.returncode == 0, submitted.stderr
            ids = [line.split()[0].removeprefix("job/") for line in submitted.stdout.splitlines()]

            def status(job_id: str) -> common_pb2.JobStatus:
                return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

            wait_for("the HyperJob's reason", lambda: status(ids[0]).reason.startswith(
                "HyperJob llm-training waits, holding nothing: 1 of the 2 sub-job(s) it needs together have room; "
                "sub-job 1: no cluster it may use fits beside sub-job(s) 0, placed first: "))
            assert "west: not enough free: nvidia.com/gpu 120/128 free" in status(ids[1]).reason
            assert [status(i).phase for i in ids] == [common_pb2.PENDING, common_pb2.PENDING]
            assert not pods(east) and not pods(west)  # nothing made, nothing held
            assert not [e for i in ids for e in events(jobs, i) if e.type in ("Dispatched", "Held")]

            core(west).delete_namespaced_pod("other-team", "default", grace_period_seconds=0)
            wait_for("both sub-jobs running", lambda: all(status(i).phase == common_pb2.RUNNING for i in ids),
                     timeout=300)
            assert sorted(status(i).cluster for i in ids) == ["east", "west"]
            for job_id in ids:
                kinds = [e.type for e in events(jobs, job_id) if e.type in ("Dispatched", "Held", "Admitted",
                                                                               "Running")]
                assert kinds == ["Dispatched", "Held", "Admitted", "Running"]
            for name, bed in beds.items():
                made = pods(bed)
                (job_id,) = [i for i in ids if status(i).cluster == name]
                assert len(made) == 128 and all(p.metadata.name.startswith(job_id) for p in made.values())
                assert sum(int(p.spec.containers[0].resources.requests[GPU]) for p in made.values()) == 128
            wait_for("every pod running", lambda: all(p.status.phase == "Running" for bed in beds.values()
                                                      for p in pods(bed).values()), timeout=300)
        finally:
            for agent in agents:
                agent.stop()
            server.stop()
