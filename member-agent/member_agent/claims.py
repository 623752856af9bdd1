"""Dynamic Resource Allocation in a member cluster, as kube-scheduler's DynamicResources plugin and the
resourceclaim controller would do it for the agent's own pods: make each pod's ResourceClaims from the job's
templates, pick devices on the pod's node that the DeviceClass's and the claim's CEL selectors accept, write the
allocation to the claim's status (reserved for the pod), and only then bind.

The cluster's devices come from the drivers' ResourceSlices; what is taken, from every ResourceClaim's allocation
(and what this agent has just allocated, before its watch sees it). A node offers each DeviceClass's devices as
the class resource (`federation.kernel.dra.class_resource`), less those other workloads' claims hold, so placement and
the federation count them like any resource.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from federation.kernel import dra
from federation.kernel.resources import Resources
from member_agent.informer import Informer
from member_agent.kubeapi import Kube, KubeError

log = logging.getLogger(__name__)
Obj = dict[str, Any]
BASE = "/apis/resource.k8s.io/v1"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"  # the resourceclaim controller's annotation


def _version(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("uid") or meta.get("name", ""), meta.get("resourceVersion", "")


def claim_name(pod: str, claim: str) -> str:
    return f"{pod}-{claim}"[:253]


def with_claims(pod_spec: Obj, pod: str) -> None:
    """Point the pod's claims at the ResourceClaims the agent makes for it (kubelet then reads them by name)."""
    claims = pod_spec.get("resourceClaims")
    if claims:
        pod_spec["resourceClaims"] = [{"name": c["name"], "resourceClaimName": claim_name(pod, c["name"])}
                                      for c in claims]


class Claims:
    def __init__(self, kube: Kube, ours: Callable[[Obj], bool], changed: Callable[[], None]) -> None:
        """`ours`: whether an object is this agent's; `changed`: the devices nodes offer may have changed."""
        self.kube = kube
        self.ours = ours
        self.changed = changed
        self.slices = Informer(kube, f"{BASE}/resourceslices", "resourceslices", self._event, missing_ok=True)
        self.classes = Informer(kube, f"{BASE}/deviceclasses", "deviceclasses", self._event, missing_ok=True)
        self.claims = Informer(kube, f"{BASE}/resourceclaims", "resourceclaims", self._claim_event, missing_ok=True)
        self._pending: dict[str, set[tuple[str, str, str]]] = {}  # claim key -> devices allocated, not yet seen
        # (slice, class) versions -> the slice's node and the devices of it the class accepts
        self._accepted: dict[tuple[tuple[str, str], tuple[str, str]], tuple[str, frozenset[tuple[str, str, str]]]] = {}

    @property
    def informers(self) -> tuple[Informer, ...]:
        return (self.slices, self.classes, self.claims)

    def _event(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        self.changed()

    def _claim_event(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        obj = new or old or {}
        meta = obj.get("metadata") or {}
        if new is None or (new.get("status") or {}).get("allocation"):  # the cache holds what was pending now
            self._pending.pop(f"{meta.get('namespace')}/{meta.get('name')}", None)
        if not self.ours(obj):  # ours are counted by their pods' requests
            self.changed()

    def class_selectors(self) -> dict[str, list[str]]:
        return {(c.get("metadata") or {}).get("name", ""): dra.class_selectors(c) for c in self.classes.items()}

    def devices(self) -> list[dra.Device]:
        return [d for s in self.slices.items() for d in dra.slice_devices(s)]

    def _taken(self, ours_too: bool) -> set[tuple[str, str, str]]:
        held = dra.allocated(c for c in self.claims.items() if ours_too or not self.ours(c))
        if ours_too:
            for devices in self._pending.values():
                held |= devices
        return held

    def offered(self) -> dict[str, Resources]:
        """Per node, each DeviceClass's devices there that no other workload's claim holds."""
        if not self.slices.store:
            return {}
        taken = self._taken(ours_too=False)
        out: dict[str, Resources] = {}
        seen = set()
        for s in self.slices.items():
            for c in self.classes.items():
                key = (_version(s), _version(c))
                seen.add(key)
                accepted = self._accepted.get(key)
                if accepted is None:  # CEL over every device is slow: once per slice and class version
                    selectors = dra.class_selectors(c)
                    accepted = self._accepted[key] = (
                        (s.get("spec") or {}).get("nodeName") or "",
                        frozenset(d.key for d in dra.slice_devices(s) if dra.accepts(selectors, d)))
                node, keys = accepted
                free = len(keys - taken)
                if node and free:
                    resource = dra.class_resource((c.get("metadata") or {}).get("name", ""))
                    out.setdefault(node, {})[resource] = out.get(node, {}).get(resource, 0) + free
        self._accepted = {k: v for k, v in self._accepted.items() if k in seen}
        return out

    def matching(self, requests: Sequence[dra.DeviceRequest]
                 ) -> Callable[[], tuple[dict[str, Resources], list[str]]]:
        """What `matching` works out for `requests`, as a function to call off the event loop (CEL over the
        devices): the devices, classes and what claims hold are read now."""
        return functools.partial(matching, requests, self.class_selectors(), self._taken(ours_too=True),
                                 self.devices())

    async def claim(self, namespace: str, pod: tuple[str, str], node: str, claims: Sequence[tuple[str, str]],
                    templates: Mapping[str, Obj], labels: Mapping[str, str]) -> None:
        """Make, allocate and reserve the claims of a pod (name, uid) on `node`: (claim, its template) each, from
        the job's `templates` by name. Raises ClaimRefused (with why) or KubeError."""
        classes = self.class_selectors()
        taken = self._taken(ours_too=True)
        free = [d for d in self.devices() if d.node == node and d.key not in taken]
        name, uid = pod
        for claim, template in claims:
            spec = (templates[template].get("spec") or {}).get("spec") or {}
            # CEL over the node's devices (bounded per selector, but selectors times devices): off the loop
            allocation = await asyncio.to_thread(_allocate, spec, classes, free)
            if isinstance(allocation, str):
                # Devices of the node all taken, or none like it anywhere: the second will not pass by waiting here.
                anywhere = await asyncio.to_thread(_allocate, spec, classes, self.devices())
                nowhere = "; no device of this cluster, on any node, free or not, matches it" \
                    if isinstance(anywhere, str) else ""
                raise ClaimRefused(f"claim {claim} of pod {namespace}/{name} on node {node}: {allocation}{nowhere}",
                                   permanent=bool(nowhere))
            cname = claim_name(name, claim)
            body = {"apiVersion": dra.API, "kind": "ResourceClaim", "metadata": {
                "name": cname, "namespace": namespace, "labels": dict(labels),
                "annotations": {POD_CLAIM_NAME: claim},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "controller": True}]},
                "spec": spec}
            path = f"{BASE}/namespaces/{namespace}/resourceclaims"
            await self.kube.create(path, body)
            devices = {d.key for _, d in allocation.results}
            self._pending[f"{namespace}/{cname}"] = devices
            await self.kube.patch(f"{path}/{cname}/status", {"status": dra.claim_status(allocation, node, name, uid)})
            free = [d for d in free if d.key not in devices]

    async def release(self, namespace: str, pods: Sequence[Obj]) -> None:
        """Delete the claims made for pods that were not bound (their owner's deletion would, later)."""
        for pod in pods:
            spec = pod.get("spec") or {}
            for c in spec.get("resourceClaims") or []:
                cname = c.get("resourceClaimName")
                if not cname:
                    continue
                self._pending.pop(f"{namespace}/{cname}", None)
                try:
                    await self.kube.delete(f"{BASE}/namespaces/{namespace}/resourceclaims/{cname}")
                except KubeError as err:
                    if err.status != 404:
                        log.warning("could not delete claim %s/%s: %s", namespace, cname, err)


def matching(requests: Sequence[dra.DeviceRequest], classes: Mapping[str, Sequence[str]],
             taken: Collection[tuple[str, str, str]], devices: Sequence[dra.Device]
             ) -> tuple[dict[str, Resources], list[str]]:
    """Per node, for each class of `requests` (requests narrowed by selectors of their own), how many of its
    devices there no claim holds that the class's and every such request's selectors accept: the most of that
    class a pod asking those requests can be given on the node (the fewest over the requests of one class). And
    why a request can never be met here: no device of the cluster, free or not, matches it."""
    out: dict[str, Resources] = {}
    never = []
    for req in requests:
        wanted = (*classes.get(req.device_class, ()), *req.selectors)
        resource = dra.class_resource(req.device_class)
        counts: dict[str, int] = {}
        anywhere = 0
        if req.device_class in classes:
            for d in devices:
                if d.node and dra.accepts(wanted, d):
                    anywhere += 1
                    if d.key not in taken:
                        counts[d.node] = counts.get(d.node, 0) + 1
        if anywhere < req.count:
            never.append(f"request {req.name}: {anywhere} of {req.count} {req.device_class} devices that its "
                         "selectors accept; no device of this cluster, on any node, free or not, matches it")
        for node in {*counts, *(n for n, r in out.items() if resource in r)}:
            have = out.setdefault(node, {})
            have[resource] = min(have.get(resource, counts.get(node, 0)), counts.get(node, 0))
    return out, never


class ClaimRefused(Exception):
    """The node has not the devices a pod's claim asks for (the placement's count was stale, or selectors narrower
    than the class). `permanent`: no device of the cluster matches it at all, so asking again would not help."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


def _allocate(spec: Obj, classes: Mapping[str, Sequence[str]], free: Sequence[dra.Device]) -> dra.Allocation | str:
    try:
        return dra.allocate(dra.claim_spec(spec, "spec"), classes, free)
    except dra.ClaimError as err:  # a template the server did not check (it came before the server did)
        return f"its template cannot be allocated: {err}"
