"""The Kubernetes backend: the cluster's real Nodes, HyperNodes and Pods through its API server.

Reads Nodes (allocatable, labels, Ready), HyperNode custom objects when the Volcano CRD exists
(else discovers the tree from node labels), and bound Pods of other workloads, which occupy
their nodes. A gang is bound all or nothing: every pod is created (with this agent's
schedulerName, so no other scheduler takes it), then bound through the pods/binding
subresource; if any step fails, every pod already created is deleted and the job is rejected.
Pod phases come from a watch and go to the agent, which decides what they mean for the gang.

The `kubernetes` client is synchronous, so its calls run in worker threads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from federation.resources import format_resources
from member_agent.agent import AgentJob, BindError
from member_agent.placement import PodPlacement
from member_agent.simulated import pod_requests
from member_agent.state import ClusterState
from member_agent.topology import Node, build, discover_from_labels, parse_hypernode, parse_node

log = logging.getLogger(__name__)

MANAGED_BY = "federation.dev/managed-by"
JOB_HASH = "federation.dev/job-hash"
JOB_ID = "federation.dev/job-id"
ATTEMPT = "federation.dev/attempt"
TASK = "federation.dev/task"
INDEX = "federation.dev/index"
DEFAULT_IMAGE = "registry.k8s.io/pause:3.9"
HYPERNODES = ("topology.volcano.sh", "v1alpha1", "hypernodes")


def job_hash(job_id: str) -> str:
    """Label values stop at 63 characters; job ids may not, so pods are labelled with a hash."""
    return hashlib.sha256(job_id.encode()).hexdigest()[:16]


def pod_manifest(job: AgentJob, task: str, index: int, namespace: str, scheduler: str, cluster: str) -> dict[str, Any]:
    """One pod of the gang, from its task's pod template (or a pause container holding the requests)."""
    spec = next(t for t in job.job.spec.tasks if t.name == task)
    template = json.loads(spec.pod_template_json) if spec.pod_template_json else {}
    meta = dict(template.get("metadata") or {})
    pod_spec = dict(template.get("spec") or {})
    if not pod_spec.get("containers"):
        pod_spec["containers"] = [{"name": "main", "image": DEFAULT_IMAGE,
                                   "resources": {"requests": format_resources(job.requests[task])}}]
    if spec.node_selector and "nodeSelector" not in pod_spec:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    pod_spec["schedulerName"] = scheduler
    pod_spec.setdefault("restartPolicy", "Never")
    labels = {**(meta.get("labels") or {}), MANAGED_BY: cluster, JOB_HASH: job_hash(job.job.id),
              ATTEMPT: str(job.attempt), TASK: task, INDEX: str(index)}
    annotations = {**(meta.get("annotations") or {}), JOB_ID: job.job.id}
    # A restarted pod gets a new name: the one it replaces may still be terminating.
    name = f"{job.job.id}-a{job.attempt}-{task}-{index}" + (f"-r{job.retries}" if job.retries else "")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": annotations},
            "spec": pod_spec}


def _node(obj: Any) -> tuple[Node, bool]:
    raw = client.ApiClient().sanitize_for_serialization(obj)
    conditions = (raw.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return parse_node(raw), ready


class KubernetesBackend:
    def __init__(self, api: client.ApiClient, cluster: str, namespace: str, scheduler: str,
                 topology_labels: Sequence[str]) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.cluster = cluster
        self.namespace = namespace
        self.scheduler = scheduler
        self.topology_labels = list(topology_labels)
        # Pods an earlier run of this agent made, counted as used when the cluster was read: name ->
        # (node, what was counted), until a job adopts them and counts them as its own.
        self._earlier: dict[str, tuple[str, dict[str, int]]] = {}
        self.state = self._load()
        self._on_pod: Callable[[str, int, str, int, str, str], object] = lambda *_: None
        self._on_node: Callable[[str, bool], object] = lambda *_: None
        self._phases: dict[str, dict[str, str]] = {}  # job id -> pod name -> phase
        self._stop = threading.Event()

    # -- reading the cluster -----------------------------------------------------------------

    def _load(self) -> ClusterState:
        nodes, ready = [], {}
        for obj in self.core.list_node().items:
            node, is_ready = _node(obj)
            nodes.append(node)
            ready[node.name] = is_ready
        try:
            raw = self.custom.list_cluster_custom_object(*HYPERNODES)
            hypernodes = [parse_hypernode(h) for h in raw.get("items", [])]
        except ApiException as err:
            if err.status != 404:
                raise
            hypernodes = []  # no Volcano CRD here
        if hypernodes or not self.topology_labels:
            topology = build(nodes, hypernodes)
        else:
            topology = discover_from_labels(nodes, self.topology_labels)
        state = ClusterState(topology)
        for name, is_ready in ready.items():
            state.set_ready(name, is_ready)
        pods = self.core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
        for pod in pods.items:
            raw = self.api.sanitize_for_serialization(pod)
            if (raw.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            node = raw["spec"].get("nodeName")
            if node in state.free:
                counted = pod_requests(raw)
                state.allocate(node, counted)
                if ((raw.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == self.cluster:
                    self._earlier[raw["metadata"]["name"]] = (node, counted)
        return state

    def set_listener(self, on_pod: Callable[[str, int, str, int, str, str], object],
                     on_node: Callable[[str, bool], object]) -> None:
        self._on_pod, self._on_node = on_pod, on_node

    # -- binding -------------------------------------------------------------------------------

    def _bind(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        created: list[str] = []
        # Phases are followed from creation: a pod may start before its gang's last binding returns.
        phases = self._phases.setdefault(job.job.id, {})
        try:
            for pod in pods:
                manifest = pod_manifest(job, pod.task, pod.index, self.namespace, self.scheduler, self.cluster)
                self.core.create_namespaced_pod(self.namespace, manifest)
                created.append(manifest["metadata"]["name"])
                phases.setdefault(created[-1], "Pending")
            for pod, name in zip(pods, created, strict=True):
                binding = client.V1Binding(metadata=client.V1ObjectMeta(name=name),
                                           target=client.V1ObjectReference(api_version="v1", kind="Node",
                                                                           name=pod.node))
                # The client cannot deserialise the Status this call returns; the body is not needed.
                self.core.create_namespaced_pod_binding(name, self.namespace, binding, _preload_content=False)
        except ApiException as err:
            self._delete_pods(created)
            for name in created:
                phases.pop(name, None)
            raise BindError(f"{err.status} {err.reason}: {_message(err)}") from None

    def _delete_pods(self, names: Sequence[str]) -> None:
        for name in names:
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    def _delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None) -> None:
        selector = f"{MANAGED_BY}={self.cluster},{JOB_HASH}={job_hash(job.job.id)}"
        found = self.core.list_namespaced_pod(self.namespace, label_selector=selector).items
        if pods is not None:
            which = {(p.task, str(p.index)) for p in pods}
            found = [p for p in found if (p.metadata.labels.get(TASK), p.metadata.labels.get(INDEX)) in which]
        names = [p.metadata.name for p in found]
        self._delete_pods(names)
        phases = self._phases.get(job.job.id, {})
        for name in names:
            phases.pop(name, None)
        if pods is None or not phases:
            self._phases.pop(job.job.id, None)

    def _adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        selector = f"{MANAGED_BY}={self.cluster},{JOB_HASH}={job_hash(job_id)},{ATTEMPT}={attempt}"
        found, phases = [], {}
        for pod in self.core.list_namespaced_pod(self.namespace, label_selector=selector).items:
            phase = pod.status.phase if pod.status else "Pending"
            if phase in ("Succeeded", "Failed") or not pod.spec.node_name:
                continue
            labels = pod.metadata.labels
            found.append(PodPlacement(labels[TASK], int(labels[INDEX]), pod.spec.node_name))
            phases[pod.metadata.name] = phase
            if pod.metadata.name in self._earlier:  # the adopting job counts it from now on
                node, counted = self._earlier.pop(pod.metadata.name)
                self.state.release(node, counted)
        if found:
            self._phases[job_id] = phases
        return sorted(found, key=lambda p: (p.task, p.index))

    async def adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        return await asyncio.to_thread(self._adopt, job_id, attempt)

    async def bind(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        await asyncio.to_thread(self._bind, job, pods)

    async def delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None = None) -> None:
        await asyncio.to_thread(self._delete, job, pods)

    # -- watching ------------------------------------------------------------------------------

    def pod_event(self, pod: Mapping[str, Any]) -> None:
        """A watched pod changed phase: tell the agent (a failed pod says whether it was evicted)."""
        meta = pod.get("metadata") or {}
        job_id = (meta.get("annotations") or {}).get(JOB_ID)
        labels = meta.get("labels") or {}
        phases = self._phases.get(job_id or "")
        if job_id is None or phases is None or meta.get("name") not in phases:
            return
        status = pod.get("status") or {}
        phase = status.get("phase", "Pending")
        if phases[meta["name"]] == phase:
            return
        phases[meta["name"]] = phase
        reason = status.get("reason") or ""
        if phase == "Failed":
            phase, reason = ("Evicted", reason) if reason == "Evicted" else ("Failed", reason or "pod failed")
        elif phase == "Unknown":
            reason = reason or "the pod's node stopped reporting"
        self._on_pod(job_id, int(labels.get(ATTEMPT, "0")), labels.get(TASK, ""), int(labels.get(INDEX, "0")),
                     phase, reason)
        if all(p == "Succeeded" for p in phases.values()):
            del self._phases[job_id]

    def node_event(self, obj: Any) -> None:
        node, ready = _node(obj)
        if node.name in self.state.free and ready != (node.name in self.state.ready):
            self._on_node(node.name, ready)

    def _watch(self, lister: Callable[..., Any], handle: Callable[[Any], None], loop: asyncio.AbstractEventLoop,
               **kwargs: Any) -> None:
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(lister, timeout_seconds=30, **kwargs):
                    loop.call_soon_threadsafe(handle, event["object"])
                    if self._stop.is_set():
                        return
            except Exception as err:  # the API server went away: retry, as kubelets do
                log.warning("watch failed (%s); retrying", err)
                self._stop.wait(2)

    def start_watches(self, loop: asyncio.AbstractEventLoop) -> None:
        selector = f"{MANAGED_BY}={self.cluster}"

        def on_pod(obj: Any) -> None:
            self.pod_event(self.api.sanitize_for_serialization(obj))

        threading.Thread(target=self._watch, args=(self.core.list_namespaced_pod, on_pod, loop),
                         kwargs={"namespace": self.namespace, "label_selector": selector}, daemon=True).start()
        threading.Thread(target=self._watch, args=(self.core.list_node, self.node_event, loop), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


def _message(err: ApiException) -> str:
    try:
        return json.loads(err.body or "{}").get("message", "") or str(err.reason)
    except ValueError:
        return str(err.body)
