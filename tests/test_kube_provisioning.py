"""Issue 46 (4), capacity provisioned on demand, the agent's half on the real API server with KWOK nodes: a gang the
federation sent to be provisioned that does not fit as the cluster is asks the autoscaler for its nodes with a
ProvisioningRequest (a PodTemplate per task), is bound on the nodes the test bed's stand-in adds, and says on its
pods which request it consumes; a request that fails or does not come in time sends the gang back with the
reason, and nothing of the ask is left behind."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from kubernetes import client

from federation.testbed import provisioner
from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.provisioning import CLASS, CLASS_ANNOTATION, CONSUME, GROUP_LABEL, NodeGroup
from tests.kubehelp import GPU, JOBS, backend, eventually, gang, gpu_cluster, next_update, pods, ready_nodes

GROUPS = [{"name": "h100", "maxNodes": 3, "capacity": {GPU: "8", "cpu": "64", "memory": "512Gi"},
           "labels": {"nvidia.com/gpu.product": "H100"}}]
NODE_GROUPS = [NodeGroup("h100", 3, {GPU: 8, "cpu": 64_000, "memory": 512 * 2**30}, {"nvidia.com/gpu.product": "H100"})]


def provisioned(job: common_pb2.Job, check: str = "PENDING") -> common_pb2.Job:
    """The job as the federation sends it when it chose this cluster's node groups for it."""
    job.status.admission_checks.append(common_pb2.AdmissionCheckState(name="provisioning", state=check))
    return job


def requests(kube: Testbed) -> list[dict[str, Any]]:
    return client.CustomObjectsApi(kube.admin()).list_namespaced_custom_object(
        provisioner.GROUP, provisioner.VERSION, JOBS, provisioner.PLURAL)["items"]


def templates(kube: Testbed) -> list[str]:
    return [t.metadata.name for t in client.CoreV1Api(kube.admin()).list_namespaced_pod_template(JOBS).items]


async def test_a_gang_that_does_not_fit_is_bound_on_the_nodes_it_asked_for(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 1))  # one node of 8 GPUs
    provisioner.install(kube)
    stand_in = provisioner.StandIn(kube.admin(), GROUPS)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b, node_groups=NODE_GROUPS, provision_timeout=120)
    seen: list[agent_pb2.JobUpdate] = []
    answering = asyncio.create_task(stand_in.run(0.2))
    try:
        await ready_nodes(b, 1)
        assert [(g.name, g.can_add) for g in agent.inventory().inventory.node_groups] == [("h100", 3)]
        await agent.assign(provisioned(gang("big", 2, mode="", duration="600s")), attempt=1)
        asked = await next_update(agent, agent_pb2.PREPARING, seen, timeout=60)
        assert asked.reason == ("asked the autoscaler for 2 node(s) of node group h100 (ProvisioningRequest "
                                "fed-big-1-1); it is placed when they join")
        bound = await next_update(agent, agent_pb2.BOUND, seen, timeout=120)
        assert bound.job_id == "big-1" and bound.attempt == 1
        assert sorted(p.node for p in bound.placements) == ["h100-0", "h100-1"]
        assert bound.reason == ("placed once the autoscaler provisioned 2 node(s) of node group h100 "
                                "(ProvisioningRequest fed-big-1-1)")
        assert stand_in.answered == [f"{JOBS}/fed-big-1-1"]
        made = [p for p in pods(kube).values() if p.metadata.name.startswith("big")]
        assert len(made) == 2
        assert all(p.metadata.annotations[CONSUME] == "fed-big-1-1" and
                   p.metadata.annotations[CLASS_ANNOTATION] == CLASS for p in made)
        # Its ask withdrawn once its pods hold the nodes, templates too; the group has one node left to add.
        await eventually(lambda: not requests(kube) and not templates(kube), what="the request withdrawn")
        nodes = client.CoreV1Api(kube.admin()).list_node(label_selector=GROUP_LABEL).items
        assert sorted(n.metadata.name for n in nodes) == ["h100-0", "h100-1"]
        assert [(g.name, g.can_add) for g in agent.inventory().inventory.node_groups] == [("h100", 1)]
        # A gang whose check passed (its room was free when it was sent) is not provisioned: it goes back.
        await agent.assign(provisioned(gang("other", 2, mode=""), check="READY"), attempt=1)
        back = await next_update(agent, agent_pb2.REJECTED, seen)
        assert back.job_id == "other-1" and "asked the autoscaler" not in back.reason
        assert not requests(kube)
    finally:
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answering
        await b.stop()


async def test_an_ask_that_fails_or_does_not_come_sends_the_gang_back(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 1))
    provisioner.install(kube)
    stand_in = provisioner.StandIn(kube.admin(), GROUPS, fail=True)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b, node_groups=NODE_GROUPS, provision_timeout=4)
    seen: list[agent_pb2.JobUpdate] = []
    answering = asyncio.create_task(stand_in.run(0.2))
    try:
        await ready_nodes(b, 1)
        await agent.assign(provisioned(gang("refused", 2, mode="")), attempt=1)
        back = await next_update(agent, agent_pb2.REJECTED, seen, timeout=60)
        assert back.job_id == "refused-1" and not back.permanent
        assert back.reason.endswith("; the autoscaler could not provision 2 node(s) of node group h100 "
                                    "(ProvisioningRequest fed-refused-1-1): out of stock")
        await eventually(lambda: not requests(kube) and not templates(kube), what="the failed request withdrawn")
        # An autoscaler that never answers: the gang goes back once its time is up.
        stand_in.fail, stand_in.hold = False, True
        await agent.assign(provisioned(gang("late", 3, mode="")), attempt=1)
        await next_update(agent, agent_pb2.PREPARING, seen, timeout=60)
        assert len(requests(kube)) == 1
        late = await next_update(agent, agent_pb2.REJECTED, seen, timeout=60)
        assert late.reason.endswith("; 3 node(s) of node group h100 (ProvisioningRequest fed-late-1-1) did not "
                                    "come within 4 s")
        await eventually(lambda: not requests(kube) and not templates(kube), what="the late request withdrawn")
        # More than the group can ever add: nothing is asked.
        await agent.assign(provisioned(gang("huge", 4, mode="")), attempt=1)
        huge = await next_update(agent, agent_pb2.REJECTED, seen)
        assert huge.reason.endswith("; no node group here can add the nodes it needs now")
        assert not requests(kube) and agent._asks == {}
    finally:
        answering.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await answering
        await b.stop()
