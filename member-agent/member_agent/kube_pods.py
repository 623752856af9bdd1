"""The Kubernetes backend's view of pods: every pod counted against its node, ours followed to their jobs (phases,
evictions, failures), their statuses and logs, and the pods an earlier run of the agent left (a part of
`kube.KubernetesBackend`)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from federation.kernel.jobspec import ON_CLUSTER_LOST
from federation.kernel.resources import Resources, add
from federation.v1 import common_pb2
from member_agent.informer import key
from member_agent.kubeapi import KubeError, Obj
from member_agent.model import ENDED_PODS as ENDED
from member_agent.model import AgentJob
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
    pod_requests,
    why_failed,
)

log = logging.getLogger(__name__)

class PodView:
    """Pods as the informer has them (a part of `KubernetesBackend`)."""

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
            self._our_pod(pod, deleted=kind == "DELETED")

    def _our_pod(self, pod: Obj, deleted: bool) -> None:
        """One of our pods changed: tell the agent its phase (deleted: evicted), and the pod's name. Which pods are
        its gangs' now, which it deleted itself and what it was told already, the agent knows (`AgentJob.live`)."""
        meta = pod.get("metadata") or {}
        job_id = (meta.get("annotations") or {}).get(JOB_ID, "")
        status = pod.get("status") or {}
        phase, reason = status.get("phase", "Pending"), status.get("reason") or ""
        if deleted or meta.get("deletionTimestamp"):
            phase, reason = "Evicted", "the pod was deleted" + (" (evicted)" if reason == "Evicted" else "")
        elif phase == "Failed":
            phase, reason = ("Evicted", reason) if reason == "Evicted" else ("Failed", why_failed(status))
        elif phase == "Unknown":
            reason = reason or "the pod's node stopped reporting"
        labels = meta.get("labels") or {}
        self._on_pod(job_id, int(labels.get(ATTEMPT, "0")), labels.get(TASK, ""), int(labels.get(INDEX, "0")),
                     phase, reason, meta.get("name", ""))

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

    def _job_of(self, pod: Obj) -> str | None:
        """Our pods are indexed by the hash of their job, so a job's pods are found without a scan."""
        labels = (pod.get("metadata") or {}).get("labels") or {}
        return labels.get(JOB_HASH) if labels.get(MANAGED_BY) == self.cluster else None

    def _job_pods(self, job_id: str, attempt: int | None = None) -> list[Obj]:
        return [p for p in self.pods.by_index(job_hash(job_id))
                if attempt is None or p["metadata"]["labels"].get(ATTEMPT) == str(attempt)]

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

    async def adopt(self, job_id: str, attempt: int) -> list[PodPlacement]:
        """Live pods of this attempt that an earlier run of the agent made, from the cache."""
        found = []
        for pod in self._job_pods(job_id, attempt):
            status, spec = pod.get("status") or {}, pod.get("spec") or {}
            if status.get("phase") in ENDED or not spec.get("nodeName") or pod["metadata"].get("deletionTimestamp"):
                continue
            labels = pod["metadata"]["labels"]
            found.append(PodPlacement(labels[TASK], int(labels[INDEX]), spec["nodeName"], *devices_of(pod)))
            k = key(pod)
            if k in self._counted:  # the adopting job counts it from now on
                self._uncount(k)
            uid = next((o.get("uid") for o in pod["metadata"].get("ownerReferences") or []
                        if o.get("kind") == "ConfigMap" and o.get("name") == job_id), None)
            if uid:
                self._anchors[job_id] = uid
        return sorted(found, key=lambda p: (p.task, p.index))
