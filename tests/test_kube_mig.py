"""MIG slices on the real API server with KWOK nodes (issue 31): nodes publish them as NVIDIA's device plugin does
(the mixed strategy's per-profile resources, the single strategy's `nvidia.com/gpu` on nodes whose product label
names the profile); pods asking for a profile are bound to the nodes that carry it, with the profile requested on
their containers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from tests.kubehelp import GPU, backend, core, eventually, next_update, pods, ready_nodes

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


H100 = {"nvidia.com/mig.capable": "true", "nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.memory": "81559",
        "nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success"}


def mig_manager(kube: Testbed) -> subprocess.Popen[bytes]:
    """The test bed's stand-in for NVIDIA's MIG manager and device plugin, as a process of its own."""
    return subprocess.Popen([sys.executable, "-m", "federation.testbed.migmanager", "--kubeconfig",
                             str(kube.admin_kubeconfig), "--delay", "1"])


def node_of(kube: Testbed, name: str) -> Any:
    return core(kube).read_node(name)


async def test_idle_gpus_are_repartitioned_for_a_profile_the_cluster_lacks(kube: Testbed, tmp_path: Path) -> None:
    kube.apply([clusters.node("a-busy", {GPU: "8", **BASE}, {**H100, "nvidia.com/gpu.count": "8"}),
                clusters.node("b-idle", {GPU: "8", **BASE}, {**H100, "nvidia.com/gpu.count": "8"}),
                clusters.node("c-plain", {GPU: "8", **BASE}),
                clusters.hypernode("rack", 1, "rack", ["a-busy", "b-idle", "c-plain"], "Node"),
                clusters.pod("other", "a-busy", {GPU: "1"})])
    manager = mig_manager(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 3)
        await eventually(lambda: b.state.used_on("a-busy").get(GPU), what="the other workload's GPU counted")
        assert agent.inventory().inventory.partitionable[-1].max_free.amounts[SLICE] == 56  # b-idle's 8 GPUs x 7
        await agent.assign(mig_job("slices", 3, {SLICE: "2", "cpu": "1"}), attempt=1)
        preparing = await next_update(agent, agent_pb2.PREPARING, seen)
        assert "node b-idle to all-1g.10gb" in preparing.reason and f"6 {SLICE}" in preparing.reason
        assert node_of(kube, "b-idle").metadata.labels["nvidia.com/mig.config"] == "all-1g.10gb"
        bound = await next_update(agent, agent_pb2.BOUND, seen, timeout=120)
        assert "repartitioned node b-idle to all-1g.10gb" in bound.reason
        made = [p for n, p in pods(kube).items() if n.startswith("slices")]
        assert len(made) == 3 and {p.spec.node_name for p in made} == {"b-idle"}
        node = node_of(kube, "b-idle")
        assert node.status.allocatable[SLICE] == "56" and node.status.allocatable[GPU] == "0"
        assert node.metadata.labels["nvidia.com/mig.config.state"] == "success"
        assert node_of(kube, "a-busy").metadata.labels["nvidia.com/mig.config"] == "all-disabled"  # not idle
        assert b.state.free["b-idle"][SLICE] == 56 - 6
    finally:
        manager.terminate()
        manager.wait()
        await b.stop()


async def test_a_failed_or_silent_cut_sends_the_gang_back_and_a_cut_under_way_is_waited_for(
        kube: Testbed, tmp_path: Path) -> None:
    # x-uncounted lacks GPU Feature Discovery's GPU count, which the stand-in needs: it fails there.
    kube.apply([clusters.node("x-uncounted", {GPU: "8", **BASE}, H100),
                clusters.node("y-idle", {GPU: "8", **BASE}, {**H100, "nvidia.com/gpu.count": "8"}),
                clusters.hypernode("rack", 1, "rack", ["x-uncounted", "y-idle"], "Node")])
    manager = mig_manager(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    seen: list[agent_pb2.JobUpdate] = []
    try:
        await ready_nodes(b, 2)
        await agent.assign(mig_job("first", 1, {SLICE: "4", "cpu": "1"}), attempt=1)
        assert "node x-uncounted to all-1g.10gb" in (await next_update(agent, agent_pb2.PREPARING, seen)).reason
        refused = await next_update(agent, agent_pb2.REJECTED, seen, timeout=120)
        assert "MIG manager failed to repartition node(s) x-uncounted" in refused.reason
        manager.terminate()
        manager.wait()
        # No MIG manager now: y-idle is labelled and never reports; the failed node is left alone.
        agent.mig_wait = 2
        await agent.assign(mig_job("second", 1, {SLICE: "4", "cpu": "1"}), attempt=1)
        assert "node y-idle to all-1g.10gb" in (await next_update(agent, agent_pb2.PREPARING, seen)).reason
        silent = await next_update(agent, agent_pb2.REJECTED, seen, timeout=120)
        assert "y-idle did not report their new MIG layout within 2 s" in silent.reason
        # the agent's state, rebuilt from the node as labelled, offers nothing on a node being cut
        await eventually(lambda: b.state.topology.nodes["y-idle"].labels.get("nvidia.com/mig.config.state")
                         == "pending", what="the agent's state rebuilt with y-idle's labels")
        assert "y-idle" not in b.state.ready
        assert not [p for p in pods(kube) if p.startswith(("first", "second"))]
        # y-idle is still being cut (as a restarted agent would find it): the next gang waits for it as it is,
        # and runs once a MIG manager finishes the job.
        agent.mig_wait = 600
        await agent.assign(mig_job("third", 1, {SLICE: "4", "cpu": "1"}), attempt=1)
        assert "node y-idle to all-1g.10gb" in (await next_update(agent, agent_pb2.PREPARING, seen)).reason
        manager = mig_manager(kube)
        bound = await next_update(agent, agent_pb2.BOUND, seen, timeout=120)
        assert "repartitioned node y-idle to all-1g.10gb" in bound.reason
        assert [p.spec.node_name for n, p in pods(kube).items() if n.startswith("third")] == ["y-idle"]
    finally:
        manager.terminate()
        manager.wait()
        await b.stop()
