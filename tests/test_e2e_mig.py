"""Dynamic MIG partitioning end to end (issue 31): the server, a member agent on a real API server with KWOK, and
the test bed's MIG-manager stand-in, each a process. No node publishes the profile a job asks for; the agent's
inventory says its idle MIG-capable GPUs could be cut into it, so the federation sends the job there; the agent has
the GPUs repartitioned, the job says so while it waits and once it runs."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.testbed.cluster import Testbed
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent import clusters
from tests.kubehelp import GPU, JOBS, core, pods
from tests.test_e2e_agents import wait_for
from tests.test_e2e_health import events
from tests.test_kube_mig import BASE, H100, SLICE, mig_manager

pytestmark = pytest.mark.e2e


def test_a_job_asking_for_a_profile_no_node_publishes_runs_on_gpus_cut_for_it(
        db_url: URL, kube: Testbed, tmp_path: Path) -> None:
    kube.apply([clusters.node(f"m{i}", {GPU: "8", **BASE}, {**H100, "nvidia.com/gpu.count": "8"}) for i in range(2)]
               + [clusters.hypernode("rack", 1, "rack", ["m0", "m1"], "Node")])
    manager = mig_manager(kube)
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    agent = None
    try:
        agent = AgentProcess("k8s", server.address, "--kubeconfig", str(kube.agent_kubeconfig(tmp_path / "a.conf")),
                             "--namespace", JOBS, "--heartbeat", "0.5")
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        wait_for("the cluster Ready with its 16 GPUs", lambda: [
            c for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
            if c.status == admin_pb2.READY and c.allocatable.get(GPU) == "16"])
        # what its idle MIG-capable GPUs could be cut into, shown to admins: 2 nodes x 8 GPUs x 7
        wait_for("the cluster's cuttable slices shown", lambda: [
            c for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
            if c.partitionable.get(SLICE) == "112"])
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="infer", tenant="ml")))
        spec = common_pb2.JobSpec(name="slices", queue="infer", annotations={"federation.dev/sim-duration": "600s"},
                                  tasks=[common_pb2.TaskSpec(name="server", replicas=4,
                                                             resources={SLICE: "2", "cpu": "1"})])
        job_id = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job.id
        def status() -> common_pb2.JobStatus:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

        try:
            running = wait_for("the job Running", lambda: (s := status()).phase == common_pb2.RUNNING and s,
                               timeout=180)
        except AssertionError as err:
            raise AssertionError(f"{err}; it says: {status().reason}") from None
        assert isinstance(running, common_pb2.JobStatus) and running.cluster == "k8s"
        assert "placed after NVIDIA's MIG manager repartitioned node m0 to all-1g.10gb" in running.reason
        said = [e for e in events(jobs, job_id) if e.type == "Preparing"]
        assert said and "cluster k8s is preparing for it" in said[0].message
        assert f"8 {SLICE}" in said[0].message and "node m0 to all-1g.10gb" in said[0].message
        assert {p.spec.node_name for p in pods(kube).values()} == {"m0"}
        assert core(kube).read_node("m0").status.allocatable[SLICE] == "56"
        assert core(kube).read_node("m1").metadata.labels["nvidia.com/mig.config"] == "all-disabled"
    finally:
        if agent is not None:
            agent.stop()
        server.stop()
        manager.terminate()
        manager.wait()
