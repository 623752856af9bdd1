"""Lifecycle policies: which policy answers a pod's event, on which pods, and when retries run out."""

from google.protobuf.duration_pb2 import Duration

from federation.v1 import common_pb2
from member_agent.lifecycle import PodEvent, respond


def policy(action: str, *events: str, timeout: int | None = None) -> common_pb2.LifecyclePolicy:
    p = common_pb2.LifecyclePolicy(events=list(events), action=action)
    if timeout is not None:
        p.timeout.CopyFrom(Duration(seconds=timeout))
    return p


def spec(job_policies: list, task_policies: list | None = None, max_retry: int | None = None) -> common_pb2.JobSpec:
    s = common_pb2.JobSpec(name="train", queue="q", policies=job_policies, tasks=[
        common_pb2.TaskSpec(name="worker", replicas=8, policies=task_policies or [],
                            partition_policy=common_pb2.PartitionPolicy(total_partitions=2, partition_size=4)),
        common_pb2.TaskSpec(name="ps", replicas=2)])
    if max_retry is not None:
        s.max_retry = max_retry
    return s


FAILED = PodEvent("PodFailed", "worker", 5, "OOMKilled")


def test_restart_task_and_pod_restart_only_the_failed_pod() -> None:
    for action in ("RestartTask", "RestartPod"):
        r = respond(spec([policy(action, "PodFailed")]), FAILED, retries=0)
        assert (r.action, r.pods, r.timeout) == (action, (("worker", 5),), 0.0)
        assert r.reason == f"{action} after PodFailed on worker[5]: OOMKilled (retry 1 of 3)"


def test_partition_and_job_restarts_take_their_pods() -> None:
    r = respond(spec([policy("RestartPartition", "PodFailed")]), FAILED, retries=0)
    assert r.pods == tuple(("worker", i) for i in range(4, 8))
    r = respond(spec([policy("RestartJob", "PodFailed")]), FAILED, retries=0)
    assert len(r.pods) == 10 and ("ps", 1) in r.pods


def test_a_task_policy_overrides_the_jobs_and_events_are_matched() -> None:
    s = spec([policy("RestartJob", "PodFailed", "Unknown")], [policy("RestartPod", "PodFailed", timeout=30)])
    r = respond(s, FAILED, retries=0)
    assert (r.action, r.timeout) == ("RestartPod", 30.0)
    assert respond(s, PodEvent("Unknown", "worker", 1, "node lost"), retries=0).action == "RestartJob"
    assert respond(s, PodEvent("PodFailed", "ps", 0, "x"), retries=0).action == "RestartJob"  # not its task


def test_endings_and_no_policy() -> None:
    assert respond(spec([policy("CompleteJob", "PodFailed")]), FAILED, 0).action == "CompleteJob"
    assert respond(spec([policy("AbortJob", "PodEvicted")]), PodEvent("PodEvicted", "ps", 0, "x"), 0).action == (
        "AbortJob")
    r = respond(spec([policy("RestartPod", "PodEvicted")]), FAILED, 0)
    assert (r.action, r.reason) == ("FailJob", "PodFailed on worker[5]: OOMKilled; no lifecycle policy handles "
                                               "PodFailed")


def test_max_retry_defaults_to_three_and_fails_the_job_when_reached() -> None:
    s = spec([policy("RestartPod", "PodFailed")])
    assert respond(s, FAILED, retries=2).action == "RestartPod"
    r = respond(s, FAILED, retries=3)
    assert (r.action, r.reason) == ("FailJob", "PodFailed on worker[5]: OOMKilled; maxRetry 3 exhausted")
    assert respond(spec([policy("RestartPod", "PodFailed")], max_retry=0), FAILED, retries=0).action == "FailJob"
