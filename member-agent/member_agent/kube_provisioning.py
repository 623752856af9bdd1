"""Asking the cluster's autoscaler for a gang's nodes through ProvisioningRequests (a part of `KubernetesBackend`;
what is asked and why: `provisioning`)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence

from member_agent.errors import BindError
from member_agent.kube_binding import _explain, _permanent
from member_agent.kubeapi import Kube, KubeError
from member_agent.pods import OVERCOMMITTED
from member_agent.provisioning import API, GROUP_LABEL, Ask, outcome, provisioning_request, template_name


def _template(name: str, requests: Mapping[str, str], labels: Mapping[str, str]) -> dict:
    """A PodTemplate for one task's pods as the autoscaler sizes nodes for them: their requests, and the node
    group's labels as their nodeSelector (the group whose nodes are asked for)."""
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name},
            "template": {"spec": {"nodeSelector": dict(labels), "containers": [{
                "name": "main", "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": dict(requests), "limits": {
                    r: q for r, q in requests.items() if r not in OVERCOMMITTED}}}]}}}


class Provisioning:
    kube: Kube
    namespace: str

    async def provision(self, ask: Ask, tasks: Sequence[tuple[str, int, Mapping[str, str]]],
                        labels: Mapping[str, str]) -> None:
        """Make the ask's PodTemplates (a task each: its name, pods, one pod's requests) and its
        ProvisioningRequest; BindError if the API server refuses (no such CRD: no autoscaler takes them here)."""
        base = f"/api/v1/namespaces/{self.namespace}/podtemplates"
        step = "creating PodTemplates"
        try:
            names = []
            for task, _, requests in tasks:
                name = template_name(ask.name, task)
                await self._create_once(base, _template(name, requests, {**labels, GROUP_LABEL: ask.group}))
                names.append(name)
            step = f"creating ProvisioningRequest {ask.name}"
            await self._create_once(f"{API}/namespaces/{self.namespace}/provisioningrequests", provisioning_request(
                ask.name, self.namespace, ask, [(n, count) for n, (_, count, _) in zip(names, tasks, strict=True)]))
        except KubeError as err:
            await self.unprovision(ask.name, [t for t, _, _ in tasks])
            raise BindError(f"{step}: {_explain(err)}", _permanent(err)) from None

    async def _create_once(self, path: str, body: dict) -> None:
        """Create it; one already there (the agent restarted while asking) is the same ask."""
        try:
            await self.kube.create(path, body)
        except KubeError as err:
            if err.status != 409:
                raise

    async def provisioned(self, name: str) -> tuple[str, str]:
        """How the ask stands, as the autoscaler says (`provisioning.outcome`)."""
        try:
            return outcome(await self.kube.get(f"{API}/namespaces/{self.namespace}/provisioningrequests/{name}"))
        except KubeError as err:
            if err.status == 404:
                return "Failed", "its ProvisioningRequest was deleted"
            return "", ""  # not known now: looked at again soon

    async def unprovision(self, name: str, tasks: Sequence[str]) -> None:
        """Delete the ask's ProvisioningRequest and PodTemplates (what is already gone is not missed)."""
        paths = [f"{API}/namespaces/{self.namespace}/provisioningrequests/{name}",
                 *(f"/api/v1/namespaces/{self.namespace}/podtemplates/{template_name(name, t)}" for t in tasks)]
        for path in paths:
            with contextlib.suppress(KubeError):
                await self.kube.delete(path)
