"""Between stored rows and protobuf messages; quantities are formatted back for humans here."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from google.protobuf import json_format, timestamp_pb2
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from federation.control.drift import signed
from federation.kernel.resources import format_resources, parse_amount, parse_resources
from federation.v1 import admin_pb2, common_pb2


def _ts(value: datetime | None) -> timestamp_pb2.Timestamp | None:
    if value is None:
        return None
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(value)
    return ts


def _lending(quantities: Mapping[str, str]) -> dict[str, int]:
    """A lending limit keeps its zeros (lend none of it), where other quotas drop them."""
    return {name: parse_amount(name, q) for name, q in quantities.items()}


def tenant_to_proto(row: Mapping[str, Any]) -> admin_pb2.Tenant:
    return admin_pb2.Tenant(
        name=row["name"], weight=row["weight"], guarantee=format_resources(row["guarantee"]),
        limit=format_resources(row["limit"]), disabled=row["disabled"], create_time=_ts(row["created_at"]),
        max_run_time=row["max_run_time"] or "", lending_limit=format_resources(row["lending_limit"]))


def tenant_values(t: admin_pb2.Tenant) -> dict[str, Any]:
    return {"name": t.name, "weight": t.weight or 1, "guarantee": parse_resources(t.guarantee),
            "limit": parse_resources(t.limit), "disabled": t.disabled, "max_run_time": t.max_run_time or None,
            "lending_limit": _lending(t.lending_limit)}


def queue_to_proto(row: Mapping[str, Any]) -> admin_pb2.Queue:
    return admin_pb2.Queue(
        name=row["name"], tenant=row["tenant"], weight=row["weight"], priority=row["priority"],
        guarantee=format_resources(row["guarantee"]), limit=format_resources(row["limit"]),
        reclaimable=row["reclaimable"], state=admin_pb2.QueueState.Value(row["state"]),
        create_time=_ts(row["created_at"]), flavors=row["flavors"], parent=row["parent"] or "",
        max_run_time=row["max_run_time"] or "", lending_limit=format_resources(row["lending_limit"]),
        admission_checks=row.get("admission_checks") or [])


def queue_values(q: admin_pb2.Queue) -> dict[str, Any]:
    return {"name": q.name, "tenant": q.tenant, "weight": q.weight or 1, "priority": q.priority,
            "guarantee": parse_resources(q.guarantee), "limit": parse_resources(q.limit),
            # Unset means reclaimable, as in Volcano: what a queue borrows may be taken back.
            "reclaimable": q.reclaimable if q.HasField("reclaimable") else True,
            "state": admin_pb2.QueueState.Name(q.state or admin_pb2.OPEN), "flavors": list(q.flavors),
            "parent": q.parent or None, "max_run_time": q.max_run_time or None,
            "lending_limit": _lending(q.lending_limit), "admission_checks": list(q.admission_checks)}


def flavor_to_proto(row: Mapping[str, Any]) -> admin_pb2.Flavor:
    return admin_pb2.Flavor(name=row["name"], resource=row["resource"], cluster_selector=row["cluster_selector"],
                            create_time=_ts(row["created_at"]), admission_checks=row.get("admission_checks") or [])


def flavor_values(f: admin_pb2.Flavor) -> dict[str, Any]:
    return {"name": f.name, "resource": f.resource, "cluster_selector": dict(f.cluster_selector),
            "admission_checks": list(f.admission_checks)}


def priority_class_to_proto(row: Mapping[str, Any]) -> admin_pb2.PriorityClass:
    return admin_pb2.PriorityClass(
        name=row["name"], value=row["value"], preemptible=row["preemptible"],
        global_default=row["global_default"], description=row["description"], create_time=_ts(row["created_at"]),
        protected_run_seconds=row["protected_run_seconds"])


def priority_class_values(pc: admin_pb2.PriorityClass) -> dict[str, Any]:
    return {"name": pc.name, "value": pc.value, "preemptible": pc.preemptible,
            "global_default": pc.global_default, "description": pc.description,
            "protected_run_seconds": pc.protected_run_seconds}


def cluster_to_proto(row: Mapping[str, Any]) -> admin_pb2.Cluster:
    inv = row["inventory"] or {}
    return admin_pb2.Cluster(
        name=row["name"], labels=row["labels"], status=admin_pb2.ClusterStatus.Value(row["status"]),
        cordoned=row["cordoned"], agent_version=row["agent_version"], last_heartbeat=_ts(row["last_heartbeat"]),
        capacity=format_resources(inv.get("capacity", {})), allocatable=format_resources(inv.get("allocatable", {})),
        used=format_resources(inv.get("used", {})), nodes=inv.get("nodes", 0), problem=row["problem"],
        topology=[admin_pb2.TierSummary(tier=t["tier"], tier_name=t.get("tier_name", ""),
                                        max_free=format_resources(t.get("max_free", {})),
                                        max_capacity=format_resources(t.get("max_capacity", {})))
                  for t in inv.get("topology", [])],
        hypernodes=[admin_pb2.HyperNodeStatus(name=h["name"], tier=h["tier"], parent=h["parent"],
                                            free=format_resources(h["free"]),
                                            allocatable=format_resources(h["allocatable"]))
                    for h in inv.get("hypernodes", [])],
        drift=signed(row.get("drift") or {}), health=(inv.get("health") or {}).get("summary", []),
        degraded_nodes=(inv.get("health") or {}).get("degraded_nodes", 0),
        failed_nodes=(inv.get("health") or {}).get("failed_nodes", 0),
        degraded_hypernodes=(inv.get("health") or {}).get("degraded_hypernodes", []),
        partitionable=format_resources(max(inv.get("partitionable") or [{"tier": 0, "max_free": {}}],
                                           key=lambda t: t["tier"])["max_free"]),
        gpu_free_nodes=inv.get("gpu_free_nodes", []))


def token_to_proto(row: Mapping[str, Any]) -> admin_pb2.Token:
    return admin_pb2.Token(id=row["id"], name=row["name"], tenant=row["tenant"] or "", admin=row["admin"],
                           created_by=row["created_by"], create_time=_ts(row["created_at"]),
                           expire_time=_ts(row["expires_at"]), revoke_time=_ts(row["revoked_at"]))


def audit_event_to_proto(row: Mapping[str, Any]) -> admin_pb2.AuditEvent:
    def text(value: Any) -> str:
        return "" if value is None else json.dumps(value, sort_keys=True)

    return admin_pb2.AuditEvent(id=row["id"], time=_ts(row["at"]), actor=row["actor"], action=row["action"],
                                kind=row["kind"], name=row["name"], before_json=text(row["before"]),
                                after_json=text(row["after"]))


def spec_to_json(spec: common_pb2.JobSpec) -> dict[str, Any]:
    """A job spec as stored: protobuf's JSON with the fields' own names, as `json_format.MessageToDict` writes it.
    That walks every field through generic Python (a tenth of a submission's server time); a job spec holds only
    strings, integers, messages, lists and maps of them and one Duration, so those are written here directly, and
    any message holding another kind goes to `json_format` whole. The two are held equal by a property test."""
    if not _plain(spec.DESCRIPTOR):
        return json_format.MessageToDict(spec, preserving_proto_field_name=True)
    return _plain_json(spec)


# Kinds JSON writes as they are (64-bit integers are strings there, and none is in a job spec: left to json_format).
_AS_IS = frozenset({FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32,
                    FieldDescriptor.TYPE_SFIXED32, FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32})
_DURATION = "google.protobuf.Duration"
_SCALAR, _MESSAGE, _DURATION_FIELD = range(3)  # how a field is written: as it is, a message, a Duration


@functools.cache
def _plain(message: Descriptor, seen: frozenset[str] = frozenset()) -> bool:
    """Whether every field the message (and every message in it) holds is of a kind `_plain_json` writes."""
    if message.full_name == _DURATION or message.full_name in seen:
        return True  # (a Duration is written by its own ToJsonString, as json_format does)
    for field in message.fields:
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if not _plain(field.message_type, seen | {message.full_name}):
                return False
        elif field.type not in _AS_IS:
            return False
    return True


@functools.cache
def _how(field: FieldDescriptor) -> tuple[int, bool, bool]:
    """A field's kind (as above), whether it is repeated, whether it is a map (its values' kind is the kind)."""
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        return _how(field.message_type.fields_by_name["value"])[0], False, True
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return (_DURATION_FIELD if field.message_type.full_name == _DURATION else _MESSAGE), field.is_repeated, False
    return _SCALAR, field.is_repeated, False


def _plain_value(kind: int, value: Any) -> Any:
    if kind == _SCALAR:
        return value
    if kind == _MESSAGE:
        return _plain_json(value)
    return value.ToJsonString()


def _plain_json(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        kind, repeated, mapped = _how(field)
        if mapped:
            out[field.name] = dict(value) if kind == _SCALAR else {str(k): _plain_value(kind, v)
                                                                   for k, v in value.items()}
        elif repeated:
            out[field.name] = list(value) if kind == _SCALAR else [_plain_value(kind, v) for v in value]
        else:
            out[field.name] = _plain_value(kind, value)
    return out


def job_to_proto(row: Mapping[str, Any], expected: tuple[datetime, str] | None = None) -> common_pb2.Job:
    """`expected`: when and where the job is expected to start, while it waits."""
    spec = json_format.ParseDict(row["spec"], common_pb2.JobSpec())
    status = common_pb2.JobStatus(
        phase=common_pb2.JobPhase.Value(row["phase"]), reason=row["reason"],
        queue_position=row.get("queue_position", 0),
        cluster=row["cluster"], hypernode=row["hypernode"], tier=row["tier"], attempt=row["attempt"],
        retries=row["retries"], requeues=row.get("requeues", 0),
        placements=[common_pb2.PodPlacement(task=p["task"], index=p["index"], node=p["node"])
                    for p in row["placements"]],
        pods=[json_format.ParseDict(p, common_pb2.PodStatus(), ignore_unknown_fields=True)
              for p in row.get("pods") or []],
        create_time=_ts(row["created_at"]), dispatch_time=_ts(row["dispatched_at"]),
        start_time=_ts(row["started_at"]), finish_time=_ts(row["finished_at"]), update_time=_ts(row["updated_at"]),
        admission_checks=[common_pb2.AdmissionCheckState(**c) for c in row.get("admission_checks") or []])
    if row.get("requeue_at") is not None and row["phase"] in ("PENDING", "PREEMPTED"):
        status.requeue_time.FromDatetime(row["requeue_at"])
    if expected is not None:
        status.expected_start_time.FromDatetime(expected[0])
        status.expected_cluster = expected[1]
    return common_pb2.Job(id=row["id"], tenant=row["tenant"], spec=spec, status=status, priority=row["priority"])


def event_to_proto(row: Mapping[str, Any], *, tenant_numbered: bool = False) -> common_pb2.JobEvent:
    return common_pb2.JobEvent(
        sequence=row["tenant_seq"] if tenant_numbered else row["seq"], job_id=row["job_id"], tenant=row["tenant"],
        queue=row["queue"], type=row["type"],
        phase=common_pb2.JobPhase.Value(row["phase"]), message=row["message"], attempt=row["attempt"],
        cluster=row["cluster"], time=_ts(row["created_at"]))
