"""Volcano's job plugins, as Volcano's job controller applies them: what each adds to a gang's pods and
which objects it makes beside them. Pure: the backend creates what this returns.

A Volcano job's name is unique in its namespace; here the federation's job id plays that part (two
submissions of one manifest are two jobs), so hostnames, the Service and the plugins' ConfigMap and
Secret are named after it exactly as Volcano names them after the job:
- `env`: `VK_TASK_INDEX` and `VC_TASK_INDEX`, the pod's index in its task.
- `svc`: each pod's hostname `<job>-<task>-<index>` and subdomain `<job>` (unless its template sets
  them), a headless Service `<job>` selecting the job's pods, a ConfigMap `<job>-svc` with each
  task's hosts (`<task>.host`, one per line: the MPI hostfile; `VC_<TASK>_HOSTS`, `VC_<TASK>_NUM`)
  mounted at /etc/volcano and exported as environment variables (not with `--inject-hosts-env=false`: a
  job of many tasks would pass the environment's size limit), and a NetworkPolicy `<job>` letting
  only the job's pods in (`--disable-network-policy` leaves it out).
- `ssh`: a Secret `<job>-ssh` with an RSA key pair, authorized_keys and an ssh config naming every
  host, mounted at /root/.ssh (`--ssh-key-file-path`, or /etc/volcano/.ssh with `--no-root`).
- `pytorch`: `MASTER_ADDR` (the master task's first pod), `MASTER_PORT` (23456), `WORLD_SIZE`
  (master and worker replicas) and `RANK` (master 0, worker i is i+1), and the port opened; with
  `--wait-master-enabled`, each worker pod first runs an init container (`--wait-master-image`, busybox) that
  waits until the master's port answers, at most `--wait-master-timeout` seconds (300).
- `ray`: the head task's container (`--head`, `--headContainer`) runs `ray start --head` with its GCS,
  dashboard and client ports (6379, 8265, 10001) opened, each worker container `ray start --address` at
  the head's first pod, and a Service `<job>-head-svc` exposes the head's ports.
- `mpi`: `MPI_HOST` (the workers' hosts, comma-separated) on the master, port 22 opened on every
  pod; Volcano's admission adds `svc` and `ssh` to an mpi job, and so does the server.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from federation.kernel.jobspec import parse_plugin_args
from federation.v1 import common_pb2

JOB_NAME_LABEL = "volcano.sh/job-name"
JOB_NAMESPACE_LABEL = "volcano.sh/job-namespace"
TASK_SPEC_LABEL = "volcano.sh/task-spec"
WAIT_MASTER_IMAGE = "busybox:1.36.1"
RAY_PORTS = (("port", "gcs", 6379), ("dashboardPort", "dashboard", 8265), ("clientPort", "client-server", 10001))
CONFIG_MOUNT = "/etc/volcano"
SSH_ROOT_PATH = "/root/.ssh"
SSH_FILES = (("id_rsa", "id_rsa"), ("id_rsa.pub", "id_rsa.pub"), ("id_rsa.pub", "authorized_keys"),
             ("config", "config"))  # secret key -> file name under .ssh

Obj = dict[str, Any]


def _args(spec: common_pb2.JobSpec, plugin: str) -> dict[str, str] | None:
    return parse_plugin_args(plugin, spec.plugins[plugin].args) if plugin in spec.plugins else None


def _template_spec(task: common_pb2.TaskSpec) -> Mapping[str, Any]:
    return (json.loads(task.pod_template_json).get("spec") or {}) if task.pod_template_json else {}


def hostname(job: str, task: common_pb2.TaskSpec, index: int) -> str:
    """A pod's hostname.subdomain, as Volcano's MakeDomainName writes it."""
    template = _template_spec(task)
    return f"{template.get('hostname') or f'{job}-{task.name}-{index}'}.{template.get('subdomain') or job}"


def hosts(job: str, task: common_pb2.TaskSpec) -> list[str]:
    """The task's hosts; a template with a fixed hostname is one host, however many replicas."""
    count = 1 if _template_spec(task).get("hostname") else task.replicas
    return [hostname(job, task, i) for i in range(count)]


def _env_key(task: str) -> str:
    return task.replace("-", "_")


def host_file(job: str, spec: common_pb2.JobSpec) -> dict[str, str]:
    """The svc plugin's ConfigMap data."""
    data = {}
    for task in spec.tasks:
        names, key = hosts(job, task), _env_key(task.name)
        data[f"{key}.host"] = "\n".join(names)
        data[f"VC_{key.upper()}_HOSTS"] = ",".join(names)
        data[f"VC_{key.upper()}_NUM"] = str(len(names))
    return data


def ssh_config(job: str, spec: common_pb2.JobSpec) -> str:
    lines = ["StrictHostKeyChecking no", "UserKnownHostsFile /dev/null"]
    for task in spec.tasks:
        for host in hosts(job, task):
            lines += [f"Host {host.split('.', 1)[0]}", f"  HostName {host}"]
    return "\n".join(lines) + "\n"


def objects(job: str, namespace: str, spec: common_pb2.JobSpec, ssh_keys: tuple[str, str] | None) -> list[Obj]:
    """The objects the job's plugins make beside its pods (`ssh_keys`: private PEM and public OpenSSH key,
    made by the caller when the ssh plugin is on)."""
    out: list[Obj] = []
    selector = {JOB_NAME_LABEL: job, JOB_NAMESPACE_LABEL: namespace}
    svc = _args(spec, "svc")
    if svc is not None:
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{job}-svc"},
                    "data": host_file(job, spec)})
        out.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": job}, "spec": {
            "clusterIP": "None", "selector": selector,
            "publishNotReadyAddresses": svc.get("publish-not-ready-addresses") == "true"}})
        if svc.get("disable-network-policy") != "true":
            out.append({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": job},
                        "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": ["Ingress"],
                                 "ingress": [{"from": [{"podSelector": {"matchLabels": selector}}]}]}})
    ray = _args(spec, "ray")
    if ray is not None:
        out.append({"apiVersion": "v1", "kind": "Service", "metadata": {"name": f"{job}-head-svc"}, "spec": {
            "selector": {**selector, TASK_SPEC_LABEL: ray.get("head", "head")},
            "ports": [{"name": name, "port": int(ray.get(flag, str(default))), "targetPort": name, "protocol": "TCP"}
                      for flag, name, default in RAY_PORTS]}})
    if _args(spec, "ssh") is not None:
        private, public = ssh_keys or ("", "")
        out.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{job}-ssh"}, "type": "Opaque",
                    "stringData": {"id_rsa": private, "id_rsa.pub": public, "config": ssh_config(job, spec)}})
    return out


def _env(container: Obj, name: str, value: str | None = None, source: Obj | None = None) -> None:
    entry: Obj = {"name": name, "value": value} if source is None else {"name": name, "valueFrom": source}
    container.setdefault("env", []).append(entry)


def _open_port(container: Obj, port: int, name: str) -> None:
    if not any(p.get("containerPort") == port for p in container.get("ports") or []):
        container.setdefault("ports", []).append({"name": name, "containerPort": port})


def decorate(pod: Obj, job: str, namespace: str, spec: common_pb2.JobSpec, task: common_pb2.TaskSpec,
             index: int) -> None:
    """Add to one pod (a manifest with labels and spec) what the job's plugins add to it."""
    meta, pod_spec = pod["metadata"], pod["spec"]
    meta.setdefault("labels", {}).update({JOB_NAME_LABEL: job, JOB_NAMESPACE_LABEL: namespace,
                                          TASK_SPEC_LABEL: task.name})
    containers = pod_spec.get("containers") or []
    every = [*containers, *(pod_spec.get("initContainers") or [])]
    if _args(spec, "env") is not None:
        for c in every:
            _env(c, "VK_TASK_INDEX", str(index))
            _env(c, "VC_TASK_INDEX", str(index))
    svc = _args(spec, "svc")
    if svc is not None:
        pod_spec.setdefault("hostname", f"{job}-{task.name}-{index}")
        pod_spec.setdefault("subdomain", job)
        config = f"{job}-svc"
        for c in every:
            for t in spec.tasks if svc.get("inject-hosts-env", "true") == "true" else ():
                for kind in ("HOSTS", "NUM"):
                    name = f"VC_{_env_key(t.name).upper()}_{kind}"
                    _env(c, name, source={"configMapKeyRef": {"name": config, "key": name}})
            c.setdefault("volumeMounts", []).append({"name": config, "mountPath": CONFIG_MOUNT})
        pod_spec.setdefault("volumes", []).append({"name": config, "configMap": {"name": config}})
    ssh = _args(spec, "ssh")
    if ssh is not None:
        secret = f"{job}-ssh"
        path = ssh.get("ssh-key-file-path", SSH_ROOT_PATH)
        if ssh.get("no-root") == "true" and path == SSH_ROOT_PATH:
            path = f"{CONFIG_MOUNT}/.ssh"
        pod_spec.setdefault("volumes", []).append({"name": secret, "secret": {
            "secretName": secret, "defaultMode": 0o600 if path == SSH_ROOT_PATH else 0o755,
            "items": [{"key": key, "path": f".ssh/{file}"} for key, file in SSH_FILES]}})
        for c in containers:
            c.setdefault("volumeMounts", []).append({"name": secret, "mountPath": path, "subPath": ".ssh"})
    torch = _args(spec, "pytorch")
    if torch is not None:
        master, worker = torch.get("master", "master"), torch.get("worker", "worker")
        port = int(torch.get("port", "23456"))
        by_name = {t.name: t for t in spec.tasks}
        if master in by_name:  # as in Volcano, a job without the master task gets nothing
            world = sum(t.replicas for t in spec.tasks if t.name in (master, worker))
            rank = {master: "0", worker: str(index + 1)}.get(task.name)
            for c in containers:
                _open_port(c, port, "pytorchjob-port")
                _env(c, "MASTER_ADDR", hostname(job, by_name[master], 0))
                _env(c, "MASTER_PORT", str(port))
                _env(c, "WORLD_SIZE", str(world))
                if rank is not None:
                    _env(c, "RANK", rank)
            if task.name == worker and torch.get("wait-master-enabled") == "true":
                _wait_for_master(pod_spec, hostname(job, by_name[master], 0), port,
                                 int(torch.get("wait-master-timeout", "300")),
                                 torch.get("wait-master-image", WAIT_MASTER_IMAGE))
    ray = _args(spec, "ray")
    if ray is not None:
        _ray(pod_spec, job, spec, task, ray)
    mpi = _args(spec, "mpi")
    if mpi is not None:
        master, worker = mpi.get("master", "master"), mpi.get("worker", "worker")
        port = int(mpi.get("port", "22"))
        workers = next((t for t in spec.tasks if t.name == worker), None)
        for c in every:
            _open_port(c, port, "mpijob-port")
            if task.name == master and workers is not None:
                _env(c, "MPI_HOST", ",".join(hosts(job, workers)))


def _wait_for_master(pod_spec: Obj, master: str, port: int, timeout: int, image: str) -> None:
    """The init container a worker waits for its master in (Volcano's `wait-for-master`), added once."""
    inits = pod_spec.setdefault("initContainers", [])
    if any(c.get("name") == "wait-for-master" for c in inits):
        return
    script = (f'deadline=$(( $(date +%s) + {timeout} ))\n'
              f'until nc -z {master} {port} 2>/dev/null; do\n'
              f'  if [ "$(date +%s)" -ge "$deadline" ]; then echo "{master}:{port} did not answer in {timeout}s"; '
              'exit 1; fi\n'
              f'  echo "waiting for the master at {master}:{port}"; sleep 2\n'
              'done\n')
    inits.append({"name": "wait-for-master", "image": image, "command": ["sh", "-c", script]})


def _ray(pod_spec: Obj, job: str, spec: common_pb2.JobSpec, task: common_pb2.TaskSpec, args: Mapping[str, str]) -> None:
    """The ray plugin: the head starts the cluster, each worker joins it at the head's first pod."""
    head = args.get("head", "head")
    ports = {flag: int(args.get(flag, str(default))) for flag, _, default in RAY_PORTS}
    by_name = {t.name: t for t in spec.tasks}
    for c in pod_spec.get("containers") or []:
        if task.name == head and c.get("name") == args.get("headContainer", "head"):
            for flag, name, _ in RAY_PORTS:
                _open_port(c, ports[flag], name)
            c["command"] = ["sh", "-c", f"ray start --head --block --dashboard-host=0.0.0.0 --port={ports['port']} "
                                        f"--dashboard-port={ports['dashboardPort']} "
                                        f"--ray-client-server-port={ports['clientPort']}"]
        elif task.name == args.get("worker", "worker") and c.get("name") == args.get("workerContainer", "worker"):
            c["command"] = ["sh", "-c", f"ray start --block --address={hostname(job, by_name[head], 0)}:"
                                        f"{ports['port']}"]
