"""Request validation, pure: specs in, field violations out, nothing touched.

Every request is checked in full before anything is stored, and every problem is reported
with the path of the field at fault (`spec.tasks[0].replicas`), so a client can point its user
at the exact line. References to stored objects (queue, priority class) are checked by the
servicer, which owns the database; the shapes and numbers are checked here.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federation.kernel import dra, gangs
from federation.kernel.durations import parse_duration
from federation.kernel.gpuask import FRACTION, GPU, MAX_MEMORY_MIB, MEMORY, AskError, ask_of, template_annotations
from federation.kernel.jobspec import (
    AVOID_DEGRADED,
    DURATION_ANNOTATIONS,
    JOB_PLUGINS,
    MAX_GPUS_PER_NODE,
    MAX_REASON,
    MAX_REPORTED_HYPERNODES,
    MAX_REPORTED_NODE_LABELS,
    ON_CLUSTER_LOST,
    ON_CLUSTER_LOST_VALUES,
    ON_MAX_RUN_TIME,
    ON_MAX_RUN_TIME_VALUES,
    parse_plugin_args,
)
from federation.kernel.resources import (
    FLAVOR,
    MAX_AMOUNT,
    MIG_PROFILE,
    SHARE,
    WHOLE,
    QuantityError,
    Resources,
    base,
    format_amount,
    parse_amount,
)
from federation.v1 import admin_pb2, common_pb2

MAX_TASKS = 64
MAX_REPLICAS = 10_000  # per job, over all tasks
MAX_POLICIES = 16
MAX_MAP_ENTRIES = 64
MAX_ANNOTATION_BYTES = 64 * 1024
MAX_TEMPLATE_BYTES = 256 * 1024
# A whole job, encoded: etcd's limit for one object, so a job always travels in one message (clients' default
# limit is 4 MiB) and a page of jobs can always hold at least one.
MAX_SPEC_BYTES = 1536 * 1024
MAX_REQUEST_ID = 128
MAX_TIER = 16
MAX_RETRY = 100
DEFAULT_QUEUE = "default"  # Volcano always has it; a job naming no queue goes there (migration 0008 makes it)
DEFAULT_TENANT = "default"  # the default queue's, and where Volcano's tenant-less queues go
MAX_WEIGHT = 1_000_000
MAX_PRIORITY_VALUE = 1_000_000_000
MAX_DESCRIPTION = 1024

EVENTS = ("PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "JobUnknown")
ACTIONS = ("RestartTask", "RestartPod", "RestartPartition", "RestartJob", "AbortJob", "TerminateJob",
           "CompleteJob")
TOPOLOGY_MODES = ("hard", "soft")
TOLERATION_OPERATORS = ("", "Exists", "Equal")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


MAX_PROTECTED_RUN_SECONDS = 7 * 86_400  # a job's expected duration protects it from reclaim for at most this long
MAX_POLICY_TIMEOUT = 30 * 86_400  # seconds: a lifecycle policy's timeout (a pod stuck for longer is stuck)


@dataclass(frozen=True)
class Violation:
    field: str
    description: str


@dataclass
class Violations:
    """Collects violations under a path prefix, so nested checks need not know where they sit."""

    items: list[Violation] = field(default_factory=list)

    def add(self, path: str, description: str) -> None:
        self.items.append(Violation(path, description))

    def __bool__(self) -> bool:
        return bool(self.items)


@dataclass(frozen=True)
class CheckedJob:
    """What validation learned about a valid job: the canonical requests the scheduler needs."""

    minimum: Resources  # what the gang needs to start (federation.kernel.gangs.minimum), canonical integers
    whole: Resources  # every replica
    replicas: int




def check_text(v: Violations, path: str, value: str, limit: int = MAX_REASON) -> None:
    """Free text anyone will read later in a terminal or a page: bounded, and no control characters (a
    terminal would run them: window titles, screen clears)."""
    if len(value) > limit:
        v.add(path, f"is {len(value)} characters long, at most {limit} are allowed")
    elif not value.isprintable():
        v.add(path, "must not contain control characters")


MAX_FIELD = 4096  # characters of any string field of a request that has no bound of its own
# Fields whose text spans lines; each has a bound of its own, checked in its own terms (a job's annotations
# together, MAX_ANNOTATION_BYTES; a pod template, MAX_TEMPLATE_BYTES; a description, MAX_DESCRIPTION).
MULTILINE = frozenset({
    "federation.v1.TaskSpec.pod_template_json",  # JSON of a pod template
    "federation.v1.JobSpec.annotations",  # annotation values (scripts, JSON configs)
    "federation.v1.PriorityClass.description",
})
# Control characters but line breaks and tabs, and the bidirectional overrides of "Trojan Source".
_MULTILINE_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def text_problem(value: str, limit: int = MAX_FIELD, multiline: bool = False) -> str:
    """The one rule every text a client or an agent sends is held to ("" when it keeps it): bounded, and
    printable (no NUL, which PostgreSQL cannot store; no control character, which a terminal would run; no
    format character such as a bidirectional override, which makes one name read as another). Text that spans
    lines may hold line breaks and tabs."""
    if len(value) > limit:
        return f"is {len(value):,} characters long, at most {limit:,} are allowed"
    if value.isprintable():
        return ""
    if "\x00" in value:
        return "contains a NUL character"
    if not multiline:
        return "must be printable: no control or format characters"
    return "must not contain control characters" if _MULTILINE_BAD.search(value) else ""


def text_violations(message: Any, path: str = "") -> list[Violation]:
    """Every string of a request (map keys too) held to `text_problem`, each named by its field path."""
    found: list[Violation] = []
    for descriptor, value in message.ListFields():
        where = f"{path}.{descriptor.name}" if path else descriptor.name
        multiline = descriptor.full_name in MULTILINE
        limit = MAX_TEMPLATE_BYTES if multiline else MAX_FIELD  # the largest of their own bounds
        if descriptor.message_type is not None and descriptor.message_type.GetOptions().map_entry:
            for k, item in value.items():
                key = str(k)
                at = f"{where}[{key[:32]!r}]"
                if why := text_problem(key, MAX_FIELD):
                    found.append(Violation(f"{where} key {key[:32]!r}", why))
                elif isinstance(item, str):
                    if why := text_problem(item, limit, multiline):
                        found.append(Violation(at, why))
                elif hasattr(item, "ListFields"):
                    found += text_violations(item, at)
        elif descriptor.type == descriptor.TYPE_STRING:
            for i, item in enumerate(value if descriptor.is_repeated else [value]):
                if why := text_problem(item, limit, multiline):
                    found.append(Violation(f"{where}[{i}]" if descriptor.is_repeated else where, why))
        elif descriptor.message_type is not None:
            for i, item in enumerate(value if descriptor.is_repeated else [value]):
                found += text_violations(item, f"{where}[{i}]" if descriptor.is_repeated else where)
    return found


def escape_controls(value: str) -> str:
    """Control characters written out (`\\x1b`), everything else as it is."""
    return value if value.isprintable() else "".join(c if c.isprintable() else repr(c)[1:-1] for c in value)


def clean_text(value: str, limit: int = MAX_REASON) -> str:
    """An agent's free text as it is stored: control characters written out (`\\x1b`), at most `limit`
    characters. An agent's report is not refused for its wording, but nothing it says reaches a terminal raw."""
    if value.isprintable() and len(value) <= limit:
        return value
    out = escape_controls(value[:limit])
    return out if len(out) <= limit and len(value) <= limit else out[:limit - 1] + "…"


def _name_problem(where: str, value: str, limit: int = 253) -> str:
    why = text_problem(value, limit)
    return f"{where} {why}" if why else ""


def update_problem(u: Any) -> str:
    """Why an agent's JobUpdate cannot be used ("" when it can): a HyperNode, task or node name that is too
    long or holds control characters. (Its reason is stored through `clean_text` instead.)"""
    checks = [("job_update.hypernode", u.hypernode)]
    checks += [(f"job_update.placements[{i}].{k}", getattr(p, k)) for i, p in enumerate(u.placements)
               for k in ("task", "node")]
    found = next((why for where, value in checks if (why := _name_problem(where, value))), "")
    bad = text_violations(u, "job_update")  # and every other text of it, by the rule for every text
    return found or (f"{bad[0].field} {bad[0].description}" if bad else "")


def pods_problem(spec: Mapping[str, Any], u: Any) -> str:
    """Why an agent's placements or pod statuses cannot be of this job (its stored spec; "" when they can): each
    names one of its tasks and an index below that task's replicas; a placement names each pod once, a status at
    most twice (a pod being replaced, the old one still terminating). A cluster holds no more of a job than it was
    given, and the job's row, its events and every page that shows them stay as large as the job."""
    replicas = {t.get("name", ""): int(t.get("replicas", 0)) for t in spec.get("tasks", [])}
    pods = sum(replicas.values())
    for name, items, most in (("placements", u.placements, 1), ("pod_statuses", u.pod_statuses, 2)):
        if len(items) > most * pods:
            return f"job_update.{name} names {len(items)} pods, the job has {pods}"
        seen: Counter[tuple[str, int]] = Counter()
        for i, pod in enumerate(items):
            if pod.task not in replicas:
                return f"job_update.{name}[{i}].task: the job has no task {pod.task!r}"
            if not 0 <= pod.index < replicas[pod.task]:
                return f"job_update.{name}[{i}].index: {pod.index} is not below task {pod.task}'s " \
                       f"{replicas[pod.task]} replicas"
            seen[pod.task, pod.index] += 1
            if seen[pod.task, pod.index] > most:
                return f"job_update.{name}[{i}] names {pod.task}[{pod.index}] again"
    return ""


def check_name(v: Violations, path: str, value: str, *, required: bool = True) -> None:
    if not value:
        if required:
            v.add(path, "is required")
        return
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        v.add(path, f"{value!r} is not a DNS-1123 label (lower-case letters, digits and '-', "
                    "starting and ending with a letter or digit, at most 63 characters)")


def check_object_name(v: Violations, path: str, value: str) -> None:
    """A Kubernetes object name (a Node's, a HyperNode's): a DNS-1123 subdomain, as the API server holds them."""
    if not value:
        v.add(path, "is required")
    elif len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        v.add(path, f"{value[:64]!r}{'...' if len(value) > 64 else ''} is not a Kubernetes object name (a DNS-1123 "
                    "subdomain: lower-case letters, digits, '-' and '.', at most 253 characters)")


def _check_qualified_key(v: Violations, path: str, key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        v.add(path, f"key {key!r} has an invalid prefix {prefix!r}")
    elif not name or len(name) > 63 or not _LABEL_NAME.match(name):
        v.add(path, f"key {key!r} is not a valid label key")


def check_labels(v: Violations, path: str, labels: Mapping[str, str]) -> None:
    if len(labels) > MAX_MAP_ENTRIES:
        v.add(path, f"has {len(labels)} entries, at most {MAX_MAP_ENTRIES} are allowed")
        return
    for key, value in labels.items():
        _check_qualified_key(v, f"{path}[{key!r}]", key)
        if len(value) > 63 or not _LABEL_NAME.match(value):
            v.add(f"{path}[{key!r}]", f"value {value!r} is not a valid label value")


def check_resources(v: Violations, path: str, quantities: Mapping[str, str], flavored: bool = False) -> Resources:
    """Quantities by resource name; with `flavored`, a name may also be `<resource>@<flavor>`."""
    if len(quantities) > MAX_MAP_ENTRIES:
        v.add(path, f"has {len(quantities)} entries, at most {MAX_MAP_ENTRIES} are allowed")
        return {}
    out: Resources = {}
    for name, quantity in quantities.items():
        resource, at, flavor = name.partition(FLAVOR)
        if at and flavored:
            check_name(v, f"{path}[{name[:64]!r}]", flavor)
        elif at:
            v.add(f"{path}[{name[:64]!r}]", "names a flavor; flavors are for quotas, a job asks for the resource")
            continue
        _check_qualified_key(v, f"{path}[{name!r}]", resource)
        try:
            if amount := parse_amount(name, quantity):
                out[name] = amount
        except QuantityError as err:
            v.add(f"{path}[{name!r}]", str(err))
    return out


def _check_topology(v: Violations, path: str, topo: common_pb2.NetworkTopology) -> None:
    if not topo.mode:
        if topo.highest_tier_allowed or topo.highest_tier_name:
            v.add(f"{path}.mode", "is required when a tier limit is set (hard or soft)")
        return
    if topo.mode not in TOPOLOGY_MODES:
        v.add(f"{path}.mode", f"{topo.mode!r} is not one of {', '.join(TOPOLOGY_MODES)}")
    if not 0 <= topo.highest_tier_allowed <= MAX_TIER:
        v.add(f"{path}.highest_tier_allowed", f"must be between 1 and {MAX_TIER}")
    if topo.highest_tier_allowed and topo.highest_tier_name:
        v.add(f"{path}.highest_tier_name", "set highest_tier_allowed or highest_tier_name, not both")
    if topo.highest_tier_name:  # any name Volcano accepts, e.g. its label discoverer's volcano.sh/hypernode
        _check_qualified_key(v, f"{path}.highest_tier_name", topo.highest_tier_name)


def _check_policies(v: Violations, path: str, policies: list[common_pb2.LifecyclePolicy],
                    task: bool = False) -> None:
    if len(policies) > MAX_POLICIES:
        v.add(path, f"has {len(policies)} policies, at most {MAX_POLICIES} are allowed")
        return
    seen: dict[str, int] = {}
    for i, policy in enumerate(policies):
        p = f"{path}[{i}]"
        if not policy.events:
            v.add(f"{p}.events", "at least one event is required")
        for event in policy.events:  # Volcano's admission webhook denies an event named twice
            if event in seen:
                where = "this policy" if seen[event] == i else f"policy {seen[event]}"
                v.add(f"{p}.events", f"event {event!r} is already handled by {where}: each event may have one "
                                     "action")
            seen.setdefault(event, i)
        for event in policy.events:
            if event not in EVENTS:
                v.add(f"{p}.events", f"{event!r} is not one of {', '.join(EVENTS)}")
            elif task and event == "JobUnknown":
                v.add(f"{p}.events", "JobUnknown concerns the whole gang: name it in the job's policies")
        if policy.action not in ACTIONS:
            v.add(f"{p}.action", f"{policy.action!r} is not one of {', '.join(ACTIONS)}")
        if policy.HasField("timeout") and (policy.timeout.seconds < 0 or policy.timeout.nanos < 0):
            v.add(f"{p}.timeout", "must not be negative")
        elif policy.HasField("timeout") and (policy.timeout.seconds > MAX_POLICY_TIMEOUT
                                             or policy.timeout.nanos >= 1_000_000_000):
            v.add(f"{p}.timeout", f"must be at most {MAX_POLICY_TIMEOUT} s (30 days), with nanos below 10^9")


def _check_task(v: Violations, path: str, task: common_pb2.TaskSpec) -> Resources:
    """Check a task; what each of its pods asks for."""
    check_name(v, f"{path}.name", task.name)
    if task.replicas < 1:
        v.add(f"{path}.replicas", f"must be at least 1, got {task.replicas}")
    elif task.replicas > MAX_REPLICAS:
        v.add(f"{path}.replicas", f"must be at most {MAX_REPLICAS}, got {task.replicas}")
    if task.HasField("min_available") and not 0 <= task.min_available <= max(task.replicas, 0):
        v.add(f"{path}.min_available",
              f"must be between 0 and the task's replicas ({task.replicas}), got {task.min_available}")
    _check_policies(v, f"{path}.policies", list(task.policies), task=True)
    if task.HasField("partition_policy"):
        pp, pp_path = task.partition_policy, f"{path}.partition_policy"
        if pp.total_partitions < 1:
            v.add(f"{pp_path}.total_partitions", "must be at least 1")
        if pp.partition_size < 1:
            v.add(f"{pp_path}.partition_size", "must be at least 1")
        if pp.total_partitions >= 1 and pp.partition_size >= 1 and \
                pp.total_partitions * pp.partition_size != task.replicas:
            v.add(pp_path, f"total_partitions x partition_size = {pp.total_partitions * pp.partition_size} "
                           f"must equal replicas ({task.replicas})")
        if not 0 <= pp.min_partitions <= max(pp.total_partitions, 0):
            v.add(f"{pp_path}.min_partitions", f"must be between 0 and total_partitions ({pp.total_partitions})")
        _check_topology(v, f"{pp_path}.network_topology", pp.network_topology)
    requests = check_resources(v, f"{path}.resources", task.resources)
    check_labels(v, f"{path}.node_selector", task.node_selector)
    for i, tol in enumerate(task.tolerations):
        if tol.operator not in TOLERATION_OPERATORS:
            v.add(f"{path}.tolerations[{i}].operator", f"{tol.operator!r} is not Exists or Equal")
        if tol.effect not in TOLERATION_EFFECTS:
            v.add(f"{path}.tolerations[{i}].effect", f"{tol.effect!r} is not a taint effect")
    if task.pod_template_json:
        if len(task.pod_template_json) > MAX_TEMPLATE_BYTES:
            v.add(f"{path}.pod_template_json", f"is larger than {MAX_TEMPLATE_BYTES} bytes")
        else:
            try:
                json.loads(task.pod_template_json)
            except ValueError as err:
                v.add(f"{path}.pod_template_json", f"is not valid JSON: {str(err)[:120]}")
            except RecursionError:
                v.add(f"{path}.pod_template_json", "is nested too deeply to be a pod template")
            else:
                try:
                    ask_of(template_annotations(task.pod_template_json), (requests or {}).get(GPU, 0))
                except AskError as err:
                    v.add(f"{path}.pod_template_json.metadata.annotations", str(err))
    return requests






def _check_claim_templates(v: Violations, path: str, spec: common_pb2.JobSpec) -> dict[str, dra.ClaimSpec] | None:
    """The job's ResourceClaimTemplates by name; None (said) when one is not one the federation can act on."""
    if len(spec.resource_claim_templates_json) > MAX_TASKS:
        v.add(f"{path}.resource_claim_templates_json", f"at most {MAX_TASKS} ResourceClaimTemplates are allowed")
        return None
    for i, text in enumerate(spec.resource_claim_templates_json):
        if len(text) > MAX_TEMPLATE_BYTES:
            v.add(f"{path}.resource_claim_templates_json[{i}]", f"is larger than {MAX_TEMPLATE_BYTES} bytes")
            return None
    try:
        return dra.templates(spec.resource_claim_templates_json)
    except dra.ClaimError as err:
        v.add(f"{path}.{err.field}", err.message)
    except RecursionError:
        v.add(f"{path}.resource_claim_templates_json", "is nested too deeply to be a ResourceClaimTemplate")
    return None


def check_job_spec(v: Violations, path: str, spec: common_pb2.JobSpec) -> CheckedJob | None:
    """Check everything about a spec that needs no stored state; None when it is invalid."""
    before = len(v.items)
    if spec.ByteSize() > MAX_SPEC_BYTES:
        v.add(path, f"is {spec.ByteSize():,} bytes encoded, at most {MAX_SPEC_BYTES:,} (etcd's limit for one "
                    "object): move bulky configuration into a ConfigMap")
    check_name(v, f"{path}.name", spec.name)
    check_name(v, f"{path}.queue", spec.queue)
    check_name(v, f"{path}.priority_class_name", spec.priority_class_name, required=False)
    if not spec.tasks:
        v.add(f"{path}.tasks", "at least one task is required")
    elif len(spec.tasks) > MAX_TASKS:
        v.add(f"{path}.tasks", f"has {len(spec.tasks)} tasks, at most {MAX_TASKS} are allowed")
    seen: set[str] = set()
    requests = []
    claims = _check_claim_templates(v, path, spec)
    for i, task in enumerate(spec.tasks[:MAX_TASKS]):
        requests.append(_check_task(v, f"{path}.tasks[{i}]", task))
        if claims is not None and task.pod_template_json:
            try:
                dra.pod_demand(task.pod_template_json, claims)
            except dra.ClaimError as err:
                v.add(f"{path}.tasks[{i}].{err.field}", err.message)
            except ValueError:
                pass  # not JSON: said by _check_task
        if task.name in seen:
            v.add(f"{path}.tasks[{i}].name", f"task name {task.name!r} is used twice")
        seen.add(task.name)
    replicas = sum(max(t.replicas, 0) for t in spec.tasks)
    if replicas > MAX_REPLICAS:
        v.add(f"{path}.tasks", f"the job has {replicas} replicas, at most {MAX_REPLICAS} are allowed")
    if not 0 <= spec.min_available <= replicas:
        v.add(f"{path}.min_available",
              f"must be between 0 and the job's total replicas ({replicas}), got {spec.min_available}")
    if spec.HasField("max_retry") and not 0 <= spec.max_retry <= MAX_RETRY:
        v.add(f"{path}.max_retry", f"must be between 0 and {MAX_RETRY}")
    _check_policies(v, f"{path}.policies", list(spec.policies))
    _check_topology(v, f"{path}.network_topology", spec.network_topology)
    check_labels(v, f"{path}.cluster_selector", spec.cluster_selector)
    check_labels(v, f"{path}.labels", spec.labels)
    if len(spec.annotations) > MAX_MAP_ENTRIES:
        v.add(f"{path}.annotations", f"has {len(spec.annotations)} entries, at most {MAX_MAP_ENTRIES} are allowed")
    elif sum(len(k) + len(val) for k, val in spec.annotations.items()) > MAX_ANNOTATION_BYTES:
        v.add(f"{path}.annotations", f"are larger than {MAX_ANNOTATION_BYTES} bytes in total")
    else:
        for key in spec.annotations:
            _check_qualified_key(v, f"{path}.annotations[{key!r}]", key)
        for key in DURATION_ANNOTATIONS:
            if key in spec.annotations:
                try:
                    if parse_duration(spec.annotations[key]) <= 0:
                        raise ValueError("must be more than zero")
                except ValueError as err:
                    v.add(f"{path}.annotations[{key!r}]", str(err))
        avoid = spec.annotations.get(AVOID_DEGRADED)
        if avoid is not None and avoid not in ("true", "false"):
            v.add(f"{path}.annotations[{AVOID_DEGRADED!r}]", "must be true or false")
        lost = spec.annotations.get(ON_CLUSTER_LOST)
        if lost is not None and lost not in ON_CLUSTER_LOST_VALUES:
            v.add(f"{path}.annotations[{ON_CLUSTER_LOST!r}]", f"must be one of {', '.join(ON_CLUSTER_LOST_VALUES)}")
        overrun = spec.annotations.get(ON_MAX_RUN_TIME)
        if overrun is not None and overrun not in ON_MAX_RUN_TIME_VALUES:
            v.add(f"{path}.annotations[{ON_MAX_RUN_TIME!r}]", f"must be one of {', '.join(ON_MAX_RUN_TIME_VALUES)}")
    check_name(v, f"{path}.namespace", spec.namespace, required=False)
    for name, plugin in spec.plugins.items():
        if name not in JOB_PLUGINS:
            v.add(f"{path}.plugins[{name[:64]!r}]",
                  f"is not a job plugin the federation supports ({', '.join(JOB_PLUGINS)})")
            continue
        try:
            args = parse_plugin_args(name, plugin.args)
        except ValueError as err:
            v.add(f"{path}.plugins[{name!r}]", str(err))
            continue
        head = args.get("head", "head")
        if name == "ray" and head not in {t.name for t in spec.tasks}:  # Volcano fails every pod of such a job
            v.add(f"{path}.plugins['ray']", f"the job has no head task {head[:64]!r} (--head names it)")
    if len(spec.request_id) > MAX_REQUEST_ID or not spec.request_id.isprintable():
        v.add(f"{path}.request_id", f"must be printable and at most {MAX_REQUEST_ID} characters")
    if len(v.items) > before:
        return None
    return CheckedJob(minimum=gangs.minimum(spec, requests), whole=gangs.whole(spec, requests), replicas=replicas)


def normalise_job_spec(spec: common_pb2.JobSpec) -> None:
    """Fill Volcano's defaults in place, so what is stored is what will be enforced."""
    if not spec.queue:
        spec.queue = DEFAULT_QUEUE  # Volcano's admission puts a job naming no queue in `default`
    for topo in [spec.network_topology, *(t.partition_policy.network_topology for t in spec.tasks)]:
        if topo.mode == "hard" and not topo.highest_tier_allowed and not topo.highest_tier_name:
            topo.highest_tier_allowed = 1  # Volcano's default for hard mode
    if not spec.HasField("max_retry"):
        spec.max_retry = 3
    if "mpi" in spec.plugins:  # Volcano's admission does the same: mpi needs the hosts and the keys
        for needed in ("svc", "ssh"):
            if needed not in spec.plugins:
                spec.plugins[needed].SetInParent()
    for task in spec.tasks:
        _gpu_fraction(task)


def _gpu_fraction(task: common_pb2.TaskSpec) -> None:
    """`nvidia.com/gpu: 0.25` in a task's resources, our job spec's own way to ask for part of one device, is stored
    as KAI's `gpu-fraction` annotation on the task's pod template (how the federation and the agent read every
    fraction), and taken off the template's containers (Kubernetes counts extended resources whole). Left as it is
    (and refused by the check) when it is not a fraction below one, or the template asks KAI's way already."""
    text = task.resources.get(GPU)
    try:
        share = parse_amount(SHARE, text) if text is not None else 0
    except QuantityError:
        return
    if not 0 < share < WHOLE:
        return
    try:
        template = json.loads(task.pod_template_json) if task.pod_template_json else {}
    except (ValueError, RecursionError):
        return
    meta = template.setdefault("metadata", {}) if isinstance(template, dict) else None
    annotations = meta.setdefault("annotations", {}) if isinstance(meta, dict) else None
    if not isinstance(annotations, dict) or FRACTION in annotations or MEMORY in annotations:
        return
    annotations[FRACTION] = format_amount(SHARE, share)
    pod = template.get("spec")
    for container in (pod.get("containers") or []) if isinstance(pod, dict) else []:
        for section in ("requests", "limits"):
            amounts = ((container.get("resources") or {}) if isinstance(container, dict) else {}).get(section)
            if isinstance(amounts, dict):
                amounts.pop(GPU, None)
    del task.resources[GPU]
    task.pod_template_json = json.dumps(template)


def _check_quota(v: Violations, path: str, guarantee: Mapping[str, str], limit: Mapping[str, str],
                 lending_limit: Mapping[str, str]) -> None:
    g = check_resources(v, f"{path}.guarantee", guarantee, flavored=True)
    lim = check_resources(v, f"{path}.limit", limit, flavored=True)
    for name, amount in g.items():
        if name in limit and name in lim and amount > lim[name]:
            v.add(f"{path}.guarantee[{name!r}]", f"guarantee {guarantee[name]} exceeds limit {limit[name]}")
    # A lending limit is on what is guaranteed, as Kueue's is on the nominal quota: at most all of it.
    lent = check_resources(v, f"{path}.lending_limit", lending_limit, flavored=True)
    for name in lending_limit:
        if name not in g:
            v.add(f"{path}.lending_limit[{name!r}]", f"lends {name} but guarantees none of it")
        elif lent.get(name, 0) > g[name]:
            v.add(f"{path}.lending_limit[{name!r}]",
                  f"lending limit {lending_limit[name]} exceeds guarantee {guarantee[name]}")


def _check_weight(v: Violations, path: str, weight: int) -> None:
    if not 0 <= weight <= MAX_WEIGHT:
        v.add(path, f"must be between 1 and {MAX_WEIGHT}")


def check_tenant(v: Violations, path: str, tenant: admin_pb2.Tenant) -> None:
    check_name(v, f"{path}.name", tenant.name)
    _check_weight(v, f"{path}.weight", tenant.weight)
    _check_quota(v, path, tenant.guarantee, tenant.limit, tenant.lending_limit)
    _check_run_time(v, f"{path}.max_run_time", tenant.max_run_time)


def _check_run_time(v: Violations, path: str, text: str) -> None:
    """A maximum run time: "" (none) or a duration of more than zero, as the job annotation takes."""
    if not text:
        return
    if len(text) > 32:
        v.add(path, f"is {len(text)} characters long, at most 32 are allowed")
        return
    try:
        if parse_duration(text) <= 0:
            raise ValueError("must be more than zero")
    except ValueError as err:
        v.add(path, str(err))


def check_queue(v: Violations, path: str, queue: admin_pb2.Queue) -> None:
    check_name(v, f"{path}.name", queue.name)
    _check_run_time(v, f"{path}.max_run_time", queue.max_run_time)
    for i, flavor in enumerate(queue.flavors):
        check_name(v, f"{path}.flavors[{i}]", flavor)
    if len(set(queue.flavors)) != len(queue.flavors):
        v.add(f"{path}.flavors", "names a flavor twice")
    check_name(v, f"{path}.tenant", queue.tenant)
    if queue.parent:
        check_name(v, f"{path}.parent", queue.parent)
        if queue.parent == queue.name:
            v.add(f"{path}.parent", "a queue cannot be its own parent")
    _check_weight(v, f"{path}.weight", queue.weight)
    _check_quota(v, path, queue.guarantee, queue.limit, queue.lending_limit)
    if queue.state not in admin_pb2.QueueState.values():
        v.add(f"{path}.state", f"{queue.state} is not a queue state")
    check_admission_checks(v, f"{path}.admission_checks", queue.admission_checks)


MAX_ADMISSION_CHECKS = 8  # Kueue allows any number; eight covers every setup we know of, and bounds each dispatch
ADMISSION_CHECK_STATES = ("PENDING", "READY", "RETRY", "REJECTED")


def check_admission_checks(v: Violations, path: str, names: Sequence[str]) -> None:
    if len(names) > MAX_ADMISSION_CHECKS:
        v.add(path, f"names {len(names)} checks; at most {MAX_ADMISSION_CHECKS}")
    for i, name in enumerate(names):
        check_name(v, f"{path}[{i}]", name)
    if len(set(names)) != len(names):
        v.add(path, "names a check twice")


MAX_INVENTORY_RESOURCES = 64
# What a real member cluster can have: the largest run some 100,000 GPUs on tens of thousands of nodes.
MAX_CLUSTER_GPUS = 1_000_000  # devices (MIG slices included) of one resource
MAX_CLUSTER_NODES = 100_000
MAX_NODE_GROUPS = 100  # cluster-autoscaler setups with more node groups than this are not known to us
MAX_HEALTH_SUMMARY = 8  # lines of a cluster's health summary ("3 nodes degraded (XID 79)"), each a reason long


def inventory_problem(inv: Any) -> str:
    """Why an agent's inventory cannot be used ("" when it can): a tier out of range, a resource name or an
    amount no cluster could report. A cluster whose agent reports such a thing is left out of scheduling
    with that reason, and every other cluster goes on."""
    amounts = [("capacity", inv.capacity.amounts), ("allocatable", inv.allocatable.amounts),
               ("used", inv.used.amounts), ("managed", inv.managed.amounts)]
    for listed, tiers in (("topology", inv.topology), ("partitionable", inv.partitionable),
                          ("health.healthy_topology", inv.health.healthy_topology)):
        if len(tiers) > MAX_TIER + 2:
            return f"{len(tiers)} {listed} tiers reported, at most {MAX_TIER + 2} are possible"
        for i, tier in enumerate(tiers):
            if not 0 <= tier.tier <= MAX_TIER + 1:
                return f"{listed}[{i}].tier {tier.tier} is out of range (0-{MAX_TIER + 1})"
            if why := _name_problem(f"{listed}[{i}].tier_name", tier.tier_name, 63):
                return why
            amounts += [(f"{listed}[{i}].max_free", tier.max_free.amounts),
                        (f"{listed}[{i}].max_capacity", tier.max_capacity.amounts)]
    for i, tier in enumerate(inv.partitionable):  # only MIG slices are made by repartitioning
        if any(not r.startswith(MIG_PROFILE) for r in [*tier.max_free.amounts, *tier.max_capacity.amounts]):
            return f"partitionable[{i}] names a resource that is not a MIG profile ({MIG_PROFILE}<profile>)"
    if len(inv.hypernodes) > MAX_REPORTED_HYPERNODES:
        return f"{len(inv.hypernodes)} HyperNodes reported, at most {MAX_REPORTED_HYPERNODES}"
    for i, h in enumerate(inv.hypernodes):
        if not 1 <= h.tier <= MAX_TIER or len(h.name) > 253 or len(h.parent) > 253:
            return f"hypernodes[{i}] has a tier out of range or a name too long"
        if why := _name_problem(f"hypernodes[{i}].name", h.name) or _name_problem(f"hypernodes[{i}].parent", h.parent):
            return why
        amounts += [(f"hypernodes[{i}].free", h.free.amounts), (f"hypernodes[{i}].allocatable", h.allocatable.amounts)]
    if len(inv.node_groups) > MAX_NODE_GROUPS:
        return f"{len(inv.node_groups)} node groups reported, at most {MAX_NODE_GROUPS}"
    for i, g in enumerate(inv.node_groups):
        if why := _name_problem(f"node_groups[{i}].name", g.name):
            return why
        if not 0 <= g.can_add <= MAX_CLUSTER_NODES:
            return f"node_groups[{i}].can_add {g.can_add} is out of range (0-{MAX_CLUSTER_NODES:,})"
        amounts.append((f"node_groups[{i}].per_node", g.per_node.amounts))
    for where, values in amounts:
        if len(values) > MAX_INVENTORY_RESOURCES:
            return f"{where} lists {len(values)} resources, at most {MAX_INVENTORY_RESOURCES}"
        for name, amount in values.items():
            v = Violations()
            _check_qualified_key(v, where, name)
            if v or FLAVOR in name:
                return f"{where} names an invalid resource {name[:64]!r}"
            most = MAX_CLUSTER_GPUS if base(name) == GPU or name.startswith(MIG_PROFILE) else MAX_AMOUNT
            if not 0 <= amount <= most:
                return f"{where}[{name!r}] = {amount} is out of range (0-{most:,})"
    counts = (inv.nodes, inv.ready_nodes, inv.health.degraded_nodes, inv.health.failed_nodes)
    if min(counts) < 0:
        return "negative node counts"
    if max(counts) > MAX_CLUSTER_NODES:
        return f"{max(counts):,} nodes reported, at most {MAX_CLUSTER_NODES:,}"
    if len(inv.gpu_free_nodes) > MAX_GPUS_PER_NODE + 1:
        return f"gpu_free_nodes has {len(inv.gpu_free_nodes)} entries, at most {MAX_GPUS_PER_NODE + 1}"
    if any(not 0 <= n <= MAX_CLUSTER_NODES for n in inv.gpu_free_nodes):
        return f"gpu_free_nodes counts nodes out of range (0-{MAX_CLUSTER_NODES:,})"
    if not 0 <= inv.gpu_device_memory <= MAX_MEMORY_MIB:
        return f"gpu_device_memory is out of range (0-{MAX_MEMORY_MIB:,} MiB)"
    if len(inv.node_labels.pairs) > MAX_REPORTED_NODE_LABELS:
        return f"{len(inv.node_labels.pairs)} node labels reported, at most {MAX_REPORTED_NODE_LABELS}"
    for i, pair in enumerate(inv.node_labels.pairs):
        key, equals, value = pair.partition("=")
        v = Violations()
        if equals:
            check_labels(v, f"node_labels.pairs[{i}]", {key: value})
        if v or not equals:
            return f"node_labels.pairs[{i}] is not a label pair (key=value)"
    if len(inv.health.summary) > MAX_HEALTH_SUMMARY:
        return f"health.summary has {len(inv.health.summary)} lines, at most {MAX_HEALTH_SUMMARY}"
    for i, line in enumerate(inv.health.summary):
        if why := _name_problem(f"health.summary[{i}]", line, MAX_REASON):
            return why
    if len(inv.health.degraded_hypernodes) > MAX_REPORTED_HYPERNODES:
        return f"{len(inv.health.degraded_hypernodes)} degraded HyperNodes reported, at most {MAX_REPORTED_HYPERNODES}"
    for i, name in enumerate(inv.health.degraded_hypernodes):
        if why := _name_problem(f"health.degraded_hypernodes[{i}]", name):
            return why
    bad = text_violations(inv)  # every other text of it, by the rule for every text
    return f"{bad[0].field} {bad[0].description}" if bad else ""


def check_flavor(v: Violations, path: str, flavor: admin_pb2.Flavor) -> None:
    check_name(v, f"{path}.name", flavor.name)
    if not flavor.resource:
        v.add(f"{path}.resource", "is required (e.g. nvidia.com/gpu)")
    else:
        _check_qualified_key(v, f"{path}.resource", flavor.resource)
    if not flavor.cluster_selector:
        v.add(f"{path}.cluster_selector", "is required: the labels of the clusters that have this flavor")
    check_labels(v, f"{path}.cluster_selector", flavor.cluster_selector)
    check_admission_checks(v, f"{path}.admission_checks", flavor.admission_checks)


def check_priority_class(v: Violations, path: str, pc: admin_pb2.PriorityClass) -> None:
    check_name(v, f"{path}.name", pc.name)
    if abs(pc.value) > MAX_PRIORITY_VALUE:
        v.add(f"{path}.value", f"must be between -{MAX_PRIORITY_VALUE} and {MAX_PRIORITY_VALUE}")
    if not 0 <= pc.protected_run_seconds <= MAX_PROTECTED_RUN_SECONDS:
        v.add(f"{path}.protected_run_seconds", f"must be between 0 and {MAX_PROTECTED_RUN_SECONDS} (a week)")
    if len(pc.description) > MAX_DESCRIPTION:
        v.add(f"{path}.description", f"must be at most {MAX_DESCRIPTION} characters")
