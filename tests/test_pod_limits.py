"""A pod template asking for GPUs under requests only (Volcano's own HyperJob example does) is made a pod the API
server takes: its extended resources' limits set equal to their requests, what it asked for otherwise unchanged."""

from __future__ import annotations

import json

from federation.v1 import common_pb2
from member_agent.model import AgentJob
from member_agent.pods import pod_manifest

GPU = "nvidia.com/gpu"


def test_extended_resources_requested_without_limits_get_limits_equal_to_their_requests() -> None:
    template = {"spec": {"containers": [
        {"name": "trainer", "image": "training-image:v1", "resources": {"requests": {GPU: 1, "cpu": "4"}}},
        {"name": "side", "image": "x", "resources": {"requests": {"cpu": "1", "example.com/nic": 2},
                                                     "limits": {"cpu": "2"}}},
        {"name": "set", "image": "x", "resources": {"requests": {GPU: 2}, "limits": {GPU: 2}}}]}}
    task = common_pb2.TaskSpec(name="worker", replicas=1, resources={GPU: "1"}, pod_template_json=json.dumps(template))
    job = common_pb2.Job(id="j", spec=common_pb2.JobSpec(name="j", queue="q", tasks=[task]))
    pod = pod_manifest(AgentJob(job, 1, [], {"worker": {GPU: 3}}, "", 0), "worker", 0, "jobs", "fed", "east")
    assert [c["resources"] for c in pod["spec"]["containers"]] == [
        {"requests": {GPU: 1, "cpu": "4"}, "limits": {GPU: 1}},
        {"requests": {"cpu": "1", "example.com/nic": 2}, "limits": {"cpu": "2", "example.com/nic": 2}},
        {"requests": {GPU: 2}, "limits": {GPU: 2}}]
