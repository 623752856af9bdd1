"""Issue 42 (6): a gpu-memory ask (KAI's annotation) fitted as the share of a device it takes, not as a whole GPU,
with real processes. A cluster of one 80 GB GPU half taken by a fraction has 0.5 GPU free: before, the federation
counted a 20 GiB ask as one whole GPU and kept it waiting, while the device had the memory free (KAI would place
it); now its agent reports its devices' memory (GPU Feature Discovery's label) and the job runs beside the other."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.clusters import tree
from tests.test_e2e_agents import wait_for

pytestmark = pytest.mark.e2e


def spec(name: str, annotations: dict[str, str]) -> common_pb2.JobSpec:
    template = json.dumps({"metadata": {"annotations": annotations}})
    return common_pb2.JobSpec(name=name, queue="infer", annotations={"federation.dev/sim-duration": "600s"},
                              tasks=[common_pb2.TaskSpec(name="server", replicas=1, resources={"cpu": "1"},
                                                         pod_template_json=template)])


def test_a_gpu_memory_ask_runs_where_a_device_has_the_memory_free(db_url: URL, tmp_path: Path) -> None:
    cluster = tmp_path / "one-gpu.yaml"
    cluster.write_text(yaml.safe_dump_all(tree("g", [1, 1], {"nvidia.com/gpu": "1", "cpu": "16"},
                                               {"nvidia.com/gpu.memory": "81920"})))
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    agent = None
    try:
        agent = AgentProcess("g", server.address, "--simulate", str(cluster), "--heartbeat", "0.5")
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        wait_for("cluster g Ready", lambda: [c for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                                             if c.status == admin_pb2.READY])
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="infer", tenant="ml")))

        def status(job_id: str) -> common_pb2.JobStatus:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

        half = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("half", {"gpu-fraction": "0.5"}))).job.id
        wait_for("the fraction running", lambda: status(half).phase == common_pb2.RUNNING)
        # 20 GiB of the 80 GiB device: a quarter of it, where half is free.
        small = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("small", {"gpu-memory": "20480"}))).job.id
        wait_for("the memory ask running", lambda: status(small).phase == common_pb2.RUNNING, timeout=120)
        # On the same node, beside the fraction; the device now 0.75 taken.
        assert {p.node for p in status(small).placements} == {p.node for p in status(half).placements}
        # More memory than the device has left (60 GiB of the 20 GiB free) waits, saying what is short.
        large = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("large", {"gpu-memory": "61440"}))).job.id
        wait_for("the large ask waiting for room", lambda: "not enough free" in status(large).reason)
        assert status(large).phase == common_pb2.PENDING
    finally:
        if agent is not None:
            agent.stop()
        server.stop()
