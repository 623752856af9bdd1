"""A federation job written back as the Volcano Job it came from, with a status as Volcano's controller
writes one: what `fedctl get job -o yaml` prints, and what `fedctl submit` takes again (its status and
server-set metadata are ignored there, as kubectl's apply ignores them)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from google.protobuf.duration_pb2 import Duration

from federation.cli.manifest import CLUSTER_SELECTOR_ANNOTATION, JOB_ID_ANNOTATION, REQUEST_ID_ANNOTATION, VOLCANO_API
from federation.v1 import common_pb2

# The federation's phases as Volcano's JobPhase names them.
STATES = {common_pb2.PENDING: "Pending", common_pb2.DISPATCHED: "Pending", common_pb2.RUNNING: "Running",
          common_pb2.RESTARTING: "Restarting", common_pb2.SUCCEEDED: "Completed", common_pb2.FAILED: "Failed",
          common_pb2.CANCELLED: "Aborted", common_pb2.PREEMPTED: "Pending"}


def _seconds(d: Duration) -> str:
    return f"{d.seconds + d.nanos / 1e9:g}s"


def _policies(policies: Any) -> list[dict[str, Any]]:
    out = []
    for p in policies:
        policy: dict[str, Any] = {"events": list(p.events)} if len(p.events) != 1 else {"event": p.events[0]}
        policy["action"] = p.action
        if p.HasField("timeout"):
            policy["timeout"] = _seconds(p.timeout)
        out.append(policy)
    return out


def _topology(t: common_pb2.NetworkTopology) -> dict[str, Any]:
    out: dict[str, Any] = {"mode": t.mode}
    if t.highest_tier_name:
        out["highestTierName"] = t.highest_tier_name
    elif t.highest_tier_allowed:
        out["highestTierAllowed"] = t.highest_tier_allowed
    return out


def _task(task: common_pb2.TaskSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"name": task.name, "replicas": task.replicas}
    if task.HasField("min_available"):
        out["minAvailable"] = task.min_available
    if task.policies:
        out["policies"] = _policies(task.policies)
    if task.HasField("partition_policy"):
        pp = task.partition_policy
        partition: dict[str, Any] = {k: v for k, v in (("totalPartitions", pp.total_partitions),
                                                       ("partitionSize", pp.partition_size),
                                                       ("minPartitions", pp.min_partitions)) if v}
        if pp.HasField("network_topology"):
            partition["networkTopology"] = _topology(pp.network_topology)
        out["partitionPolicy"] = partition
    template: dict[str, Any] = {}
    with contextlib.suppress(ValueError):
        template = json.loads(task.pod_template_json) if task.pod_template_json else {}
    out["template"] = template
    return out


def volcano_job(job: common_pb2.Job) -> dict[str, Any]:
    spec, status = job.spec, job.status
    annotations = dict(spec.annotations)
    annotations[JOB_ID_ANNOTATION] = job.id
    if spec.cluster_selector:
        selector = sorted(spec.cluster_selector.items())
        annotations[CLUSTER_SELECTOR_ANNOTATION] = ",".join(f"{k}={v}" for k, v in selector)
    if spec.request_id:
        annotations[REQUEST_ID_ANNOTATION] = spec.request_id
    metadata: dict[str, Any] = {"name": spec.name}
    if spec.namespace:
        metadata["namespace"] = spec.namespace
    if spec.labels:
        metadata["labels"] = dict(spec.labels)
    metadata["annotations"] = annotations
    if status.create_time.seconds:
        metadata["creationTimestamp"] = status.create_time.ToJsonString()
    body: dict[str, Any] = {"queue": spec.queue}
    if spec.priority_class_name:
        body["priorityClassName"] = spec.priority_class_name
    if spec.min_available:
        body["minAvailable"] = spec.min_available
    if spec.HasField("max_retry"):
        body["maxRetry"] = spec.max_retry
    if spec.policies:
        body["policies"] = _policies(spec.policies)
    if spec.network_topology.mode:
        body["networkTopology"] = _topology(spec.network_topology)
    if spec.plugins:
        body["plugins"] = {name: list(p.args) for name, p in sorted(spec.plugins.items())}
    body["tasks"] = [_task(t) for t in spec.tasks]
    phases = [p.phase for p in status.pods]
    state: dict[str, Any] = {"phase": STATES.get(status.phase, "Pending")}
    if status.reason:
        state["message"] = status.reason
    if status.update_time.seconds:
        state["lastTransitionTime"] = status.update_time.ToJsonString()
    return {"apiVersion": VOLCANO_API, "kind": "Job", "metadata": metadata, "spec": body, "status": {
        "state": state, "minAvailable": spec.min_available or sum(t.replicas for t in spec.tasks),
        "pending": phases.count("Pending"), "running": phases.count("Running"),
        "succeeded": phases.count("Succeeded"), "failed": phases.count("Failed"),
        "retryCount": status.retries, "version": status.attempt}}
