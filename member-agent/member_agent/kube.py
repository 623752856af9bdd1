"""The Kubernetes backend: a member cluster's real Nodes, HyperNodes and Pods, through its API server.

The agent's view of the cluster is three informers (list, then watch; one cache each): Nodes,
Volcano HyperNodes (when the CRD is installed) and the Pods of every namespace. The cluster state
follows them without a restart:
- Pods of other workloads count against their nodes from when they are bound until they end or go;
  so do pods an earlier run of this agent made, until the job they belong to adopts them.
- A Node that is NotReady or gone fails the pods on it (event Unknown, as the simulated backend
  reports a lost node); a cordoned Node (`spec.unschedulable`) is given nothing new; taints are
  matched against each task's tolerations at placement. New nodes, changed labels or allocatable,
  and HyperNode changes rebuild the topology, carrying every node's usage over.
- One of our pods deleted by someone else (or evicted) raises PodEvicted, a failed one PodFailed,
  as Volcano's job controller raises them.
- A job that ends stops its pods still running and keeps those that ended, with their logs, for the
  retention (as Volcano keeps a finished job's pods, and Kubernetes a Job's until its TTL); ended pods
  hold nothing, so reconciliation leaves them out.

A gang is bound all or nothing: its pods are created (this agent's schedulerName, so no other
scheduler takes them), then bound through pods/binding, each step many calls at once (bounded);
if any call fails, every pod created is deleted and the job rejected. A job with plugins has an anchor
ConfigMap (named after the job) that owns its pods and its plugins' objects, so deleting it removes
whatever is left of the job, through the garbage collector. The caches keep only what the agent reads
of each object (`slim_pod`, `slim_node`).

This module is the backend's wiring (its informers, its start and its role check); its parts each own one
concern: nodes, HyperNodes and health (`kube_nodes.py`), pods as the informer has them (`kube_pods.py`), and
binding and deleting (`kube_binding.py`).
"""


from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence

from federation.kernel.resources import Resources
from member_agent.claims import Claims
from member_agent.informer import Informer, key
from member_agent.kube_binding import Binding
from member_agent.kube_nodes import HYPERNODES, NodeView
from member_agent.kube_pods import PodView
from member_agent.kube_provisioning import Provisioning
from member_agent.kubeapi import Kube, KubeError
from member_agent.model import PodListener
from member_agent.nodehealth import HealthRules, NodeHealth
from member_agent.pods import (
    slim_node,
    slim_pod,
)
from member_agent.state import ClusterState
from member_agent.topology import (
    Topology,
)

log = logging.getLogger(__name__)

# Every call the backend makes, for the start-up check of its role: (verb, group, resource, namespaced).
ACCESS = (("list", "", "nodes", False), ("watch", "", "nodes", False), ("patch", "", "nodes", False),
          ("create", "topology.volcano.sh", "hypernodes", False), ("patch", "topology.volcano.sh", "hypernodes", False),
          ("delete", "topology.volcano.sh", "hypernodes", False),
          ("patch", "topology.volcano.sh", "hypernodes/status", False),
          ("list", "", "pods", False), ("watch", "", "pods", False),
          ("list", "topology.volcano.sh", "hypernodes", False), ("watch", "topology.volcano.sh", "hypernodes", False),
          ("create", "", "pods", True), ("delete", "", "pods", True), ("create", "", "pods/binding", True),
          ("get", "", "pods/log", True),
          ("create", "", "configmaps", True), ("get", "", "configmaps", True), ("patch", "", "configmaps", True),
          ("delete", "", "configmaps", True), ("create", "", "services", True), ("patch", "", "services", True),
          ("create", "", "secrets", True), ("patch", "", "secrets", True),
          ("create", "networking.k8s.io", "networkpolicies", True),
          ("patch", "networking.k8s.io", "networkpolicies", True),
          *((verb, "resource.k8s.io", r, False) for r in ("resourceslices", "deviceclasses", "resourceclaims")
            for verb in ("list", "watch")),
          ("create", "resource.k8s.io", "resourceclaims", True), ("delete", "resource.k8s.io", "resourceclaims", True),
          ("patch", "resource.k8s.io", "resourceclaims/status", True),
          # nodes on demand (`provisioning`): a gang's PodTemplates and ProvisioningRequest
          ("create", "", "podtemplates", True), ("delete", "", "podtemplates", True),
          *((verb, "autoscaling.x-k8s.io", "provisioningrequests", True) for verb in ("create", "get", "delete")))


class StartError(Exception):
    """The agent cannot work with this cluster as it is; the message says what to fix."""


class KubernetesBackend(NodeView, PodView, Binding, Provisioning):
    def __init__(self, kube: Kube, cluster: str, namespace: str, scheduler: str,
                 topology_labels: Sequence[str], concurrency: int = 64, health: HealthRules | None = None,
                 write_hypernodes: bool = False, dcgm_url: str = "", dcgm_period: float = 15.0,
                 retention: float = 0.0) -> None:
        self.kube = kube
        self.retention = retention  # seconds an ended job's ended pods are kept (0: deleted with the job)
        # Ended attempts whose ended pods are kept -> when they go (monotonic), and what wakes the sweeper.
        self._kept: dict[tuple[str, int], float] = {}
        self._kept_changed = asyncio.Event()
        self.dcgm_url, self.dcgm_period = dcgm_url, dcgm_period  # dcgm-exporter's /metrics, when read
        self._dcgm: dict[str, NodeHealth] = {}  # nodes DCGM's metrics say are not healthy
        # Discovered from labels, the tree is written to the cluster as HyperNode objects (and kept current)
        # unless HyperNodes someone else wrote are there: then those are the tree.
        self.write_hypernodes = write_hypernodes
        self._sync_due: asyncio.TimerHandle | None = None
        self._syncing: asyncio.Task[None] | None = None
        self.rules = health or HealthRules()
        self._health: dict[str, NodeHealth] = {}  # nodes not healthy -> why, from their conditions and taints
        self.cluster = cluster
        self.namespace = namespace
        self.scheduler = scheduler
        self.topology_labels = list(topology_labels)
        self.limit = asyncio.Semaphore(concurrency)
        self.nodes = Informer(kube, "/api/v1/nodes", "nodes", self._node_event, transform=slim_node)
        self.hypernodes = Informer(kube, HYPERNODES, "hypernodes", self._hypernode_event, missing_ok=True)
        self.pods = Informer(kube, "/api/v1/pods", "pods", self._pod_event, index=self._job_of, transform=slim_pod)
        self.dra = Claims(kube, self._ours, self._schedule_rebuild)
        self.state = ClusterState(Topology({}, {}, {}, {}))
        self.started = False
        # Pods counted against their nodes by this backend (other workloads', and our own from an
        # earlier run until a job adopts them): pod key -> (node, requests).
        # pod -> ((node, request, its devices as annotated, share), the devices booked): other workloads' pods
        self._counted: dict[str, tuple[tuple[str, Resources, tuple[int, ...], int], tuple[int, ...]]] = {}
        self._ready: dict[str, bool] = {}  # node -> its Ready condition, as last seen
        self._binding: set[str] = set()  # jobs whose pods are being made (a kept attempt's sweep leaves them be)
        self._anchors: dict[str, str] = {}  # job id -> uid of its anchor ConfigMap
        self._rebuild_pending: asyncio.TimerHandle | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._on_pod: PodListener = lambda *_: None
        self._on_node: Callable[..., object] = lambda *_: None
        self._on_change: Callable[[], object] = lambda: None

    def set_listener(self, on_pod: PodListener,
                     on_node: Callable[..., object], on_change: Callable[[], object]) -> None:
        self._on_pod, self._on_node, self._on_change = on_pod, on_node, on_change

    async def check_access(self) -> None:
        """Ask the API server whether this agent's identity may make every call it will make; a missing
        grant stops the agent at start with the verb and resource, instead of failing jobs later."""
        missing = []
        for verb, group, resource, namespaced in ACCESS:
            name, _, sub = resource.partition("/")
            attributes = {"verb": verb, "group": group, "resource": name, "subresource": sub}
            if namespaced:
                attributes["namespace"] = self.namespace
            review = await self.kube.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
                "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes}})
            if not (review.get("status") or {}).get("allowed"):
                where = f" in namespace {self.namespace}" if namespaced else " (cluster-wide)"
                missing.append(f"{verb} {resource}{f'.{group}' if group else ''}{where}")
        if missing:
            raise StartError("the agent's role does not grant: " + "; ".join(missing)
                             + " (deploy/kubernetes/agent/rbac.yaml grants exactly what it needs)")

    async def start(self, timeout: float = 120) -> None:
        """Fill the caches and build the cluster state from them; then follow every change."""
        informers = (self.nodes, self.hypernodes, self.pods, *self.dra.informers)
        self._tasks = [asyncio.create_task(i.run()) for i in informers]
        deadline = time.monotonic() + timeout
        for informer in informers:
            while not informer.synced.is_set():
                refused = isinstance(informer.error, KubeError) and informer.error.status in (401, 403)
                if refused or time.monotonic() > deadline:
                    raise StartError(f"cannot read {informer.resource}: {informer.error or 'no answer'}")
                await asyncio.sleep(0.05)
        self.state = self._build_state()
        for pod in self.pods.items():
            self._account(key(pod), pod, earlier=True)
        self._keep_found()
        self.started = True
        self._tasks.append(asyncio.create_task(self._sweep_kept()))
        self._count_cached()
        if self.dcgm_url:
            self._tasks.append(asyncio.create_task(self._poll_dcgm()))
        if self.write_hypernodes:
            await self.sync_hypernodes()

    async def stop(self) -> None:
        if self._sync_due is not None:
            self._sync_due.cancel()
        if self._syncing is not None:
            self._tasks.append(self._syncing)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.kube.close()
