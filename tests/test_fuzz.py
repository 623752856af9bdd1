"""Hostile input, generated: random and malformed job specs at the API, random YAML at the CLI's parser.

Whatever comes in, the server answers with a proper status (never INTERNAL or UNKNOWN) and stores
nothing when it refuses; the parser either converts a document or raises ManifestError naming the
file, never anything else. Example counts are bounded for CI (FEDERATION_FUZZ_EXAMPLES raises them).
"""

import os

import grpc
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from federation.cli.manifest import admin_from_document, job_from_document
from federation.cli.yamldoc import ManifestError, load_documents
from federation.v1 import admin_pb2, common_pb2, jobs_pb2
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
