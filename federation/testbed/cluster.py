"""A real Kubernetes control plane on loopback, with nodes faked by KWOK: etcd, kube-apiserver (RBAC on),
kube-controller-manager (garbage collector, namespaces, service accounts, Deployments and ReplicaSets), the KWOK
controller, and kube-scheduler where a test asks for it.

Certificates are made here (a CA, the API server's serving certificate, an admin client certificate in
`system:masters`); a member agent connects as a ServiceAccount bound to `deploy/kubernetes/agent/rbac.yaml`,
with a token from the TokenRequest API, as it would in a real cluster. Volcano's HyperNode CRD is installed
from the build (`build.Tools.crds`). Every process logs to a file in the work directory, named on failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from kubernetes import client, config, utils
from kubernetes.client.rest import ApiException

from federation.security import certs
from federation.testbed import build
from federation.testbed.build import REPO, Tools
from member_agent.clusters import registered

STAGES = REPO / "testbed" / "kwok" / "stages.yaml"
AGENT_RBAC = REPO / "deploy" / "kubernetes" / "agent" / "rbac.yaml"
HYPERNODE_CRD = ("topology.volcano.sh", "hypernodes")


def cri_log_line(text: str) -> str:
    """A line as container runtimes write logs (CRI: time, stream, full line, text), which KWOK serves."""
    return f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime())}.000000000Z stdout F {text}\n"


PORT_ATTEMPTS = 5  # starts of a process whose port was taken before it bound it


class TestbedError(RuntimeError):
    """A test bed process did not start; the message names it and carries the end of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kubeconfig(path: Path, server: str, ca: bytes, user: dict[str, str]) -> Path:
    import base64

    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "testbed",
        "clusters": [{"name": "testbed", "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca).decode()}}],
        "users": [{"name": "testbed", "user": user}],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": "testbed"}}]}))
    path.chmod(0o600)
    return path


class Testbed:
    """The control plane's processes, started by `start()` and stopped by `stop()` (or as a context manager)."""

    __test__ = False  # not a test class, whatever pytest makes of its name

    def __init__(self, workdir: Path, tools: Tools) -> None:
        self.dir = workdir.resolve()
        self.tools = tools
        self.procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.server = ""
        self.admin_kubeconfig = self.dir / "admin.kubeconfig"

    # -- processes ----------------------------------------------------------------------------

    def _start(self, name: str, argv: Sequence[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = (self.dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, **(env or {})})
        self.procs.append((name, proc))
        return proc

    def _failed(self, name: str, why: str) -> TestbedError:
        tail = (self.dir / f"{name}.log").read_text(errors="replace")[-3000:]
        return TestbedError(f"{name} {why} (log {self.dir / f'{name}.log'}):\n{tail}")

    def _wait(self, name: str, proc: subprocess.Popen[bytes], ready: Any, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise self._failed(name, f"exited with {proc.returncode}")
            with contextlib.suppress(OSError, ValueError, ApiException):
                if ready():
                    return
            time.sleep(0.2)
        raise self._failed(name, f"was not ready within {timeout:.0f} s")

    def _listening(self, name: str, argv: Callable[..., Sequence[str]], ready: Callable[..., Any],
                   ports: int = 1) -> tuple[int, ...]:
        """Start `name` listening on `ports` free ports (`argv(*ports)`) and wait until `ready(*ports)`. A port is
        found free before the process binds it, and another test's process may take it meanwhile: then again, on
        other ports."""
        log = self.dir / f"{name}.log"
        for attempt in range(PORT_ATTEMPTS):
            chosen = tuple(free_port() for _ in range(ports))
            since = log.stat().st_size if log.exists() else 0
            proc = self._start(name, argv(*chosen))
            try:
                self._wait(name, proc, lambda: ready(*chosen))  # noqa: B023 (called before the loop goes on)
                return chosen
            except TestbedError:
                with log.open("rb") as f:
                    f.seek(since)
                    taken = b"address already in use" in f.read().lower()
                if not taken or attempt == PORT_ATTEMPTS - 1:
                    raise
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                self.procs.remove((name, proc))
        raise AssertionError("unreachable")

    def start(self) -> Testbed:
        self.dir.mkdir(parents=True, exist_ok=True)
        pki = self.dir / "pki"
        pki.mkdir(exist_ok=True)
        ca = certs.make_ca(common_name="testbed CA")
        ca.write(pki, "ca")
        certs.issue(ca, "kube-apiserver", ["127.0.0.1", "localhost", "kubernetes.default.svc"]).write(pki, "apiserver")
        certs.issue(ca, "admin", organization="system:masters").write(pki, "admin")
        sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (pki / "sa.key").write_bytes(sa.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                      serialization.NoEncryption()))
        (pki / "sa.pub").write_bytes(sa.public_key().public_bytes(serialization.Encoding.PEM,
                                                                  serialization.PublicFormat.SubjectPublicKeyInfo))

        etcd_port, _ = self._listening("etcd", lambda client_port, peer_port: [
            self.tools.program("etcd"), "--data-dir", str(self.dir / "etcd"), "--name", "testbed",
            "--listen-client-urls", f"http://127.0.0.1:{client_port}",
            "--advertise-client-urls", f"http://127.0.0.1:{client_port}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer_port}",
            "--initial-cluster", f"testbed=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync", "--quota-backend-bytes", str(8 * 2**30), "--log-level", "warn"],
            lambda client_port, _: urllib.request.urlopen(f"http://127.0.0.1:{client_port}/health", timeout=2),
            ports=2)

        context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        api_port, = self._listening("kube-apiserver", lambda api_port: [
            self.tools.program("kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{etcd_port}",
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={api_port}",
            f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}", "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={pki / 'sa.pub'}", f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16", "--allow-privileged=true", "--profiling=false",
            f"--cert-dir={pki}", "--max-requests-inflight=800", "--max-mutating-requests-inflight=400",
            # New nodes are tainted not-ready until the node lifecycle controller sees them heartbeat; the
            # test bed runs no such controller (KWOK's nodes need no heartbeats), so nothing would lift it.
            "--disable-admission-plugins=TaintNodesByCondition",
            # Pods' logs: from KWOK, serving every node's kubelet API on loopback with a certificate of ours.
            "--kubelet-preferred-address-types=InternalIP", f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}"],
            lambda api_port: urllib.request.urlopen(f"https://127.0.0.1:{api_port}/readyz", timeout=5,
                                                    context=context).status == 200)
        self.server = f"https://127.0.0.1:{api_port}"
        _kubeconfig(self.admin_kubeconfig, self.server, ca.cert, {
            "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")})

        self._start("kube-controller-manager", [
            self.tools.program("kube-controller-manager"), f"--kubeconfig={self.admin_kubeconfig}",
            # Deployments make ReplicaSets make Pods: the deployment tests install the Helm charts for real.
            "--controllers=garbagecollector,namespace,serviceaccount,root-ca-cert-publisher,deployment,replicaset",
            f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
            "--leader-elect=false", "--secure-port=0", "--concurrent-gc-syncs=20"])
        # KWOK as every node's kubelet API, over TLS the API server checks (pods' logs come through it).
        certs.issue(ca, "kwok", ["127.0.0.1"]).write(pki, "kwok")
        self.pod_log = self.dir / "pod.log"
        self.pod_log.write_text("".join(cri_log_line(f"test bed pod log, line {i}") for i in range(1, 6)))
        logs = self.dir / "logs.yaml"
        logs.write_text(yaml.safe_dump({"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "ClusterLogs",
                                        "metadata": {"name": "testbed-pod-logs"},
                                        "spec": {"logs": [{"logsFile": str(self.pod_log), "follow": True}]}}))
        kubelet_port = free_port()
        # `kubectl exec` into a pod runs a local command when an Exec object names the pod (`exec_locally`).
        self.install_crd(build.kwok_crd("execs"))
        self._start("kwok", [
            self.tools.program("kwok"), f"--kubeconfig={self.admin_kubeconfig}", "--manage-all-nodes=true",
            f"--config={STAGES}", f"--config={logs}", f"--server-address=127.0.0.1:{kubelet_port}",
            "--node-ip=127.0.0.1", f"--node-port={kubelet_port}", f"--tls-cert-file={pki / 'kwok.crt'}",
            f"--tls-private-key-file={pki / 'kwok.key'}", "--enable-crds=Exec"],
            # a command exec'd into a pod is looked up on KWOK's own PATH: this virtualenv's programs are there,
            # as they are on the image's
            {"PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"})
        self.install_crd(self.tools.crd(*HYPERNODE_CRD))
        api = self.admin()
        self._wait("kube-controller-manager", next(p for n, p in self.procs if n == "kube-controller-manager"),
                   lambda: client.CoreV1Api(api).read_namespaced_service_account("default", "default") is not None)
        return self

    def start_scheduler(self) -> None:
        """kube-scheduler, for tests whose ordinary pods (a chart's Deployments) must be placed on KWOK nodes;
        not started with the rest: the gangs' pods name the agent as their scheduler."""
        self._start("kube-scheduler", [
            self.tools.program("kube-scheduler"), f"--kubeconfig={self.admin_kubeconfig}",
            f"--authentication-kubeconfig={self.admin_kubeconfig}",
            f"--authorization-kubeconfig={self.admin_kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}"])

    def stop(self) -> None:
        """Everything at once: a test bed keeps nothing worth a graceful shutdown (the API server's would
        wait for its clients' watches)."""
        for _, proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for _, proc in self.procs:
            proc.wait()
        self.procs.clear()

    def __enter__(self) -> Testbed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- objects ------------------------------------------------------------------------------

    def admin(self) -> client.ApiClient:
        return config.new_client_from_config(config_file=str(self.admin_kubeconfig))

    def install_crd(self, path: Path) -> None:
        api = self.admin()
        ext = client.ApiextensionsV1Api(api)
        crd = yaml.safe_load(path.read_text())
        with contextlib.suppress(ApiException):  # already there (a restarted test bed)
            ext.create_custom_resource_definition(crd)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            status = ext.read_custom_resource_definition(crd["metadata"]["name"]).status
            if any(c.type == "Established" and c.status == "True" for c in (status.conditions or [])):
                return
            time.sleep(0.1)
        raise TestbedError(f"the CRD {crd['metadata']['name']} was not established")

    def apply(self, objects: Sequence[dict[str, Any]]) -> None:
        """Create these objects as the admin (custom objects, such as HyperNodes, included); Nodes with the
        labels a kubelet would have given them."""
        api = self.admin()
        custom = client.CustomObjectsApi(api)
        for obj in map(registered, objects):
            group, _, version = obj["apiVersion"].rpartition("/")
            if group.endswith(".volcano.sh"):
                plural = obj["kind"].lower() + "s"
                custom.create_cluster_custom_object(group, version, plural, obj)
            else:
                utils.create_from_dict(api, obj)

    def exec_locally(self, namespace: str, pod: str, container: str, env: dict[str, str], workdir: Path) -> None:
        """`kubectl exec` into this pod's container runs the command here, in `workdir` with `env` added: what a
        container runtime would run in it, for the processes tests run from a Pod's own manifest."""
        body = {"apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Exec",
                "metadata": {"name": pod, "namespace": namespace},
                "spec": {"execs": [{"containers": [container], "local": {
                    "workDir": str(workdir), "envs": [{"name": k, "value": v} for k, v in sorted(env.items())]}}]}}
        client.CustomObjectsApi(self.admin()).create_namespaced_custom_object(
            "kwok.x-k8s.io", "v1alpha1", namespace, "execs", body)

    def agent_kubeconfig(self, path: Path, rbac: Sequence[dict[str, Any]] | None = None,
                         ttl: int = 24 * 3600) -> Path:
        """A kubeconfig holding a ServiceAccount token bound to the agent's role (`rbac`, default the one
        in deploy/kubernetes/agent/rbac.yaml), whose namespaces are made first."""
        objects = list(rbac if rbac is not None else yaml.safe_load_all(AGENT_RBAC.read_text()))
        api = self.admin()
        core = client.CoreV1Api(api)
        namespaces = {o["metadata"]["namespace"] for o in objects if o["metadata"].get("namespace")}
        for ns in sorted(namespaces):
            with contextlib.suppress(ApiException):
                core.create_namespace({"metadata": {"name": ns}})
        for obj in objects:
            try:
                utils.create_from_dict(api, obj)
            except utils.FailToCreateError as err:
                if any(e.status != 409 for e in err.api_exceptions):
                    raise
        account = next(o for o in objects if o["kind"] == "ServiceAccount")
        token = core.create_namespaced_service_account_token(
            account["metadata"]["name"], account["metadata"]["namespace"],
            {"spec": {"expirationSeconds": ttl}}).status.token
        ca = (self.dir / "pki" / "ca.crt").read_bytes()
        return _kubeconfig(path, self.server, ca, {"token": token})


@contextlib.contextmanager
def running(workdir: Path, tools: Tools) -> Iterator[Testbed]:
    bed = Testbed(workdir, tools)
    try:
        yield bed.start()
    finally:
        bed.stop()
