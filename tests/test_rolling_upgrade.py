"""A rolling upgrade from the previous release (the tag `v0.1.0`, its source taken from this repository's history) to
this checkout, under load: two server replicas and an agent of the previous release run a simulated cluster while a
client submits; the schema is upgraded under them, then each server is replaced by this release's, one at a time,
then the agent. Nothing accepted is lost, nothing runs twice, and every job runs to its end."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import threading
import time
from pathlib import Path

import grpc
import psycopg
import pytest
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import BIN, AgentProcess, ServerProcess
from federation.kernel.versions import RELEASE
from federation.store.database import conninfo
from federation.testbed.build import REPO
from federation.testbed.cluster import free_port
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent import clusters
from tests.test_e2e_agents import wait_for

PREVIOUS = "v0.1.0"
PREVIOUS_COMMIT = "f04b50581232324259dcea3b4ba2085dd0276d0c"  # the same, for a clone that did not fetch tags
GPU = "nvidia.com/gpu"


@pytest.fixture(scope="module")
def previous(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The previous release's source, and the environment that runs its programs (this virtualenv's libraries,
    its own code first on the path: the console scripts import whatever `federation` comes first)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS], capture_output=True, timeout=120)
    if archive.returncode:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", PREVIOUS_COMMIT], capture_output=True,
                                 timeout=120)
    assert archive.returncode == 0, f"the previous release {PREVIOUS} is not in this clone: {archive.stderr!r}"
    root = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(root, filter="data")
    return {"PYTHONPATH": f"{root}:{root / 'member-agent'}"}


def test_a_rolling_upgrade_under_load_loses_nothing(previous: dict[str, str], empty_db_url: URL,
                                                    tmp_path: Path) -> None:
    url = empty_db_url.render_as_string(hide_password=False)
    migrate = subprocess.run([str(BIN / "federation-server"), "db", "upgrade", "--database-url", url],
                             capture_output=True, text=True, timeout=120, env={**os.environ, **previous})
    assert migrate.returncode == 0, migrate.stderr
    ports = [free_port(), free_port()]
    target = f"ipv4:127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    east = tmp_path / "east.yaml"
    east.write_text(yaml.safe_dump_all(clusters.tree("e-", [1, 2], clusters.H100), sort_keys=False))  # 16 GPUs

    def server(port: int, env: dict[str, str] | None) -> ServerProcess:
        return ServerProcess("--database-url", url, "--leader-lease", "2", listen=f"127.0.0.1:{port}", env=env)

    def agent(env: dict[str, str] | None) -> AgentProcess:
        return AgentProcess("east", target, "--simulate", str(east), "--heartbeat", "0.5", env=env)

    servers = [server(port, previous) for port in ports]
    agents = [agent(previous)]
    accepted: list[str] = []
    stop = threading.Event()
    try:
        with grpc.insecure_channel(target) as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))

        def submit() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                port = ports[n % 2]  # alternately to each replica, as a load balancer would
                spec = common_pb2.JobSpec(name=f"load-{n}", queue="train",
                                          annotations={"federation.dev/sim-duration": "2s"},
                                          tasks=[common_pb2.TaskSpec(name="w", replicas=1, resources={GPU: "1"})])
                try:
                    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
                        accepted.append(jobs_pb2_grpc.JobServiceStub(ch).SubmitJob(
                            jobs_pb2.SubmitJobRequest(spec=spec), timeout=20).job.id)
                except grpc.RpcError:
                    pass  # that replica is being replaced: not accepted, nothing to keep
                time.sleep(0.1)

        load = threading.Thread(target=submit, daemon=True)
        load.start()
        wait_for("load on the previous release", lambda: len(accepted) >= 20, timeout=120)
        # The schema first (expand only: the previous release keeps running on it), then the servers one at a
        # time, then the agent.
        upgraded = subprocess.run([str(BIN / "federation-server"), "db", "upgrade", "--database-url", url],
                                  capture_output=True, text=True, timeout=120)
        assert upgraded.returncode == 0, upgraded.stderr
        for i, port in enumerate(ports):
            servers[i].stop()
            servers[i] = server(port, None)
            count = len(accepted)
            wait_for(f"submissions accepted after replacing server {i}", lambda c=count: len(accepted) > c + 10,
                     timeout=120)
        try:
            agents[0].stop()
        except RuntimeError as err:
            # The previous release's agent can miss SIGTERM: a stop that landed as its stream wound down was
            # swallowed and it connected again (fixed since, `tests/test_agent_client.py`). Killed at the end of its
            # grace period, as Kubernetes kills a pod that outlives terminationGracePeriodSeconds: the upgrade goes on.
            assert "did not stop" in str(err), err
        agents.append(agent(None))
        count = len(accepted)
        wait_for("submissions accepted after replacing the agent", lambda: len(accepted) > count + 10, timeout=120)
        stop.set()
        load.join(60)

        with grpc.insecure_channel(target) as channel:
            jobs = jobs_pb2_grpc.JobServiceStub(channel)
            wait_for("every accepted job Succeeded", lambda: {
                jobs.GetJob(jobs_pb2.GetJobRequest(id=j), timeout=30).status.phase for j in accepted}
                == {common_pb2.SUCCEEDED}, timeout=300)
            (cluster,) = admin_pb2_grpc.AdminServiceStub(channel).ListClusters(
                admin_pb2.ListClustersRequest()).clusters
            assert cluster.agent_version == RELEASE
        with psycopg.connect(conninfo(empty_db_url)) as conn:
            dispatches = conn.execute("SELECT job_id, attempt, count(*) FROM job_events WHERE type = 'Dispatched' "
                                      "GROUP BY job_id, attempt").fetchall()
            ran = dict(conn.execute("SELECT job_id, count(DISTINCT attempt) FROM job_events WHERE type = 'Running' "
                                    "GROUP BY job_id").fetchall())
        # Each attempt dispatched once (an attempt a cluster refused is followed by a new one, never repeated), and
        # each job ran in one attempt only: nothing ran twice.
        assert {count for _, _, count in dispatches} == {1} and {j for j, _, _ in dispatches} == set(accepted)
        assert set(ran) == set(accepted) and set(ran.values()) == {1}
    finally:
        stop.set()
        for process in [*agents, *servers]:
            process.stop()
