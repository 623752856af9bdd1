"""A scheduling cycle that computes for long holds nothing else up: RPCs, the agents' heartbeats and the lease
go on meanwhile, and the long cycle's decisions are written under the lease it started with.

The real server and a simulated agent, with the `cycle:dispatching` failpoint armed to compute for BUSY seconds
in pure Python once a cycle has decided to dispatch (as a decision over a very large backlog does). The bounds
below are a quarter of BUSY, so the test fails by a wide margin when the cycle holds the loop (every probe then
waits the whole BUSY) and passes with room on a loaded machine.
"""

import threading
import time
import urllib.request

import grpc
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.test_e2e_agents import CLUSTERS, GPU, wait_for

pytestmark = pytest.mark.e2e
BUSY = 10.0  # seconds the cycle computes: longer than the 4 s lease it must keep
BOUND = BUSY / 4


def _lag_buckets(metrics_address: str) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=30).read().decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("federation_event_loop_lag_seconds_bucket"):
            out[line.split('le="')[1].split('"')[0]] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("federation_event_loop_lag_seconds_count"):
            out["count"] = float(line.rsplit(" ", 1)[1])
    return out


@pytest.mark.parametrize("role", ["both", "all"])  # the scheduler in a process of its own; in a thread beside the API
def test_a_long_cycle_holds_up_no_rpc_heartbeat_or_lease(db_url: URL, role: str) -> None:
    # Not admitted on arrival: the job must wait for a cycle (and so for the long one), which on an idle federation
    # it does only when no cycle has looked at its queue yet.
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), "--role", role,
                           "--no-admit-on-arrival", env={"FEDERATION_FAILPOINTS": f"cycle:dispatching=busy({BUSY})"})
    agent = AgentProcess("h100", server.address, "--simulate", str(CLUSTERS / "h100-spine-leaf.yaml"),
                         "--heartbeat", "0.5")
    channel = grpc.insecure_channel(server.address)
    jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
    try:
        wait_for("the cluster Ready", lambda: any(c.status == admin_pb2.READY and c.nodes for c in admin.ListClusters(
            admin_pb2.ListClustersRequest()).clusters))
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        job_id = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=common_pb2.JobSpec(
            name="long-cycle", queue="train",
            tasks=[common_pb2.TaskSpec(name="worker", replicas=2, resources={GPU: "8"})]))).job.id
        submitted = time.monotonic()
        rpc_seconds: list[float] = []
        heartbeat_ages: list[float] = []
        phase = [common_pb2.PENDING]

        def probe() -> None:
            while phase[0] == common_pb2.PENDING and time.monotonic() - submitted < 4 * BUSY:
                started = time.monotonic()
                phase[0] = jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status.phase
                clusters = admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                rpc_seconds.append((time.monotonic() - started) / 2)
                heartbeat_ages.append(time.time() - clusters[0].last_heartbeat.ToMicroseconds() / 1e6)  # not truncated
                time.sleep(0.05)

        prober = threading.Thread(target=probe)
        prober.start()
        prober.join()
        waited = time.monotonic() - submitted
        assert phase[0] != common_pb2.PENDING
        assert b"failpoint cycle:dispatching: computing for" in server.log  # the long cycle did run
        assert waited >= BUSY  # and the job waited for it: every probe above ran while it computed
        assert len(rpc_seconds) >= BUSY / BOUND
        assert max(rpc_seconds) < BOUND, sorted(rpc_seconds)[-5:]
        assert max(heartbeat_ages) < BOUND, sorted(heartbeat_ages)[-5:]
        lag = _lag_buckets(server.metrics)
        assert lag["count"] >= BUSY / 0.1 / 2  # sampled all along (every 0.1 s when the loop is free)
        assert lag["2.5"] == lag["count"]  # no sample found the loop held for 2.5 s or more
        # Decided once, under the lease the server took first: the long cycle's dispatch was written.
        final = wait_for("the job running", lambda: (j := jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)))
                         .status.phase == common_pb2.RUNNING and j)
        assert final.status.attempt == 1
        engine = create_engine(db_url)
        with engine.connect() as conn:
            epoch = conn.execute(text("SELECT epoch FROM leader_lease WHERE id = 1")).scalar_one()
            dispatched = conn.execute(text("SELECT count(*) FROM job_events WHERE job_id = :id AND type = "
                                           "'Dispatched'"), {"id": job_id}).scalar_one()
        engine.dispose()
        assert epoch == 1  # never lost, never retaken
        assert dispatched == 1
    finally:
        agent.stop()
        server.stop()
