"""HyperJobs with real processes: a federation server and member agents, each a process of its own.

Simulated clusters here (the same run on the real API server is in test_kube_hyperjob.py): a HyperJob larger than
any one cluster is split across two, each agent holding its sub-job's room until both have it, then both bound; one
that does not fit waits holding nothing; a sub-job whose cluster is lost is run again elsewhere while the other keeps
running, and nothing runs twice."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.clusters import tree
from tests.processes import fedctl
from tests.test_e2e_agents import wait_for
from tests.test_e2e_health import events

pytestmark = pytest.mark.e2e
GPU = "nvidia.com/gpu"
CORPUS = Path(__file__).parent / "corpus" / "ecosystem" / "volcano-hyperjob-subgroups"


def sub_jobs(name: str, replicas: int, pods: int, clusters: dict[int, list[str]] | None = None
             ) -> list[common_pb2.JobSpec]:
    """A HyperJob of `replicas` sub-jobs, each a gang of `pods` one-GPU pods."""
    return [common_pb2.JobSpec(
        name=f"{name}-trainer-{i}", queue="default", annotations={"federation.dev/sim-duration": "3600s"},
        tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "1", "cpu": "1"})],
        hyperjob=common_pb2.HyperJobPart(id=name, name=name, replicated_job="trainer", index=i, parts=replicas,
                                         cluster_names=(clusters or {}).get(i, [])))
        for i in range(replicas)]


def test_a_hyperjob_runs_across_two_clusters_and_a_lost_sub_job_runs_again_elsewhere(db_url: URL,
                                                                                      tmp_path: Path) -> None:
    files = {}
    for name, fanout in (("a", [2, 8]), ("b", [2, 8]), ("c", [1, 2])):  # 128, 128 and 16 GPUs
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(yaml.safe_dump_all(tree(name, fanout, {GPU: "8", "cpu": "64"})))
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False), "--heartbeat-timeout",
                           "3", "--lost-grace", "3", "--ui-listen", "127.0.0.1:0")
    agents: dict[str, AgentProcess] = {}
    try:
        for name in ("a", "b"):
            agents[name] = AgentProcess(name, server.address, "--simulate", str(files[name]), "--heartbeat", "0.5")
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)

        def ready() -> set[str]:
            return {c.name for c in admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
                    if c.status == admin_pb2.READY}

        def status(job_id: str) -> common_pb2.JobStatus:
            return jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id)).status

        wait_for("a and b Ready", lambda: ready() == {"a", "b"})
        # Bad input names the field and stores nothing: a HyperJob's sub-jobs come whole, in one batch.
        with pytest.raises(grpc.RpcError) as partial:
            jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=sub_jobs("half", 2, 8)[:1]))
        assert partial.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "specs[0].hyperjob" in partial.value.details() and "submitted together" in partial.value.details()

        # Volcano Global's own example: 256 GPUs, more than either cluster, through fedctl submit. One sub-job each,
        # held, then committed together.
        manifest = yaml.safe_load((CORPUS / "volcano_hyperjob-multi-cluster-job-splitting_0.yaml").read_text())
        manifest["metadata"]["annotations"] = {"federation.dev/sim-duration": "3600s"}
        (tmp_path / "hyperjob.yaml").write_text(yaml.safe_dump(manifest))
        submitted = fedctl(server.address, "submit", "-f", str(tmp_path / "hyperjob.yaml"))
        assert submitted.returncode == 0, submitted.stderr
        ids = [line.split()[0].removeprefix("job/") for line in submitted.stdout.splitlines()]
        assert [i.startswith("llm-training-trainer-") for i in ids] == [True, True]
        wait_for("both sub-jobs running", lambda: all(status(i).phase == common_pb2.RUNNING for i in ids), timeout=60)
        assert sorted(status(i).cluster for i in ids) == ["a", "b"]
        for job_id in ids:
            kinds = [e.type for e in events(jobs, job_id) if e.type in ("Dispatched", "Held", "Admitted", "Running")]
            assert kinds == ["Dispatched", "Held", "Admitted", "Running"]
            checks = [(c.name, c.state) for c in status(job_id).admission_checks]
            assert checks == [("hyperjob", "READY")]
        # One job with a row per sub-job: fedctl describe, get -o wide, the dashboard.
        described = fedctl(server.address, "describe", "job", ids[0]).stdout
        assert "HyperJob:  llm-training (llm-training-" in described and "2 of 2 sub-jobs running; 2 together, at " \
            "most 2 clusters" in described
        table = described.partition("HyperJob:")[2].partition("Clusters:")[0].splitlines()[2:]  # past its header
        assert {r.split()[1]: (r.split()[3], r.split()[4]) for r in table} == {
            i: ("Running", status(i).cluster) for i in ids}
        wide = fedctl(server.address, "get", "jobs", "-o", "wide").stdout.splitlines()
        column = wide[0].split().index("HYPERJOB")
        assert sorted(line.split()[column] for line in wide[1:]) == ["llm-training[0]", "llm-training[1]"]
        page = urllib.request.urlopen(f"{server.dashboard}/jobs/{ids[1]}", timeout=10).read().decode()
        assert "<h2>HyperJob llm-training: its sub-jobs</h2>" in page
        assert page.count('<tr data-sub-job="') == 2 and '<tr data-sub-job="1" class="here">' in page

        # One that does not fit now waits holding nothing: neither cluster has 128 GPUs free.
        waiting = [r.job_id for r in jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=sub_jobs("next", 2, 64)))
                   .results]
        wait_for("a reason", lambda: status(waiting[0]).reason.startswith("HyperJob next waits, holding nothing"))
        assert all(status(i).phase == common_pb2.PENDING for i in waiting)

        # Its id is its own: the same sub-jobs again are refused.
        with pytest.raises(grpc.RpcError) as again:
            jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=sub_jobs("next", 2, 64)))
        assert again.value.code() == grpc.StatusCode.ALREADY_EXISTS
        for job_id in waiting + ids:
            assert jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id)).status.phase == common_pb2.CANCELLED

        # Cluster b is lost: its sub-job runs again in c (which joined since) while a's keeps running, once.
        ft = [r.job_id for r in jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(
            specs=sub_jobs("ft", 2, 16, {0: ["a"], 1: ["b", "c"]}))).results]
        wait_for("both running", lambda: all(status(i).phase == common_pb2.RUNNING for i in ft), timeout=60)
        assert [status(i).cluster for i in ft] == ["a", "b"]
        agents["c"] = AgentProcess("c", server.address, "--simulate", str(files["c"]), "--heartbeat", "0.5")
        wait_for("c Ready", lambda: "c" in ready())
        agents.pop("b").kill()
        wait_for("the lost sub-job running in c", lambda: status(ft[1]).phase == common_pb2.RUNNING and
                 status(ft[1]).cluster == "c", timeout=90)
        assert status(ft[0]).phase == common_pb2.RUNNING and status(ft[0]).attempt == 1
        assert [e.type for e in events(jobs, ft[1]) if e.type in ("Lost", "Held", "Admitted", "Running")] == [
            "Held", "Admitted", "Running", "Lost", "Held", "Admitted", "Running"]
    finally:
        for agent in agents.values():
            agent.stop()
        server.stop()
