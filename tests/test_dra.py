"""Dynamic Resource Allocation in the federation (issue 31): ResourceClaimTemplates read and refused with the field
named, each pod's devices counted under their DeviceClass's resource in the job's request, quotas and fair shares
over them, CEL selectors (with Kubernetes' quantity library) choosing devices, and fedctl carrying the templates a
manifest gives before its job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from federation.cli.jobdocs import jobs_from_documents
from federation.cli.yamldoc import ManifestError, load_documents
from federation.kernel import dra, gangs
from federation.scheduling.cycle import PendingJob, QueueInfo, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, JobView, TierFree
from federation.testbed.dra import DRIVER, resource_slices
from federation.v1 import common_pb2
from federation.validation import Violations, check_job_spec

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dra" / "h100-claims.yaml"
H100 = dra.class_resource("h100")


def template(name: str = "two", count: int = 2, device_class: str = "h100", **exactly: object) -> str:
    return json.dumps({"apiVersion": dra.API, "kind": "ResourceClaimTemplate", "metadata": {"name": name},
                       "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                           "deviceClassName": device_class, "count": count, **exactly}}]}}}})


def job(templates: list[str], claim_template: str = "two", pods: int = 2, name: str = "j") -> common_pb2.JobSpec:
    pod = json.dumps({"spec": {"resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": claim_template}]}})
    return common_pb2.JobSpec(name=name, queue="q", resource_claim_templates_json=templates, tasks=[
        common_pb2.TaskSpec(name="worker", replicas=pods, resources={"cpu": "1"}, pod_template_json=pod)])


def test_each_pod_counts_its_claims_devices_under_their_class() -> None:
    assert gangs.minimum(job([template()])) == {"cpu": 2000, H100: 4}


@pytest.mark.parametrize(("spec", "field", "says"), [
    (job([template(allocationMode="All")]), "spec.resource_claim_templates_json[0].spec.spec.devices.requests[0]"
     ".exactly.allocationMode", "exact count"),
    (job([template(selectors=[{"cel": {"expression": "device.driver =="}}])]),
     "spec.resource_claim_templates_json[0].spec.spec.devices.requests[0].exactly.selectors[0].cel.expression",
     "does not parse as CEL"),
    (job([template(count=0)]), "spec.resource_claim_templates_json[0].spec.spec.devices.requests[0].exactly.count",
     "at least 1"),
    (job([template()], claim_template="missing"),
     "spec.tasks[0].pod_template_json.spec.resourceClaims[0].resourceClaimTemplateName", "not among"),
    (job(["{"]), "spec.resource_claim_templates_json[0]", "not JSON"),
])
def test_claims_the_federation_cannot_count_are_refused_with_the_field(spec: common_pb2.JobSpec, field: str,
                                                                       says: str) -> None:
    v = Violations()
    check_job_spec(v, "spec", spec)
    assert [(i.field, says in i.description) for i in v.items] == [(field, True)], v.items


def _pending(spec: common_pb2.JobSpec, seq: int) -> PendingJob:
    largest = {r: a for t in spec.tasks for r, a in gangs.pod_request(t, claims=dra.templates(
        spec.resource_claim_templates_json)).items()}
    return PendingJob(JobView(spec.name, gangs.minimum(spec), largest), spec.queue, 0, seq)


def test_a_queue_limit_on_a_device_class_holds_its_jobs() -> None:
    free = {H100: 16, "cpu": 64_000}
    view = ClusterView("c1", {}, free, [TierFree(0, "node", {H100: 8, "cpu": 32_000})])
    pending = [_pending(job([template(count=1)], name=f"j{i}"), i) for i in range(4)]  # 2 devices each
    d = schedule(Snapshot([TenantInfo("t")], [QueueInfo("q", "t", limit={H100: 4})], pending, [], [view], free))
    assert sorted(d.assign) == ["j0", "j1"] and d.usage["q"][H100] == 4
    assert d.waiting["j2"] == f"queue at limit {H100}=4"


def test_cel_selectors_and_quantities_choose_the_devices() -> None:
    (node,) = resource_slices(["n1"], 4, "H100", memory="80Gi")
    devices = dra.slice_devices(node)
    classes = {"h100": [f'device.driver == "{DRIVER}"']}
    big = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0'
    odd = f'device.attributes["{DRIVER}"].index % 2 == 1'
    claim = dra.claim_spec(json.loads(template(selectors=[{"cel": {"expression": big}}, {"cel": {"expression": odd}}]))
                           ["spec"]["spec"], "spec")
    allocation = dra.allocate(claim, classes, devices)
    assert isinstance(allocation, dra.Allocation)
    assert [d.name for _, d in allocation.results] == ["gpu-1", "gpu-3"]
    refused = dra.allocate(claim, classes, devices[:2])
    assert refused == "request gpus: 1 of 2 h100 devices free that its selectors accept"
    # An expression that fails on a device (an attribute it lacks) passes over it, as no match.
    assert not dra.accepts([f'device.attributes["{DRIVER}"].vendor == "x"'], devices[0])
    assert dra.allocate(claim, {}, devices).startswith("request gpus: DeviceClass h100 does not exist")


def test_fedctl_carries_the_templates_a_manifest_gives_before_its_job() -> None:
    (converted,) = jobs_from_documents(load_documents(EXAMPLE.read_text(), str(EXAMPLE)))
    spec = converted.message
    assert [json.loads(t)["metadata"]["name"] for t in spec.resource_claim_templates_json] == ["two-big-gpus"]
    assert gangs.minimum(spec)[dra.class_resource("gpu.nvidia.com")] == 8  # 4 workers x 2 devices
    v = Violations()
    check_job_spec(v, "spec", spec)
    assert not v.items
    job_only = EXAMPLE.read_text().split("---\n", 1)[1]
    with pytest.raises(ManifestError) as err:
        list(jobs_from_documents(load_documents(job_only, "job.yaml")))
    assert str(err.value).startswith("job.yaml:16:") and "no ResourceClaimTemplate two-big-gpus" in str(err.value)
