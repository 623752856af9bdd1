"""A stand-in for cluster-autoscaler's ProvisioningRequest handling on the test bed: for each request not yet
answered, it adds the KWOK nodes its parameters ask for (the node group and how many, as the member agent writes
them), under a new tier-1 HyperNode of their own as a new rack would be, and sets `Provisioned`; when the group is
at its maximum it sets `Failed` instead, as the autoscaler does when a scale-up cannot be had.

The CRD installed is a subset of cluster-autoscaler's `autoscaling.x-k8s.io/v1` schema: what the agent writes and
reads.

    python -m federation.testbed.provisioner --kubeconfig K --node-groups groups.yaml
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import yaml
from kubernetes import client, config, utils

from member_agent.clusters import hypernode, registered
from member_agent.provisioning import GROUP_LABEL, GROUP_PARAMETER, NODES_PARAMETER

GROUP, VERSION, PLURAL = "autoscaling.x-k8s.io", "v1", "provisioningrequests"
CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{PLURAL}.{GROUP}"},
    "spec": {"group": GROUP, "scope": "Namespaced",
             "names": {"kind": "ProvisioningRequest", "listKind": "ProvisioningRequestList", "plural": PLURAL,
                       "singular": "provisioningrequest", "shortNames": ["provreq", "provreqs"]},
             "versions": [{"name": VERSION, "served": True, "storage": True, "subresources": {"status": {}},
                           "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                               "spec": {"type": "object", "required": ["podSets", "provisioningClassName"],
                                        "properties": {
                                            "provisioningClassName": {"type": "string"},
                                            "parameters": {"type": "object",
                                                           "additionalProperties": {"type": "string"}},
                                            "podSets": {"type": "array", "items": {
                                                "type": "object", "required": ["count", "podTemplateRef"],
                                                "properties": {
                                                    "count": {"type": "integer", "format": "int32", "minimum": 1},
                                                    "podTemplateRef": {"type": "object", "properties": {
                                                        "name": {"type": "string"}}}}}}}},
                               "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}]}}


def install(testbed: Any) -> None:
    """The ProvisioningRequest CRD on this test bed (once; a second install finds it there)."""
    path = testbed.dir / "provisioningrequests.yaml"
    path.write_text(yaml.safe_dump(CRD))
    testbed.install_crd(path)


class StandIn:
    """Answers ProvisioningRequests with KWOK nodes. `groups`: as the agent's --node-groups file lists them (the
    capacity kept as written, for the nodes' allocatable); `fail`: answer every request Failed (an autoscaler out
    of stock); `hold`: leave every request unanswered (one that never comes)."""

    def __init__(self, api: client.ApiClient, groups: Sequence[dict[str, Any]], fail: bool = False,
                 hold: bool = False) -> None:
        self.api, self.fail, self.hold = api, fail, hold
        self.groups = {g["name"]: g for g in groups}
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.answered: list[str] = []  # namespace/name of each request answered, in order

    def step(self) -> int:
        """Answer every request not answered yet; how many were."""
        if self.hold:
            return 0
        done = 0
        for request in self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)["items"]:
            conditions = (request.get("status") or {}).get("conditions") or []
            if any(c.get("type") in ("Provisioned", "Failed") and c.get("status") == "True" for c in conditions):
                continue
            meta = request["metadata"]
            params = request["spec"].get("parameters") or {}
            group, nodes = self.groups.get(params.get(GROUP_PARAMETER, "")), int(params.get(NODES_PARAMETER, "0"))
            have = sum(1 for n in self.core.list_node(label_selector=GROUP_LABEL).items
                       if n.metadata.labels.get(GROUP_LABEL) == (group or {}).get("name"))
            if self.fail or group is None or have + nodes > group["maxNodes"]:
                why = "out of stock" if self.fail else f"node group {params.get(GROUP_PARAMETER)!r} cannot add " \
                                                       f"{nodes} node(s)"
                self._answer(meta, "Failed", "CapacityUnavailable", why)
            else:
                self._add(meta["name"], group, nodes, have)
                self._answer(meta, "Provisioned", "Provisioned", f"{nodes} node(s) of {group['name']} added")
            self.answered.append(f"{meta['namespace']}/{meta['name']}")
            done += 1
        return done

    def _add(self, request: str, group: dict[str, Any], nodes: int, have: int) -> None:
        labels = {**(group.get("labels") or {}), GROUP_LABEL: group["name"]}
        allocatable = {str(k): str(v) for k, v in group["capacity"].items()}
        allocatable.setdefault("pods", "110")
        names = [f"{group['name']}-{have + i}" for i in range(nodes)]
        for name in names:
            utils.create_from_dict(self.api, registered({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": allocatable, "capacity": allocatable}}))
        rack = hypernode(f"{request}-rack", 1, "", names, "Node")
        group_name, _, version = rack["apiVersion"].rpartition("/")
        self.custom.create_cluster_custom_object(group_name, version, "hypernodes", rack)

    def _answer(self, meta: dict[str, Any], kind: str, reason: str, message: str) -> None:
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, meta["namespace"], PLURAL, meta["name"],
            {"status": {"conditions": [{"type": kind, "status": "True", "reason": reason, "message": message,
                                        "lastTransitionTime": now}]}})

    async def run(self, period: float = 0.5) -> None:
        """Answer requests until cancelled."""
        while True:
            await asyncio.to_thread(self.step)
            await asyncio.sleep(period)


@click.command()
@click.option("--kubeconfig", required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--node-groups", "groups_file", required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--period", type=float, default=0.5, show_default=True)
def main(kubeconfig: str, groups_file: Path, period: float) -> None:
    """Stand in for cluster-autoscaler's ProvisioningRequests on a test bed."""
    stand_in = StandIn(config.new_client_from_config(config_file=kubeconfig), yaml.safe_load(groups_file.read_text()))
    asyncio.run(stand_in.run(period))


if __name__ == "__main__":
    main()
