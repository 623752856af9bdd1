"""The Kubernetes backend's writes for gangs: all pods of a gang created and bound or none, with their plugins'
objects and DRA claims; pods deleted; ended pods kept for the retention (a part of `kube.KubernetesBackend`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any

from federation.kernel.dra import pod_claims
from member_agent import plugins
from member_agent.claims import ClaimRefused
from member_agent.errors import BindError
from member_agent.informer import key
from member_agent.kubeapi import KubeError, Obj
from member_agent.model import AgentJob
from member_agent.placement import PodPlacement
from member_agent.pods import (
    ATTEMPT,
    INDEX,
    JOB_HASH,
    JOB_ID,
    MANAGED_BY,
    TASK,
    ended,
    job_hash,
    pod_manifest,
    ssh_keys,
)
from member_agent.provisioning import CLASS, CLASS_ANNOTATION, CONSUME

log = logging.getLogger(__name__)

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


class Binding:
    """Binding and deleting (a part of `KubernetesBackend`)."""

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
        self._binding.add(job.job.id)
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
        finally:
            self._binding.discard(job.job.id)

    async def _bind(self, job: AgentJob, pods: Sequence[PodPlacement], namespace: str, owner: Obj | None) -> None:
        manifests = [pod_manifest(job, p.task, p.index, namespace, self.scheduler, self.cluster, owner, p.devices,
                                  p.share) for p in pods]
        if job.consumes:  # on nodes the autoscaler added for it: it consumes that booking (cluster-autoscaler reads it)
            for m in manifests:
                m["metadata"].setdefault("annotations", {}).update({CONSUME: job.consumes, CLASS_ANNOTATION: CLASS})
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
        await self._delete_pods(namespace, [p["metadata"]["name"] for p in found])
        if pods is None and job.job.spec.plugins:
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
                if job_id in self._binding or any(not ended(p) and not p["metadata"].get("deletionTimestamp")
                                                  for p in self._job_pods(job_id)):
                    continue  # it runs here again
                try:
                    await self._delete_kept(job_id, attempt)
                except Exception as err:  # the API server refused or is away: tried again later
                    log.warning("could not delete the kept pods of job %s attempt %d: %s", job_id, attempt, err)
                    self._kept[(job_id, attempt)] = now + min(self.retention, 60)
            self._kept_changed.clear()
            wait = min(self._kept.values(), default=now + 3600) - now
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(wait, 0.05)):
                    await self._kept_changed.wait()

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

    async def delete_attempt(self, job_id: str, attempt: int, anchor: bool, keep_ended: bool = False) -> int:
        """Delete every pod of this attempt, each with the grace period it asks for (an orphan may be a
        training job that checkpoints on SIGTERM); with `anchor`, the job's anchor too (no attempt of the
        job is live here); with `keep_ended`, the attempt's ended pods (and the anchor) are kept for the
        retention instead. How many pods were deleted."""
        found = [p for p in self._job_pods(job_id, attempt) if not p["metadata"].get("deletionTimestamp")]
        if keep_ended and self.retention and any(ended(p) for p in found):
            found, anchor = [p for p in found if not ended(p)], False
            self._keep(job_id, attempt)
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
