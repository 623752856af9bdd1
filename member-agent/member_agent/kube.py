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
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from federation.kernel.dra import DeviceRequest, pod_claims
from federation.kernel.jobspec import ON_CLUSTER_LOST
from federation.kernel.resources import Resources, add
from federation.v1 import common_pb2
from member_agent import discovery, mig, plugins
from member_agent.agent import ENDED_PODS as ENDED
from member_agent.agent import AgentJob, BindError
from member_agent.claims import ClaimRefused, Claims
from member_agent.dcgm import DEFAULT_THRESHOLDS, dcgm_health
from member_agent.discovery import OWNER
from member_agent.informer import Informer, key
from member_agent.kubeapi import Kube, KubeError, Obj
from member_agent.metrics import CACHED
from member_agent.nodehealth import DEGRADED, FAILED, HEALTHY, HealthRules, NodeHealth, hypernode_degraded, node_health
from member_agent.placement import PodPlacement
from member_agent.pods import (
    ATTEMPT,
    INDEX,
    JOB_HASH,
    JOB_ID,
    MANAGED_BY,
    TASK,
    devices_of,
    ended,
    job_hash,
    node_ready,
    placeable,
    pod_manifest,
    pod_requests,
    slim_node,
    slim_pod,
    ssh_keys,
    why_failed,
)
from member_agent.state import ClusterState
from member_agent.topology import (
    Topology,
    TopologyError,
    build,
    discover_from_labels,
    label_hypernodes,
    parse_hypernode,
    parse_node,
)

log = logging.getLogger(__name__)

HYPERNODES = "/apis/topology.volcano.sh/v1alpha1/hypernodes"
REBUILD_DELAY = 0.2  # a burst of node or HyperNode changes rebuilds the topology once
SYNC_DELAY = 1.0  # a burst of changes writes the discovered HyperNodes (and their status) once

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
          ("patch", "resource.k8s.io", "resourceclaims/status", True))


class StartError(Exception):
    """The agent cannot work with this cluster as it is; the message says what to fix."""


























COLLECTIONS = {"ConfigMap": "/api/v1/namespaces/{}/configmaps", "Service": "/api/v1/namespaces/{}/services",
               "Secret": "/api/v1/namespaces/{}/secrets",
               "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{}/networkpolicies"}


async def _all(calls: Iterable[Awaitable[Any]], limit: asyncio.Semaphore) -> list[Exception | None]:
    """Run calls at most `limit` at a time; the error of each (None when it succeeded), in order."""
    async def one(call: Awaitable[Any]) -> Exception | None:
        async with limit:
            try:
                await call
            except Exception as err:  # refused, or the connection failed: the caller undoes the rest
                return err
            return None

    return list(await asyncio.gather(*(one(c) for c in calls)))


class KubernetesBackend:
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
        self._phases: dict[str, dict[str, str]] = {}  # job id -> pod key -> phase, for our live pods
        self._anchors: dict[str, str] = {}  # job id -> uid of its anchor ConfigMap
        self._rebuild_pending: asyncio.TimerHandle | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._on_pod: Callable[[str, int, str, int, str, str], object] = lambda *_: None
        self._on_node: Callable[..., object] = lambda *_: None
        self._on_change: Callable[[], object] = lambda: None

    def set_listener(self, on_pod: Callable[[str, int, str, int, str, str], object],
                     on_node: Callable[..., object], on_change: Callable[[], object]) -> None:
        self._on_pod, self._on_node, self._on_change = on_pod, on_node, on_change

    # -- starting --------------------------------------------------------------------------------

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

    def _count_cached(self) -> None:
        for informer in (self.nodes, self.hypernodes, self.pods):
            CACHED.labels(informer.resource).set(len(informer.store))

    # -- the cluster state from the caches ----------------------------------------------------------

    def _foreign(self) -> list[Obj]:
        """HyperNodes in the cluster this agent did not write."""
        return [o for o in self.hypernodes.items()
                if ((o.get("metadata") or {}).get("labels") or {}).get(OWNER) != self.cluster]

    def _topology(self) -> Topology:
        nodes = [parse_node(o) for o in self.nodes.items()]
        offered = self.dra.offered()  # DRA devices, as their classes' resources
        if offered:
            nodes = [replace(n, allocatable={**n.allocatable, **offered[n.name]}) if n.name in offered else n
                     for n in nodes]
        if self.write_hypernodes and self.topology_labels and not self._foreign():
            # The tree the labels describe now; the HyperNode objects follow it (sync_hypernodes).
            return build(nodes, label_hypernodes(nodes, self.topology_labels))
        hypernodes = [parse_hypernode(o) for o in self.hypernodes.items()]
        if hypernodes or not self.topology_labels:
            topology = build(nodes, hypernodes)
            for note in topology.notes:
                log.info("%s", note)
            return topology
        return discover_from_labels(nodes, self.topology_labels)

    def _build_state(self, previous: ClusterState | None = None) -> ClusterState:
        state = ClusterState(self._topology())
        if previous is not None:  # what was booked on each node stays booked
            state.take_over(previous)
        for obj in self.nodes.items():
            name = obj["metadata"]["name"]
            self._note_health(name, obj)
            health = self._health.get(name)
            self._ready[name] = node_ready(obj) and (health is None or health.state != FAILED)
            state.set_ready(name, self._ready[name] and placeable(obj))
        self._apply_health(state)
        return state

    # -- health ------------------------------------------------------------------------------------

    def _note_health(self, name: str, obj: Obj | None) -> bool:
        """Read a node's health from its conditions and taints (and DCGM's metrics); whether it changed."""
        health = node_health(((obj or {}).get("status") or {}).get("conditions") or [],
                             ((obj or {}).get("spec") or {}).get("taints") or [], self.rules) if obj else None
        if health is not None and name in self._dcgm:
            health = health.worst(self._dcgm[name])
        before = self._health.get(name)
        if health is None or health.state == HEALTHY:
            self._health.pop(name, None)
            return before is not None
        self._health[name] = health
        return before != health

    def _failed(self) -> dict[str, NodeHealth]:
        return {n: h for n, h in self._health.items() if h.state == FAILED}

    def _apply_health(self, state: ClusterState) -> bool:
        """The state's degraded nodes and links from the caches; whether anything changed."""
        links = {}
        for obj in self.hypernodes.items():
            why = hypernode_degraded((obj.get("status") or {}).get("conditions") or [], self.rules)
            if why:
                links[obj["metadata"]["name"]] = why
        state.failed = self._failed()
        return state.set_health({n: h for n, h in self._health.items() if h.state == DEGRADED}, links)

    # -- discovered HyperNodes, written to the cluster ---------------------------------------------

    def _schedule_sync(self) -> None:
        if self.write_hypernodes and self.started and self._sync_due is None:
            self._sync_due = asyncio.get_running_loop().call_later(SYNC_DELAY, self._start_sync)

    def _start_sync(self) -> None:
        self._sync_due = None
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.create_task(self._sync_logged())
        else:  # one at a time; what changed meanwhile is synced after it
            self._schedule_sync()

    async def _sync_logged(self) -> None:
        try:
            await self.sync_hypernodes()
        except (KubeError, OSError) as err:
            log.warning("could not write the discovered HyperNodes: %s (tried again on the next change)", err)

    async def sync_hypernodes(self) -> int:
        """Make the cluster's HyperNode objects the discovered tree: create, change or delete this agent's own,
        and set each one's status (node count, Ready, DegradedMembers) when it changed. Level-triggered and
        idempotent; how many calls it made."""
        if not self.topology_labels:
            return 0
        foreign = self._foreign()
        if foreign:
            log.info("%d HyperNodes this agent did not write are in the cluster (e.g. %s): using them, writing "
                     "none", len(foreign), foreign[0]["metadata"]["name"])
            return 0
        nodes = [parse_node(o) for o in self.nodes.items()]
        desired = {h.name: discovery.manifest(h, self.cluster) for h in label_hypernodes(nodes, self.topology_labels)}
        actual = {o["metadata"]["name"]: o for o in self.hypernodes.items()}
        calls = 0
        for name, obj in desired.items():
            have = actual.get(name)
            if have is None:
                await self.kube.create(HYPERNODES, obj)
            elif have.get("spec") != obj["spec"]:
                await self.kube.patch(f"{HYPERNODES}/{name}", {"spec": obj["spec"]})
            else:
                continue
            calls += 1
        for name in actual.keys() - desired.keys():
            await self.kube.delete(f"{HYPERNODES}/{name}")
            calls += 1
        state, now = self.state, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        degraded = {n: h.reasons for n, h in state.degraded.items()}
        for name in desired:
            if name not in state.topology.domains:
                continue
            status = discovery.status(state.nodes_under(name), state.ready, degraded,
                                      (actual.get(name) or {}).get("status"), now)
            if not discovery.same_status((actual.get(name) or {}).get("status"), status):
                await self.kube.patch(f"{HYPERNODES}/{name}/status", {"status": status})
                calls += 1
        return calls

    def _rebuild(self) -> None:
        self._rebuild_pending = None
        try:
            self.state = self._build_state(self.state)
        except TopologyError as err:  # keep placing on the last good tree; say why it was not changed
            log.error("the cluster's topology changed to one that cannot be used, keeping the previous one: %s", err)
            return
        log.info("topology rebuilt: %d nodes, tiers %s", len(self.state.topology.nodes), self.state.topology.tiers())
        self._schedule_sync()
        self._on_change()

    def _schedule_rebuild(self) -> None:
        if self.started and self._rebuild_pending is None:
            self._rebuild_pending = asyncio.get_running_loop().call_later(REBUILD_DELAY, self._rebuild)

    def _node_event(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        if not self.started:
            return
        self._count_cached()
        name = (new or old or {}).get("metadata", {}).get("name", "")
        if kind == "DELETED" or old is None or new is None:
            if kind == "DELETED" and name in self.state.free:
                self._on_node(name, False)  # its pods are lost with it
            self._schedule_rebuild()
            return
        before, after = parse_node(old), parse_node(new)
        if (before.labels, before.allocatable) != (after.labels, after.allocatable):
            self._schedule_rebuild()
        elif before.taints != after.taints and name in self.state.free:
            self.state.replace_node(after)
            self._on_change()
        self._follow(name, new)

    def _follow(self, name: str, obj: Obj) -> None:
        """A node's health, readiness and cordon, as now known, into the state (and its pods' fate)."""
        if self._note_health(name, obj) and self._apply_health(self.state):
            log.info("node %s: %s", name, self._health.get(name, NodeHealth()).state)
            self._schedule_sync()
            self._on_change()
        failed = self._health.get(name)
        ready = node_ready(obj) and (failed is None or failed.state != FAILED)
        if ready != self._ready.get(name, True):
            self._ready[name] = ready
            why = f"node {name} failed ({', '.join(failed.reasons)})" if failed and failed.state == FAILED else ""
            self._on_node(name, ready, why)
        if name in self.state.free and (ready and placeable(obj)) != (name in self.state.ready):
            self.state.set_ready(name, ready and placeable(obj))
            self._schedule_sync()
            self._on_change()

    async def _poll_dcgm(self) -> None:
        """Read the DCGM exporter's metrics every period; nodes whose GPUs cross a threshold turn degraded or
        failed (with their conditions' health, the worse wins). An endpoint that does not answer keeps the
        last reading, and says so."""
        thresholds = self.rules.dcgm_thresholds or DEFAULT_THRESHOLDS
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            while True:
                try:
                    async with session.get(self.dcgm_url) as response:
                        response.raise_for_status()
                        text = await response.text()
                    skipped: list[str] = []
                    found = dcgm_health(text, thresholds, self.rules.failed_xids, self.rules.default_failure_rate,
                                        skipped)
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # whatever the endpoint sends, the polling goes on
                    log.warning("cannot read DCGM metrics from %s: %s (keeping the last reading)", self.dcgm_url,
                                str(err)[:200])
                else:
                    if skipped:
                        log.warning("DCGM metrics from %s: %d samples passed over, e.g. %s", self.dcgm_url,
                                    len(skipped), skipped[0])
                    changed = {n for n in found.keys() | self._dcgm.keys() if found.get(n) != self._dcgm.get(n)}
                    self._dcgm = found
                    for name in sorted(changed):
                        obj = self.nodes.store.get(f"/{name}")
                        if obj is not None and self.started:
                            self._follow(name, obj)
                await asyncio.sleep(self.dcgm_period)

    def _hypernode_event(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        self._count_cached()
        if old is not None and new is not None and old.get("spec") == new.get("spec"):
            if self.started and self._apply_health(self.state):  # only its status changed: its links' health
                self._on_change()
            return
        self._schedule_rebuild()

    # -- pods ---------------------------------------------------------------------------------------

    def _ours(self, pod: Obj) -> bool:
        return ((pod.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) == self.cluster

    def _account(self, k: str, pod: Obj | None, earlier: bool = False) -> None:
        """Count a pod of another workload (or one of ours from an earlier run, at start) against its node
        while it is bound and has not ended."""
        if pod is not None and self._ours(pod) and not earlier and k not in self._counted:
            return  # this run's own pods are counted by their job
        want = None
        if pod is not None:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node in self.state.free and (pod.get("status") or {}).get("phase") not in ENDED:
                want = (node, pod_requests(pod), *devices_of(pod))
        have = self._counted.get(k)
        if (have and have[0]) == want:
            return
        if have is not None:
            self._uncount(k)
        if want is not None:
            node, request, devices, share = want
            self._counted[k] = (want, self.state.allocate(node, request, 1, devices or None, share))
        if self.started:
            self._on_change()

    def _uncount(self, k: str) -> None:
        (node, request, _, share), booked = self._counted.pop(k)
        self.state.release(node, request, booked, share)

    def _pod_event(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        if not self.started:
            return
        pod = new or old or {}
        k = key(pod)
        self._account(k, new)
        if self._ours(pod):
            self._our_pod(k, pod, deleted=kind == "DELETED")

    def _our_pod(self, k: str, pod: Obj, deleted: bool) -> None:
        """One of our pods changed: tell the agent its phase (deleted by someone else: evicted)."""
        meta = pod.get("metadata") or {}
        job_id = (meta.get("annotations") or {}).get(JOB_ID, "")
        phases = self._phases.get(job_id)
        if phases is None or k not in phases:
            return  # not a live pod of ours: gone already, or deleted by us
        status = pod.get("status") or {}
        phase, reason = status.get("phase", "Pending"), status.get("reason") or ""
        if deleted or meta.get("deletionTimestamp"):
            phase, reason = "Evicted", "the pod was deleted" + (" (evicted)" if reason == "Evicted" else "")
        elif phase == "Failed":
            phase, reason = ("Evicted", reason) if reason == "Evicted" else ("Failed", why_failed(status))
        elif phase == "Unknown":
            reason = reason or "the pod's node stopped reporting"
        if phases[k] == phase:
            return
        phases[k] = phase
        labels = meta.get("labels") or {}
        self._on_pod(job_id, int(labels.get(ATTEMPT, "0")), labels.get(TASK, ""), int(labels.get(INDEX, "0")),
                     phase, reason)
        if phase in ("Evicted", "Failed"):
            del phases[k]  # whatever happens to it next, the policy has been told
        if phases and all(p == "Succeeded" for p in phases.values()):
            del self._phases[job_id]

    def pod_statuses(self, job: AgentJob) -> list[common_pb2.PodStatus]:
        """The attempt's pods from the informer's cache, as kubectl shows them."""
        out = []
        for pod in self._job_pods(job.job.id, job.attempt):
            meta, status = pod["metadata"], pod.get("status") or {}
            labels = meta.get("labels") or {}
            phase = "Terminating" if meta.get("deletionTimestamp") else status.get("phase", "Pending")
            out.append(common_pb2.PodStatus(
                task=labels.get(TASK, ""), index=int(labels.get(INDEX, "0")), name=meta.get("name", ""),
                namespace=meta.get("namespace", ""), node=(pod.get("spec") or {}).get("nodeName") or "",
                phase=phase, restarts=int(status.get("restarts") or 0),
                message=status.get("said") or status.get("message") or status.get("reason") or ""))
        return sorted(out, key=lambda p: (p.task, p.index, p.name))

    async def logs(self, job_id: str, attempt: int, task: str, index: int, follow: bool, previous: bool,
                   tail_lines: int) -> AsyncIterator[bytes]:
        """The pod's log from the API server (which reads it from the node's kubelet): its first container's,
        as kubectl picks when a pod has one. A pod kept after its job ended is read as a running one."""
        pods = [p for p in self._job_pods(job_id, attempt)
                if p["metadata"]["labels"].get(TASK) == task and p["metadata"]["labels"].get(INDEX) == str(index)]
        if not pods:
            raise LookupError(f"job {job_id} has no pod {task}[{index}] of attempt {attempt} in this cluster")
        meta = pods[0]["metadata"]
        containers = (pods[0].get("spec") or {}).get("containers") or [{}]
        query = {"container": containers[0].get("name") or "", "follow": str(follow).lower(),
                 "previous": str(previous).lower()}
        if tail_lines:
            query["tailLines"] = str(tail_lines)
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/log"
        try:
            async for data in self.kube.raw(path, query):
                yield data
        except KubeError as err:
            raise LookupError(f"pod {meta['namespace']}/{meta['name']}: {err.status} {err.reason}: "
                              f"{err.message}") from None

    async def repartition(self, layouts: Mapping[str, str]) -> None:
        """Label each node with the MIG manager configuration to apply, and its state pending at once (the MIG
        manager says so itself soon after): the node is left out of placement from this write on, whoever reads
        it, until the MIG manager reports success or failure."""
        for name, config in sorted(layouts.items()):
            try:
                await self.kube.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {
                    mig.CONFIG_LABEL: config, mig.STATE_LABEL: "pending"}}})
            except KubeError as err:
                raise BindError(f"labelling node {name} {mig.CONFIG_LABEL}={config}: {_explain(err)}",
                                permanent=_permanent(err)) from None

    async def cordon(self, nodes: Sequence[str], cordon: bool) -> None:
        """`kubectl cordon` (or uncordon) each node: spec.unschedulable, which the node informer then reports."""
        for name in nodes:
            await self.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": cordon or None}})

    def narrowing(self, requests: Sequence[DeviceRequest]
                  ) -> Callable[[], tuple[dict[str, Resources], list[str]]] | None:
        return self.dra.matching(requests)

    def _job_of(self, pod: Obj) -> str | None:
        """Our pods are indexed by the hash of their job, so a job's pods are found without a scan."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return labels.get(JOB_HASH) if labels.get(MANAGED_BY) == self.cluster else None

    def _job_pods(self, job_id: str, attempt: int | None = None) -> list[Obj]:
        return [p for p in self.pods.by_index(job_hash(job_id))
                if attempt is None or p["metadata"]["labels"].get(ATTEMPT) == str(attempt)]

    # -- binding ------------------------------------------------------------------------------------

    def _namespace(self, job: AgentJob) -> str:
        return job.job.spec.namespace or self.namespace

    async def _anchor(self, job: AgentJob, namespace: str) -> Obj:
        """The job's anchor ConfigMap (made once per job), as an owner reference for what the job makes."""
        uid = self._anchors.get(job.job.id)
        if uid is None:
            path = f"/api/v1/namespaces/{namespace}/configmaps"
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": job.job.id, "labels": {MANAGED_BY: self.cluster, JOB_HASH: job_hash(job.job.id)},
                "annotations": {JOB_ID: job.job.id}}, "data": {"job": job.job.id, "cluster": self.cluster}}
            try:
                uid = (await self.kube.create(path, body))["metadata"]["uid"]
            except KubeError as err:
                if err.status != 409:
                    raise
                uid = (await self.kube.get(f"{path}/{job.job.id}"))["metadata"]["uid"]
            self._anchors[job.job.id] = uid
            made = await self._plugin_objects(job, namespace, {"apiVersion": "v1", "kind": "ConfigMap",
                                                                "name": job.job.id, "uid": uid, "controller": True})
            if made is not None:
                raise made
        return {"apiVersion": "v1", "kind": "ConfigMap", "name": job.job.id, "uid": uid, "controller": True}

    async def _plugin_objects(self, job: AgentJob, namespace: str, owner: Obj) -> KubeError | None:
        spec = job.job.spec
        keys = await asyncio.to_thread(ssh_keys) if "ssh" in spec.plugins else None  # RSA takes a while
        wanted = plugins.objects(job.job.id, namespace, spec, keys)
        for obj in wanted:
            obj["metadata"].update(namespace=namespace, ownerReferences=[owner],
                                   labels={MANAGED_BY: self.cluster, JOB_HASH: job_hash(job.job.id)})
            path = COLLECTIONS[obj["kind"]].format(namespace)
            try:
                await self.kube.create(path, obj)
            except KubeError as err:
                if err.status != 409:
                    return err
                try:  # left by an earlier attempt: it is this one's now
                    await self.kube.patch(f"{path}/{obj['metadata']['name']}", obj)
                except KubeError as again:
                    return again
        return None

    async def bind(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        namespace = self._namespace(job)
        first = job.job.id not in self._anchors
        try:
            try:
                owner = await self._anchor(job, namespace) if job.job.spec.plugins else None
            except KubeError as err:
                raise BindError(f"creating the job's objects in namespace {namespace}: {_explain(err)}",
                                _permanent(err)) from None
            await self._bind(job, pods, namespace, owner)
        except BindError:
            if first and job.job.spec.plugins:  # nothing of the job stays: its anchor takes the objects with it
                await self._delete_anchor(job.job.id, namespace)
            raise

    async def _bind(self, job: AgentJob, pods: Sequence[PodPlacement], namespace: str, owner: Obj | None) -> None:
        manifests = [pod_manifest(job, p.task, p.index, namespace, self.scheduler, self.cluster, owner, p.devices,
                                  p.share) for p in pods]
        # Phases are followed from creation: a pod may start before its gang's last binding returns.
        phases = self._phases.setdefault(job.job.id, {})
        for m in manifests:
            phases.setdefault(f"{namespace}/{m['metadata']['name']}", "Pending")
        path = f"/api/v1/namespaces/{namespace}/pods"
        made: dict[str, Obj] = {}  # name -> the pod as created

        async def create(manifest: Obj) -> None:
            made[manifest["metadata"]["name"]] = await self.kube.create(path, manifest)

        created = await _all((create(m) for m in manifests), self.limit)
        failed = [(f"creating pod {namespace}/{m['metadata']['name']}", e)
                  for m, e in zip(manifests, created, strict=True) if e is not None]
        if not failed and job.job.spec.resource_claim_templates_json:
            failed = await self._claim(job, [made[m["metadata"]["name"]] for m in manifests], pods, namespace)
        if not failed:
            bindings = [{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": m["metadata"]["name"]},
                         "target": {"apiVersion": "v1", "kind": "Node", "name": p.node}}
                        for m, p in zip(manifests, pods, strict=True)]
            bound = await _all((self.kube.create(f"{path}/{b['metadata']['name']}/binding", b) for b in bindings),
                               self.limit)
            failed = [(f"binding pod {namespace}/{b['metadata']['name']} to node {b['target']['name']}", e)
                      for b, e in zip(bindings, bound, strict=True) if e is not None]
        if failed:
            made = [m["metadata"]["name"] for m, e in zip(manifests, created, strict=True) if e is None]
            await self._delete_pods(namespace, made)
            if job.job.spec.resource_claim_templates_json:
                await self.dra.release(namespace, manifests)
            for m in manifests:
                phases.pop(f"{namespace}/{m['metadata']['name']}", None)
            # A permanent refusal first: one forbidden pod makes the whole gang impossible here.
            step, err = min(failed, key=lambda f: not _permanent(f[1]))
            raise BindError(f"{step}: {_explain(err)}", _permanent(err)) from None

    async def _claim(self, job: AgentJob, made: Sequence[Obj], pods: Sequence[PodPlacement], namespace: str
                     ) -> list[tuple[str, Exception]]:
        """The ResourceClaims of the pods `made` (as created) made and allocated on their nodes, one pod after
        another (each takes devices the next may not); what failed, as `_bind` reports it."""
        templates = {t["metadata"]["name"]: t for t in map(json.loads, job.job.spec.resource_claim_templates_json)}
        tasks = {t.name: t for t in job.job.spec.tasks}
        labels = {MANAGED_BY: self.cluster, JOB_HASH: job_hash(job.job.id)}
        for pod, p in zip(made, pods, strict=True):
            claims = pod_claims(tasks[p.task].pod_template_json)
            if not claims:
                continue
            name = pod["metadata"]["name"]
            step = f"allocating devices for pod {namespace}/{name} on node {p.node}"
            try:
                await self.dra.claim(namespace, (name, pod["metadata"]["uid"]), p.node, claims, templates, labels)
            except (KubeError, ClaimRefused) as err:
                return [(step, err)]
        return []

    async def _delete_pods(self, namespace: str, names: Sequence[str]) -> None:
        base = f"/api/v1/namespaces/{namespace}/pods"
        errors = await _all((self.kube.delete(f"{base}/{n}", [("gracePeriodSeconds", "0")]) for n in names),
                            self.limit)
        for name, err in zip(names, errors, strict=True):
            if err is not None and not (isinstance(err, KubeError) and err.status == 404):
                log.warning("could not delete pod %s/%s: %s", namespace, name, err)

    async def delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None = None) -> None:
        namespace = self._namespace(job)
        found = self._job_pods(job.job.id)
        if pods is not None:
            which = {(p.task, str(p.index)) for p in pods}
            found = [p for p in found if (p["metadata"]["labels"].get(TASK), p["metadata"]["labels"].get(INDEX))
                     in which]
        phases = self._phases.get(job.job.id, {})
        for pod in found:  # gone by our hand: their deletion is not an eviction
            phases.pop(key(pod), None)
        await self._delete_pods(namespace, [p["metadata"]["name"] for p in found])
        if pods is None:
            self._phases.pop(job.job.id, None)
            if job.job.spec.plugins:
                await self._delete_anchor(job.job.id, namespace)

    async def end(self, job: AgentJob) -> None:
        """The job ended: stop its pods that have not; keep those that ended (Succeeded or Failed, with their
        logs) for the retention, and with them the anchor (what the job's plugins made), as Volcano keeps a
        finished job's pods until the job goes."""
        if not self.retention:
            await self.delete(job)
            return
        kept = [p for p in self._job_pods(job.job.id, job.attempt) if ended(p)]
        if not kept:
            await self.delete(job)
            return
        names = {p["metadata"]["name"] for p in kept}
        going = [p for p in self._job_pods(job.job.id) if p["metadata"]["name"] not in names]
        phases = self._phases.pop(job.job.id, {})
        for pod in going:  # gone by our hand: their deletion is not an eviction
            phases.pop(key(pod), None)
        await self._delete_pods(self._namespace(job), [p["metadata"]["name"] for p in going])
        self._keep(job.job.id, job.attempt)

    def _keep(self, job_id: str, attempt: int) -> None:
        self._kept[(job_id, attempt)] = time.monotonic() + self.retention
        self._kept_changed.set()

    def _keep_found(self) -> None:
        """Ended pods an earlier run left are kept from now for the retention (the clock of their end is lost
        with that run): their job's own pods, if the job runs here again, are another attempt's or live."""
        if not self.retention:
            return
        for bucket in self.pods.indexed.values():
            for pod in bucket.values():
                attempt = pod["metadata"]["labels"].get(ATTEMPT, "")
                job_id = (pod["metadata"].get("annotations") or {}).get(JOB_ID)
                if job_id and attempt.isdigit() and ended(pod):
                    self._kept.setdefault((job_id, int(attempt)), time.monotonic() + self.retention)

    async def _sweep_kept(self) -> None:
        """Delete the kept pods whose retention has passed, unless their job runs here again: only pods that
        ended, and the job's anchor when nothing of the job is left."""
        while True:
            now = time.monotonic()
            for (job_id, attempt), until in sorted(self._kept.items()):
                if until > now:
                    continue
                del self._kept[(job_id, attempt)]
                if job_id in self._phases:
                    continue
                try:
                    await self._delete_kept(job_id, attempt)
                except Exception as err:  # the API server refused or is away: tried again later
                    log.warning("could not delete the kept pods of job %s attempt %d: %s", job_id, attempt, err)
                    self._kept[(job_id, attempt)] = now + min(self.retention, 60)
            self._kept_changed.clear()
            wait = min(self._kept.values(), default=now + 3600) - now
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kept_changed.wait(), max(wait, 0.05))

    async def _delete_kept(self, job_id: str, attempt: int) -> None:
        kept = [p for p in self._job_pods(job_id, attempt) if ended(p) and not p["metadata"].get("deletionTimestamp")]
        for namespace in sorted({p["metadata"]["namespace"] for p in kept}):
            await self._delete_pods(namespace, [p["metadata"]["name"] for p in kept
                                                if p["metadata"]["namespace"] == namespace])
        if not [p for p in self._job_pods(job_id) if not ended(p)]:
            for namespace in sorted({p["metadata"]["namespace"] for p in kept} | {self.namespace}):
                await self._delete_anchor(job_id, namespace)
        log.info("job %s attempt %d: its %d ended pod(s) deleted, their retention passed", job_id, attempt,
                 len(kept))

    async def _delete_anchor(self, job_id: str, namespace: str) -> None:
        """The garbage collector removes what the job's plugins made (and any pod left) with it."""
        self._anchors.pop(job_id, None)
        try:
            await self.kube.delete(f"/api/v1/namespaces/{namespace}/configmaps/{job_id}",
                                   [("propagationPolicy", "Background")])
        except KubeError as err:
            if err.status != 404:
                log.warning("could not delete the anchor of job %s: %s", job_id, err)

    def managed(self) -> dict[tuple[str, int], int]:
        """Every attempt of which the cluster holds pods this agent manages (by their labels), with how many,
        from the cache: what reconciliation asks the federation about. Pods already going are left out, and so
        are pods that ended: they hold nothing and run nothing, and are kept for the retention."""
        out: dict[tuple[str, int], int] = {}
        for bucket in self.pods.indexed.values():
            for pod in bucket.values():
                meta = pod["metadata"]
                job_id, attempt = (meta.get("annotations") or {}).get(JOB_ID), meta["labels"].get(ATTEMPT, "")
                if job_id and attempt.isdigit() and not meta.get("deletionTimestamp") and not ended(pod):
                    out[(job_id, int(attempt))] = out.get((job_id, int(attempt)), 0) + 1
        return out

    def attempts(self, job_id: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for pod in self._job_pods(job_id):
            attempt = pod["metadata"]["labels"].get(ATTEMPT, "")
            if attempt.isdigit() and not pod["metadata"].get("deletionTimestamp"):
                out[int(attempt)] = out.get(int(attempt), 0) + 1
        return out

    def waits_when_lost(self, job_id: str) -> bool:
        return any(((p["metadata"].get("annotations") or {}).get(ON_CLUSTER_LOST)) == "wait"
                   for p in self._job_pods(job_id))

    def ended(self, job_id: str, attempt: int) -> tuple[int, int]:
        phases = [(p.get("status") or {}).get("phase") for p in self._job_pods(job_id, attempt)
                  if not p["metadata"].get("deletionTimestamp")]
        return phases.count("Succeeded"), phases.count("Failed")

    def unadopted(self) -> Resources:
        """What our pods that no job of this run holds (yet) hold: made by an earlier run, not yet adopted or
        deleted by reconciliation."""
        out: Resources = {}
        for bucket in self.pods.indexed.values():
            for k in bucket:
                counted = self._counted.get(k)
                if counted is not None:
                    out = add(out, counted[0][1])
        return out

    async def delete_attempt(self, job_id: str, attempt: int, anchor: bool, keep_ended: bool = False) -> int:
        """Delete every pod of this attempt, each with the grace period it asks for (an orphan may be a
        training job that checkpoints on SIGTERM); with `anchor`, the job's anchor too (no attempt of the
        job is live here); with `keep_ended`, the attempt's ended pods (and the anchor) are kept for the
        retention instead. How many pods were deleted."""
        found = [p for p in self._job_pods(job_id, attempt) if not p["metadata"].get("deletionTimestamp")]
        if keep_ended and self.retention and any(ended(p) for p in found):
            found, anchor = [p for p in found if not ended(p)], False
            self._keep(job_id, attempt)
        phases = self._phases.get(job_id, {})
        for pod in found:  # gone by our hand: their deletion is not an eviction
            phases.pop(key(pod), None)
        calls = [self.kube.delete(f"/api/v1/namespaces/{p['metadata']['namespace']}/pods/{p['metadata']['name']}")
                 for p in found]
        deleted = 0
        for pod, err in zip(found, await _all(calls, self.limit), strict=True):
            if err is None or (isinstance(err, KubeError) and err.status == 404):
                deleted += 1
            else:
                log.warning("could not delete orphan pod %s: %s", key(pod), err)
        if anchor:
            for namespace in sorted({p["metadata"]["namespace"] for p in found} | {self.namespace}):
                await self._delete_anchor(job_id, namespace)
        return deleted

    async def adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        """Live pods of this attempt that an earlier run of the agent made, from the cache."""
        found, phases = [], {}
        for pod in self._job_pods(job_id, attempt):
            status, spec = pod.get("status") or {}, pod.get("spec") or {}
            if status.get("phase") in ENDED or not spec.get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            labels = pod["metadata"]["labels"]
            found.append(PodPlacement(labels[TASK], int(labels[INDEX]), spec["nodeName"], *devices_of(pod)))
            k = key(pod)
            phases[k] = status.get("phase", "Pending")
            if k in self._counted:  # the adopting job counts it from now on
                self._uncount(k)
            uid = next((o.get("uid") for o in pod["metadata"].get("ownerReferences") or []
                        if o.get("kind") == "ConfigMap" and o.get("name") == job_id), None)
            if uid:
                self._anchors[job_id] = uid
        if found:
            self._phases[job_id] = phases
        return sorted(found, key=lambda p: (p.task, p.index))






PERMANENT = (400, 403, 404, 422)  # forbidden (RBAC, a quota, an admission webhook), invalid, not found


def _permanent(err: Exception) -> bool:
    """Whether the API server refused for good (409, 429, 5xx and failed connections may pass), or no device of
    the cluster matches a claim."""
    if isinstance(err, ClaimRefused):
        return err.permanent
    return isinstance(err, KubeError) and err.status in PERMANENT


def _explain(err: Exception) -> str:
    if isinstance(err, ClaimRefused):
        return str(err)
    if not isinstance(err, KubeError):
        return f"the API server could not be reached: {err}"
    if err.status == 403:
        return f"403 Forbidden: {err.message} (the agent's role must grant it: deploy/kubernetes/agent/rbac.yaml)"
    return f"{err.status} {err.reason}: {err.message}"
