"""MIG slices on the real API server with KWOK nodes (issue 31): nodes publish them as NVIDIA's device plugin does
(the mixed strategy's per-profile resources, the single strategy's `nvidia.com/gpu` on nodes whose product label
names the profile); pods asking for a profile are bound to the nodes that carry it, with the profile requested on
their containers."""

from __future__ import annotations

from pathlib import Path

from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from tests.kubehelp import GPU, backend, next_update, pods, ready_nodes

SLICE = "nvidia.com/mig-1g.10gb"
PRODUCT = "nvidia.com/gpu.product"
SINGLE = "H100-80GB-HBM3-MIG-1g.10gb"
BASE = {"cpu": "64", "memory": "512Gi", "pods": "110"}


def mig_job(name: str, replicas: int, resources: dict[str, str], node_selector: dict[str, str] | None = None
            ) -> common_pb2.Job:
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", annotations={"federation.dev/sim-duration": "600s"},
        tasks=[common_pb2.TaskSpec(name="infer", replicas=replicas, resources=resources,
                                   node_selector=node_selector or {})]))


async def test_mig_pods_are_bound_to_the_nodes_that_publish_their_profile(kube: Testbed, tmp_path: Path) -> None:
    kube.apply([clusters.node("whole", {GPU: "8", **BASE}),
                clusters.node("mixed", {SLICE: "14", "nvidia.com/mig-3g.40gb": "2", **BASE},
                              {"nvidia.com/mig.strategy": "mixed"}),
                clusters.node("single", {GPU: "14", **BASE}, {"nvidia.com/mig.strategy": "single", PRODUCT: SINGLE}),
                clusters.hypernode("rack", 1, "rack", ["whole", "mixed", "single"], "Node")])
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 3)
        await agent.assign(mig_job("mixed-slices", 3, {SLICE: "2", "cpu": "1"}), attempt=1)
        await next_update(agent, agent_pb2.BOUND, seen)
        await agent.assign(mig_job("single-slices", 2, {GPU: "1", "cpu": "1"}, {PRODUCT: SINGLE}), attempt=1)
        await next_update(agent, agent_pb2.BOUND, seen)
        made = pods(kube)
        mixed = [p for n, p in made.items() if n.startswith("mixed-slices")]
        single = [p for n, p in made.items() if n.startswith("single-slices")]
        assert len(mixed) == 3 and {p.spec.node_name for p in mixed} == {"mixed"}
        assert all(p.spec.containers[0].resources.requests[SLICE] == "2" for p in mixed)
        assert len(single) == 2 and {p.spec.node_name for p in single} == {"single"}
        assert b.state.free["mixed"][SLICE] == 14 - 6
        # More slices of the profile than the node has left: refused, whatever whole GPUs are free elsewhere.
        await agent.assign(mig_job("too-many", 1, {SLICE: "9", "cpu": "1"}), attempt=1)
        refused = await next_update(agent, agent_pb2.REJECTED, seen)
        assert SLICE in refused.reason
    finally:
        await b.stop()
