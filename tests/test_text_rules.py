"""Issue 27 (1): every text a client sends is held to one rule (bounded, printable, line breaks only where text
spans lines) at the edge, naming the field; what is stored can always be listed, watched and replayed by a
client with gRPC's default 4 MiB limit."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from federation.api.jobs import MAX_PAGE_BYTES
from federation.v1 import admin_pb2, common_pb2, jobs_pb2
from federation.validation import MAX_FIELD, MAX_SPEC_BYTES, MULTILINE, text_violations
from tests.conftest import Api, make_queue
from tests.test_api_admin import rpc_error

TITLE = "\x1b]0;owned\x07"  # sets a terminal's window title
SERVICES = (jobs_pb2.DESCRIPTOR.services_by_name["JobService"], admin_pb2.DESCRIPTOR.services_by_name["AdminService"])


def _string_fields(descriptor: Descriptor, path: tuple[FieldDescriptor, ...] = (), depth: int = 0
                   ) -> list[tuple[FieldDescriptor, ...]]:
    """Every path from a request to a string field (a map's key and value included), to a few levels deep."""
    out = []
    for field in descriptor.fields:
        is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
        if is_map or field.type == FieldDescriptor.TYPE_STRING:
            out.append((*path, field))
        elif field.message_type is not None and depth < 4 and not field.message_type.full_name.startswith(
                "google.protobuf"):
            out += _string_fields(field.message_type, (*path, field), depth + 1)
    return out


def _with(message: Message, path: tuple[FieldDescriptor, ...], text: str, as_key: bool) -> bool:
    """Set the string at `path` to `text` (a map's key, when `as_key`); False when there is none to set."""
    *parents, leaf = path
    for field in parents:
        message = getattr(message, field.name).add() if field.is_repeated \
            else getattr(message, field.name)
    target = getattr(message, leaf.name)
    if leaf.message_type is not None:  # a map
        value_field = leaf.message_type.fields_by_name["value"]
        if as_key:
            if value_field.message_type is None:
                target["k" + text] = "v"
            else:
                target["k" + text]
        elif value_field.message_type is None:
            target["k"] = text
        else:
            return False  # its values are messages: their strings have paths of their own
    elif leaf.is_repeated:
        target.append(text)
    else:
        setattr(message, leaf.name, text)
    return True


@pytest.mark.parametrize("service", SERVICES, ids=lambda s: s.name)
def test_every_string_of_every_request_is_held_to_the_rule(service: object) -> None:
    checked = 0
    for method in service.methods:  # type: ignore[attr-defined]
        request_class = {"JobService": jobs_pb2, "AdminService": admin_pb2}[service.name]  # type: ignore[attr-defined]
        request_type = getattr(request_class, method.input_type.name)
        for path in _string_fields(method.input_type):
            where = ".".join(f.name for f in path)
            for as_key in (False, True):
                if as_key and path[-1].message_type is None:
                    continue
                for text, why in ((f"a{TITLE}b", "control"), ("x" * (MAX_FIELD + 1), "characters long")):
                    multiline = path[-1].full_name in MULTILINE
                    if multiline and why != "control" and not as_key:
                        continue  # those have bounds of their own, larger, checked in their own terms
                    request = request_type()
                    if not _with(request, path, text, as_key):
                        continue
                    found = text_violations(request)
                    assert found and why in found[0].description, (method.name, where, as_key, why, found)
                    leaf = path[-1].name
                    assert leaf in found[0].field, (method.name, where, found[0].field)
                    checked += 1
    assert checked > 50


async def test_texts_that_break_the_rule_are_refused_naming_the_field_and_nothing_is_stored(api: Api) -> None:
    await make_queue(api)
    spec = common_pb2.JobSpec(name="j", queue="train", labels={"team": f"ml{TITLE}"},
                              tasks=[common_pb2.TaskSpec(name="w", replicas=1, resources={"cpu": "1"})])
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.labels['team']" in err.details()
    spec.labels["team"] = "ml"
    spec.annotations["note"] = "right-to-left \u202e override"
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "spec.annotations['note']" in err.details()
    err = await rpc_error(api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(
        name="x" * 10_000_000))))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "tenant.name" in err.details()
    assert len(err.details()) < 500
    assert not (await api.jobs.ListJobs(jobs_pb2.ListJobsRequest())).jobs
    assert "x" * 100 not in str(await api.admin.ListTenants(admin_pb2.ListTenantsRequest()))
    del spec.annotations["note"]
    spec.annotations["script"] = "#!/bin/sh\n\techo multi-line annotations stay welcome\n"
    assert (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec))).job.id


async def test_what_is_stored_is_listed_watched_and_replayed_within_default_limits(api: Api) -> None:
    """Jobs as large as allowed: a page of them stays under 4 MiB (bounded in bytes, not only in count), and a
    client with gRPC's defaults lists every one and replays the event log from the start."""
    await make_queue(api)
    template = json.dumps({"spec": {"containers": [{"name": "w", "image": "x", "env": [
        {"name": f"V{i}", "value": "v" * 1000} for i in range(250)]}]}})
    assert len(template) > 250_000 * 0.9
    tasks = [common_pb2.TaskSpec(name=f"t{i}", replicas=1, resources={"cpu": "1"}, pod_template_json=template)
             for i in range(5)]
    spec = common_pb2.JobSpec(name="big", queue="train", tasks=tasks)
    assert MAX_PAGE_BYTES < spec.ByteSize() * 10 < 4 * MAX_SPEC_BYTES * 10
    ids = {(await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec))).job.id for _ in range(10)}
    too_big = common_pb2.JobSpec(name="huge", queue="train", tasks=tasks + tasks)
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=too_big)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "etcd's limit" in err.details()
    async with grpc.aio.insecure_channel(api.address) as plain:  # gRPC's default limits
        from federation.v1 import jobs_pb2_grpc
        stub = jobs_pb2_grpc.JobServiceStub(plain)
        listed: set[str] = set()
        token, pages = "", 0
        while True:
            page = await stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000, page_token=token))
            assert page.ByteSize() <= MAX_PAGE_BYTES
            listed |= {j.id for j in page.jobs}
            pages += 1
            token = page.next_page_token
            if not token:
                break
        assert listed == ids and pages > 1
        events = []
        watch = stub.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0))
        async for event in watch:
            events.append(event)
            if len(events) == 10:
                break
        watch.cancel()
        assert {e.job_id for e in events} == ids
