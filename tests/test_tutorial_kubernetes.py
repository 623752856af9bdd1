"""The Kubernetes tutorial (docs/tutorials/kubernetes.md), its Helm install run as written on the test bed's real API
server: certificates, Secrets, both charts installed (each after a server-side dry run of the same command), their
rollouts, the first admin token made by `kubectl exec` into the server's Pod, a member cluster registered and a
gang job run to completion on it.

Filled in: the test's own database for the URL, `localhost` for `federation.example.com`, and free ports for the
charts' fixed ones (other tests run beside this one). KWOK's nodes run no containers, so what the installed Pods
would run is started here from the installed Deployments as the API server has them: their commands, arguments and
environment, Secrets read from the API server (environment and volumes alike), the migration first, and the agent
with the chart's ServiceAccount as its only rights. `kubectl exec` into the server's Pod reaches KWOK, which runs the
command here with that container's environment.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from sqlalchemy.engine import URL

from federation.cli.dev import BIN, _Child
from federation.testbed.build import REPO, Tools
from federation.testbed.cluster import Testbed, free_port
from tests.kubehelp import gpu_cluster
from tests.test_e2e_agents import wait_for

TUTORIAL = REPO / "docs" / "tutorials" / "kubernetes.md"
NAMESPACE = "federation-system"
PLACEHOLDER_URL = "postgresql://USER:PASSWORD@HOST:5432/federation"
TOKEN = "<the token printed above>"


def blocks() -> list[list[str]]:
    """Each shell block of the tutorial: its commands, without their trailing comments."""
    text = TUTORIAL.read_text()
    return [[line.split("  #", 1)[0].strip() for line in block.split("```", 1)[0].splitlines() if line.strip()]
            for block in text.split("```sh\n")[1:]]


def test_the_local_steps_are_the_quick_starts() -> None:
    """Step 1's commands are the README quick start's, which tests/test_readme_quickstart.py runs."""
    assert blocks()[0] == ["make demo-kube", "make kube-up"]
    assert "make demo-kube" in (REPO / "README.md").read_text().split("## Quick start", 1)[1].split("##", 1)[0]


class Pod:
    """What a container of an installed Deployment runs, run here: its command and arguments, its environment with
    Secret references read from the API server, its Secret volumes written to local directories and their mount
    paths in arguments mapped to those."""

    def __init__(self, container: dict[str, Any], secrets: dict[str, dict[str, str]], mounts: dict[str, Path],
                 replace: dict[str, list[str]] | None = None) -> None:
        paths = {m["mountPath"]: str(mounts[m["name"]]) for m in container.get("volumeMounts", [])
                 if m["name"] in mounts}

        def local(text: str) -> str:
            for path, directory in paths.items():
                text = text.replace(path, directory)
            return text

        argv = [a for arg in [*container["command"], *container.get("args", [])]
                for a in (replace or {}).get(arg, [arg])]
        self.argv = [str(BIN / argv[0]), *map(local, argv[1:])]
        self.env: dict[str, str] = {}
        for e in container.get("env", []):
            if "value" in e:
                self.env[e["name"]] = local(e["value"])
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                self.env[e["name"]] = secrets[ref["name"]][ref["key"]]


class Installed:
    """The charts' Deployments as the API server has them, and their Secrets, for running what their Pods run."""

    def __init__(self, kube: Testbed, tmp_path: Path) -> None:
        self.api = kube.admin()
        core = client.CoreV1Api(self.api)
        self.secrets = {s.metadata.name: {k: base64.b64decode(v).decode() for k, v in (s.data or {}).items()}
                        for s in core.list_namespaced_secret(NAMESPACE).items}
        self.core, self.dir = core, tmp_path

    def pod(self, deployment: str) -> tuple[list[dict], list[dict], dict[str, Path]]:
        """Its init containers, containers and Secret volumes (written out, by volume name)."""
        found = client.AppsV1Api(self.api).read_namespaced_deployment(deployment, NAMESPACE)
        spec = self.api.sanitize_for_serialization(found)["spec"]["template"]["spec"]
        mounts: dict[str, Path] = {}
        for volume in spec.get("volumes", []):
            if "secret" in volume:
                directory = self.dir / deployment / volume["name"]
                directory.mkdir(parents=True)
                for key, value in self.secrets[volume["secret"]["secretName"]].items():
                    (directory / key).write_text(value)
                mounts[volume["name"]] = directory
        return spec.get("initContainers", []), spec["containers"], mounts

    def pods(self, app: str) -> list[str]:
        return [p.metadata.name for p in self.core.list_namespaced_pod(
            NAMESPACE, label_selector=f"app.kubernetes.io/name={app}").items if p.status.phase == "Running"]


def run(command: str, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (command, done.stdout[-1000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr, (command, done.stderr)
    return done.stdout


def test_the_helm_install_runs_as_written(testbed_tools: Tools, kube: Testbed, empty_db_url: URL,
                                          tmp_path: Path) -> None:
    kube.start_scheduler()
    nodes = set(gpu_cluster(kube))
    checkout = tmp_path / "checkout"  # a checkout's layout, with the tutorial's files written beside it
    checkout.mkdir()
    for name in ("deploy", "examples", ".venv"):
        (checkout / name).symlink_to(REPO / name)
    grpc_port, agents_port, metrics_port, health_port = (free_port() for _ in range(4))
    url = empty_db_url.render_as_string(hide_password=False)
    helm_home = str(tmp_path / "helm")
    env = {**os.environ, "PATH": f"{testbed_tools.bin}:{os.environ['PATH']}",
           "KUBECONFIG": str(kube.admin_kubeconfig), "HELM_CACHE_HOME": helm_home, "HELM_CONFIG_HOME": helm_home}
    for name in ("FEDERATION_SERVER", "FEDERATION_TOKEN", "FEDERATION_CA"):
        env.pop(name, None)

    def filled(command: str) -> str:
        command = (command.replace(PLACEHOLDER_URL, url)
                   .replace("federation.example.com:50051", f"localhost:{grpc_port}")
                   .replace("federation.example.com:50052", f"localhost:{agents_port}")
                   .replace("federation.example.com", "localhost"))
        if command.startswith("helm install federation "):
            command += (f" --set ports.grpc={grpc_port} --set ports.agents={agents_port}"
                        f" --set ports.metrics={metrics_port}")
        elif command.startswith("helm install member-agent "):
            command += f" --set healthPort={health_port}"
        return command

    commands = blocks()[1]
    assert [c for c in commands if c.startswith("helm install")] == [
        c for c in blocks_of(REPO / "README.md") if c.startswith("helm install")], "the README's install is this one"
    processes: list[_Child] = []
    token, submitted = "", ""
    try:
        for command in map(filled, commands):
            if command.startswith("export "):
                command = command.replace(TOKEN, token)
                shown = run(f"{command} && env -0", checkout, env)
                env = dict(line.split("=", 1) for line in shown.split("\0") if "=" in line)
                continue
            if command.startswith("helm install"):
                assert "STATUS: pending-install" in run(f"{command} --dry-run=server", checkout, env)
            if " exec deploy/federation-server " in command:
                processes += started(kube, tmp_path, agents_port, health_port)
            out = run(command, checkout, env)
            if " exec deploy/federation-server " in command:
                token = out.strip()
            if command.startswith("fedctl submit"):
                submitted = out.split()[0].removeprefix("job/")
            if command == "fedctl get clusters":
                assert "east" in out and "Ready" in out, out
        assert token and submitted

        on_nodes = Installed(kube, tmp_path / "scheduled")
        placed = {p.spec.node_name for p in on_nodes.core.list_namespaced_pod(NAMESPACE).items}
        assert placed and placed <= nodes  # the charts' Pods were scheduled onto the KWOK nodes

        def phase() -> str | None:
            job = json.loads(run(f"fedctl get job {submitted} -o json", checkout, env))
            return job["status"]["phase"] if job["status"]["phase"] in ("Succeeded", "Failed") else None

        assert wait_for("the tutorial's job to end", phase, timeout=300) == "Succeeded"
        cluster = json.loads(run("fedctl get clusters east -o json", checkout, env))
        assert cluster["status"] == "Ready" and cluster["allocatable"]["nvidia.com/gpu"] == str(8 * len(nodes))
        assert ok(f"http://127.0.0.1:{health_port}/readyz")
    finally:
        for process in reversed(processes):
            process.stop()


def blocks_of(path: Path) -> list[str]:
    return [line.split("  #", 1)[0].strip() for block in path.read_text().split("```sh\n")[1:]
            for line in block.split("```", 1)[0].splitlines() if line.strip()]


def started(kube: Testbed, tmp_path: Path, agents_port: int, health_port: int) -> list[_Child]:
    """What the installed Pods run: the server's migration and server, then the agent; `kubectl exec` into each
    server Pod made to run its command here with the server container's environment."""
    installed = Installed(kube, tmp_path / "pods")
    (migrate,), (server,), mounts = installed.pod("federation-server")
    init = Pod(migrate, installed.secrets, mounts)
    done = subprocess.run(init.argv, env={**os.environ, **init.env}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    serve = Pod(server, installed.secrets, mounts)
    children = [_Child(serve.argv, b"federation-server listening", serve.env, 300)]
    try:
        for name in installed.pods("federation-server"):
            kube.exec_locally(NAMESPACE, name, server["name"], serve.env, tmp_path)
        (), (agent,), agent_mounts = installed.pod("member-agent")
        manifest = subprocess.run([kube.tools.program("helm"), "get", "manifest", "member-agent", "-n", NAMESPACE,
                                   "--kubeconfig", str(kube.admin_kubeconfig)], capture_output=True, text=True,
                                  timeout=120, env={**os.environ, "HELM_CACHE_HOME": str(tmp_path / "helm"),
                                                    "HELM_CONFIG_HOME": str(tmp_path / "helm")})
        assert manifest.returncode == 0, manifest.stderr
        rbac = [o for o in yaml.safe_load_all(manifest.stdout) if o and o["kind"] in (
            "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")]
        kubeconfig = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig", rbac)
        run_agent = Pod(agent, installed.secrets, agent_mounts, {"--in-cluster": ["--kubeconfig", str(kubeconfig)]})
        assert f"localhost:{agents_port}" in run_agent.argv + list(run_agent.env.values())
        assert str(health_port) in " ".join(run_agent.argv + list(run_agent.env.values()))
        children.append(_Child(run_agent.argv, b"health on", run_agent.env, 300))
    except BaseException:
        for child in reversed(children):
            child.stop()
        raise
    return children


def ok(address: str) -> bool:
    try:
        return urllib.request.urlopen(address, timeout=5).status == 200
    except OSError:
        return False
