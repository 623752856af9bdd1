"""Health across the federation with real processes: the cluster choice prefers healthy hardware (and says why
it skipped a cluster), and `fedctl drain` moves a gang off a node, to another cluster when its own has no room."""

from __future__ import annotations

import concurrent.futures
import signal
import subprocess
import time
from pathlib import Path

import grpc
import pytest
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.relay.connections import NODE_ORDERS_IN_FLIGHT
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.clusters import tree
from tests.processes import BIN, fedctl
from tests.test_e2e_agents import by_either_path, wait_for
from tests.test_e2e_health import events

pytestmark = pytest.mark.e2e
GPU = "nvidia.com/gpu"


def cluster_file(tmp_path: Path, name: str, prefix: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(tree(prefix, [1, 2], {GPU: "8", "cpu": "64"})))  # one leaf of two nodes
    return path


def spec(name: str, checkpoint: str = "") -> common_pb2.JobSpec:
    annotations = {"federation.dev/sim-duration": "600s"}
    if checkpoint:
        annotations["federation.dev/checkpoint-interval"] = checkpoint
    return common_pb2.JobSpec(name=name, queue="train", annotations=annotations,
                              network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=1),
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=2, resources={GPU: "8"})])


def test_the_federation_prefers_healthy_hardware_and_a_drain_moves_a_gang_to_another_cluster(
        db_url: URL, tmp_path: Path) -> None:
    faults = tmp_path / "faults.yaml"  # cluster a's node a0-0 reports XID 79 from the start
    faults.write_text("- {at: 0s, node: a0-0, state: degraded, reason: XID 79}\n")
    # a long heartbeat timeout: agent a is frozen for a while below, and must come back to the same stream
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False),
                           "--heartbeat-timeout", "300")
    agents: list[AgentProcess] = []
    try:
        agents.append(AgentProcess("a", server.address, "--simulate", str(cluster_file(tmp_path, "a", "a")),
                                   "--faults", str(faults), "--heartbeat", "0.5"))
        agents.append(AgentProcess("b", server.address, "--simulate", str(cluster_file(tmp_path, "b", "b")),
                                   "--heartbeat", "0.5"))
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)

        def clusters() -> dict[str, admin_pb2.Cluster]:
            return {c.name: c for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters}

        wait_for("both clusters Ready, a degraded", lambda: len(clusters()) == 2 and all(
            c.status == admin_pb2.READY for c in clusters().values()) and clusters()["a"].degraded_nodes == 1)
        assert list(clusters()["a"].health) == ["1 node degraded (XID 79)"]
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))

        def status(job_id: str) -> common_pb2.JobStatus:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

        # Both clusters fit the gang; by name a would come first, but there only on its degraded node.
        first = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("first"))).job.id
        wait_for("first Running", lambda: status(first).phase == common_pb2.RUNNING)
        assert status(first).cluster == "b"
        # Issue 42 (5): why b, said on its Dispatched event.
        dispatched = [e for e in _replay(jobs, first) if e.type == "Dispatched"]
        assert dispatched[0].message in by_either_path(
            "dispatched to cluster b (on healthy hardware; passed over a: 1 node degraded (XID 79) (the gang fits "
            "there only on degraded hardware)); its agent is placing the gang"), dispatched
        second = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("second", checkpoint="1h"))).job.id
        wait_for("second Running in a (nothing healthy fits anywhere)", lambda: status(second).phase ==
                 common_pb2.RUNNING)
        assert status(second).cluster == "a" and {p.node for p in status(second).placements} == {"a0-0", "a0-1"}

        # An operator drains a0-1: a has no other sound node, so the gang goes back to the federation; b is full
        # until `first` is cancelled, then it runs there, no retry counted.
        drained = fedctl(server.address, "drain", "node", "a0-1", "--cluster", "a", "--grace", "1s")
        assert drained.returncode == 0, drained.stderr
        assert "node/a0-1 in cluster a: cordoned" in drained.stdout
        wait_for("second evacuated", lambda: [e for e in events(jobs, second) if e.type == "Evacuated"])
        evacuated = next(e for e in events(jobs, second) if e.type == "Evacuated")
        assert "node a0-1 drained by an operator" in evacuated.message
        assert "no healthy room in this cluster" in evacuated.message
        jobs.CancelJob(jobs_pb2.CancelJobRequest(id=first))
        wait_for("second Running in b", lambda: status(second).phase == common_pb2.RUNNING and status(
            second).cluster == "b")
        assert status(second).retries == 0
        bad = fedctl(server.address, "drain", "node", "a0-1", "--cluster", "nowhere")
        assert bad.returncode != 0 and "nowhere" in bad.stderr
        missing = fedctl(server.address, "drain", "node", "a0-1")
        assert missing.returncode != 0 and "needs --cluster" in missing.stderr
        undone = fedctl(server.address, "uncordon", "node", "a0-1", "--cluster", "a")
        assert undone.returncode == 0 and "uncordoned" in undone.stdout, undone.stderr
        check_node_orders(server.address, admin, agents[0])
    finally:
        for agent in agents:
            agent.stop()
        server.stop()


def node_orders(admin: admin_pb2_grpc.AdminServiceStub) -> list[str]:
    return [e.name for e in admin.ListAuditEvents(admin_pb2.ListAuditEventsRequest(limit=1000)).events
            if e.kind in ("node", "hypernode")]


def check_node_orders(address: str, admin: admin_pb2_grpc.AdminServiceStub, agent: AgentProcess) -> None:
    """What an operator's node order answers is what the agent did; names are Kubernetes names; an order is
    audited before it is sent; a cluster holds a few unanswered orders at a time, not a flood."""
    audited = node_orders(admin)
    for name in ("../../etc/passwd", "x" * 4000, "A0-1"):
        bad = fedctl(address, "cordon", "node", name, "--cluster", "a")
        assert bad.returncode != 0 and "name:" in bad.stderr and "DNS-1123" in bad.stderr, bad.stderr
        assert "Traceback" not in bad.stderr
    missing = fedctl(address, "cordon", "node", "a9-9", "--cluster", "a")
    assert missing.returncode != 0 and "node a9-9 is not in cluster a" in missing.stderr, missing.stderr
    assert node_orders(admin) == ["a/a9-9", *audited]  # the refused names were not audited; a9-9 was, first

    agent.proc.send_signal(signal.SIGSTOP)  # it reads nothing: its orders stay unanswered
    try:
        with concurrent.futures.ThreadPoolExecutor(NODE_ORDERS_IN_FLIGHT) as pool:
            waiting = [pool.submit(admin.OrderNode, admin_pb2.OrderNodeRequest(
                cluster="a", action="cordon", kind="node", name="a0-0")) for _ in range(NODE_ORDERS_IN_FLIGHT)]
            wait_for("every order audited", lambda: len(node_orders(admin)) == len(audited) + 1 +
                     NODE_ORDERS_IN_FLIGHT)
            with pytest.raises(grpc.RpcError) as more:
                admin.OrderNode(admin_pb2.OrderNodeRequest(cluster="a", action="cordon", kind="node", name="a0-1"))
            assert more.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert f"{NODE_ORDERS_IN_FLIGHT} node orders not yet answered" in more.value.details()
            assert len(node_orders(admin)) == len(audited) + 1 + NODE_ORDERS_IN_FLIGHT  # not audited
            agent.proc.send_signal(signal.SIGCONT)
            assert [w.result().message for w in waiting] == ["node/a0-0 in cluster a: cordoned"] * len(waiting)
    finally:
        agent.proc.send_signal(signal.SIGCONT)
    undone = admin.OrderNode(admin_pb2.OrderNodeRequest(cluster="a", action="uncordon", kind="node", name="a0-0"))
    assert undone.message == "node/a0-0 in cluster a: uncordoned"


def _replay(jobs: jobs_pb2_grpc.JobServiceStub, job_id: str) -> list[common_pb2.JobEvent]:
    """The job's events so far."""
    stream = jobs.WatchJobs(jobs_pb2.WatchJobsRequest(job_id=job_id, after_sequence=0), timeout=2)
    out: list[common_pb2.JobEvent] = []
    try:
        out.extend(stream)
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
    return out


def test_a_gang_on_degraded_hardware_moves_only_to_a_cluster_with_healthy_room(db_url: URL, tmp_path: Path) -> None:
    """Issue 42 (5): a gang whose whole cluster turned degraded was evacuated and restarted on hardware as degraded
    (25 s down, attempt 2, for nothing). It runs on, saying why, until another cluster has healthy room for it; then
    the federation moves it there, no retry counted."""
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    agents: list[AgentProcess] = []
    try:
        for name in ("a", "b"):
            agents.append(AgentProcess(name, server.address, "--simulate", str(cluster_file(tmp_path, name, name)),
                                       "--heartbeat", "0.5"))
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        wait_for("both clusters Ready", lambda: sorted(
            c.name for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
            if c.status == admin_pb2.READY) == ["a", "b"])
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))

        def status(job_id: str) -> common_pb2.JobStatus:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

        gang = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("gang"))).job.id
        wait_for("the gang Running", lambda: status(gang).phase == common_pb2.RUNNING)
        home = status(gang).cluster
        other = "b" if home == "a" else "a"
        filler = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("filler"))).job.id
        wait_for("the filler Running in the other cluster", lambda: status(filler).phase == common_pb2.RUNNING)
        assert status(filler).cluster == other

        # Every node of the gang's cluster degrades; the other cluster is full: nowhere healthy to go.
        agent = next(a for a in agents if f"--cluster {home} " in " ".join(a.proc.args) + " ")
        for node in (f"{home}0-0", f"{home}0-1"):
            subprocess.run([str(BIN / "member-agent"), "fault", "degrade-node", node, "--reason", "XID 48",
                            "--agent", agent.admin], check=True, capture_output=True, timeout=60)
        wanted = wait_for("the move asked for", lambda: [e for e in events(jobs, gang) if e.type == "MoveWanted"])
        assert wanted[0].message.endswith("no healthy room in this cluster; it keeps running here until a cluster "
                                          "has healthy room for it"), wanted[0].message
        assert "XID 48" in wanted[0].message
        time.sleep(3)  # several cycles: it stays where it is
        assert status(gang).phase == common_pb2.RUNNING and status(gang).cluster == home
        assert status(gang).attempt == 1
        assert not [e for e in events(jobs, gang) if e.type in ("Preempted", "Evacuated")]

        # Room on healthy hardware appears: the federation moves it there.
        jobs.CancelJob(jobs_pb2.CancelJobRequest(id=filler))
        wait_for("the gang Running in the other cluster", lambda: status(gang).phase == common_pb2.RUNNING and
                 status(gang).cluster == other, timeout=60)
        moved = [e for e in events(jobs, gang) if e.type == "Preempted"]
        assert len(moved) == 1 and moved[0].message.startswith(f"moved off degraded hardware in cluster {home} ("), \
            moved
        assert moved[0].message.endswith(f"cluster {other} has healthy room for it")
        assert status(gang).attempt == 2 and status(gang).retries == 0
    finally:
        for agent in agents:
            agent.stop()
        server.stop()
