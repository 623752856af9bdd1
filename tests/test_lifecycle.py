"""Lifecycle policies: which policy answers an event, on which pods, when retries run out, and what
happens with no policy."""

from google.protobuf.duration_pb2 import Duration

from federation.v1 import common_pb2
from member_agent.lifecycle import Event, respond


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


FAILED = Event.of_pod("PodFailed", "worker", 5, "OOMKilled")


def test_restart_pod_restarts_the_failed_pod_and_restart_task_its_whole_task() -> None:
    # Volcano: RestartPod kills the event's pod; RestartTask kills every pod of the event's task.
    for action, pods in (("RestartPod", (("worker", 5),)), ("RestartTask", tuple(("worker", i) for i in range(8)))):
        r = respond(spec([policy(action, "PodFailed")]), FAILED, retries=0)
        assert (r.action, r.pods, r.timeout) == (action, pods, 0.0)
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
    assert respond(s, Event.of_pod("Unknown", "worker", 1, "node lost"), retries=0).action == "RestartJob"
    assert respond(s, Event.of_pod("PodFailed", "ps", 0, "x"), retries=0).action == "RestartJob"  # not its task


def test_endings_and_no_policy() -> None:
    assert respond(spec([policy("CompleteJob", "PodFailed")]), FAILED, 0).action == "CompleteJob"
    assert respond(spec([policy("AbortJob", "PodEvicted")]), Event.of_pod("PodEvicted", "ps", 0, "x"), 0).action == (
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


def test_pending_and_completed_tasks_need_a_policy_to_do_anything() -> None:
    pending = Event.of_pod("PodPending", "worker", 2, "created, not running")
    completed = Event("TaskCompleted", "ps", (("ps", 0), ("ps", 1)), "all its pods succeeded")
    assert respond(spec([]), pending, 0) is None
    assert respond(spec([]), completed, 0) is None
    r = respond(spec([policy("RestartTask", "PodPending", timeout=60)]), pending, 0)
    assert (r.action, r.timeout, r.pods) == ("RestartTask", 60.0, tuple(("worker", i) for i in range(8)))
    assert r.reason == ("RestartTask after PodPending on worker[2]: created, not running (still Pending after 60s) "
                        "(retry 1 of 3)")
    r = respond(spec([], [policy("CompleteJob", "TaskCompleted")]), completed, 0)
    assert r is None  # the policy is the worker task's, and the ps task completed
    r = respond(spec([policy("CompleteJob", "TaskCompleted")]), completed, 0)
    assert (r.action, r.reason) == ("CompleteJob", "CompleteJob after TaskCompleted of ps: all its pods succeeded")
    r = respond(spec([policy("RestartTask", "TaskCompleted")]), completed, 0)
    assert r.pods == (("ps", 0), ("ps", 1))  # a completed task restarts whole


def test_job_unknown_is_answered_by_job_policies_on_the_missing_pods() -> None:
    missing = Event("JobUnknown", "", (("worker", 1), ("worker", 6)), "found 8 of 10 pods")
    assert respond(spec([]), missing, 0) is None  # the agent places the gang afresh
    assert respond(spec([], [policy("AbortJob", "JobUnknown")]), missing, 0) is None  # a task's policy: not its event
    r = respond(spec([policy("RestartPod", "JobUnknown")]), missing, 0)
    assert (r.action, r.pods, r.reason) == ("RestartPod", (("worker", 1), ("worker", 6)),
                                            "RestartPod after JobUnknown: found 8 of 10 pods (retry 1 of 3)")
    r = respond(spec([policy("RestartPartition", "JobUnknown")]), missing, 0)
    assert r.pods == tuple(("worker", i) for i in range(8))  # both partitions of 4
    assert respond(spec([policy("TerminateJob", "JobUnknown")]), missing, 0).action == "TerminateJob"
