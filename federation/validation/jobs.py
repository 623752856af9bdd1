"""A job's spec checked in full (Volcano's fields and the federation's), and made canonical."""

from __future__ import annotations

import json
from dataclasses import dataclass

from federation.kernel import dra, gangs
from federation.kernel.durations import parse_duration
from federation.kernel.gpuask import FRACTION, GPU, MEMORY, AskError, ask_of, template_annotations
from federation.kernel.jobspec import (
    AVOID_DEGRADED,
    DURATION_ANNOTATIONS,
    JOB_PLUGINS,
    ON_CLUSTER_LOST,
    ON_CLUSTER_LOST_VALUES,
    ON_MAX_RUN_TIME,
    ON_MAX_RUN_TIME_VALUES,
    parse_plugin_args,
)
from federation.kernel.resources import (
    SHARE,
    WHOLE,
    QuantityError,
    Resources,
    format_amount,
    parse_amount,
)
from federation.v1 import common_pb2
from federation.validation.core import (
    DEFAULT_QUEUE,
    MAX_MAP_ENTRIES,
    MAX_TEMPLATE_BYTES,
    MAX_TIER,
    Violations,
    check_labels,
    check_name,
    check_qualified_key,
    check_resources,
)

MAX_TASKS = 64
MAX_REPLICAS = 10_000  # per job, over all tasks
MAX_POLICIES = 16
MAX_ANNOTATION_BYTES = 64 * 1024
# A whole job, encoded: etcd's limit for one object, so a job always travels in one message (clients' default
# limit is 4 MiB) and a page of jobs can always hold at least one.
MAX_SPEC_BYTES = 1536 * 1024
MAX_REQUEST_ID = 128
MAX_RETRY = 100
EVENTS = ("PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskCompleted", "JobUnknown")
ACTIONS = ("RestartTask", "RestartPod", "RestartPartition", "RestartJob", "AbortJob", "TerminateJob",
           "CompleteJob")
TOPOLOGY_MODES = ("hard", "soft")
TOLERATION_OPERATORS = ("", "Exists", "Equal")
TOLERATION_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
MAX_POLICY_TIMEOUT = 30 * 86_400  # seconds: a lifecycle policy's timeout (a pod stuck for longer is stuck)


@dataclass(frozen=True)
class CheckedJob:
    """What validation learned about a valid job: the canonical requests the scheduler needs."""

    minimum: Resources  # what the gang needs to start (federation.kernel.gangs.minimum), canonical integers
    whole: Resources  # every replica
    replicas: int


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
        check_qualified_key(v, f"{path}.highest_tier_name", topo.highest_tier_name)


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
            check_qualified_key(v, f"{path}.annotations[{key!r}]", key)
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
    least, every = gangs.minimum_and_whole(spec, requests)
    return CheckedJob(minimum=least, whole=every, replicas=replicas)


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
