"""Issue 41 (5): CEL selectors are bounded before they are compiled (length, bracket nesting, the steps a
comprehension multiplies, characters per job), refused at submit with the field at fault; on a device, a
selector beyond the bounds (a DeviceClass the cluster holds, never checked at submit) is passed over without an
error escaping; and the compiling happens off the loop that answers RPCs, so a submit of the costliest allowed
templates holds no other call up."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.cli.dev import ServerProcess
from federation.kernel import dra
from federation.testbed.dra import DRIVER, resource_slices
from federation.v1 import admin_pb2, admin_pb2_grpc, jobs_pb2, jobs_pb2_grpc
from federation.validation import Violations, check_job_spec
from tests.test_dra import job, template

FIELD = "spec.resource_claim_templates_json[0].spec.spec.devices.requests[0].exactly.selectors[0].cel.expression"
LIST = "[" + ",".join(str(i) for i in range(10)) + "]"


def refusal(expression: str) -> list[tuple[str, str]]:
    v = Violations()
    check_job_spec(v, "spec", job([template(selectors=[{"cel": {"expression": expression}}])]))
    return [(i.field, i.description) for i in v.items]


def test_a_selector_beyond_the_bounds_is_refused_naming_its_field() -> None:
    assert refusal(f'device.driver == "{DRIVER}"') == []
    assert refusal("(" * 32 + "true" + ")" * 32) == []
    assert refusal('device.driver == "((((((((((((((((((((((((((((((((((((("') == []  # brackets in a string
    assert refusal("(" * 1900 + "true" + ")" * 1900) == [
        (FIELD, f"nests brackets 1900 deep, at most {dra.MAX_CEL_NESTING} are allowed")]
    assert refusal("true || " * 1500 + "true")[0][1] == \
        f"is {len('true || ' * 1500) + 4} characters long, at most {dra.MAX_CEL_LENGTH} are allowed"
    assert refusal(f"{LIST}.all(a, a >= 0)") == []  # ten elements
    (field, why), = refusal(f"{LIST}.all(a, {LIST}.all(b, {LIST}.all(c, {LIST}.all(d, a + b + c + d >= 0))))")
    assert field == FIELD and why.startswith("would evaluate about ") and \
        why.endswith(f"steps per device, at most {dra.MAX_CEL_COST:,} are allowed")
    device_wide = (f'device.attributes["{DRIVER}"].all(k, device.attributes["{DRIVER}"].all(j, '
                   f'device.attributes["{DRIVER}"].all(i, k != j || j != i)))')
    assert refusal(device_wide)[0][1].startswith("would evaluate about ")

    many = [template(name=f"t{i}", selectors=[{"cel": {"expression": " || ".join(['device.driver == "x"'] * 400)}}])
            for i in range(16)]  # each within every bound, 16 of them over the job's
    v = Violations()
    check_job_spec(v, "spec", job(many, claim_template="t0"))
    assert [(i.field, "at most 65,536 are allowed in one job" in i.description) for i in v.items] == [
        ("spec.resource_claim_templates_json", True)]


def test_a_device_class_beyond_the_bounds_accepts_no_device_and_raises_nothing() -> None:
    (node,) = resource_slices(["n1"], 2, "H100", memory="80Gi")
    devices = dra.slice_devices(node)
    for selector in ("(" * 150 + "true" + ")" * 150,
                     f"{LIST}.all(a, {LIST}.all(b, {LIST}.all(c, {LIST}.all(d, a + b + c + d >= 0))))"):
        assert not dra.accepts([selector], devices[0])
        assert dra.allocate(dra.ClaimSpec((dra.DeviceRequest("gpus", "h100", 1),)), {"h100": [selector]},
                            devices) == "request gpus: 0 of 1 h100 devices free that its selectors accept"
    assert dra.accepts([f'device.driver == "{DRIVER}"'], devices[0])


def costly_job(n: int) -> jobs_pb2.SubmitJobsRequest:
    """A batch whose every job holds the most CEL one job may, each selector a different text (none cached)."""
    specs = []
    for j in range(n):
        templates = []
        for t in range(18):  # 18 selectors of ~3,500 characters: the job's 64 KiB
            clauses = " || ".join(f'device.attributes["{DRIVER}"].index == {j * 10_000 + t * 100 + k}'
                                  for k in range(62))
            templates.append(template(name=f"t{t}", selectors=[{"cel": {"expression": clauses}}]))
        spec = job(templates, claim_template="t0", name=f"cel-{j}")
        spec.queue = "train"
        specs.append(spec)
    return jobs_pb2.SubmitJobsRequest(specs=specs, dry_run=True, allow_unknown_resources=True)


@pytest.mark.e2e
def test_compiling_the_costliest_allowed_selectors_holds_no_other_call_up(db_url: URL) -> None:
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    try:
        channel = grpc.insecure_channel(server.address)
        jobs, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        request = costly_job(12)
        probes: list[float] = []
        done = threading.Event()

        def probe() -> None:
            while not done.is_set():
                start = time.monotonic()
                jobs.GetVersion(jobs_pb2.GetVersionRequest(), timeout=120)
                probes.append(time.monotonic() - start)
                time.sleep(0.02)

        prober = threading.Thread(target=probe)
        prober.start()
        try:
            start = time.monotonic()
            answer = jobs.SubmitJobs(request, timeout=600)
            took = time.monotonic() - start
        finally:
            done.set()
            prober.join()
        assert len(answer.results) == len(request.specs)
        # The batch compiled 216 selectors of ~3,500 characters; every probe meanwhile was answered in a small
        # part of that (a loop held by the compiling would make one probe wait all of it).
        assert len(probes) >= 5 and max(probes) < took / 4, (took, max(probes), len(probes))
    finally:
        server.stop()
