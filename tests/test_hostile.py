"""Hostile input and faults, as a hostile tester would bring them: a member agent reporting nonsense, one
tenant watching for another's names, a second server on a used port, requests built to cost, and fedctl fed
files that are not manifests. Processes where the issue named them (agents, servers, fedctl)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.cli.dev import BIN, AgentProcess, ServerProcess
from federation.security import certs
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.conftest import REPO, Api, make_queue
from tests.test_api_admin import rpc_error
from tests.test_e2e_agents import wait_for

CLUSTERS = REPO / "examples" / "clusters"
GPU = "nvidia.com/gpu"

HOSTILE_AGENT = """
import sys, time, grpc
from federation.v1 import agent_pb2, agent_pb2_grpc
def messages():
    yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="evil", agent_version="0"))
    inv = agent_pb2.Inventory(allocatable=agent_pb2.ResourceAmounts(amounts={"nvidia.com/gpu": 8}), nodes=1,
                              topology=[agent_pb2.TierFree(tier=2147483647, max_free=agent_pb2.ResourceAmounts(
                                  amounts={"nvidia.com/gpu": 8}))])
    yield agent_pb2.AgentMessage(inventory=inv)
    while True:
        time.sleep(0.5)
        yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
with grpc.insecure_channel(sys.argv[1]) as channel:
    for _ in agent_pb2_grpc.AgentServiceStub(channel).Connect(messages()):
        pass
"""


def test_a_hostile_agent_leaves_only_its_own_cluster_out(db_url: URL) -> None:
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    good = AgentProcess("h100", server.address, "--simulate", str(CLUSTERS / "h100-spine-leaf.yaml"),
                        "--heartbeat", "0.5")
    evil = subprocess.Popen([sys.executable, "-c", HOSTILE_AGENT, server.address], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        problems = lambda: {c.name: c.problem for c in admin.ListClusters(  # noqa: E731
            admin_pb2.ListClustersRequest()).clusters}
        wait_for("the hostile agent to report", lambda: problems().get("evil"))
        assert "topology[0].tier 2147483647 is out of range" in problems()["evil"] and not problems()["h100"]
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        spec = common_pb2.JobSpec(name="fits", queue="train", tasks=[common_pb2.TaskSpec(
            name="worker", replicas=2, resources={GPU: "8"})])
        job = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job
        get = lambda: jobs.GetJob(jobs_pb2.GetJobRequest(id=job.id)).status  # noqa: E731
        wait_for("the job to run on the good cluster", lambda: get().phase == common_pb2.RUNNING)
        assert get().cluster == "h100" and evil.poll() is None  # scheduling went on while it kept reporting
        # A job that could only ever fit where the hostile agent claims room waits, and says why per cluster.
        wide = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=common_pb2.JobSpec(name="wide", queue="train", tasks=[
            common_pb2.TaskSpec(name="worker", replicas=1, resources={GPU: "8", "example.com/evil": "1"})]),
            allow_unknown_resources=True)).job  # only the hostile agent claims it, and its report is not used
        explained = {c.cluster: c.reason for c in jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=wide.id)).clusters}
        assert explained["evil"].startswith("its agent reported an inventory") and "h100" in explained
    finally:
        evil.kill()
        good.stop()
        server.stop()


def _fedctl(address: str, token: str, ca: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "fedctl"), "--server", address, *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "FEDERATION_TOKEN": token, "FEDERATION_CA": str(ca)})


def test_a_tenant_never_reads_another_tenants_names_in_its_watch(db_url: URL, tmp_path: Path) -> None:
    """bravo reclaims from alpha: alpha's watch (live, and replayed) names no job or queue of bravo's."""
    pki = tmp_path / "pki"
    certs.write_all(pki, ["east"])
    url = db_url.render_as_string(hide_password=False)
    server = ServerProcess("--database-url", url, "--agent-listen", "127.0.0.1:0", "--tls-cert",
                           str(pki / "server.crt"), "--tls-key", str(pki / "server.key"), "--agent-ca",
                           str(pki / "ca.crt"), secure=True)
    agent = None
    watches: list[subprocess.Popen[str]] = []
    try:
        assert "listening with TLS on" in server.ready_line
        east = tmp_path / "east.yaml"
        import yaml

        from member_agent import clusters
        east.write_text(yaml.safe_dump_all(clusters.tree("e-", [1, 2], clusters.H100), sort_keys=False))  # 16 GPUs
        agent = AgentProcess("east", server.agent_address, "--simulate", str(east), "--heartbeat", "0.5",
                             "--tls-ca", str(pki / "ca.crt"), "--tls-cert", str(pki / "east.crt"),
                             "--tls-key", str(pki / "east.key"))
        root = subprocess.run([str(BIN / "federation-server"), "token", "create", "--admin", "--database-url", url],
                              capture_output=True, text=True, timeout=60).stdout.strip()
        ca = pki / "ca.crt"
        plain = subprocess.run([str(BIN / "fedctl"), "--server", server.address, "--token", root, "clusters"],
                               capture_output=True, text=True, timeout=60)
        assert plain.returncode != 0 and "Traceback" not in plain.stderr  # the API speaks only TLS now
        for tenant, guarantee in (("alpha", []), ("bravo", ["--guarantee", f"{GPU}=8"])):
            assert _fedctl(server.address, root, ca, "tenant", "create", tenant, *guarantee).returncode == 0
            assert _fedctl(server.address, root, ca, "queue", "create", f"queue-{tenant}", "--tenant", tenant,
                           *guarantee).returncode == 0
        tokens = {t: _fedctl(server.address, root, ca, "token", "create", "--tenant", t).stdout.strip()
                  for t in ("alpha", "bravo")}
        for tenant in ("alpha", "bravo"):
            watches.append(subprocess.Popen(
                [str(BIN / "fedctl"), "--server", server.address, "watch", "--after", "0", "-o", "json"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "FEDERATION_TOKEN": tokens[tenant], "FEDERATION_CA": str(ca)}))
        job = tmp_path / "job.yaml"
        for tenant, name, count in (("alpha", "open-alpha", 2), ("bravo", "secret-bravo", 1)):
            job.write_text(f"""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata: {{name: {name}, annotations: {{federation.dev/sim-duration: 60s}}}}
spec:
  queue: queue-{tenant}
  tasks: [{{name: w, replicas: 1, template: {{spec: {{containers: [{{name: c, image: x, resources:
    {{limits: {{nvidia.com/gpu: "8"}}}}}}]}}}}}}]
""")
            for _ in range(count):
                assert _fedctl(server.address, tokens[tenant], ca, "submit", str(job)).returncode == 0
            time.sleep(2 if tenant == "alpha" else 0)
        events = lambda: _fedctl(server.address, root, ca, "watch", "--after", "0", "-o", "json")  # noqa: E731
        channel = grpc.secure_channel(server.address, grpc.ssl_channel_credentials(ca.read_bytes()))
        admin_jobs = jobs_pb2_grpc.JobServiceStub(channel)
        metadata = (("authorization", f"Bearer {root}"),)

        def preempted() -> bool:
            found = admin_jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=metadata).jobs
            return any(j.status.phase == common_pb2.PREEMPTED or "reclaimed" in j.status.reason for j in found)

        wait_for("bravo to reclaim from alpha", preempted, 60)
        time.sleep(2)  # the watches have it
    finally:
        for watch in watches:
            watch.terminate()
        seen = [w.communicate(timeout=30)[0] for w in watches]
        if agent is not None:
            agent.stop()
        server.stop()
    del events
    alpha, bravo = seen
    assert "reclaimed for a job of another tenant" in alpha  # alpha learns why, not who
    assert "secret-bravo" not in alpha and "queue-bravo" not in alpha and "bravo" not in alpha
    assert "open-alpha" not in bravo and "queue-alpha" not in bravo


def test_a_second_server_on_a_port_in_use_fails_at_once_naming_it(db_url: URL) -> None:
    first = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    try:
        done = subprocess.run([str(BIN / "federation-server"), "serve", "--insecure-dev", "--listen", first.address,
                               "--metrics-listen", "", "--database-url", db_url.render_as_string(hide_password=False)],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        lines = [line for line in done.stderr.splitlines() if not line.startswith(("20", "WARNING"))]
        assert lines == [f"Error: cannot listen on {first.address}: the address is in use (or not this host's)"]
    finally:
        first.stop()


async def test_requests_built_to_cost_are_refused_at_once_with_short_errors(api: Api) -> None:
    await make_queue(api)
    spec = common_pb2.JobSpec(name="costly", queue="train", tasks=[common_pb2.TaskSpec(
        name="w", replicas=1, resources={GPU: "1e1000000"})])
    started = time.monotonic()
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "is not a valid quantity" in err.details()
    assert time.monotonic() - started < 30  # it used to hold the event loop for half a minute
    err = await rpc_error(api.jobs.GetJob(jobs_pb2.GetJobRequest(id="x" * 1_000_000)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and len(err.details()) < 500  # the rule for every text
    assert "id: is 1,000,000 characters long, at most 4,096" in err.details()
    err = await rpc_error(api.jobs.GetJob(jobs_pb2.GetJobRequest(id="a\x00b")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "id" in err.details()
    err = await rpc_error(api.admin.CreateToken(admin_pb2.CreateTokenRequest(admin=True, ttl={"seconds": 10**15})))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    nested = '{"spec": ' * 100_000 + "1" + "}" * 100_000
    bad = common_pb2.JobSpec(name="deep", queue="train", tasks=[common_pb2.TaskSpec(
        name="w", replicas=1, resources={GPU: "1"}, pod_template_json=nested)])
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=bad)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT


@pytest.mark.parametrize("case", ["binary file", "infinite quantity", "nobody listening", "broken config"])
def test_fedctl_never_prints_a_traceback(tmp_path: Path, case: str) -> None:
    env = {**os.environ, "FEDCTL_CONFIG": str(tmp_path / "config.yaml")}
    args: list[str] = ["--server", "127.0.0.1:1"]
    if case == "binary file":
        (tmp_path / "job.yaml").write_bytes(os.urandom(2048) + b"\xff")
        args += ["submit", str(tmp_path / "job.yaml")]
    elif case == "infinite quantity":
        args += ["tenant", "create", "ml", "--limit", f"{GPU}=inf"]
    elif case == "nobody listening":
        args += ["list", "jobs"]
    else:
        (tmp_path / "config.yaml").write_bytes(b"server: [\x00")
        args = ["list", "jobs"]
    done = subprocess.run([str(BIN / "fedctl"), *args], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode != 0 and "Traceback" not in done.stderr and len(done.stderr.splitlines()) <= 2, \
        done.stderr
    assert done.stderr.startswith(("fedctl:", "Error:", "Usage:")), done.stderr
