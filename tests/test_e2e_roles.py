"""`federation-server serve` runs the API here and the scheduler as a child process: the API answers whatever the
scheduler does (computes, dies), what only the scheduler knows is asked of it across the processes, one /metrics
shows both, and neither process outlives the other's end (a killed child is started again; a killed parent
takes its child with it)."""

import re
import signal
import socket
import time
import urllib.request

import grpc
import psutil
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.test_e2e_agents import CLUSTERS, GPU, wait_for

pytestmark = pytest.mark.e2e


def _scheduler_child(server: ServerProcess) -> psutil.Process | None:
    """The scheduler process the server started, while it lives (a killed one may linger as a zombie a moment)."""
    for child in psutil.Process(server.proc.pid).children():
        try:
            if "--role" in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
                return child
        except psutil.Error:  # gone, or a zombie, meanwhile
            continue
    return None


def _job(name: str, gpus: int) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(name=name, queue="train", annotations={"federation.dev/sim-duration": "600s"},
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=1, resources={GPU: str(gpus)})])


def test_the_api_outlives_its_scheduler_process_which_comes_back(db_url: URL) -> None:
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), "--heartbeat-timeout", "30")
    agent = AgentProcess("h100", server.address, "--simulate", str(CLUSTERS / "h100-spine-leaf.yaml"),
                         "--heartbeat", "0.5")
    channel = grpc.insecure_channel(server.address)
    jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
    try:
        first = wait_for("the scheduler process", lambda: _scheduler_child(server))
        assert isinstance(first, psutil.Process)
        wait_for("the cluster Ready", lambda: any(c.status == admin_pb2.READY and c.nodes for c in admin.ListClusters(
            admin_pb2.ListClustersRequest()).clusters))
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        ran = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=_job("runs", 8))).job.id
        wait_for("the job running", lambda: jobs.GetJob(jobs_pb2.GetJobRequest(id=ran)).status.phase
                 == common_pb2.RUNNING)
        # What only the scheduler knows, asked across the processes: why a job too large waits, a queue's status.
        large = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=_job("too-large", 4096))).job.id
        explained = wait_for("an explanation", lambda: jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=large)).clusters)
        assert [c.cluster for c in explained] == ["h100"] and not explained[0].fits
        assert "nvidia.com/gpu" in explained[0].reason
        status = admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="train"))
        assert status.usage[GPU] == "8" and status.running == 1
        body = urllib.request.urlopen(f"http://{server.metrics}/metrics", timeout=30).read().decode()
        cycles = next(line for line in body.splitlines() if line.startswith("federation_scheduler_cycle_seconds_count"))
        assert float(cycles.rsplit(" ", 1)[1]) > 0  # the scheduler's series, on the API process's scrape
        assert "grpc_server_handled_total" in body  # and the API's own

        port = int(re.search(rb"scheduler's metrics at 127\.0\.0\.1:(\d+)", server.log).group(1))  # type: ignore[union-attr]
        assert any(c.laddr.port == port and c.status == psutil.CONN_LISTEN  # the socket is the API process's too
                   for c in psutil.Process(server.proc.pid).net_connections("tcp"))
        first.kill()  # the scheduler process dies: the API goes on answering, accepting, explaining nothing
        started = time.monotonic()
        first.wait(60)
        # Its metrics port stays the API process's while no scheduler process runs: another process taking it then
        # (an outgoing connection's local port, on a busy machine) once failed every restart that followed.
        with socket.socket() as squatter:
            squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past the killed child's closed connections
            with pytest.raises(OSError):
                squatter.bind(("127.0.0.1", port))
        waiting = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=_job("during", 8))).job.id
        assert jobs.GetJob(jobs_pb2.GetJobRequest(id=ran)).status.phase == common_pb2.RUNNING
        second = wait_for("the scheduler process started again",
                          lambda: (p := _scheduler_child(server)) is not None and p.pid != first.pid and p)
        assert isinstance(second, psutil.Process)
        wait_for("the job submitted meanwhile running", lambda: jobs.GetJob(jobs_pb2.GetJobRequest(id=waiting))
                 .status.phase == common_pb2.RUNNING, 120)
        print(f"dispatched {time.monotonic() - started:.1f} s after the scheduler process was killed")
        # The new scheduler process's series on the API process's scrape, from the same address.
        assert wait_for("the restarted scheduler's series", lambda: any(
            line.startswith("federation_scheduler_cycle_seconds_count") for line in urllib.request.urlopen(
                f"http://{server.metrics}/metrics", timeout=30).read().decode().splitlines()))
        engine = create_engine(db_url)
        with engine.connect() as conn:
            dispatched = conn.execute(text("SELECT job_id, count(*) FROM job_events WHERE type = 'Dispatched' "
                                           "GROUP BY job_id")).all()
        engine.dispose()
        assert {job: n for job, n in dispatched} == {ran: 1, waiting: 1}

        server.proc.send_signal(signal.SIGKILL)  # the parent dies without a word: its child sees its pipe close
        server.proc.wait(30)
        second.wait(60)
    finally:
        agent.stop()
        if server.proc.poll() is None:
            server.stop()
