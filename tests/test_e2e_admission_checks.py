"""Admission checks and capacity provisioned on demand (issue 46, 4) with real processes.

An external check: a job of a queue naming `approval` is dispatched (its quota and room kept) but its cluster is not
told to run it until the check's controller says READY through the admin API (`fedctl admission-check`); RETRY puts
it back in its queue, REJECTED ends it. Provisioning: on the real API server, a gang too large for the one member
cluster as it is goes there when its queue has the `provisioning` check and the cluster's agent reports a node group
that can hold it; the agent asks for the nodes (a ProvisioningRequest), the test bed's stand-in provisioner (its own
process) adds them as KWOK nodes, and the gang runs on them; the same gang in a queue without the check waits."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.testbed import provisioner
from federation.testbed.cluster import Testbed
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.clusters import tree
from tests.kubehelp import JOBS, gpu_cluster, pods
from tests.processes import fedctl
from tests.test_e2e_agents import by_either_path, wait_for
from tests.test_e2e_health import events

pytestmark = pytest.mark.e2e
GPU = "nvidia.com/gpu"


def spec(name: str, queue: str, replicas: int = 1) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(name=name, queue=queue, annotations={"federation.dev/sim-duration": "600s"},
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=replicas,
                                                         resources={GPU: "8", "cpu": "4"})])


def checks(status: common_pb2.JobStatus) -> list[tuple[str, str, str]]:
    return [(c.name, c.state, c.message) for c in status.admission_checks]


def test_a_job_waits_for_its_external_check_then_runs_retries_or_fails(db_url: URL, tmp_path: Path) -> None:
    cluster = tmp_path / "a.yaml"
    cluster.write_text(yaml.safe_dump_all(tree("a", [1, 4], {GPU: "8", "cpu": "64"})))
    queues = tmp_path / "queues.yaml"
    queues.write_text(yaml.safe_dump_all([
        {"apiVersion": "federation.dev/v1", "kind": "Tenant", "metadata": {"name": "ml"}, "spec": {}},
        {"apiVersion": "federation.dev/v1", "kind": "Queue", "metadata": {"name": "gated"},
         "spec": {"tenant": "ml", "admissionChecks": ["approval"]}}]))
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), "--ui-listen",
                           "127.0.0.1:0")
    agent = None
    try:
        agent = AgentProcess("a", server.address, "--simulate", str(cluster), "--heartbeat", "0.5")
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        wait_for("cluster a Ready", lambda: [c for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                                             if c.status == admin_pb2.READY])
        applied = fedctl(server.address, "apply", "-f", str(queues))
        assert applied.returncode == 0, applied.stderr
        listed = fedctl(server.address, "get", "queues").stdout.splitlines()
        gated = next(line.split() for line in listed if line.startswith("gated "))
        assert gated[listed[0].split().index("CHECKS")] == "approval"

        def status(job_id: str) -> common_pb2.JobStatus:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

        approved = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("approved", "gated", 2))).job.id
        wait_for("dispatched", lambda: status(approved).phase == common_pb2.DISPATCHED)
        assert status(approved).reason in by_either_path(
            "dispatched to cluster a; waiting for admission check(s) approval before its cluster is told to run it")
        assert checks(status(approved)) == [("approval", "PENDING", "")]
        # Its room is kept (quota reserved, as Kueue's QuotaReserved) while its cluster has not been told: the agent
        # holds nothing of it, and another job's room is what is left.
        time.sleep(2)
        assert status(approved).phase == common_pb2.DISPATCHED
        assert admin.ListClusters(admin_pb2.ListClustersRequest()).clusters[0].used.get(GPU, "0") == "0"
        # Bad input names its field and changes nothing.
        with pytest.raises(grpc.RpcError) as bad:
            admin.SetAdmissionCheck(admin_pb2.SetAdmissionCheckRequest(job_id=approved, name="approval",
                                                                       state="MAYBE"))
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "state" in bad.value.details()
        with pytest.raises(grpc.RpcError) as unknown:
            admin.SetAdmissionCheck(admin_pb2.SetAdmissionCheckRequest(job_id=approved, name="budget", state="READY"))
        assert unknown.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no admission check 'budget'" in unknown.value.details()
        with pytest.raises(grpc.RpcError) as agents:
            admin.SetAdmissionCheck(admin_pb2.SetAdmissionCheckRequest(job_id=approved, name="provisioning",
                                                                       state="READY"))
        assert agents.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "carried out by the agent" in \
            agents.value.details()
        assert checks(status(approved)) == [("approval", "PENDING", "")]
        said = fedctl(server.address, "admission-check", approved, "approval", "ready", "--message", "signed off")
        assert said.returncode == 0, said.stderr
        wait_for("running once approved", lambda: status(approved).phase == common_pb2.RUNNING)
        assert checks(status(approved)) == [("approval", "READY", "signed off")]
        assert [e.type for e in events(jobs, approved) if e.type in ("Dispatched", "Admitted", "Running")] == [
            "Dispatched", "Admitted", "Running"]
        wide = fedctl(server.address, "get", "jobs", "-o", "wide").stdout.splitlines()
        row = next(line.split() for line in wide if line.startswith(approved))
        assert row[wide[0].split().index("CHECKS")] == "approval=Ready"
        page = urllib.request.urlopen(f"{server.dashboard}/jobs/{approved}", timeout=10).read().decode()
        assert 'data-check="approval">approval: ready (signed off)' in page
        queues_page = urllib.request.urlopen(f"{server.dashboard}/queues", timeout=10).read().decode()
        assert 'admission checks its jobs pass before their cluster runs them">checks approval</div>' in queues_page

        # RETRY: its room goes back, it waits in its queue and is dispatched again with its checks pending again.
        retried = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("retried", "gated"))).job.id
        wait_for("dispatched", lambda: status(retried).phase == common_pb2.DISPATCHED)
        assert status(retried).attempt == 1
        fedctl(server.address, "admission-check", retried, "approval", "retry", "--message", "not yet")
        wait_for("dispatched again", lambda: status(retried).attempt == 2 and
                 status(retried).phase == common_pb2.DISPATCHED)
        assert checks(status(retried)) == [("approval", "PENDING", "")]
        assert [e.type for e in events(jobs, retried) if e.type in ("Dispatched", "CheckRetry")] == [
            "Dispatched", "CheckRetry", "Dispatched"]
        # REJECTED: it fails, saying why; its room is free again.
        out = fedctl(server.address, "admission-check", retried, "approval", "rejected", "--message", "no budget")
        assert out.returncode == 0 and "Failed: rejected by admission check approval: no budget" in out.stdout
        assert status(retried).phase == common_pb2.FAILED
        # A job that ended has no check left to set: said, not a traceback.
        late = fedctl(server.address, "admission-check", retried, "approval", "ready")
        assert late.returncode != 0 and "Traceback" not in late.stderr and "FAILED" in late.stderr
    finally:
        if agent is not None:
            agent.stop()
        server.stop()


GROUPS = [{"name": "h100", "maxNodes": 2, "capacity": {GPU: "8", "cpu": "64", "memory": "512Gi"}}]


def test_a_gang_too_large_for_every_cluster_runs_on_nodes_provisioned_for_it(db_url: URL, kube: Testbed,
                                                                               tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 1))  # one node of 8 GPUs
    provisioner.install(kube)
    groups = tmp_path / "groups.yaml"
    groups.write_text(yaml.safe_dump(GROUPS))
    stand_in = subprocess.Popen([sys.executable, "-m", "federation.testbed.provisioner", "--kubeconfig",
                                 str(kube.admin_kubeconfig), "--node-groups", str(groups), "--period", "0.3"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    agent = None
    try:
        agent = AgentProcess("k8s", server.address, "--kubeconfig", str(kube.agent_kubeconfig(tmp_path / "agent.kc")),
                             "--namespace", JOBS, "--heartbeat", "0.5", "--node-groups", str(groups))
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        wait_for("the cluster Ready", lambda: [c for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                                               if c.status == admin_pb2.READY and c.allocatable.get(GPU) == "8"])
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(
            name="grow", tenant="ml", admission_checks=["provisioning"])))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="fixed", tenant="ml")))

        def status(job_id: str) -> common_pb2.JobStatus:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

        fixed = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("fixed", "fixed", 2))).job.id
        grown = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("grown", "grow", 2))).job.id
        wait_for("the gang running on new nodes", lambda: status(grown).phase == common_pb2.RUNNING, timeout=120)
        s = status(grown)
        assert sorted(p.node for p in s.placements) == ["h100-0", "h100-1"]
        dispatched = next(e for e in events(jobs, grown) if e.type == "Dispatched")
        assert dispatched.message == ("dispatched to cluster k8s (on 2 new node(s) of node group h100 that cluster k8s "
                                      "will provision); its agent is placing the gang")
        assert [e.message for e in events(jobs, grown) if e.type == "Preparing"] == [
            f"cluster k8s is preparing for it: asked the autoscaler for 2 node(s) of node group h100 "
            f"(ProvisioningRequest fed-{grown}-1); it is placed when they join"]
        assert checks(s) == [("provisioning", "READY", "placed once the autoscaler provisioned 2 node(s) of node "
                                                       f"group h100 (ProvisioningRequest fed-{grown}-1)")]
        made = [p for p in pods(kube).values() if p.metadata.name.startswith(grown)]
        assert {p.spec.node_name for p in made} == {"h100-0", "h100-1"}
        # The same gang in a queue without the check waits: the cluster holds 8 GPUs free, the group is at its most.
        assert status(fixed).phase == common_pb2.PENDING
        assert "no ready cluster fits" in status(fixed).reason or "cannot run" in status(fixed).reason
        cluster = admin.ListClusters(admin_pb2.ListClustersRequest()).clusters[0]
        assert cluster.allocatable.get(GPU) == "24" and cluster.used.get(GPU) == "16"
    finally:
        if agent is not None:
            agent.stop()
        server.stop()
        stand_in.kill()
        stand_in.wait()
