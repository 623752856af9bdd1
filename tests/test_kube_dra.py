"""Dynamic Resource Allocation on the real API server with KWOK nodes (issue 31): the test bed publishes
ResourceSlices for its nodes as a driver would; a gang whose pods name ResourceClaimTemplates gets each pod's
claims made, devices allocated on the pod's node by the DeviceClass's and the claim's CEL selectors, the allocation
written to the claims' status (reserved for the pod), and only then is bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubernetes import client

from federation.kernel.dra import API, class_resource
from federation.testbed.cluster import Testbed
from federation.testbed.dra import DRIVER, device_class, resource_slices
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from tests.kubehelp import JOBS, backend, eventually, gpu_cluster, next_update, pods, ready_nodes


def model_class(model: str) -> dict[str, Any]:
    """A DeviceClass per GPU model, as clusters offering several models define them."""
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": model.lower()},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}" && '
                                                          f'device.attributes["{DRIVER}"].model == "{model}"'}}]}}


def claim_template(name: str, device_class: str, count: int, selector: str = "") -> str:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    return json.dumps({"apiVersion": API, "kind": "ResourceClaimTemplate", "metadata": {"name": name},
                       "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}}}})


def dra_job(name: str, pods: int, template: str) -> common_pb2.Job:
    pod = json.dumps({"spec": {
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": json.loads(template)["metadata"]["name"]}],
        "containers": [{"name": "train", "image": "x", "resources": {"requests": {"cpu": "1"},
                                                                      "claims": [{"name": "gpus"}]}}]}})
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations={"federation.dev/sim-duration": "600s"},
        resource_claim_templates_json=[template],
        tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={"cpu": "1"}, pod_template_json=pod)]))


def claims(kube: Testbed) -> dict[str, Any]:
    found = client.CustomObjectsApi(kube.admin()).list_namespaced_custom_object(
        "resource.k8s.io", "v1", JOBS, "resourceclaims")
    return {c["metadata"]["name"]: c for c in found["items"]}


async def test_claims_are_allocated_on_the_pods_nodes_then_the_pods_bound(kube: Testbed, tmp_path: Path) -> None:
    h100, a100 = gpu_cluster(kube, (1, 1, 2))  # two nodes: four H100s on one, four A100s on the other
    kube.apply([model_class("H100"), model_class("A100"), *resource_slices([h100], 4, "H100"),
                *resource_slices([a100], 4, "A100", memory="40Gi")])
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 2)
        offered = class_resource("h100"), class_resource("a100")
        await eventually(lambda: all(b.state.free[n].get(r) == 4 for n, r in zip((h100, a100), offered, strict=True)),
                         what="each node offering its model's four devices")
        capacity, _, _ = b.state.totals()
        assert (capacity[offered[0]], capacity[offered[1]]) == (4, 4)  # what the federation's inventory shows

        at_least_64gi = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0'
        await agent.assign(dra_job("train", 2, claim_template("two-h100", "h100", 2, at_least_64gi)), attempt=1)
        await next_update(agent, agent_pb2.BOUND, seen)
        made = pods(kube)
        assert len(made) == 2 and {p.spec.node_name for p in made.values()} == {h100}
        held = claims(kube)
        assert len(held) == 2
        devices = []
        for name, pod in made.items():
            (ref,) = pod.spec.resource_claims
            claim = held[ref.resource_claim_name]
            assert claim["metadata"]["ownerReferences"][0]["uid"] == pod.metadata.uid
            status = claim["status"]
            assert status["reservedFor"] == [{"resource": "pods", "name": name, "uid": pod.metadata.uid}]
            terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
            assert terms[0]["matchFields"][0]["values"] == [h100]
            results = status["allocation"]["devices"]["results"]
            assert len(results) == 2 and all((r["driver"], r["pool"], r["request"]) == (DRIVER, h100, "gpus")
                                             for r in results)
            devices += [r["device"] for r in results]
        assert sorted(devices) == [f"gpu-{i}" for i in range(4)]  # each device to one claim
        assert b.state.free[h100][offered[0]] == 0

        # No H100 left: the next gang is refused here; the A100s' 40 GiB fail the selector of a claim asking 64.
        await agent.assign(dra_job("more", 1, claim_template("one-h100", "h100", 1)), attempt=1)
        refused = await next_update(agent, agent_pb2.REJECTED, seen)
        assert class_resource("h100") in refused.reason and "no device of this cluster" not in refused.reason
        assert not refused.permanent  # room lacking now: may pass
        await agent.assign(dra_job("big", 1, claim_template("one-a100", "a100", 1, at_least_64gi)), attempt=1)
        refused = await next_update(agent, agent_pb2.REJECTED, seen)
        assert "selectors accept" in refused.reason
        # Issue 42 (6): no A100 of this cluster has 64 GiB, free or not: said as such, not as room lacking now.
        assert "no device of this cluster, on any node, free or not, matches it" in refused.reason, refused.reason
        assert refused.permanent  # never offered this cluster again: not re-dispatched every few seconds
        assert set(claims(kube)) == set(held)  # the refused gang's claims were taken back
        # An A100 claim with no such selector is allocated on the A100 node.
        await agent.assign(dra_job("small", 1, claim_template("one-a100", "a100", 1)), attempt=1)
        await next_update(agent, agent_pb2.BOUND, seen)
        (small,) = [c for n, c in claims(kube).items() if n not in held]
        assert [(r["pool"], r["device"]) for r in small["status"]["allocation"]["devices"]["results"]] == [
            (a100, "gpu-0")]
    finally:
        await b.stop()


async def test_a_claim_narrower_than_its_class_places_each_pod_where_a_matching_device_is(
        kube: Testbed, tmp_path: Path) -> None:
    """Issue 42 (6): each node has two devices of the class and one of them with the memory a claim's own selector
    asks: the gang's two pods go one to a node and are bound (the class's count alone put both on one node, and
    the agent refused the gang at binding), as kube-scheduler v1.34 binds them."""
    first, second = gpu_cluster(kube, (1, 1, 2), prefix="m")
    kube.apply([device_class(), *[{
        "apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": f"{node}-mixed"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {"model": {"string": "H100"}},
                              "capacity": {"memory": {"value": memory}}} for i, memory in enumerate(("40Gi", "80Gi"))]}}
        for node in (first, second)]])
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 2)
        offered = class_resource(DRIVER)
        await eventually(lambda: all(b.state.free[n].get(offered) == 2 for n in (first, second)),
                         what="each node offering its two devices")
        at_least_64gi = f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0'
        await agent.assign(dra_job("pair", 2, claim_template("big-one", DRIVER, 1, at_least_64gi)), attempt=1)
        bound = await next_update(agent, agent_pb2.BOUND, seen)
        assert bound.type == agent_pb2.BOUND, [(u.type, u.reason) for u in seen]
        made = pods(kube)
        assert sorted(p.spec.node_name for p in made.values()) == sorted((first, second))
        allocated = sorted((r["pool"], r["device"]) for c in claims(kube).values()
                           for r in c["status"]["allocation"]["devices"]["results"])
        assert allocated == sorted([(first, "gpu-1"), (second, "gpu-1")])  # the 80 GiB device of each node
        # and nothing else of the class's matching devices is left: a third such pod is refused as room lacking now
        await agent.assign(dra_job("third", 1, claim_template("big-two", DRIVER, 1, at_least_64gi)), attempt=1)
        refused = await next_update(agent, agent_pb2.REJECTED, seen)
        assert not refused.permanent, refused.reason
    finally:
        await b.stop()
