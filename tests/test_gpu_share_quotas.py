"""Quotas and fair shares count fractional GPUs exactly (issue 31): a fraction counts its thousandths of a device
(`resources.SHARE`) against GPU limits and deserved shares, beside whole GPUs, in the pure cycle and end to end
through the server and simulated agents."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from federation.cli.jobdocs import jobs_from_documents
from federation.cli.yamldoc import ManifestError, load_documents
from federation.control.scheduler import cluster_view
from federation.kernel import gangs
from federation.kernel.gpuask import FRACTION, template_annotations
from federation.kernel.resources import GPU, SHARE, format_resources, with_share
from federation.scheduling.cycle import PendingJob, QueueInfo, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import JobView
from federation.v1 import admin_pb2, common_pb2, jobs_pb2
from federation.validation import Violations, check_job_spec, normalise_job_spec
from tests.test_e2e_agents import wait_for
from tests.test_e2e_scheduling import start


def fractional(name: str, queue: str, fraction: str, pods: int = 1, gpus: int = 0) -> common_pb2.JobSpec:
    """A job of `pods` pods each asking KAI's `gpu-fraction` (or, with `gpus`, whole GPUs beside one fraction)."""
    template = json.dumps({"metadata": {"annotations": {FRACTION: fraction}}})
    tasks = [common_pb2.TaskSpec(name="infer", replicas=pods, resources={"cpu": "1"}, pod_template_json=template)]
    if gpus:
        tasks.append(common_pb2.TaskSpec(name="train", replicas=1, resources={GPU: str(gpus), "cpu": "1"}))
    return common_pb2.JobSpec(name=name, queue=queue, tasks=tasks,
                              annotations={"federation.dev/sim-duration": "10m"})


def in_resources(name: str, queue: str, fraction: str) -> common_pb2.JobSpec:
    """A job of one pod asking for a fraction of a GPU as our job spec's own field: `nvidia.com/gpu: 0.25`."""
    return common_pb2.JobSpec(name=name, queue=queue, annotations={"federation.dev/sim-duration": "10m"},
                              tasks=[common_pb2.TaskSpec(name="infer", replicas=1,
                                                         resources={GPU: fraction, "cpu": "1"})])


def test_a_fraction_in_the_task_s_resources_is_stored_as_kai_s_annotation() -> None:
    spec = in_resources("quarter", "q", "0.25")
    normalise_job_spec(spec)
    assert GPU not in spec.tasks[0].resources
    assert json.loads(spec.tasks[0].pod_template_json)["metadata"]["annotations"] == {FRACTION: "0.25"}
    v = Violations()
    assert check_job_spec(v, "spec", spec) is not None and not v
    assert gangs.minimum(spec)[SHARE] == 250 and GPU not in gangs.minimum(spec)
    # a template's containers give the fraction up (Kubernetes counts nvidia.com/gpu whole); 500m is a half
    container = {"name": "main", "image": "x", "resources": {"requests": {GPU: "500m", "cpu": "1"},
                                                             "limits": {GPU: "500m"}}}
    spec = in_resources("half", "q", "500m")
    spec.tasks[0].pod_template_json = json.dumps({"spec": {"containers": [container]}})
    normalise_job_spec(spec)
    template = json.loads(spec.tasks[0].pod_template_json)
    assert template["metadata"]["annotations"][FRACTION] == "0.5"
    assert template["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}, "limits": {}}


def test_a_fraction_in_resources_that_is_not_one_is_refused_naming_the_resource() -> None:
    for text in ("1.5", "0.0001"):
        spec = in_resources("odd", "q", text)
        normalise_job_spec(spec)
        v = Violations()
        check_job_spec(v, "spec", spec)
        assert [i.field for i in v.items] == [f"spec.tasks[0].resources['{GPU}']"], text
    both = fractional("both", "q", "0.5")  # KAI's annotation and a fraction in resources: two asks
    both.tasks[0].resources[GPU] = "0.5"
    normalise_job_spec(both)
    v = Violations()
    check_job_spec(v, "spec", both)
    assert v.items and GPU in str(v.items[0])


def _pending(spec: common_pb2.JobSpec, seq: int) -> PendingJob:
    request = gangs.minimum(spec)
    largest = {r: a for t in spec.tasks for r, a in gangs.pod_request(t).items()}
    return PendingJob(JobView(f"{spec.name}", request, largest), spec.queue, 0, seq)


def _snapshot(tenants: list[TenantInfo], queues: list[QueueInfo], pending: list[PendingJob], gpus: int) -> Snapshot:
    """One cluster of one node with `gpus` devices, as its agent reports it (devices booked in `SHARE`)."""
    free = {GPU: gpus, SHARE: gpus * 1000, "cpu": 64_000}
    tiers = [{"tier": 0, "tier_name": "node", "max_free": free, "max_capacity": free}]
    view = cluster_view({"name": "c1", "labels": {}, "inventory": {"allocatable": free, "topology": tiers}}, {})
    return Snapshot(tenants, queues, pending, [], [view], dict(free))


def test_a_fraction_counts_its_thousandths_and_a_whole_gpu_a_thousand() -> None:
    assert gangs.minimum(fractional("f", "q", "0.25", pods=3)) == {"cpu": 3000, SHARE: 750}
    assert gangs.minimum(fractional("m", "q", "0.5", gpus=2)) == {"cpu": 2000, GPU: 2, SHARE: 2500}
    assert format_resources({GPU: 2, SHARE: 2500}) == {GPU: "2.5"}
    assert with_share({GPU: 4, f"{GPU}@h100": 2}) == {GPU: 4, f"{GPU}@h100": 2, SHARE: 4000, f"{SHARE}@h100": 2000}


def test_a_queue_limit_of_one_gpu_holds_four_quarters() -> None:
    pending = [_pending(fractional(f"j{i}", "q", "0.25"), i) for i in range(6)]
    d = schedule(_snapshot([TenantInfo("t")], [QueueInfo("q", "t", limit=with_share({GPU: 1}))], pending, 8))
    assert sorted(d.assign) == ["j0", "j1", "j2", "j3"]
    assert d.usage["q"][SHARE] == 1000 and format_resources(d.usage["q"])[GPU] == "1"
    assert d.waiting["j4"] == f"queue at limit {GPU}=1"


def test_whole_and_fractional_gpus_share_one_limit() -> None:
    # 1 whole GPU and a half (1.5) leave 0.5 under a limit of 2: two quarters fit, a third does not.
    pending = [_pending(fractional("mixed", "q", "0.5", gpus=1), 0)]
    pending += [_pending(fractional(f"j{i}", "q", "0.25"), 1 + i) for i in range(3)]
    d = schedule(_snapshot([TenantInfo("t")], [QueueInfo("q", "t", limit=with_share({GPU: 2}))], pending, 8))
    assert sorted(d.assign) == ["j0", "j1", "mixed"]
    assert d.usage["q"][SHARE] == 2000 and d.waiting["j2"] == f"queue at limit {GPU}=2"


def test_fair_shares_of_fractional_gpus_follow_the_weights() -> None:
    # Two GPUs, tenants weighted 3:1: 1.5 GPUs to quarters of `a`, 0.5 to halves of `b`, though `b` came first.
    pending = [_pending(fractional(f"b{i}", "qb", "0.5"), i) for i in range(20)]
    pending += [_pending(fractional(f"a{i}", "qa", "0.25"), 100 + i) for i in range(20)]
    d = schedule(_snapshot([TenantInfo("ta", 3), TenantInfo("tb", 1)], [QueueInfo("qa", "ta"), QueueInfo("qb", "tb")],
                           pending, 2))
    assert sum(j.startswith("a") for j in d.assign) == 6 and sum(j.startswith("b") for j in d.assign) == 1
    assert d.shares is not None and d.shares.tenants["ta"][SHARE] == 1500 and d.shares.tenants["tb"][SHARE] == 500


def test_a_queue_s_limit_holds_fractional_jobs_end_to_end(db_url: URL, tmp_path: Path) -> None:
    """The real server with simulated agents: a queue limited to one GPU runs four quarter-GPU jobs, shows one GPU
    used, and holds the rest at its limit."""
    fed = start(db_url, tmp_path)
    try:
        fed.tenant("t")
        fed.queue("q", "t", limit={GPU: "1"})
        # KAI's annotation and our job spec's own field alike
        jobs = fed.submit_specs([fractional(f"quarter-{i}", "q", "0.25") for i in range(3)]
                                + [in_resources(f"in-resources-{i}", "q", "0.25") for i in range(3)])
        running = lambda: [j for j in jobs if fed.job(j).status.phase == common_pb2.RUNNING]  # noqa: E731
        wait_for("four quarters to run", lambda: len(running()) == 4)
        status = fed.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="q"))
        assert status.usage[GPU] == "1" and (status.running, status.pending) == (4, 2)
        waiting = fed.jobs.ListJobs(jobs_pb2.ListJobsRequest(queue="q", phases=[common_pb2.PENDING])).jobs
        wait_for("the limit to be the reason", lambda: all(
            fed.job(j.id).status.reason.startswith(f"queue at limit {GPU}=1") for j in waiting))
        assert len(running()) == 4  # and no more started since
    finally:
        fed.close()


def test_a_manifest_s_container_may_ask_for_a_fraction_and_is_told_where_it_cannot() -> None:
    example = Path(__file__).resolve().parent.parent / "examples" / "jobs" / "fractional-inference.yaml"
    (converted,) = jobs_from_documents(load_documents(example.read_text(), str(example)))
    normalise_job_spec(converted.message)
    rerank = converted.message.tasks[1]
    assert template_annotations(rerank.pod_template_json) == {FRACTION: "0.5"} and GPU not in rerank.resources
    assert gangs.minimum(converted.message)[SHARE] == 4 * 250 + 2 * 500
    odd = example.read_text().replace('nvidia.com/gpu: "0.5"', 'nvidia.com/gpu: "1.5"')
    line = odd.splitlines().index('                  nvidia.com/gpu: "1.5"') + 1
    with pytest.raises(ManifestError, match=rf"odd.yaml:{line}: .*nvidia.com/gpu.*a fraction of a GPU is below one"):
        list(jobs_from_documents(load_documents(odd, "odd.yaml")))
