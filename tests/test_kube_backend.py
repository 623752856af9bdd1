"""The Kubernetes backend against a local server speaking the Kubernetes REST paths it uses."""

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import config

from federation.v1 import agent_pb2, common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.kube import JOB_HASH, MANAGED_BY, KubernetesBackend, job_hash
from tests.fake_kube import FakeKube

GPU = "nvidia.com/gpu"


def objects() -> list[dict]:
    return clusters.tree("n", [1, 2, 2], {GPU: "8", "cpu": "64"}, {"pool": "gpu"}, ["spine", "leaf"])


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    objs = objects()
    other = clusters.pod("db", "n0-0-0", {"cpu": "60"})
    kube = FakeKube([o for o in objs if o["kind"] == "Node"], [o for o in objs if o["kind"] == "HyperNode"], [other])
    yield kube
    kube.close()


def backend(fake: FakeKube, tmp_path: Path, **kw: object) -> KubernetesBackend:
    api = config.new_client_from_config(config_file=str(fake.kubeconfig(tmp_path)))
    return KubernetesBackend(api, "east", "jobs", "federation-agent", **kw)  # type: ignore[arg-type]


def job(name: str, pods: int, tier: int = 1) -> common_pb2.Job:
    template = '{"metadata": {"labels": {"app": "train"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}'
    return common_pb2.Job(id=f"{name}-1", spec=common_pb2.JobSpec(
        name=name, queue="q", network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=tier),
        tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "8", "cpu": "4"},
                                   pod_template_json=template)]))


def updates(agent: Agent) -> list[agent_pb2.JobUpdate]:
    out = []
    while not agent.outbox.empty():
        message = agent.outbox.get_nowait()
        if message.HasField("job_update"):
            out.append(message.job_update)
    return out


def test_reads_nodes_hypernodes_and_other_pods(fake: FakeKube, tmp_path: Path) -> None:
    b = backend(fake, tmp_path, topology_labels=())
    assert b.state.topology.tiers() == [1, 2, 3]
    assert b.state.topology.domains["n0-1"].nodes == ["n0-1-0", "n0-1-1"]
    assert b.state.free["n0-0-0"]["cpu"] == 4000  # the db pod holds 60 of 64 cores


def test_label_discovery_without_the_hypernode_crd(tmp_path: Path) -> None:
    nodes = [clusters.node(f"m{i}", {GPU: "8"}, {"net/spine": "s0", "net/leaf": f"l{i // 2}"}) for i in range(4)]
    kube = FakeKube(nodes, None)
    try:
        b = backend(kube, tmp_path, topology_labels=("net/spine", "net/leaf"))
        assert b.state.topology.domains["leaf-l1"].nodes == ["m2", "m3"]
    finally:
        kube.close()


async def test_binds_the_whole_gang_then_reports_the_end(fake: FakeKube, tmp_path: Path) -> None:
    b = backend(fake, tmp_path, topology_labels=())
    agent = Agent("east", {}, b)
    b.start_watches(asyncio.get_running_loop())
    try:
        await agent.assign(job("train", 2), attempt=1)
        (bound,) = updates(agent)
        assert bound.type == agent_pb2.BOUND and bound.tier == 1
        posts = [path for method, path in fake.requests if method == "POST"]
        creates = [p for p in posts if p.endswith("/pods")]
        bindings = [p for p in posts if p.endswith("/binding")]
        assert len(creates) == 2 and len(bindings) == 2
        assert posts.index(bindings[0]) > posts.index(creates[-1])  # every pod exists before any is bound
        pods = {name: pod for (ns, name), pod in fake.pods.items() if ns == "jobs"}
        assert set(pods) == {"train-1-a1-worker-0", "train-1-a1-worker-1"}
        for placement in bound.placements:
            pod = pods[f"train-1-a1-worker-{placement.index}"]
            assert pod["spec"]["nodeName"] == placement.node
            assert pod["spec"]["schedulerName"] == "federation-agent"
            assert pod["metadata"]["labels"] == {"app": "train", MANAGED_BY: "east", JOB_HASH: job_hash("train-1"),
                                                 "federation.dev/attempt": "1", "federation.dev/task": "worker",
                                                 "federation.dev/index": str(placement.index)}
        fake.set_pod_phase("train-1-a1-worker-0", "Succeeded", "jobs")
        await asyncio.sleep(1.5)
        assert updates(agent) == []  # one pod done is not the job done
        fake.set_pod_phase("train-1-a1-worker-1", "Succeeded", "jobs")
        for _ in range(100):
            done = [u for u in updates(agent) if u.type == agent_pb2.JOB_SUCCEEDED]
            if done:
                break
            await asyncio.sleep(0.1)
        assert done and done[0].job_id == "train-1"
        assert agent.state.free["n0-0-1"][GPU] == 8  # released
    finally:
        b.stop()


async def test_a_failed_binding_deletes_every_pod_and_rejects(fake: FakeKube, tmp_path: Path) -> None:
    b = backend(fake, tmp_path, topology_labels=())
    agent = Agent("east", {}, b)
    fake.fail_binding.add("gang-1-a1-worker-1")
    await agent.assign(job("gang", 2), attempt=1)
    (rejected,) = updates(agent)
    assert rejected.type == agent_pb2.REJECTED
    assert rejected.reason == "binding failed: 409 Conflict: cannot bind gang-1-a1-worker-1"
    assert [k for k in fake.pods if k[0] == "jobs"] == []
    deletes = [p for m, p in fake.requests if m == "DELETE"]
    assert sorted(deletes) == ["/api/v1/namespaces/jobs/pods/gang-1-a1-worker-0",
                               "/api/v1/namespaces/jobs/pods/gang-1-a1-worker-1"]
    assert all(f[GPU] == 8 for n, f in agent.state.free.items())  # nothing stays booked


async def test_cancel_deletes_the_pods_and_node_loss_is_reported(fake: FakeKube, tmp_path: Path) -> None:
    b = backend(fake, tmp_path, topology_labels=())
    agent = Agent("east", {}, b)
    b.start_watches(asyncio.get_running_loop())
    try:
        await agent.assign(job("long", 2), attempt=1)
        (bound,) = updates(agent)
        node = bound.placements[0].node
        fake.set_node_ready(node, False)
        for _ in range(100):
            failed = [u for u in updates(agent) if u.type == agent_pb2.POD_FAILED]
            if failed:
                break
            await asyncio.sleep(0.1)
        assert failed and failed[0].reason == f"Unknown: node {node} lost"
        assert node not in agent.state.ready
        await agent.remove("long-1", 1, "cancelled")
        assert [k for k in fake.pods if k[0] == "jobs"] == []
    finally:
        b.stop()


async def test_a_failed_pod_is_recreated_under_a_new_name_and_bound_alone(fake: FakeKube, tmp_path: Path) -> None:
    b = backend(fake, tmp_path, topology_labels=())
    agent = Agent("east", {}, b)
    b.start_watches(asyncio.get_running_loop())
    spec = job("long", 2)
    spec.spec.policies.add(events=["PodFailed"], action="RestartPod")
    try:
        await agent.assign(spec, attempt=1)
        updates(agent)
        fake.set_pod_phase("long-1-a1-worker-1", "Failed", namespace="jobs")
        for _ in range(100):
            restarted = [u for u in updates(agent) if u.type == agent_pb2.POD_RESTARTED]
            if restarted:
                break
            await asyncio.sleep(0.1)
        assert restarted and restarted[0].retries == 1
        names = sorted(k[1] for k in fake.pods if k[0] == "jobs")
        assert names == ["long-1-a1-worker-0", "long-1-a1-worker-1-r1"]  # the other pod never stopped
        bound = fake.pods[("jobs", "long-1-a1-worker-1-r1")]["spec"].get("nodeName")
        assert bound == next(p.node for p in restarted[0].placements if p.index == 1)
    finally:
        b.stop()


async def test_a_restarted_agent_adopts_the_pods_it_created(fake: FakeKube, tmp_path: Path) -> None:
    first = Agent("east", {}, backend(fake, tmp_path, topology_labels=()))
    await first.assign(job("long", 2), attempt=1)
    (bound,) = updates(first)
    created = sorted(k for k in fake.pods if k[0] == "jobs")
    posts = len([1 for m, _ in fake.requests if m == "POST"])

    b = backend(fake, tmp_path, topology_labels=())  # the agent restarted: it reads the cluster again
    again = Agent("east", {}, b)
    b.start_watches(asyncio.get_running_loop())
    try:
        await again.assign(job("long", 2), attempt=1)  # the server assigns what it was not told about
        (adopted,) = updates(again)
        assert adopted.type == agent_pb2.BOUND and "adopted" in adopted.reason
        assert sorted((p.index, p.node) for p in adopted.placements) == sorted(
            (p.index, p.node) for p in bound.placements)
        assert sorted(k for k in fake.pods if k[0] == "jobs") == created
        assert len([1 for m, _ in fake.requests if m == "POST"]) == posts  # nothing created, nothing bound
        node = adopted.placements[0].node
        assert again.state.free[node][GPU] == 0  # counted once: the job's, not also another workload's
        for _, name in created:
            fake.set_pod_phase(name, "Succeeded", namespace="jobs")
        for _ in range(100):
            done = [u for u in updates(again) if u.type == agent_pb2.JOB_SUCCEEDED]
            if done:
                break
            await asyncio.sleep(0.1)
        assert done and again.state.free[node][GPU] == 8
    finally:
        b.stop()


async def wait_for_update(agent: Agent, kind: int) -> list[agent_pb2.JobUpdate]:
    sent: list[agent_pb2.JobUpdate] = []
    for _ in range(100):
        sent += updates(agent)
        if any(u.type == kind for u in sent):
            return sent
        await asyncio.sleep(0.1)
    raise AssertionError(f"no update of type {kind} in {[u.type for u in sent]}")


async def test_a_pod_stuck_pending_is_replaced_and_one_in_phase_unknown_is_lost(fake: FakeKube,
                                                                                tmp_path: Path) -> None:
    b = backend(fake, tmp_path, topology_labels=())
    agent = Agent("east", {}, b)
    b.start_watches(asyncio.get_running_loop())
    spec = job("long", 2)
    spec.spec.policies.add(events=["PodPending"], action="RestartPod").timeout.FromMilliseconds(1500)
    fake.stuck.add("long-1-a1-worker-1")  # say its image never arrives
    try:
        await agent.assign(spec, attempt=1)
        updates(agent)
        (restarted,) = [u for u in await wait_for_update(agent, agent_pb2.POD_RESTARTED)]
        assert restarted.reason.startswith("RestartPod after PodPending on worker[1]")
        assert sorted(k[1] for k in fake.pods if k[0] == "jobs") == ["long-1-a1-worker-0", "long-1-a1-worker-1-r1"]
        fake.set_pod_phase("long-1-a1-worker-0", "Unknown", namespace="jobs")  # its kubelet went quiet
        failed = [u for u in await wait_for_update(agent, agent_pb2.JOB_FAILED) if u.type != agent_pb2.JOB_FAILED]
        assert failed[0].reason == "Unknown: the pod's node stopped reporting"
    finally:
        b.stop()


async def test_a_completed_task_completes_the_job_by_policy(fake: FakeKube, tmp_path: Path) -> None:
    b = backend(fake, tmp_path, topology_labels=())
    agent = Agent("east", {}, b)
    b.start_watches(asyncio.get_running_loop())
    spec = job("mpi", 2)
    spec.spec.tasks.insert(0, common_pb2.TaskSpec(name="launcher", replicas=1, resources={"cpu": "1"}))
    spec.spec.tasks[0].policies.add(events=["TaskCompleted"], action="CompleteJob")
    try:
        await agent.assign(spec, attempt=1)
        updates(agent)
        fake.set_pod_phase("mpi-1-a1-worker-0", "Succeeded", namespace="jobs")  # a worker is not the launcher
        fake.set_pod_phase("mpi-1-a1-launcher-0", "Succeeded", namespace="jobs")
        (done,) = [u for u in await wait_for_update(agent, agent_pb2.JOB_SUCCEEDED)]
        assert done.reason == "CompleteJob after TaskCompleted of launcher: all its pods succeeded"
        assert [k for k in fake.pods if k[0] == "jobs"] == []  # the workers were stopped
    finally:
        b.stop()


async def test_a_restarted_agent_restarts_the_pods_its_gang_lost_under_job_unknown(fake: FakeKube,
                                                                                    tmp_path: Path) -> None:
    spec = job("long", 2)
    spec.spec.policies.add(events=["JobUnknown"], action="RestartTask")
    first = Agent("east", {}, backend(fake, tmp_path, topology_labels=()))
    await first.assign(spec, attempt=1)
    del fake.pods[("jobs", "long-1-a1-worker-1")]  # gone while no agent watched

    again = Agent("east", {}, backend(fake, tmp_path, topology_labels=()))
    await again.assign(spec, attempt=1)
    await asyncio.gather(*again._acting)
    adopted, restarted = updates(again)
    assert adopted.type == agent_pb2.BOUND and [p.index for p in adopted.placements] == [0]
    assert restarted.type == agent_pb2.POD_RESTARTED and restarted.retries == 1
    assert sorted(k[1] for k in fake.pods if k[0] == "jobs") == ["long-1-a1-worker-0", "long-1-a1-worker-1-r1"]


def _verb(method: str, path: str) -> tuple[str, str, str]:
    """(apiGroup, resource, verb) of one request, as the API server's authorizer sees it."""
    parts = path.strip("/").split("/")
    group = "" if parts[0] == "api" else parts[1]
    rest = parts[2:] if parts[0] == "api" else parts[3:]
    if rest[:1] == ["namespaces"]:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    verb = {"POST": "create", "DELETE": "delete", "WATCH": "watch"}.get(method) or ("get" if named else "list")
    return group, resource, verb


async def test_the_agent_role_grants_every_call_the_backend_makes(fake: FakeKube, tmp_path: Path) -> None:
    import yaml

    from tests.conftest import REPO

    b = backend(fake, tmp_path, topology_labels=())
    agent = Agent("east", {}, b)
    b.start_watches(asyncio.get_running_loop())
    await asyncio.sleep(0.5)
    await agent.assign(job("rbac", 2), attempt=1)
    fake.fail_binding.add("rbac2-1-a1-worker-1")
    await agent.assign(job("rbac2", 2), attempt=1)
    await agent.remove("rbac-1", 1, "done")
    b.stop()
    role = next(d for d in yaml.safe_load_all((REPO / "deploy" / "kubernetes" / "agent" / "rbac.yaml").read_text())
                if d["kind"] == "ClusterRole")
    granted = {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
               for v in rule["verbs"]}
    used = {_verb(method, path) for method, path in fake.requests}
    assert used <= granted, used - granted
    assert {("", "pods/binding", "create"), ("", "pods", "delete"), ("", "pods", "watch"), ("", "nodes", "watch"),
            ("topology.volcano.sh", "hypernodes", "list")} <= used
