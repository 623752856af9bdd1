"""The federation with a member cluster on a real Kubernetes API server: server and member-agent processes,
the agent connecting as its ServiceAccount, KWOK running the pods."""

from __future__ import annotations

import subprocess
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import BIN, AgentProcess, ServerProcess
from federation.testbed.cluster import AGENT_RBAC, Testbed
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.kubehelp import GPU, JOBS, gpu_cluster, pods
from tests.test_e2e_agents import wait_for

pytestmark = pytest.mark.e2e


def metric(address: str, name: str) -> float:
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


class Federation:
    """A server on this test's database and one agent process on the test bed's API server."""

    def __init__(self, db_url: URL, kube: Testbed, tmp_path: Path) -> None:
        self.server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
        try:
            self.config = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig")
            self.agent = self.start_agent()
            channel = grpc.insecure_channel(self.server.address)
            self.jobs, self.admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
            wait_for("the cluster to be Ready", lambda: [
                c for c in self.admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                if c.status == admin_pb2.READY and c.allocatable.get(GPU) == "32"])
            self.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
            self.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        except BaseException:
            self.stop()
            raise

    def start_agent(self) -> AgentProcess:
        return AgentProcess("k8s", self.server.address, "--kubeconfig", str(self.config), "--namespace", JOBS,
                            "--label", "accelerator=h100", "--heartbeat", "0.5", "--health-listen", "127.0.0.1:0")

    @property
    def health(self) -> str:
        return self.agent.log.decode().split("health on ", 1)[1].split()[0]

    def submit(self, replicas: int, duration: str) -> str:
        spec = common_pb2.JobSpec(name="kube", queue="train", annotations={"federation.dev/sim-duration": duration},
                                  network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=1),
                                  tasks=[common_pb2.TaskSpec(name="worker", replicas=replicas,
                                                             resources={GPU: "8", "cpu": "8"})])
        return self.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job.id

    def status(self, job_id: str) -> common_pb2.JobStatus:
        return self.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

    def stop(self) -> None:
        if hasattr(self, "agent"):
            self.agent.stop()
        self.server.stop()


def test_a_gang_runs_to_the_end_on_a_real_api_server(db_url: URL, kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    fed = Federation(db_url, kube, tmp_path)
    try:
        job_id = fed.submit(2, "3s")
        wait_for("the gang Running", lambda: fed.status(job_id).phase == common_pb2.RUNNING)
        status = fed.status(job_id)
        assert status.hypernode in ("n0-0", "n0-1") and status.tier == 1
        assert {p.spec.node_name for p in pods(kube).values()} == {p.node for p in status.placements}
        wait_for("the job to succeed", lambda: fed.status(job_id).phase == common_pb2.SUCCEEDED)
        # Its pods stay, ended, with their logs (the agent's default retention is a day), as Volcano keeps them.
        assert {p.status.phase for p in pods(kube).values()} == {"Succeeded"} and len(pods(kube)) == 2
        assert [p.phase for p in fed.status(job_id).pods] == ["Succeeded"] * 2
        logs = subprocess.run([str(BIN / "fedctl"), "--server", fed.server.address, "logs", job_id, "worker", "0",
                               "--tail", "1"], capture_output=True, text=True, timeout=60)
        assert logs.returncode == 0 and logs.stdout == "test bed pod log, line 5\n", logs.stderr
        health = fed.health
        assert urllib.request.urlopen(f"http://{health}/healthz", timeout=5).status == 200
        assert urllib.request.urlopen(f"http://{health}/readyz", timeout=5).status == 200
        assert metric(health, 'member_agent_placements_total{result="bound"}') == 1
        assert metric(health, "member_agent_pods_bound_total") == 2
        assert metric(health, "member_agent_bind_seconds_count") == 1
        assert metric(health, 'member_agent_cached_objects{resource="nodes"}') == 4
        assert 0 <= metric(health, "member_agent_inventory_age_seconds") < 30
    finally:
        fed.stop()


def test_a_killed_agents_successor_adopts_the_whole_gang_and_creates_nothing(
        db_url: URL, kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    fed = Federation(db_url, kube, tmp_path)
    try:
        # Long enough that the successor finds the pods running however slowly it starts on a loaded machine
        # (one that finds them completed reports the job done instead: test_kube_lifecycle.py).
        job_id = fed.submit(2, "60s")
        wait_for("Running", lambda: fed.status(job_id).phase == common_pb2.RUNNING)
        before = {name: p.metadata.uid for name, p in pods(kube).items()}
        fed.agent.kill()
        fed.agent = fed.start_agent()  # the server assigns the job again; the agent adopts its pods
        wait_for("the adoption logged", lambda: b"adopted 2 pods" in fed.agent.log, timeout=120)
        assert {name: p.metadata.uid for name, p in pods(kube).items()} == before
        assert metric(fed.health, "member_agent_pods_bound_total") == 0
        assert metric(fed.health, 'member_agent_placements_total{result="adopted"}') == 1
        wait_for("Succeeded", lambda: fed.status(job_id).phase == common_pb2.SUCCEEDED, timeout=120)  # seen by it
        assert fed.status(job_id).attempt == 1
    finally:
        fed.stop()


@pytest.mark.parametrize(("kind", "verb", "resource"), [("ClusterRole", "watch", "pods"),
                                                        ("Role", "create", "pods/binding")])
def test_an_agent_whose_role_lacks_a_verb_stops_naming_it(kube: Testbed, tmp_path: Path, kind: str, verb: str,
                                                          resource: str) -> None:
    rbac = list(yaml.safe_load_all(AGENT_RBAC.read_text()))
    role = next(o for o in rbac if o["kind"] == kind)
    for rule in role["rules"]:
        if resource in rule["resources"]:
            if len(rule["resources"]) > 1:  # split the rule so only this resource loses the verb
                role["rules"].append({**rule, "resources": [r for r in rule["resources"] if r != resource]})
                rule["resources"] = [resource]
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
    role["rules"] = [rule for rule in role["rules"] if rule["verbs"]]
    config = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig", rbac)
    done = subprocess.run([str(BIN / "member-agent"), "--cluster", "k8s", "--server", "127.0.0.1:1",
                           "--kubeconfig", str(config), "--namespace", JOBS], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1
    where = f"in namespace {JOBS}" if kind == "Role" else "(cluster-wide)"
    assert f"the agent's role does not grant: {verb} {resource} {where}" in done.stderr
    assert "Traceback" not in done.stderr


def test_fedctl_shows_the_pods_and_reads_their_logs_from_the_member_cluster(
        db_url: URL, kube: Testbed, tmp_path: Path) -> None:
    """Issue 28 (1), all the way: fedctl → server → the agent's stream → the API server → the node's kubelet
    (KWOK) and back, with no member kubeconfig on the user's side."""
    gpu_cluster(kube)
    fed = Federation(db_url, kube, tmp_path)
    try:
        job_id = fed.submit(2, "600s")
        wait_for("both pods reported Running", lambda: [p.phase for p in fed.status(job_id).pods] == ["Running"] * 2)
        names = {name for name in pods(kube)}
        listed = subprocess.run([str(BIN / "fedctl"), "--server", fed.server.address, "get", "pods", job_id],
                                capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stderr
        rows = [line.split() for line in listed.stdout.splitlines()[1:]]
        assert {r[1] for r in rows} == names and {r[2] for r in rows} == {JOBS} and {r[6] for r in rows} == {"Running"}
        logs = subprocess.run([str(BIN / "fedctl"), "--server", fed.server.address, "logs", job_id, "worker", "1",
                               "--tail", "2"], capture_output=True, text=True, timeout=60)
        assert logs.returncode == 0, logs.stderr
        assert logs.stdout.splitlines() == ["test bed pod log, line 4", "test bed pod log, line 5"]
    finally:
        fed.stop()
