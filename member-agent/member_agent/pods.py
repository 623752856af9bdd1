"""A gang's pods as both backends know them: the annotations the simulator and KWOK's stages read, what a pod
holds on its node, and, for Kubernetes, the manifests the agent makes (labels, the task's template, plugins' and
devices' additions) and the slim copies it keeps of the pods and nodes it watches. Pure: no I/O."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from federation.kernel.dra import CLASS_RESOURCE
from federation.kernel.durations import parse_duration
from federation.kernel.gpuask import WHOLE
from federation.kernel.jobspec import ON_CLUSTER_LOST
from federation.kernel.resources import SHARE, Resources, format_resources, parse_amount
from federation.v1 import common_pb2
from member_agent import mig, plugins
from member_agent.claims import with_claims
from member_agent.devices import ASSIGNED, ASSIGNED_SHARE, assigned, pod_devices
from member_agent.kubeapi import Obj
from member_agent.model import ENDED_PODS as ENDED
from member_agent.model import AgentJob

DURATION_ANNOTATION = "federation.dev/sim-duration"
START_DELAY_ANNOTATION = "federation.dev/sim-start-delay"  # how long a new pod stays Pending
MANAGED_BY = "federation.dev/managed-by"
JOB_HASH = "federation.dev/job-hash"
JOB_ID = "federation.dev/job-id"
ATTEMPT = "federation.dev/attempt"
TASK = "federation.dev/task"
INDEX = "federation.dev/index"
DEFAULT_IMAGE = "registry.k8s.io/pause:3.9"
OVERCOMMITTED = ("cpu", "memory", "ephemeral-storage")  # every other resource is requested at its limit


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What a pod holds on its node, as the kube-scheduler counts it: its containers' requests summed,
    at least its largest init container's, plus the pod overhead."""
    spec = pod.get("spec") or {}

    def requests(container: Any) -> Resources:
        out: Resources = {}
        for resource, quantity in (((container or {}).get("resources") or {}).get("requests") or {}).items():
            out[str(resource)] = parse_amount(str(resource), quantity)
        return out

    total: Resources = {}
    for container in spec.get("containers") or []:
        for resource, amount in requests(container).items():
            total[resource] = total.get(resource, 0) + amount
    for container in spec.get("initContainers") or []:
        for resource, amount in requests(container).items():
            total[resource] = max(total.get(resource, 0), amount)
    for resource, quantity in (spec.get("overhead") or {}).items():
        total[str(resource)] = total.get(str(resource), 0) + parse_amount(str(resource), quantity)
    return total


def annotation(spec: common_pb2.JobSpec, task: str, name: str) -> str:
    """A task's pod template annotation, else the job's."""
    template = next((t.pod_template_json for t in spec.tasks if t.name == task), "")
    if template:
        try:
            value = ((json.loads(template).get("metadata") or {}).get("annotations") or {}).get(name)
        except (ValueError, AttributeError):
            value = None
        if value:
            return str(value)
    return spec.annotations.get(name, "")


def job_hash(job_id: str) -> str:
    """Label values stop at 63 characters; job ids may not, so pods are labelled with a hash."""
    return hashlib.sha256(job_id.encode()).hexdigest()[:16]


def _go_duration(text: str) -> str | None:
    """A duration annotation as KWOK (Go's time.ParseDuration) reads it."""
    try:
        return f"{round(parse_duration(text) * 1000)}ms"
    except ValueError:
        return None


def devices_of(pod: Obj) -> tuple[tuple[int, ...], int]:
    return assigned((pod.get("metadata") or {}).get("annotations") or {})


def pod_manifest(job: AgentJob, task: str, index: int, namespace: str, scheduler: str, cluster: str,
                 owner: Obj | None = None, devices: Sequence[int] = (), share: int = WHOLE) -> Obj:
    """One pod of the gang: its task's pod template (or a pause container holding the requests), this
    agent's schedulerName and labels, and what the job's plugins add."""
    spec = next(t for t in job.job.spec.tasks if t.name == task)
    template = json.loads(spec.pod_template_json) if spec.pod_template_json else {}
    meta = dict(template.get("metadata") or {})
    pod_spec = dict(template.get("spec") or {})
    if not pod_spec.get("containers"):
        requests = format_resources({r: a for r, a in job.requests[task].items()  # SHARE and DRA classes: ours alone
                                     if r != SHARE and not r.startswith(CLASS_RESOURCE)})
        limits = {r: q for r, q in requests.items() if r not in OVERCOMMITTED}  # limits must equal requests
        pod_spec["containers"] = [{"name": "main", "image": DEFAULT_IMAGE,
                                   "resources": {"requests": requests, **({"limits": limits} if limits else {})}}]
    else:
        _with_limits(pod_spec)
    if spec.node_selector and "nodeSelector" not in pod_spec:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    pod_spec["schedulerName"] = scheduler
    pod_spec.setdefault("restartPolicy", "Never")
    labels = {**(meta.get("labels") or {}), MANAGED_BY: cluster, JOB_HASH: job_hash(job.job.id),
              ATTEMPT: str(job.attempt), TASK: task, INDEX: str(index)}
    annotations = {**(meta.get("annotations") or {}), JOB_ID: job.job.id}
    if job.job.spec.annotations.get(ON_CLUSTER_LOST):  # a restarted agent cut off must know it may not fence it
        annotations[ON_CLUSTER_LOST] = job.job.spec.annotations[ON_CLUSTER_LOST]
    for name in (START_DELAY_ANNOTATION, DURATION_ANNOTATION):  # KWOK's stages in the test bed read them
        duration = _go_duration(annotation(job.job.spec, task, name))
        if duration:
            annotations[name] = duration
    if devices:
        containers = pod_spec["containers"] = [dict(c) for c in pod_spec["containers"]]
        env = containers[0]["env"] = list(containers[0].get("env") or [])  # KAI's default: the first container
        pod_devices(annotations, env, devices, share)
        if not env:
            del containers[0]["env"]
    name = pod_name(job, task, index)
    with_claims(pod_spec, name)
    pod: Obj = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
                "spec": pod_spec}
    if owner is not None:
        pod["metadata"]["ownerReferences"] = [owner]
    plugins.decorate(pod, job.job.id, namespace, job.job.spec, spec, index)
    return pod


def pod_name(job: AgentJob, task: str, index: int) -> str:
    """The name of the pod a gang's (task, index) gets when it is bound now. A restarted or moved pod gets a new
    name: the one it replaces may still be terminating, and its events are not the new pod's."""
    return f"{job.job.id}-a{job.attempt}-{task}-{index}" + (f"-r{job.retries}" if job.retries else "") + (
        f"-m{job.moved}" if job.moved else "")


def _with_limits(pod_spec: Obj) -> None:
    """Each container's extended resources (GPUs, devices) requested with no limit given the limit equal to the
    request: the API server refuses such a pod ("Limit must be set for non overcommitable resources"), and equal is
    the one value it takes. Volcano's own examples ask for `nvidia.com/gpu` under requests only."""
    for kind in ("containers", "initContainers"):
        if not pod_spec.get(kind):
            continue
        pod_spec[kind] = containers = [dict(c) for c in pod_spec[kind]]
        for container in containers:
            resources = container.get("resources") or {}
            requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
            missing = {r: q for r, q in requests.items() if r not in OVERCOMMITTED and r not in limits}
            if missing:
                container["resources"] = {**resources, "limits": {**limits, **missing}}


def ssh_keys() -> tuple[str, str]:
    """A fresh key pair for a job's ssh plugin: the private key (PEM) and the public key (OpenSSH)."""
    key_pair = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key_pair.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                     serialization.NoEncryption()).decode()
    public = key_pair.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                serialization.PublicFormat.OpenSSH).decode()
    return private, public + "\n"


def _meta(obj: Obj, *keys: str) -> Obj:
    meta = obj.get("metadata") or {}
    return {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "labels", *keys) if k in meta}


def _requests(containers: Any) -> list[Obj]:
    return [{"name": c.get("name"), "resources": {"requests": (c.get("resources") or {}).get("requests") or {}}}
            for c in containers or []]


def slim_pod(pod: Obj) -> Obj:
    """What the agent reads of a pod: who it is, where it is bound, what it requests and how it is doing.
    (A full pod is several kilobytes; a large cluster has tens of thousands.)"""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    meta = _meta(pod, "deletionTimestamp", "ownerReferences")
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if JOB_ID in annotations:
        meta["annotations"] = {k: annotations[k] for k in (JOB_ID, ON_CLUSTER_LOST, ASSIGNED, ASSIGNED_SHARE)
                               if k in annotations}
    return {"metadata": meta,
            "spec": {"nodeName": spec.get("nodeName"), "containers": _requests(spec.get("containers")),
                     "initContainers": _requests(spec.get("initContainers")), "overhead": spec.get("overhead")},
            "status": {k: status[k] for k in ("phase", "reason", "message") if k in status}
            | {"containerStatuses": [{"name": c.get("name"), "state": {"terminated": (c.get("state") or {}).get(
                "terminated")}} for c in status.get("containerStatuses") or [] if (c.get("state") or {}).get(
                "terminated")]}
            | _shown(status)}


def _shown(status: Obj) -> Obj:
    """What a user sees of a pod beyond its phase (kubectl's RESTARTS and STATUS): container restarts, and
    why a container waits (CrashLoopBackOff, ImagePullBackOff...) or ended."""
    containers = status.get("containerStatuses") or []
    out: Obj = {"restarts": sum(int(c.get("restartCount") or 0) for c in containers)}
    for c in containers:
        state = c.get("state") or {}
        said = state.get("waiting") or state.get("terminated") or {}
        if said.get("reason"):
            out["said"] = said["reason"] + (f": {said['message']}" if said.get("message") else "")
            break
    return out


def slim_node(node: Obj) -> Obj:
    """What the agent reads of a node: labels, allocatable, taints, cordon, readiness and health conditions
    (without their heartbeat times, which change every few seconds and would make every status a change)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    return {"metadata": _meta(node),
            "spec": {k: spec[k] for k in ("unschedulable", "taints") if k in spec},
            "status": {"allocatable": status.get("allocatable") or {},
                       "conditions": [{k: c[k] for k in ("type", "status", "reason", "message") if k in c}
                                      for c in status.get("conditions") or []]}}


def node_ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def placeable(node: Obj) -> bool:
    """Not cordoned, nor being repartitioned by NVIDIA's MIG manager: new pods may go there."""
    return not (node.get("spec") or {}).get("unschedulable") and not mig.reconfiguring(
        (node.get("metadata") or {}).get("labels") or {})


def ended(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ENDED


def why_failed(status: Mapping[str, Any]) -> str:
    for c in status.get("containerStatuses") or []:
        terminated = (c.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode"):
            return f"container {c.get('name')} exited with {terminated['exitCode']}" + (
                f" ({terminated['reason']})" if terminated.get("reason") else "")
    return status.get("message") or "pod failed"
