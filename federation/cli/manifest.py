"""Volcano Job and admin manifests to API messages, remembering where each field came from.

`fedctl submit` reads `batch.volcano.sh/v1alpha1` Job manifests (docs/architecture.md, Job manifests) and `fedctl apply`
reads the federation's own Tenant, Queue and PriorityClass manifests. Each converted message
comes with an origin map from its field paths back to manifest lines, so that the server's
field violations (`tasks[0].replicas`) can be shown at the line the user wrote.
"""

from __future__ import annotations

import difflib
import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import duration_pb2
from google.protobuf.message import Message

from federation.cli import volcano_fields
from federation.cli.volcano_fields import Fields
from federation.cli.yamldoc import Document, quoted
from federation.kernel.durations import parse_duration
from federation.kernel.resources import GPU, SHARE, WHOLE, QuantityError, format_amount, parse_amount
from federation.v1 import admin_pb2, common_pb2
from federation.validation import DEFAULT_QUEUE, DEFAULT_TENANT

VOLCANO_API = "batch.volcano.sh/v1alpha1"
HYPERJOB_API = "training.volcano.sh/v1alpha1"  # Volcano Global's HyperJob (`hyperjob.py`)
FEDERATION_API = "federation.dev/v1"
CLUSTER_SELECTOR_ANNOTATION = "federation.dev/cluster-selector"
REQUEST_ID_ANNOTATION = "federation.dev/request-id"
JOB_ID_ANNOTATION = "federation.dev/job-id"  # which job `get -o yaml` printed: set by the server, never taken back

VOLCANO_SCHEDULER = "volcano"  # the schedulerName Volcano's jobs carry: the federation stands in for it
GENERATED_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' alphabet for generateName's 5 characters


@dataclass
class Converted:
    """One manifest document as an API message, with its origin map and warnings."""

    doc: Document
    message: Message
    origin: dict[str, str] = field(default_factory=dict)  # message field path -> manifest path
    warnings: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # Volcano fields not acted on, "path (line N)"

    def line_of(self, field_path: str) -> int:
        path = field_path
        while path:
            if path in self.origin:
                return self.doc.line(self.origin[path])
            cut = max(path.rfind("."), path.rfind("["))
            path = path[:cut] if cut > 0 else ""
        return self.doc.start_line


class _Reader:
    """Typed access to a document's values; wrong types raise a located ManifestError."""

    def __init__(self, doc: Document, out: Converted) -> None:
        self.doc, self.out = doc, out

    def map(self, value: Any, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.doc.error(path, "must be a mapping")
        return value

    def list(self, value: Any, path: str) -> list[Any]:
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.doc.error(path, "must be a list")
        return value

    def int(self, value: Any, path: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.doc.error(path, f"must be an integer, got {quoted(value)}")
        if not -(2**31) <= value < 2**31:
            raise self.doc.error(path, f"{value} is out of range")
        return value

    def str(self, value: Any, path: str) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self.doc.error(path, f"must be a string, got {quoted(value)}")
        return str(value)

    def bool(self, value: Any, path: str) -> bool:
        if not isinstance(value, bool):
            raise self.doc.error(path, f"must be true or false, got {quoted(value)}")
        return value

    def str_map(self, value: Any, path: str) -> dict[str, str]:
        return {str(k): self.str(v, f"{path}.{k}") for k, v in self.map(value, path).items()}

    def duration(self, value: Any, path: str) -> duration_pb2.Duration:
        try:
            seconds = parse_duration(self.str(value, path))
        except ValueError as err:
            raise self.doc.error(path, str(err)) from None
        d = duration_pb2.Duration()
        d.FromNanoseconds(round(seconds * 1e9))
        return d

    def fields(self, data: dict[str, Any], fields: Fields, path: str, owner: str = "Volcano's Job") -> None:
        """A field Volcano does not have is an error (with the likeliest meant one); one it has that the
        federation does not act on is remembered for the document's one warning."""
        for key in data:
            child = f"{path}.{key}" if path else str(key)
            if key in fields.ignored:
                self.out.ignored.append(f"{child} (line {self.doc.line(child)})")
            elif key not in fields.known:
                close = difflib.get_close_matches(str(key), sorted(fields.known), n=1)
                hint = f"; did you mean {close[0]}?" if close else f" (fields here: {', '.join(sorted(fields.known))})"
                raise self.doc.error(child, f"unknown field {quoted(str(key))}: {owner} has no such field{hint}")


def _topology(r: _Reader, value: Any, path: str, target: common_pb2.NetworkTopology, prefix: str) -> None:
    data = r.map(value, path)
    r.fields(data, volcano_fields.NETWORK_TOPOLOGY, path)
    if "mode" in data:
        target.mode = r.str(data["mode"], f"{path}.mode")
        r.out.origin[f"{prefix}.mode"] = f"{path}.mode"
    if "highestTierAllowed" in data:
        target.highest_tier_allowed = r.int(data["highestTierAllowed"], f"{path}.highestTierAllowed")
        r.out.origin[f"{prefix}.highest_tier_allowed"] = f"{path}.highestTierAllowed"
    if "highestTierName" in data:
        target.highest_tier_name = r.str(data["highestTierName"], f"{path}.highestTierName")
        r.out.origin[f"{prefix}.highest_tier_name"] = f"{path}.highestTierName"
    r.out.origin[prefix] = path


def _policies(r: _Reader, value: Any, path: str, target: Any, prefix: str) -> None:
    r.out.origin[prefix] = path
    for i, item in enumerate(r.list(value, path)):
        p, fp = f"{path}[{i}]", f"{prefix}[{i}]"
        data = r.map(item, p)
        r.fields(data, volcano_fields.POLICY, p)
        policy = target.add()
        if "event" in data:
            policy.events.append(r.str(data["event"], f"{p}.event"))
            r.out.origin[f"{fp}.events"] = f"{p}.event"
        for j, event in enumerate(r.list(data.get("events"), f"{p}.events")):
            policy.events.append(r.str(event, f"{p}.events[{j}]"))
            r.out.origin[f"{fp}.events"] = f"{p}.events"
        policy.action = r.str(data.get("action", ""), f"{p}.action")
        r.out.origin[f"{fp}.action"] = f"{p}.action"
        if "timeout" in data:
            policy.timeout.CopyFrom(r.duration(data["timeout"], f"{p}.timeout"))
            r.out.origin[f"{fp}.timeout"] = f"{p}.timeout"
        r.out.origin[fp] = p


def _pod_resources(r: _Reader, pod: dict[str, Any], path: str, prefix: str) -> dict[str, str]:
    """A replica's requests: sum over containers, at least the largest init container (as Kubernetes).

    A resource given only under `limits` is requested at its limit, as Kubernetes defaults it.
    """
    def container_requests(kind: str) -> list[dict[str, int]]:
        out = []
        for j, container in enumerate(r.list(pod.get(kind), f"{path}.{kind}")):
            cpath = f"{path}.{kind}[{j}]"
            res = r.map(r.map(container, cpath).get("resources"), f"{cpath}.resources")
            merged = {**r.str_map(res.get("limits"), f"{cpath}.resources.limits"),
                      **r.str_map(res.get("requests"), f"{cpath}.resources.requests")}
            amounts = {}
            for name, quantity in merged.items():
                section = "requests" if name in (res.get("requests") or {}) else "limits"
                qpath = f"{cpath}.resources.{section}.{name}"
                r.out.origin.setdefault(f"{prefix}[{name!r}]", qpath)
                try:  # GPUs in thousandths: below one, a fraction of a device (our job spec's own way)
                    amounts[name] = parse_amount(SHARE if name == GPU else name, quantity)
                except QuantityError as err:
                    raise r.doc.error(qpath, str(err)) from None
                if name == GPU and amounts[name] > WHOLE and amounts[name] % WHOLE:
                    raise r.doc.error(qpath, f"{quantity!r}: a fraction of a GPU is below one (one device's "
                                             f"share); more than one GPU is a whole number")
            out.append(amounts)
        return out

    total: dict[str, int] = {}
    for amounts in container_requests("containers"):
        for name, amount in amounts.items():
            total[name] = total.get(name, 0) + amount
    for amounts in container_requests("initContainers"):
        for name, amount in amounts.items():
            total[name] = max(total.get(name, 0), amount)
    if total.get(GPU, 0) > WHOLE and total[GPU] % WHOLE:
        raise r.doc.error(f"{path}.containers", "its containers' GPU fractions add up to more than one GPU")
    return {name: format_amount(SHARE if name == GPU else name, amount) for name, amount in sorted(total.items())}


def _task(r: _Reader, value: Any, path: str, task: common_pb2.TaskSpec, prefix: str) -> None:
    data = r.map(value, path)
    r.fields(data, volcano_fields.TASK, path)
    o = r.out.origin
    o[prefix] = path
    task.name = r.str(data.get("name", ""), f"{path}.name")
    o[f"{prefix}.name"] = f"{path}.name"
    task.replicas = r.int(data.get("replicas", 1), f"{path}.replicas")
    o[f"{prefix}.replicas"] = f"{path}.replicas"
    if "minAvailable" in data:
        task.min_available = r.int(data["minAvailable"], f"{path}.minAvailable")
        o[f"{prefix}.min_available"] = f"{path}.minAvailable"
    _policies(r, data.get("policies"), f"{path}.policies", task.policies, f"{prefix}.policies")
    if "partitionPolicy" in data:
        pp_path, pp_prefix = f"{path}.partitionPolicy", f"{prefix}.partition_policy"
        pp = r.map(data["partitionPolicy"], pp_path)
        r.fields(pp, volcano_fields.PARTITION_POLICY, pp_path)
        o[pp_prefix] = pp_path
        for key, attr in (("totalPartitions", "total_partitions"), ("partitionSize", "partition_size"),
                          ("minPartitions", "min_partitions")):
            if key in pp:
                setattr(task.partition_policy, attr, r.int(pp[key], f"{pp_path}.{key}"))
                o[f"{pp_prefix}.{attr}"] = f"{pp_path}.{key}"
        task.partition_policy.SetInParent()
        if "networkTopology" in pp:
            _topology(r, pp["networkTopology"], f"{pp_path}.networkTopology",
                      task.partition_policy.network_topology, f"{pp_prefix}.network_topology")
    template = r.map(data.get("template"), f"{path}.template")
    pod = r.map(template.get("spec"), f"{path}.template.spec")
    tpath = f"{path}.template.spec"
    task.resources.update(_pod_resources(r, pod, tpath, f"{prefix}.resources"))
    task.node_selector.update(r.str_map(pod.get("nodeSelector"), f"{tpath}.nodeSelector"))
    o[f"{prefix}.node_selector"] = f"{tpath}.nodeSelector"
    for i, tol in enumerate(r.list(pod.get("tolerations"), f"{tpath}.tolerations")):
        t = r.str_map(tol, f"{tpath}.tolerations[{i}]")
        task.tolerations.add(key=t.get("key", ""), operator=t.get("operator", ""), value=t.get("value", ""),
                             effect=t.get("effect", ""))
        o[f"{prefix}.tolerations[{i}]"] = f"{tpath}.tolerations[{i}]"
    tmeta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    _volcano_annotations(r, tmeta.get("annotations"), f"{path}.template.metadata.annotations")
    if template:
        task.pod_template_json = json.dumps(template, sort_keys=True, default=str)


# Annotations Volcano's scheduler reads; the federation's scheduler and the agent do not, so each is said.
VOLCANO_ANNOTATIONS = {
    "volcano.sh/preemptable": "preemption follows the job's priority class (preemptible)",
    "volcano.sh/cooldown-time": "a priority class's protectedRunSeconds keeps a started job from preemption",
    "volcano.sh/resource-strategy-scoring-type": "the agent places pods by topology and packing, not this score",
    "volcano.sh/resource-strategy-weight": "the agent places pods by topology and packing, not this score",
}
VOLCANO_PREFIXES = ("volcano.sh/", "scheduling.volcano.sh/", "scheduling.k8s.io/group-name")


def _volcano_annotations(r: _Reader, annotations: object, path: str) -> None:
    """Volcano scheduler annotations are kept on the job or pod, but not acted on: said, never dropped silently."""
    if not isinstance(annotations, dict):
        return
    for key in annotations:
        if isinstance(key, str) and key.startswith(VOLCANO_PREFIXES):
            why = VOLCANO_ANNOTATIONS.get(key, "Volcano's scheduler reads it; the federation's does not")
            r.out.ignored.append(f"{path}[{quoted(key)}] (line {r.doc.line(f'{path}.{key}')}: {why})")


def _selector(r: _Reader, text: str, path: str) -> dict[str, str]:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = part.partition("=")
        if not eq or not key.strip():
            raise r.doc.error(path, f"{quoted(part)} is not key=value (write the selector as a=b,c=d)")
        out[key.strip()] = value.strip()
    return out


def job_from_document(doc: Document) -> Converted:
    """A Volcano Job manifest as a JobSpec."""
    spec = common_pb2.JobSpec()
    out = Converted(doc, spec)
    r = _Reader(doc, out)
    data = r.map(doc.data, "")
    if data.get("apiVersion") != VOLCANO_API or data.get("kind") != "Job":
        found = f"{data.get('apiVersion')}/{data.get('kind')}"
        raise doc.error("kind", f"expected a Volcano Job ({VOLCANO_API}, kind Job), found {found}"
                        + ("; admin objects go to 'fedctl apply -f'" if data.get("apiVersion") == FEDERATION_API
                           else ""))
    r.fields(data, volcano_fields.JOB, "")
    meta = r.map(data.get("metadata"), "metadata")
    r.fields(meta, volcano_fields.METADATA, "metadata")
    body = r.map(data.get("spec"), "spec")
    o = out.origin
    if "name" not in meta and "generateName" in meta:  # as the API server: the prefix and 5 random characters
        prefix = r.str(meta["generateName"], "metadata.generateName")
        spec.name = prefix + "".join(secrets.choice(GENERATED_SUFFIX) for _ in range(5))
        o["name"] = "metadata.generateName"
    else:
        spec.name = r.str(meta.get("name", ""), "metadata.name")
        o["name"] = "metadata.name"
    spec.labels.update(r.str_map(meta.get("labels"), "metadata.labels"))
    o["labels"] = "metadata.labels"
    annotations = r.str_map(meta.get("annotations"), "metadata.annotations")
    _volcano_annotations(r, annotations, "metadata.annotations")
    if CLUSTER_SELECTOR_ANNOTATION in annotations:
        apath = f"metadata.annotations.{CLUSTER_SELECTOR_ANNOTATION}"
        spec.cluster_selector.update(_selector(r, annotations.pop(CLUSTER_SELECTOR_ANNOTATION), apath))
        o["cluster_selector"] = apath
    if REQUEST_ID_ANNOTATION in annotations:
        spec.request_id = annotations.pop(REQUEST_ID_ANNOTATION)
        o["request_id"] = f"metadata.annotations.{REQUEST_ID_ANNOTATION}"
    annotations.pop(JOB_ID_ANNOTATION, None)
    spec.annotations.update(annotations)
    o["annotations"] = "metadata.annotations"
    if "namespace" in meta:
        spec.namespace = r.str(meta["namespace"], "metadata.namespace")
        o["namespace"] = "metadata.namespace"

    job_spec(r, body, "spec", spec)
    if out.ignored:
        out.warnings.append(f"{doc.file}:{doc.start_line}: Volcano fields the federation does not act on, ignored: "
                            + ", ".join(out.ignored))
    return out


def job_spec(r: _Reader, body: dict[str, Any], at: str, spec: common_pb2.JobSpec) -> None:
    """A Volcano Job's spec, at manifest path `at` (a Job's `spec`, a HyperJob's `templateSpec`), into `spec`."""
    doc, out, o = r.doc, r.out, r.out.origin
    r.fields(body, volcano_fields.JOB_SPEC, at)
    scheduler = r.str(body.get("schedulerName", VOLCANO_SCHEDULER), f"{at}.schedulerName")
    if scheduler != VOLCANO_SCHEDULER:
        out.ignored.append(f"{at}.schedulerName (line {doc.line(f'{at}.schedulerName')}: {quoted(scheduler)}; the "
                           "federation schedules it, as Volcano would)")
    spec.queue = r.str(body.get("queue", DEFAULT_QUEUE), f"{at}.queue")
    o["queue"] = f"{at}.queue"
    spec.priority_class_name = r.str(body.get("priorityClassName", ""), f"{at}.priorityClassName")
    o["priority_class_name"] = f"{at}.priorityClassName"
    spec.min_available = r.int(body.get("minAvailable", 0), f"{at}.minAvailable")
    o["min_available"] = f"{at}.minAvailable"
    if "maxRetry" in body:
        spec.max_retry = r.int(body["maxRetry"], f"{at}.maxRetry")
        o["max_retry"] = f"{at}.maxRetry"
    _policies(r, body.get("policies"), f"{at}.policies", spec.policies, "policies")
    if "networkTopology" in body:
        _topology(r, body["networkTopology"], f"{at}.networkTopology", spec.network_topology, "network_topology")
    for name, args in r.map(body.get("plugins"), f"{at}.plugins").items():
        ppath = f"{at}.plugins.{name}"
        spec.plugins[str(name)].args.extend(r.str(a, f"{ppath}[{j}]") for j, a in enumerate(r.list(args, ppath)))
        o[f"plugins[{str(name)!r}]"] = ppath
    o["tasks"] = f"{at}.tasks"
    for i, task in enumerate(r.list(body.get("tasks"), f"{at}.tasks")):
        _task(r, task, f"{at}.tasks[{i}]", spec.tasks.add(), f"tasks[{i}]")


def _admin(doc: Document, kind: str, message: Message, fields: dict[str, tuple[str, Callable[..., Any]]]) -> Converted:
    out = Converted(doc, message)
    r = _Reader(doc, out)
    data = r.map(doc.data, "")
    meta = r.map(data.get("metadata"), "metadata")
    message.name = r.str(meta.get("name", ""), "metadata.name")  # type: ignore[attr-defined]
    out.origin["name"] = "metadata.name"
    body = r.map(data.get("spec"), "spec")
    r.fields(body, Fields(frozenset(fields)), "spec", f"a {kind}")
    for key, (attr, read) in fields.items():
        if key not in body:
            continue
        path = f"spec.{key}"
        value = read(r, body[key], path)
        if isinstance(value, dict):
            getattr(message, attr).update(value)
        elif isinstance(value, list):
            getattr(message, attr).extend(value)
        else:
            setattr(message, attr, value)
        out.origin[attr] = path
    return out


def _queue_state(r: _Reader, value: Any, path: str) -> int:
    text = r.str(value, path).upper()
    if text not in ("OPEN", "CLOSED", "DRAINING"):
        raise r.doc.error(path, f"{quoted(value)} is not one of Open, Closed, Draining")
    return admin_pb2.QueueState.Value(text)


def _str_list(r: _Reader, value: Any, path: str) -> list[str]:
    return [r.str(x, f"{path}[{i}]") for i, x in enumerate(r.list(value, path))]


ADMIN_KINDS: dict[str, tuple[type[Message], dict[str, tuple[str, Callable[..., Any]]]]] = {
    "Tenant": (admin_pb2.Tenant, {
        "weight": ("weight", _Reader.int), "guarantee": ("guarantee", _Reader.str_map),
        "limit": ("limit", _Reader.str_map), "disabled": ("disabled", _Reader.bool),
        "maxRunTime": ("max_run_time", _Reader.str), "lendingLimit": ("lending_limit", _Reader.str_map)}),
    "Queue": (admin_pb2.Queue, {
        "tenant": ("tenant", _Reader.str), "weight": ("weight", _Reader.int), "priority": ("priority", _Reader.int),
        "guarantee": ("guarantee", _Reader.str_map), "limit": ("limit", _Reader.str_map),
        "reclaimable": ("reclaimable", _Reader.bool), "state": ("state", _queue_state),
        "flavors": ("flavors", _str_list),
        "parent": ("parent", _Reader.str), "maxRunTime": ("max_run_time", _Reader.str),
        "lendingLimit": ("lending_limit", _Reader.str_map), "admissionChecks": ("admission_checks", _str_list)}),
    "Flavor": (admin_pb2.Flavor, {
        "resource": ("resource", _Reader.str), "clusterSelector": ("cluster_selector", _Reader.str_map),
        "admissionChecks": ("admission_checks", _str_list)}),
    "PriorityClass": (admin_pb2.PriorityClass, {
        "value": ("value", _Reader.int), "preemptible": ("preemptible", _Reader.bool),
        "globalDefault": ("global_default", _Reader.bool), "description": ("description", _Reader.str),
        "protectedRunSeconds": ("protected_run_seconds", _Reader.int)}),
}


VOLCANO_QUEUE_API = "scheduling.volcano.sh/v1beta1"
TENANT_ANNOTATION = "federation.dev/tenant"  # Volcano has no tenants: its queues go to this one, else `default`
HIERARCHY_ANNOTATION = "volcano.sh/hierarchy"  # root/eng/prod: Volcano's DRF hierarchy
HIERARCHY_WEIGHTS_ANNOTATION = "volcano.sh/hierarchy-weights"  # 1/2/8: a weight per level


def volcano_queue(doc: Document) -> list[tuple[str, Converted]]:
    """A Volcano Queue as the federation's queues: weight, capability (limit), guarantee.resource,
    reclaimable, priority and parent one to one; Volcano's hierarchy annotations as parent queues, each
    created with its level's weight; fields with no counterpart refused by name."""
    out = Converted(doc, admin_pb2.Queue())
    queue: admin_pb2.Queue = out.message  # type: ignore[assignment]
    r = _Reader(doc, out)
    data = r.map(doc.data, "")
    meta = r.map(data.get("metadata"), "metadata")
    r.fields(meta, volcano_fields.METADATA, "metadata", "a Volcano Queue's metadata")
    queue.name = r.str(meta.get("name", ""), "metadata.name")
    annotations = r.str_map(meta.get("annotations"), "metadata.annotations")
    queue.tenant = annotations.get(TENANT_ANNOTATION, DEFAULT_TENANT)
    o = out.origin
    o["name"] = "metadata.name"
    o["tenant"] = f"metadata.annotations.{TENANT_ANNOTATION}"
    body = r.map(data.get("spec"), "spec")
    for key in body:
        if key in volcano_fields.QUEUE_SPEC_REFUSED:
            raise doc.error(f"spec.{key}", f"has no counterpart: {volcano_fields.QUEUE_SPEC_REFUSED[key]}")
    r.fields(body, volcano_fields.QUEUE_SPEC, "spec", "Volcano's Queue")
    if "weight" in body:
        queue.weight = r.int(body["weight"], "spec.weight")
        o["weight"] = "spec.weight"
    if "priority" in body:
        queue.priority = r.int(body["priority"], "spec.priority")
        o["priority"] = "spec.priority"
    if "reclaimable" in body:
        queue.reclaimable = r.bool(body["reclaimable"], "spec.reclaimable")
        o["reclaimable"] = "spec.reclaimable"
    if "capability" in body:
        queue.limit.update(r.str_map(body["capability"], "spec.capability"))
        o["limit"] = "spec.capability"
    if "guarantee" in body:
        guarantee = r.map(body["guarantee"], "spec.guarantee")
        r.fields(guarantee, Fields(frozenset({"resource"})), "spec.guarantee", "Volcano's Queue")
        queue.guarantee.update(r.str_map(guarantee.get("resource"), "spec.guarantee.resource"))
        o["guarantee"] = "spec.guarantee.resource"
    parent = r.str(body.get("parent", ""), "spec.parent")
    if parent and parent != "root":  # Volcano's root queue is the tenant here
        queue.parent = parent
        o["parent"] = "spec.parent"
    if HIERARCHY_ANNOTATION not in annotations:
        return [("Queue", out)]
    hpath = f"metadata.annotations.{HIERARCHY_ANNOTATION}"
    levels = annotations[HIERARCHY_ANNOTATION].strip("/").split("/")
    weights = annotations.get(HIERARCHY_WEIGHTS_ANNOTATION, "/".join("1" * len(levels))).strip("/").split("/")
    if len(weights) != len(levels) or not all(w.isdigit() and int(w) > 0 for w in weights):
        raise doc.error(f"metadata.annotations.{HIERARCHY_WEIGHTS_ANNOTATION}",
                        f"needs a positive whole weight for each of the {len(levels)} levels of {hpath}")
    if levels and levels[0] == "root":
        levels, weights = levels[1:], weights[1:]
    if queue.parent or not levels:
        raise doc.error(hpath, "give the hierarchy or spec.parent, not both" if queue.parent else "names no level")
    made = []
    above = ""
    for name, weight in zip(levels[:-1], weights[:-1], strict=True):  # the parents, top down
        level = Converted(doc, admin_pb2.Queue(name=name, tenant=queue.tenant, weight=int(weight), parent=above),
                          {"name": hpath, "tenant": hpath,
                           "weight": f"metadata.annotations.{HIERARCHY_WEIGHTS_ANNOTATION}"})
        if above:
            level.origin["parent"] = hpath
        made.append(("Queue", level))
        above = name
    queue.weight = int(weights[-1])  # the hierarchy's weight of the queue itself, as Volcano's drf plugin
    o["weight"] = f"metadata.annotations.{HIERARCHY_WEIGHTS_ANNOTATION}"
    if above:
        queue.parent = above
        o["parent"] = hpath
    return [*made, ("Queue", out)]


def for_submit(doc: Document) -> bool:
    """A document `fedctl submit` takes: a Volcano Job, or a ResourceClaimTemplate its pods' claims name."""
    data = doc.data if isinstance(doc.data, dict) else {}
    return (data.get("apiVersion"), data.get("kind")) in ((VOLCANO_API, "Job"), (HYPERJOB_API, "HyperJob")) or \
        data.get("kind") == "ResourceClaimTemplate"


def for_apply(doc: Document) -> bool:
    """A document `fedctl apply` takes: the federation's own kinds, and Volcano's and Kueue's queue objects."""
    data = doc.data if isinstance(doc.data, dict) else {}
    return data.get("apiVersion") in (FEDERATION_API, VOLCANO_QUEUE_API) or \
        str(data.get("apiVersion", "")).startswith("kueue.x-k8s.io/")


def apply_documents(doc: Document) -> list[tuple[str, Converted]]:
    """What `fedctl apply` makes of one document: the federation's own kinds, or a Volcano Queue."""
    data = doc.data if isinstance(doc.data, dict) else {}
    if data.get("apiVersion") == VOLCANO_QUEUE_API and data.get("kind") == "Queue":
        return volcano_queue(doc)
    return [admin_from_document(doc)]


def admin_from_document(doc: Document) -> tuple[str, Converted]:
    """A federation admin manifest (Tenant, Queue, PriorityClass) as its message."""
    data = doc.data if isinstance(doc.data, dict) else {}
    kind = data.get("kind")
    if data.get("apiVersion") != FEDERATION_API or kind not in ADMIN_KINDS:
        raise doc.error("kind", f"expected apiVersion {FEDERATION_API} with kind {', '.join(ADMIN_KINDS)}, or "
                                f"{VOLCANO_QUEUE_API} Queue; found {data.get('apiVersion')}/{kind}"
                        + ("; jobs go to 'fedctl submit -f'" if data.get("apiVersion") == VOLCANO_API else ""))
    message_type, fields = ADMIN_KINDS[kind]
    return kind, _admin(doc, kind, message_type(), fields)
