"""GPU and link health on the real API server (KWOK): the server and member-agent processes, faults written the
way NVSentinel writes them (a taint says a node is bad, a condition says why; a HyperNode's status its links)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.testbed.cluster import Testbed
from federation.testbed.faults import apply
from federation.v1 import admin_pb2, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.faults import Fault
from tests.kubehelp import GPU, gpu_cluster, pods
from tests.test_e2e_agents import wait_for
from tests.test_e2e_kube import Federation

pytestmark = pytest.mark.e2e


def submit(fed: Federation, name: str, replicas: int, mode: str = "hard", checkpoint: str = "",
           tolerate: bool = False) -> str:
    annotations = {"federation.dev/sim-duration": "600s"}
    if checkpoint:
        annotations["federation.dev/checkpoint-interval"] = checkpoint
    task = common_pb2.TaskSpec(name="worker", replicas=replicas, resources={GPU: "8", "cpu": "8"})
    if tolerate:  # a pod that tolerates every taint still gets no failed node
        task.tolerations.append(common_pb2.Toleration(operator="Exists"))
    spec = common_pb2.JobSpec(name=name, queue="train", annotations=annotations, tasks=[task],
                              network_topology=common_pb2.NetworkTopology(mode=mode, highest_tier_allowed=1))
    return fed.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job.id


def cluster(fed: Federation) -> admin_pb2.Cluster:
    return fed.admin.GetCluster(admin_pb2.GetClusterRequest(name="k8s"))


def events(jobs: jobs_pb2_grpc.JobServiceStub, job_id: str) -> list[common_pb2.JobEvent]:
    """The job's events so far (a replay of its watch)."""
    out: list[common_pb2.JobEvent] = []
    try:
        for event in jobs.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0, job_id=job_id), timeout=2):
            out.append(event)
    except grpc.RpcError as err:
        if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
            raise
    return out


def test_a_node_with_an_nvsentinel_taint_and_condition_gets_nothing_new(db_url: URL, kube: Testbed,
                                                                        tmp_path: Path) -> None:
    gpu_cluster(kube)  # one spine, leaves n0-0 and n0-1 of two nodes each
    fed = Federation(db_url, kube, tmp_path)
    try:
        apply(kube.admin(), Fault(0, "node", "n0-0-0", "failed", "XID 79"))
        wait_for("the failed node in the cluster's health", lambda: cluster(fed).failed_nodes == 1)
        assert cluster(fed).health == ["1 node failed (XID 79)"]
        first = submit(fed, "first", 2)
        wait_for("first Running", lambda: fed.status(first).phase == common_pb2.RUNNING,
                 state=lambda: (fed.status(first), events(fed.jobs, first), fed.agent.log.decode()[-4000:]))
        assert fed.status(first).hypernode == "n0-1"  # the only leaf with two sound nodes
        second = submit(fed, "second", 2)  # leaf n0-0 has one sound node left: it waits
        tolerant = submit(fed, "tolerant", 1, tolerate=True)
        wait_for("the tolerant pod Running", lambda: fed.status(tolerant).phase == common_pb2.RUNNING)
        assert [p.node for p in fed.status(tolerant).placements] == ["n0-0-1"]  # never the failed node
        time.sleep(2)
        assert fed.status(second).phase == common_pb2.PENDING
        assert "n0-0-0" not in {p.spec.node_name for p in pods(kube).values()}
        apply(kube.admin(), Fault(0, "node", "n0-0-0", "healthy"))  # repaired: the waiting gang fits again
        fed.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=tolerant))
        wait_for("second Running once the node is healthy", lambda: fed.status(second).phase == common_pb2.RUNNING)
        assert fed.status(second).hypernode == "n0-0"
    finally:
        fed.stop()


def test_a_gang_on_a_node_that_turns_degraded_moves_by_its_checkpoint_inside_its_tier(
        db_url: URL, kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    fed = Federation(db_url, kube, tmp_path)
    try:
        job_id = submit(fed, "train", 2, checkpoint="20s")
        wait_for("Running", lambda: fed.status(job_id).phase == common_pb2.RUNNING)
        before = fed.status(job_id)
        leaf, nodes = before.hypernode, {p.node for p in before.placements}
        bad = sorted(nodes)[0]
        apply(kube.admin(), Fault(0, "node", bad, "degraded", "XID 63"))
        wait_for("the move planned", lambda: [e for e in events(fed.jobs, job_id) if e.type == "DrainPlanned"])
        planned = next(e for e in events(fed.jobs, job_id) if e.type == "DrainPlanned")
        assert f"node {bad} degraded (XID 63)" in planned.message
        # Planned for its next checkpoint (its 20 s interval counted from its start), not at once: the agent's timer.
        delay = int(re.search(r"moving at the next checkpoint in (\d+)s", planned.message).group(1))  # type: ignore[union-attr]
        assert 0 < delay <= 20
        wait_for("the gang moved", lambda: [e for e in events(fed.jobs, job_id) if e.type == "Drained"], timeout=90)
        drained = next(e for e in events(fed.jobs, job_id) if e.type == "Drained")
        waited = drained.time.ToDatetime() - planned.time.ToDatetime()
        assert waited.total_seconds() >= delay - 5  # it waited for the checkpoint (the server's clock, both events)
        after = fed.status(job_id)
        assert after.phase == common_pb2.RUNNING and after.retries == 0  # moved, not failed: no retry counted
        assert after.tier == 1 and after.hypernode != leaf  # the other leaf: one sound node was left in its own
        assert bad not in {p.node for p in after.placements}
        wait_for("the pods in the API server where the federation says",
                 lambda: {p.spec.node_name for p in pods(kube).values() if not p.metadata.deletion_timestamp}
                 == {p.node for p in after.placements})
    finally:
        fed.stop()


def test_a_hypernode_marked_degraded_is_not_given_to_a_hard_tier_gang(db_url: URL, kube: Testbed,
                                                                     tmp_path: Path) -> None:
    gpu_cluster(kube)
    fed = Federation(db_url, kube, tmp_path)
    try:
        apply(kube.admin(), Fault(0, "hypernode", "n0-0", "degraded", "cable errors"))
        wait_for("the degraded HyperNode reported", lambda: list(cluster(fed).degraded_hypernodes) == ["n0-0"])
        first = submit(fed, "first", 2)
        wait_for("first Running", lambda: fed.status(first).phase == common_pb2.RUNNING,
                 state=lambda: (fed.status(first), events(fed.jobs, first), fed.agent.log.decode()[-4000:]))
        assert fed.status(first).hypernode == "n0-1"
        second = submit(fed, "second", 2)  # only n0-0 is left, behind its degraded links: never for a hard gang
        wait_for("second turned away", lambda: "degraded links (n0-0)" in fed.status(second).reason)
        assert fed.status(second).phase == common_pb2.PENDING
        soft = submit(fed, "soft", 2, mode="soft")  # a soft gang takes it when nothing else fits
        wait_for("soft Running", lambda: fed.status(soft).phase == common_pb2.RUNNING)
        assert {p.node for p in fed.status(soft).placements} == {"n0-0-0", "n0-0-1"}
        assert fed.status(second).phase == common_pb2.PENDING
    finally:
        fed.stop()
