"""Hostile input, generated: random and malformed job specs at the API, random YAML at the CLI's parser.

Whatever comes in, the server answers with a proper status (never INTERNAL or UNKNOWN) and stores
nothing when it refuses; the parser either converts a document or raises ManifestError naming the
file, never anything else. Example counts are bounded for CI (FEDERATION_FUZZ_EXAMPLES raises them).
"""

import os
import random
from typing import Any

import grpc
import yaml
from google.protobuf import message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from sqlalchemy import text

from federation.cli.manifest import admin_from_document, job_from_document
from federation.cli.yamldoc import ManifestError, load_documents
from federation.v1 import admin_pb2, agent_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import all_jobs, event_count

EXAMPLES = int(os.environ.get("FEDERATION_FUZZ_EXAMPLES", "60"))
ANSWERS = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND,
           grpc.StatusCode.RESOURCE_EXHAUSTED}
fuzz = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Names that are sometimes valid, often not: empty, upper case, too long, odd characters.
names = st.one_of(st.sampled_from(["train", "worker", "ml", "a" * 64, "", "Bad_Name", "x.y", "-x"]),
                  st.text(max_size=70))
quantities = st.one_of(st.sampled_from(["8", "0", "-1", "1.5", "500m", "1e3", "2Gi", "abc", "", "1" * 40]),
                       st.text(max_size=20))
resources = st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu", "memory", "Bad Name", ""]) | st.text(max_size=30),
                            quantities, max_size=5)
ints = st.one_of(st.integers(-5, 20), st.sampled_from([2**31 - 1, -(2**31), 10_001, 100_000]))
tasks = st.builds(common_pb2.TaskSpec, name=names, replicas=ints, resources=resources,
                  min_available=ints, node_selector=st.dictionaries(names, names, max_size=3),
                  pod_template_json=st.one_of(st.just(""), st.sampled_from(["{", "[]", '{"spec": 1}']),
                                              st.text(max_size=40)))
topologies = st.builds(common_pb2.NetworkTopology, mode=st.sampled_from(["", "hard", "soft", "HARD", "x"]),
                       highest_tier_allowed=ints)
specs = st.builds(common_pb2.JobSpec, name=names, queue=st.sampled_from(["train", "missing", ""]),
                  tasks=st.lists(tasks, max_size=4), min_available=ints, network_topology=topologies,
                  annotations=st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=4),
                  request_id=st.text(max_size=140), priority_class_name=st.sampled_from(["", "none", "Bad"]))


@fuzz
@given(batch=st.lists(specs, min_size=1, max_size=3))
async def test_random_specs_get_a_proper_status_and_nothing_is_stored_on_rejection(
        api: Api, batch: list[common_pb2.JobSpec]) -> None:
    if not (await api.admin.ListQueues(admin_pb2.ListQueuesRequest())).queues:  # the first example makes it
        await make_queue(api)
    before_jobs, before_events = len(await all_jobs(api)), await event_count(api)
    try:
        response = await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=batch))
    except grpc.aio.AioRpcError as err:
        assert err.code() in ANSWERS, (err.code(), err.details())
        assert err.details()
        assert (len(await all_jobs(api)), await event_count(api)) == (before_jobs, before_events)
    else:
        assert len(response.results) == len(batch)
        assert len(await all_jobs(api)) == before_jobs + sum(not r.duplicate for r in response.results)


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.text(max_size=20) | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5),
    max_leaves=20)
volcano_like = st.fixed_dictionaries({
    "apiVersion": st.sampled_from(["batch.volcano.sh/v1alpha1", "v1", "federation.dev/v1", ""]),
    "kind": st.sampled_from(["Job", "Queue", "Tenant", "PriorityClass", "HyperNode", "Pod", ""]),
    "metadata": st.one_of(yaml_values, st.fixed_dictionaries({"name": names})),
    "spec": yaml_values,
})


def parse_all(text: str) -> None:
    for doc in load_documents(text, "fuzz.yaml"):
        kind = doc.data.get("kind") if isinstance(doc.data, dict) else None
        if kind in ("Tenant", "Queue", "PriorityClass"):
            admin_from_document(doc)
        else:
            job_from_document(doc)


@fuzz
@given(text=st.one_of(st.text(max_size=300), volcano_like.map(yaml.safe_dump), yaml_values.map(yaml.safe_dump),
                      st.lists(volcano_like, max_size=3).map(yaml.safe_dump_all)))
def test_random_yaml_is_converted_or_refused_with_the_file_named(text: str) -> None:
    try:
        parse_all(text)
    except ManifestError as err:
        assert str(err).startswith("fuzz.yaml"), str(err)


# -- every RPC, on the wire ------------------------------------------------------------------------

SEED = int(os.environ.get("FEDERATION_FUZZ_SEED", random.randrange(2**32)))
print(f"fuzz seed: {SEED} (FEDERATION_FUZZ_SEED={SEED} repeats this run)")
wire = settings(max_examples=EXAMPLES * 3, deadline=None, derandomize=False, print_blob=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
HOSTILE_TEXT = st.one_of(st.text(max_size=40), st.sampled_from(["\x00", "a\x00b", "x" * 100_000, "1e1000000",
                                                                  "inf", "NaN", "١٢", "-1", "../../etc"]))
HOSTILE_INT = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([0, -1, 2**31 - 1, -(2**31)]))
# Enum numbers outside every enum's range (proto3 enums are open: they arrive as they are), and durations and
# timestamps at and past their extremes (±10,000 years; nanos of 10^9 and more, or negative).
ENUM_OUTSIDE = [-1, 99, 1000, 2**31 - 1, -(2**31)]
SECONDS_EXTREMES = [0, -1, 1, 10**12, 315_576_000_000, -315_576_000_000, 315_576_000_001, 2**63 - 1, -(2**63)]
NANOS_EXTREMES = [0, 1, 999_999_999, 10**9, 2 * 10**9, -1, -(2**31), 2**31 - 1]
SPECIAL = ("google.protobuf.Duration", "google.protobuf.Timestamp")


def methods() -> list[tuple[str, Any, bool, bool]]:
    """(path, request type, server streaming, client streaming) of every method the server serves."""
    out = []
    for module in (jobs_pb2, admin_pb2, agent_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                request = message_factory.GetMessageClass(m.input_type)
                out.append((f"/{service.full_name}/{m.name}", request, m.server_streaming, m.client_streaming))
    return out


@st.composite
def filled(draw: st.DrawFn, kind: Any, depth: int = 0) -> Any:
    """A message of `kind` with hostile values in some of its fields (two levels deep)."""
    message = kind()
    for field in kind.DESCRIPTOR.fields:
        if not draw(st.booleans()):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name
            key_field, value_field = entry["key"], entry["value"]
            if key_field.type == key_field.TYPE_STRING and value_field.type == value_field.TYPE_STRING:
                getattr(message, field.name).update(draw(st.dictionaries(HOSTILE_TEXT, HOSTILE_TEXT, max_size=3)))
        elif field.message_type is not None and field.message_type.full_name in SPECIAL:
            child = message_factory.GetMessageClass(field.message_type)(
                seconds=draw(st.sampled_from(SECONDS_EXTREMES)), nanos=draw(st.sampled_from(NANOS_EXTREMES)))
            if field.is_repeated:
                getattr(message, field.name).append(child)
            else:
                getattr(message, field.name).CopyFrom(child)
        elif field.message_type is not None:
            if depth < 3 and field.message_type.full_name.startswith("federation."):
                child = draw(filled(message_factory.GetMessageClass(field.message_type), depth + 1))
                if field.is_repeated:
                    getattr(message, field.name).append(child)
                else:
                    getattr(message, field.name).CopyFrom(child)
        elif field.type == field.TYPE_STRING:
            value = draw(HOSTILE_TEXT)
            if field.is_repeated:
                getattr(message, field.name).append(value)
            else:
                setattr(message, field.name, value)
        elif field.type == field.TYPE_ENUM:
            values = draw(st.lists(st.one_of(st.integers(0, 10), st.sampled_from(ENUM_OUTSIDE)), min_size=1,
                                   max_size=3))
            if field.is_repeated:
                getattr(message, field.name).extend(values)
            else:
                setattr(message, field.name, values[0])
        elif field.type in (field.TYPE_INT32, field.TYPE_INT64) and not field.is_repeated:
            setattr(message, field.name, draw(HOSTILE_INT))
        elif field.type in (field.TYPE_DOUBLE, field.TYPE_FLOAT) and not field.is_repeated:
            setattr(message, field.name, draw(st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308,
                                                               -0.0, 5e-324])))
        elif field.type == field.TYPE_BOOL and not field.is_repeated:
            setattr(message, field.name, True)
    return message


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, bool, bool, bytes]:
    path, kind, server_streaming, client_streaming = draw(st.sampled_from(methods()))
    payload = draw(st.one_of(st.binary(max_size=64), filled(kind).map(lambda m: m.SerializeToString())))
    return path, server_streaming, client_streaming, payload


async def stored(api: Api) -> tuple[int, ...]:
    async with api.server.engine.connect() as conn:
        counts = []
        for table in ("jobs", "job_events", "tenants", "queues", "priority_classes", "flavors", "api_tokens",
                      "clusters"):
            counts.append((await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one())
        return tuple(counts)


@seed(SEED)
@wire
@given(call=calls())
async def test_every_rpc_answers_hostile_bytes_with_a_proper_status_and_stays_responsive(
        api: Api, call: tuple[str, bool, bool, bytes]) -> None:
    path, server_streaming, client_streaming, payload = call
    before = await stored(api)
    code = grpc.StatusCode.OK
    try:
        if client_streaming:  # the agents' stream: a frame of whatever, then the end of it
            stream = api.channel.stream_stream(path)(iter([payload]), timeout=10)
            async for _ in stream:
                pass
        elif server_streaming:
            async for _ in api.channel.unary_stream(path)(payload, timeout=1):
                break
        else:
            await api.channel.unary_unary(path)(payload, timeout=10)
    except grpc.aio.AioRpcError as err:
        code = err.code()
        assert code not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), (path, code, err.details())
        assert len(err.details() or "") <= 1000  # an error quotes at most a short prefix of the input
    if code != grpc.StatusCode.OK and code != grpc.StatusCode.DEADLINE_EXCEEDED:
        assert await stored(api) == before, path  # refused: nothing stored
    health = health_pb2_grpc.HealthStub(api.channel)
    answer = await health.Check(health_pb2.HealthCheckRequest(), timeout=5)  # the server still answers at once
    assert answer.status == health_pb2.HealthCheckResponse.SERVING


def _sweep(kind: Any, depth: int = 0) -> list[tuple[tuple[Any, ...], Any]]:
    """(field path, field) of every enum field and every Duration or Timestamp field under a request."""
    out: list[tuple[tuple[Any, ...], Any]] = []
    for field in kind.DESCRIPTOR.fields:
        if field.type == field.TYPE_ENUM or (field.message_type is not None and field.message_type.full_name
                                             in SPECIAL):
            out.append(((field,), field))
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry and depth < 4 \
                and field.message_type.full_name.startswith("federation."):
            child = message_factory.GetMessageClass(field.message_type)
            out += [((field, *path), leaf) for path, leaf in _sweep(child, depth + 1)]
    return out


def _set(message: Any, path: tuple[Any, ...], value: Any) -> None:
    *parents, leaf = path
    for field in parents:
        message = getattr(message, field.name).add() if field.is_repeated else getattr(message, field.name)
    if leaf.type == leaf.TYPE_ENUM:
        if leaf.is_repeated:
            getattr(message, leaf.name).append(value)
        else:
            setattr(message, leaf.name, value)
    elif leaf.is_repeated:
        getattr(message, leaf.name).add(seconds=value[0], nanos=value[1])
    else:
        getattr(message, leaf.name).CopyFrom(message_factory.GetMessageClass(leaf.message_type)(
            seconds=value[0], nanos=value[1]))


async def test_every_enum_out_of_range_and_every_duration_extreme_in_every_request_gets_a_proper_status(
        api: Api) -> None:
    """Issue 27 (7), swept rather than sampled: each enum field of each request (nested ones too) with numbers
    outside its enum, and each Duration and Timestamp at and past its extremes, never INTERNAL or UNKNOWN."""
    await make_queue(api)
    swept = 0
    for path, kind, server_streaming, client_streaming in methods():
        if client_streaming:
            continue  # the agents' stream: its messages are fuzzed above
        for fields, leaf in _sweep(kind):
            values: list[Any] = list(ENUM_OUTSIDE) if leaf.type == leaf.TYPE_ENUM else \
                [(s, 0) for s in SECONDS_EXTREMES] + [(1, n) for n in NANOS_EXTREMES] + [(-1, 1), (1, -1)]
            for value in values:
                request = kind()
                _set(request, fields, value)
                try:
                    if server_streaming:
                        async for _ in api.channel.unary_stream(path)(request.SerializeToString(), timeout=1):
                            break
                    else:
                        await api.channel.unary_unary(path)(request.SerializeToString(), timeout=10)
                except grpc.aio.AioRpcError as err:
                    where = ".".join(f.name for f in fields)
                    assert err.code() not in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN), \
                        (path, where, value, err.code(), err.details())
                swept += 1
    assert swept > 100
