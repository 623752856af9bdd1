"""Volcano's job plugins on a real API server: the objects and environment each makes, as Volcano's would."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from member_agent.agent import Agent
from member_agent.plugins import ssh_config
from tests.kubehelp import JOBS, backend, core, eventually, gpu_cluster, next_update, pods, ready_nodes

TEMPLATE = '{"spec": {"containers": [{"name": "c", "image": "pytorch"}]}}'


def job(plugins: dict[str, list[str]], tasks: dict[str, int]) -> common_pb2.Job:
    spec = common_pb2.JobSpec(name="ddp", queue="q",
                              plugins={n: common_pb2.PluginArgs(args=a) for n, a in plugins.items()})
    for name, replicas in tasks.items():
        spec.tasks.add(name=name, replicas=replicas, resources={"nvidia.com/gpu": "8"}, pod_template_json=TEMPLATE)
    return common_pb2.Job(id="ddp-1", spec=spec)


def env(pod: object) -> dict[str, str]:
    (container,) = pod.spec.containers  # type: ignore[attr-defined]
    return {e.name: e.value if e.value_from is None else f"<{e.value_from.config_map_key_ref.name}:"
            f"{e.value_from.config_map_key_ref.key}>" for e in container.env or []}


async def test_svc_env_ssh_and_pytorch_make_what_volcano_makes(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 4))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        await agent.assign(job({"svc": [], "env": [], "ssh": [], "pytorch": ["--port=29500"]},
                               {"master": 1, "worker": 3}), attempt=1)
        await next_update(agent, agent_pb2.BOUND, [])
        api = core(kube)
        service = api.read_namespaced_service("ddp-1", JOBS)
        assert service.spec.cluster_ip == "None"
        assert service.spec.selector == {"volcano.sh/job-name": "ddp-1", "volcano.sh/job-namespace": JOBS}
        hosts = api.read_namespaced_config_map("ddp-1-svc", JOBS).data
        workers = [f"ddp-1-worker-{i}.ddp-1" for i in range(3)]
        assert hosts == {"master.host": "ddp-1-master-0.ddp-1", "VC_MASTER_HOSTS": "ddp-1-master-0.ddp-1",
                         "VC_MASTER_NUM": "1", "worker.host": "\n".join(workers),
                         "VC_WORKER_HOSTS": ",".join(workers), "VC_WORKER_NUM": "3"}
        policy = client.NetworkingV1Api(kube.admin()).read_namespaced_network_policy("ddp-1", JOBS)
        assert policy.spec.ingress[0]._from[0].pod_selector.match_labels == service.spec.selector
        secret = api.read_namespaced_secret("ddp-1-ssh", JOBS)
        assert set(secret.data) == {"id_rsa", "id_rsa.pub", "config"}
        made = pods(kube)
        master, worker = made["ddp-1-a1-master-0"], made["ddp-1-a1-worker-2"]
        assert (worker.spec.hostname, worker.spec.subdomain) == ("ddp-1-worker-2", "ddp-1")
        from_hosts = {k: f"<ddp-1-svc:{k}>" for k in ("VC_MASTER_HOSTS", "VC_MASTER_NUM", "VC_WORKER_HOSTS",
                                                     "VC_WORKER_NUM")}
        assert env(master) == {"VK_TASK_INDEX": "0", "VC_TASK_INDEX": "0", **from_hosts,
                               "MASTER_ADDR": "ddp-1-master-0.ddp-1", "MASTER_PORT": "29500", "WORLD_SIZE": "4",
                               "RANK": "0"}
        assert env(worker)["RANK"] == "3" and env(worker)["VC_TASK_INDEX"] == "2"
        mounts = {m.mount_path: (m.name, m.sub_path) for m in worker.spec.containers[0].volume_mounts}
        assert mounts["/etc/volcano"] == ("ddp-1-svc", None) and mounts["/root/.ssh"] == ("ddp-1-ssh", ".ssh")
        assert [p.container_port for p in worker.spec.containers[0].ports] == [29500]
        # Everything the job made is owned by its anchor, so it goes with the job.
        anchor = api.read_namespaced_config_map("ddp-1", JOBS)
        for obj in (service, secret, master, api.read_namespaced_config_map("ddp-1-svc", JOBS)):
            assert [(o.kind, o.name, o.uid) for o in obj.metadata.owner_references] == [
                ("ConfigMap", "ddp-1", anchor.metadata.uid)]
        await agent.remove("ddp-1", 1, "cancelled")
        await eventually(lambda: not api.list_namespaced_service(JOBS).items
                         and not api.list_namespaced_secret(JOBS).items and not pods(kube),
                         what="the garbage collector to remove the job's objects")
    finally:
        await b.stop()


async def test_mpi_gives_the_master_its_workers_and_opens_ssh(kube: Testbed, tmp_path: Path) -> None:
    gpu_cluster(kube, (1, 1, 4))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        await agent.assign(job({"mpi": ["--master=launcher", "--worker=mpiworker"], "svc": [], "ssh": []},
                               {"launcher": 1, "mpiworker": 2}), attempt=1)
        await next_update(agent, agent_pb2.BOUND, [])
        made = pods(kube)
        launcher, worker = made["ddp-1-a1-launcher-0"], made["ddp-1-a1-mpiworker-1"]
        assert env(launcher)["MPI_HOST"] == "ddp-1-mpiworker-0.ddp-1,ddp-1-mpiworker-1.ddp-1"
        assert "MPI_HOST" not in env(worker)
        assert [p.container_port for p in worker.spec.containers[0].ports] == [22]
        hostfile = core(kube).read_namespaced_config_map("ddp-1-svc", JOBS).data["mpiworker.host"]
        assert hostfile == "ddp-1-mpiworker-0.ddp-1\nddp-1-mpiworker-1.ddp-1"
    finally:
        await b.stop()


def test_the_ssh_config_names_every_host() -> None:
    spec = job({"ssh": []}, {"master": 1, "worker": 2}).spec
    assert ssh_config("ddp-1", spec) == (
        "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n"
        "Host ddp-1-master-0\n  HostName ddp-1-master-0.ddp-1\n"
        "Host ddp-1-worker-0\n  HostName ddp-1-worker-0.ddp-1\nHost ddp-1-worker-1\n  HostName ddp-1-worker-1.ddp-1\n")


async def test_ray_pytorch_wait_for_master_and_svc_without_hosts_env(kube: Testbed, tmp_path: Path) -> None:
    """Issue 28 (4): the plugins and flags Volcano's own examples use, carried out as Volcano does."""
    gpu_cluster(kube, (1, 1, 4))
    b = await backend(kube, tmp_path)
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, 4)
        ray = job({"ray": ["--headContainer=c", "--workerContainer=c"], "svc": ["--inject-hosts-env=false"]},
                  {"head": 1, "worker": 2})
        await agent.assign(ray, attempt=1)
        await next_update(agent, agent_pb2.BOUND, [])
        api = core(kube)
        service = api.read_namespaced_service("ddp-1-head-svc", JOBS)
        assert service.spec.selector == {"volcano.sh/job-name": "ddp-1", "volcano.sh/job-namespace": JOBS,
                                         "volcano.sh/task-spec": "head"}
        assert [(p.name, p.port) for p in service.spec.ports] == [("gcs", 6379), ("dashboard", 8265),
                                                                  ("client-server", 10001)]
        made = pods(kube)
        head, worker = made["ddp-1-a1-head-0"], made["ddp-1-a1-worker-1"]
        assert head.spec.containers[0].command[-1].startswith("ray start --head --block")
        assert [p.container_port for p in head.spec.containers[0].ports] == [6379, 8265, 10001]
        assert worker.spec.containers[0].command[-1] == "ray start --block --address=ddp-1-head-0.ddp-1:6379"
        assert not [k for k in env(worker) if k.startswith("VC_")]  # --inject-hosts-env=false
        mounts = [m.mount_path for m in worker.spec.containers[0].volume_mounts]
        assert "/etc/volcano" in mounts  # the hosts file is still there
        await agent.remove("ddp-1", 1, "done")
        await eventually(lambda: not pods(kube), what="the ray job's pods to go")

        torch = job({"pytorch": ["--wait-master-enabled=true", "--wait-master-timeout=600"]},
                    {"master": 1, "worker": 2})
        torch.id = "ddp-2"
        await agent.assign(torch, attempt=1)
        await eventually(lambda: len(pods(kube)) == 3, what="the pytorch job's pods")
        made = pods(kube)
        master, worker = made["ddp-2-a1-master-0"], made["ddp-2-a1-worker-0"]
        assert not master.spec.init_containers
        (wait,) = worker.spec.init_containers
        assert (wait.name, wait.image) == ("wait-for-master", "busybox:1.36.1")
        assert "nc -z ddp-2-master-0.ddp-2 23456" in wait.command[-1] and "600" in wait.command[-1]
    finally:
        await b.stop()


def test_plugin_flags_are_checked_as_volcano_reads_them() -> None:
    from federation.validation import Violations, check_job_spec

    def problems(plugins: dict[str, list[str]], tasks: dict[str, int]) -> list[str]:
        v = Violations()
        check_job_spec(v, "spec", job(plugins, tasks).spec)
        return [f"{i.field}: {i.description}" for i in v.items]

    assert problems({"ray": []}, {"head": 1, "worker": 2}) == []
    assert problems({"ray": ["--head=leader"]}, {"head": 1}) == [
        "spec.plugins['ray']: the job has no head task 'leader' (--head names it)"]
    assert problems({"pytorch": ["--wait-master-timeout=0"]}, {"master": 1}) == [
        "spec.plugins['pytorch']: --wait-master-timeout is a number of seconds (1-86400), got '0'"]
    assert problems({"svc": ["--inject-hosts-env=maybe"]}, {"w": 1}) == [
        "spec.plugins['svc']: --inject-hosts-env is true or false, got 'maybe'"]
