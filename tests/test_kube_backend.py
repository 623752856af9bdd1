"""The Kubernetes backend against a real kube-apiserver (RBAC on) with nodes faked by KWOK, as the agent's
ServiceAccount bound to deploy/kubernetes/agent/rbac.yaml: every call it makes must be granted."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client

from federation.testbed import build
from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.kube import KubernetesBackend
from member_agent.pods import JOB_HASH, MANAGED_BY, job_hash
from tests.kubehelp import (
    GPU,
    JOBS,
    NODE,
    backend,
    core,
    drain,
    eventually,
    gang,
    gpu_cluster,
    next_update,
    pods,
    ready_nodes,
)


def test_the_api_server_says_the_release_it_was_built_from_and_nodes_have_kubelets_labels(kube: Testbed) -> None:
    """Issue 42 (11): unstamped, the test bed's API server said v0.0.0-master+$Format:%H$, which operators that
    check the server's version (Kueue among them) refuse; and (1) its nodes had none of the labels a kubelet
    gives every node, which Volcano's own examples select."""
    api = kube.admin()
    info = client.VersionApi(api).get_code()
    assert info.git_version == build.kube_version() and (info.major, info.minor) == tuple(
        build.kube_version().removeprefix("v").split(".")[:2])
    kube.apply([clusters.node("v0", {"cpu": "8"}, {"pool": "a"})])
    assert client.CoreV1Api(api).read_node("v0").metadata.labels == {
        "kubernetes.io/hostname": "v0", "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "pool": "a"}


async def test_reads_nodes_hypernodes_and_other_workloads_pods(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    kube.apply([clusters.pod("db", "n0-0-0", {"cpu": "60"})])  # another workload, bound by someone else
    b = await backend(kube, tmp_path)
    try:
        assert b.state.topology.tiers() == [1, 2, 3]
        assert b.state.topology.domains["n0-1"].nodes == ["n0-1-0", "n0-1-1"]
        assert b.state.free["n0-0-0"]["cpu"] == 4000  # the db pod holds 60 of 64 cores
    finally:
        await b.stop()


async def test_label_discovery_when_the_cluster_has_no_hypernodes(kube: Testbed, tmp_path: Path) -> None:
    kube.apply([clusters.node(f"m{i}", NODE, {"net/spine": "s0", "net/leaf": f"l{i // 2}"}) for i in range(4)])
    b = await backend(kube, tmp_path, topology_labels=("net/spine", "net/leaf"))
    try:
        assert b.state.topology.domains["leaf-l1"].nodes == ["m2", "m3"]
        assert b.state.topology.domains["spine-s0"].children == ["leaf-l0", "leaf-l1"]
    finally:
        await b.stop()


@pytest.mark.parametrize(("mode", "replicas", "hypernode", "tier"), [("hard", 2, "n0-0", 1), ("soft", 3, "n0", 2)])
async def test_a_gang_lands_inside_its_hypernode_and_kwok_runs_it_to_the_end(
        kube: Testbed, tmp_path: Path, mode: str, replicas: int, hypernode: str, tier: int) -> None:
    gpu_cluster(kube)  # leaves of two 8-GPU nodes: two pods fit a leaf, three need the spine
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        template = '{"metadata": {"labels": {"app": "train"}}, "spec": {"containers": [{"name": "c", ' \
                   '"image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}, "limits": ' \
                   '{"nvidia.com/gpu": "8"}}}]}}'
        await agent.assign(gang("train", replicas, mode, 1, duration="2s", template=template), attempt=1)
        seen: list[agent_pb2.JobUpdate] = []
        bound = await next_update(agent, agent_pb2.BOUND, seen)
        assert (bound.hypernode, bound.tier) == (hypernode, tier)
        made = pods(kube)
        assert set(made) == {f"train-1-a1-worker-{i}" for i in range(replicas)}
        for placement in bound.placements:
            pod = made[f"train-1-a1-worker-{placement.index}"]
            assert pod.spec.node_name == placement.node
            assert b.state.topology.lowest_common_domain([placement.node]).startswith(hypernode)
            assert pod.spec.scheduler_name == "federation-agent"
            assert {k: v for k, v in pod.metadata.labels.items() if not k.startswith("volcano.sh/")} == {
                "app": "train", MANAGED_BY: "east", JOB_HASH: job_hash("train-1"), "federation.dev/attempt": "1",
                "federation.dev/task": "worker", "federation.dev/index": str(placement.index)}
        await eventually(lambda: all(p.status.phase == "Running" for p in pods(kube).values()) or
                         all(p.status.phase == "Succeeded" for p in pods(kube).values()), what="KWOK runs the pods")
        done = await next_update(agent, agent_pb2.JOB_SUCCEEDED, seen)
        assert done.job_id == "train-1" and done.reason == "all pods completed"
        assert all(free[GPU] == 8 for free in agent.state.free.values())  # released
        await eventually(lambda: not pods(kube), what="the finished job's pods deleted")
    finally:
        await b.stop()


async def test_a_failed_creation_deletes_every_pod_and_rejects(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    # Someone else's pod has the name the gang's second pod will take: creating it fails with 409.
    core(kube).create_namespaced_pod(JOBS, {"metadata": {"name": "gang-1-a1-worker-1"},
                                            "spec": {"containers": [{"name": "c", "image": "x"}]}})
    try:
        await ready_nodes(b, 4)
        await agent.assign(gang("gang", 2), attempt=1)
        (rejected,) = drain(agent)
        assert rejected.type == agent_pb2.REJECTED
        # The step that failed and the API server's words; a conflict may pass, so it was tried again first.
        assert rejected.reason.startswith(f"creating pod {JOBS}/gang-1-a1-worker-1: 409 AlreadyExists: pods "
                                          f"\"gang-1-a1-worker-1\"")
        assert rejected.reason.endswith("(after 4 tries)") and not rejected.permanent
        await eventually(lambda: set(pods(kube)) == {"gang-1-a1-worker-1"}, what="the gang's own pod deleted")
        assert all(f[GPU] == 8 for f in agent.state.free.values())  # nothing stays booked
    finally:
        await b.stop()


def _other_pod(kube: Testbed) -> None:
    kube.apply([{**clusters.pod("other", "n0-0-0", {GPU: "8"}), "metadata": {"name": "other", "namespace": "default"}}])


def _cordon(kube: Testbed) -> None:
    core(kube).patch_node("n0-0-0", {"spec": {"unschedulable": True}})


def _taint(kube: Testbed) -> None:
    core(kube).patch_node("n0-0-0", {"spec": {"taints": [{"key": "maintenance", "effect": "NoSchedule"}]}})


def _not_ready(kube: Testbed) -> None:  # KWOK's stage for the annotation turns the node NotReady
    core(kube).patch_node("n0-0-0", {"metadata": {"annotations": {"federation.dev/testbed-not-ready": "true"}}})


SEEN: dict[Callable[[Testbed], None], Callable[[KubernetesBackend], bool]] = {
    _other_pod: lambda b: b.state.free["n0-0-0"][GPU] == 0,
    _cordon: lambda b: "n0-0-0" not in b.state.ready,
    _taint: lambda b: bool(b.state.topology.nodes["n0-0-0"].taints),
    _not_ready: lambda b: "n0-0-0" not in b.state.ready,
}


@pytest.mark.parametrize("change", list(SEEN), ids=lambda c: c.__name__.strip("_"))
async def test_a_change_in_the_cluster_moves_the_next_gang_without_a_restart(
        kube: Testbed, tmp_path: Path, change: Callable[[Testbed], None]) -> None:
    gpu_cluster(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        change(kube)  # to n0-0-0, in leaf n0-0, which a two-node gang takes first (ties break by name)
        await eventually(lambda: SEEN[change](b), what="the agent to see the change")
        await agent.assign(gang("next", 2), attempt=1)
        (bound,) = drain(agent)
        assert bound.type == agent_pb2.BOUND and bound.hypernode == "n0-1"
        if change is _taint:  # a gang tolerating the taint may still go there
            tolerant = gang("tolerant", 2)
            tolerant.spec.tasks[0].tolerations.add(key="maintenance", operator="Exists", effect="NoSchedule")
            await agent.assign(tolerant, attempt=1)
            (bound,) = drain(agent)
            assert bound.type == agent_pb2.BOUND and bound.hypernode == "n0-0"
    finally:
        await b.stop()


async def test_a_hypernode_added_at_run_time_is_placed_on(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube)
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        await agent.assign(gang("wide", 3), attempt=1)
        (rejected,) = drain(agent)
        assert rejected.type == agent_pb2.REJECTED  # no leaf holds three nodes
        kube.apply([clusters.node(f"m{i}", NODE) for i in range(3)])
        kube.apply([clusters.hypernode("rack-m", 1, "leaf", ["m0", "m1", "m2"], "Node")])
        await eventually(lambda: "rack-m" in b.state.topology.domains and len(b.state.ready) == 7,
                         what="the new HyperNode in the agent's tree")
        await agent.assign(gang("wide", 3), attempt=2)
        (bound,) = drain(agent)
        assert bound.type == agent_pb2.BOUND and bound.hypernode == "rack-m"
    finally:
        await b.stop()


@pytest.mark.parametrize(("action", "fault", "event"), [("RestartPod", "fail", "PodFailed"),
                                                        ("RestartTask", "delete", "PodEvicted")])
async def test_a_pod_failed_or_deleted_by_someone_else_is_answered_by_the_policy(
        kube: Testbed, tmp_path: Path, action: str, fault: str, event: str) -> None:
    gpu_cluster(kube, (1, 1, 4))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        policy = common_pb2.LifecyclePolicy(events=[event], action=action)
        await agent.assign(gang("job", 3, policies=[policy]), attempt=1)
        seen: list[agent_pb2.JobUpdate] = []
        await next_update(agent, agent_pb2.BOUND, seen)
        await eventually(lambda: all(p.status.phase == "Running" for p in pods(kube).values()), what="Running")
        first = {name: p.metadata.uid for name, p in pods(kube).items()}
        victim = "job-1-a1-worker-1"
        if fault == "fail":  # KWOK's stage fails the running pod
            core(kube).patch_namespaced_pod(victim, JOBS, {"metadata": {"annotations": {
                "federation.dev/testbed-fail": "0s"}}})
        else:
            core(kube).delete_namespaced_pod(victim, JOBS, body=client.V1DeleteOptions(grace_period_seconds=0))
        failed = await next_update(agent, agent_pb2.POD_FAILED, seen)
        assert failed.reason.startswith(f"{event}: ")
        restarted = await next_update(agent, agent_pb2.POD_RESTARTED, seen)
        assert restarted.reason.startswith(f"{action} after {event} on worker[1]")
        now = await eventually(lambda: {n: p.metadata.uid for n, p in pods(kube).items()
                                        if not p.metadata.deletion_timestamp and p.status.phase == "Running"}
                               if len(pods(kube)) == 3 else None, what="the restarted pods")
        if action == "RestartPod":  # only the failed pod is new
            assert set(now) == {"job-1-a1-worker-0", "job-1-a1-worker-1-r1", "job-1-a1-worker-2"}
            assert now["job-1-a1-worker-0"] == first["job-1-a1-worker-0"]
        else:  # every pod of the task is new
            assert set(now) == {f"job-1-a1-worker-{i}-r1" for i in range(3)}
    finally:
        await b.stop()
