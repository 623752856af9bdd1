"""`fedctl dev`: run a local federation from this checkout, for demos and trying things out."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import grpc
import yaml

from federation.cli.output import render_table
from federation.security import certs
from federation.testbed import build
from federation.v1 import common_pb2, jobs_pb2, jobs_pb2_grpc
from federation.validation import Violations, check_name

if TYPE_CHECKING:
    from federation.testbed.cluster import Testbed

BIN = Path(sys.executable).parent


class _Child:
    """A child process of ours whose output is collected, started when a line says it is ready."""

    def __init__(self, argv: list[str], ready: bytes, env: dict[str, str] | None, timeout: float,
                 log_file: Path | None = None) -> None:
        self.log = b""
        self.ready_line = ""
        self.log_file = log_file  # every line is also written here, for whoever runs the federation to read
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        found = threading.Event()
        sink = log_file.open("ab", buffering=0) if log_file is not None else None

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if sink is not None:
                    sink.write(line)
                self.log += line
                if ready in line and not found.is_set():
                    self.ready_line = line.decode().strip()
                    found.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                reader.join(5)  # the last words, which say why
                raise RuntimeError(f"{Path(argv[0]).name} did not start:\n{self.log.decode()}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, grace: float = 30) -> int:
        """SIGTERM and wait: the programs shut down cleanly on it (woken first, if frozen with SIGSTOP). One that
        outlasts `grace` is killed, and the error says where each of its threads and its children's were (py-spy,
        where installed) and its last words."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(BIN))
            stacks = "(py-spy is not installed: no stacks)"
            if spy:
                dump = subprocess.run([spy, "dump", "--subprocesses", "--pid", str(self.proc.pid)],
                                      capture_output=True, text=True, timeout=60)
                stacks = dump.stdout or f"(py-spy could not read it: {dump.stderr.strip()})"
            self.kill()
            tail = "\n".join(self.log.decode(errors="replace").splitlines()[-40:])
            raise RuntimeError(f"{Path(str(self.proc.args[0])).name} did not stop within {grace:g} s of SIGTERM; "
                               f"its threads then:\n{stacks}\nits last words:\n{tail}") from None


class ServerProcess(_Child):
    """federation-server on a free port; `address` once it listens. Local federations run it
    with --insecure-dev (no tokens) unless `secure`."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60,
                 listen: str = "127.0.0.1:0", secure: bool = False, metrics_listen: str = "127.0.0.1:0",
                 ui_listen: str = "", log_file: Path | None = None) -> None:
        super().__init__([str(BIN / "federation-server"), "serve", "--listen", listen,
                          "--metrics-listen", metrics_listen, *(["--ui-listen", ui_listen] if ui_listen else []),
                          *([] if secure else ["--insecure-dev"]), *args],
                         b"federation-server listening", env, timeout, log_file)
        lines = self.log.decode().splitlines()
        self.dashboard = next((line.rsplit(" ", 1)[1] for line in lines if "dashboard on" in line), "")
        self.metrics = next((line.rsplit(" ", 1)[1] for line in lines if "metrics on" in line), "")
        self.agent_address = next((line.rsplit(" ", 1)[1] for line in lines if "agents (mTLS) on" in line), "")
        self.address = self.ready_line.rsplit(" ", 1)[1]


class AgentProcess(_Child):
    """A member-agent (`args` choose its backend); `admin` is its fault-injection address."""

    def __init__(self, cluster: str, server: str, *args: str, env: dict[str, str] | None = None,
                 timeout: float = 60, admin_listen: str = "127.0.0.1:0", log_file: Path | None = None) -> None:
        super().__init__([str(BIN / "member-agent"), "--cluster", cluster, "--server", server,
                          "--admin-listen", admin_listen, *args], b"admin listening on", env, timeout, log_file)
        self.admin = self.ready_line.rsplit(" ", 1)[1]


@click.group()
def dev() -> None:
    """Run a local federation from this checkout."""


@dev.command("certs")
@click.argument("directory", type=click.Path(path_type=Path, file_okay=False))
@click.option("--cluster", "clusters", multiple=True, required=True,
              help="A member cluster to make an agent certificate for (repeatable); its common name is the name.")
@click.option("--server-name", "server_names", multiple=True,
              help=f"A DNS name or IP address agents reach the server by (repeatable) "
                   f"[default: {', '.join(certs.SERVER_NAMES)}].")
@click.option("--days", type=click.IntRange(min=1), default=365, show_default=True, help="Validity.")
def dev_certs(directory: Path, clusters: tuple[str, ...], server_names: tuple[str, ...], days: int) -> None:
    """Make a CA, a server certificate and one client certificate per cluster in DIRECTORY, for local use.

    The server: --agent-listen with --tls-cert server.crt --tls-key server.key --agent-ca ca.crt.
    Each agent: --tls-ca ca.crt --tls-cert CLUSTER.crt --tls-key CLUSTER.key.
    """
    v = Violations()
    for i, cluster in enumerate(clusters):
        check_name(v, f"--cluster[{i}]", cluster)
    if v:
        raise click.BadParameter("; ".join(f"{x.description}" for x in v.items), param_hint="--cluster")
    for path in certs.write_all(directory, clusters, server_names or certs.SERVER_NAMES, days):
        click.echo(str(path))


def _run(server: str, *args: str, env: dict[str, str] | None = None) -> None:
    click.secho(f"$ fedctl {' '.join(args)}", bold=True)
    done = subprocess.run([str(BIN / "fedctl"), "--server", server, *args], check=False,
                          env={**os.environ, **(env or {})})
    if done.returncode:
        raise click.ClickException(f"'fedctl {' '.join(args)}' failed")


def _printed(argv: list[str], env: dict[str, str] | None = None) -> str:
    """What a command prints (a token), or its own words on why it failed."""
    done = subprocess.run(argv, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
    if done.returncode:
        raise click.ClickException(f"'{' '.join(Path(a).name if i == 0 else a for i, a in enumerate(argv))}' "
                                   f"failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _first_admin_token(data_dir: Path) -> str:
    """The schema, then the first admin token, straight in the (embedded) database, before the server runs on it:
    as an operator makes the first one (`federation-server token create --admin`)."""
    server = str(BIN / "federation-server")
    _printed([server, "db", "upgrade", "--data-dir", str(data_dir)])
    return _printed([server, "token", "create", "--admin", "--name", "dev", "--data-dir", str(data_dir)])


def _tenant_tokens(address: str, env: dict[str, str], examples: Path) -> dict[str, str]:
    """A token for each tenant of the example admin objects, made through the API as the admin (`env`)."""
    docs = yaml.safe_load_all((examples / "admin" / "federation.yaml").read_text())
    tenants = sorted(d["metadata"]["name"] for d in docs if isinstance(d, dict) and d.get("kind") == "Tenant")
    return {t: _printed([str(BIN / "fedctl"), "--server", address, "token", "create", "--tenant", t, "--name", "dev"],
                        env) for t in tenants}


DEMO_CLUSTERS = (("h100", "h100-spine-leaf", "accelerator=h100"), ("gb300", "gb300-nvl72", "accelerator=gb300"),
                 ("cpu", "cpu-small", "pool=batch"))
KUBE_CLUSTER = "h100"  # the one `make demo-kube` runs on a real API server
KUBE_NAMESPACE = "federation-jobs"  # where deploy/kubernetes/agent/rbac.yaml lets the agent make pods
ENDED = (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED)
STAGES = {common_pb2.PENDING: "pending", common_pb2.DISPATCHED: "pending", common_pb2.PREEMPTED: "pending",
          common_pb2.RUNNING: "running", common_pb2.RESTARTING: "running"}  # the rest: done


class _Stopped(Exception):
    """SIGTERM, so that stopping `fedctl dev` stops what it started, as Ctrl-C does."""


@contextlib.contextmanager
def _stoppable() -> Iterator[None]:
    """SIGTERM raises `_Stopped` and SIGINT `KeyboardInterrupt` while inside, even where the shell that
    started us ignored SIGINT (a background job of a script), so that Ctrl-C or `kill -INT` always stops
    what we started."""
    def stopped(signum: int, frame: object) -> None:
        raise _Stopped()

    previous = signal.signal(signal.SIGTERM, stopped)
    interrupt = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, interrupt)


@contextlib.contextmanager
def _owned(data_dir: Path) -> Iterator[None]:
    """This data directory for this process alone while it runs: a second local federation over a live one
    would wipe the PostgreSQL under it. An exclusive lock beside it, which the kernel drops if we die."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    lock = (data_dir.parent / f"{data_dir.name}.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise click.ClickException(f"{data_dir} belongs to a local federation that is running ({holder}); stop it "
                                   "first (Ctrl-C where it runs), or give this one another --data-dir") from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"fedctl dev, pid {os.getpid()}")
    lock.flush()
    try:
        yield
    finally:
        lock.close()


@contextlib.contextmanager
def _federation(data_dir: Path, examples: Path, listen: str, kube: Path | None = None,
                ports: DevPorts | None = None, tokens: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    """The server on an embedded PostgreSQL and the three example clusters' agents; all stopped on the way
    out, whatever the way (an error, Ctrl-C, SIGTERM). With `kube` (a kubeconfig), the H100 cluster is the
    Kubernetes test bed it reaches instead of a simulation. Each process's output goes to a file of its own
    in `logs/` beside the data directory; `ports` fixes the metrics and agents' admin ports. With `tokens` (a
    dict, filled here), the server requires tokens: the admin's (key "admin") and one per example tenant."""
    ports = ports or DevPorts()
    with _owned(data_dir), _federation_on(data_dir, examples, listen, kube, ports, tokens) as server:
        yield server


@dataclass(frozen=True)
class DevPorts:
    metrics: str = "127.0.0.1:0"
    ui: str = "127.0.0.1:0"
    agent_admin: tuple[str, ...] = ("127.0.0.1:0",) * 3  # one per example cluster, in DEMO_CLUSTERS' order


@contextlib.contextmanager
def _federation_on(data_dir: Path, examples: Path, listen: str, kube: Path | None,
                   ports: DevPorts, tokens: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    shutil.rmtree(data_dir, ignore_errors=True)
    logs = data_dir.parent / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    click.echo(f"starting federation-server on an embedded PostgreSQL in {data_dir} ...")
    children: list[_Child] = []
    tls = data_dir.parent / "certs"
    certs.write_all(tls, [name for name, _, _ in DEMO_CLUSTERS])
    with _stoppable():
        try:
            client: dict[str, str] = {}  # fedctl's environment: with tokens, the admin's, over TLS
            if tokens is not None:
                tokens["admin"] = _first_admin_token(data_dir)
                client = {"FEDERATION_TOKEN": tokens["admin"], "FEDERATION_CA": str(tls / "ca.crt")}
            server = ServerProcess("--data-dir", str(data_dir), "--auto-migrate", "--agent-listen", "127.0.0.1:0",
                                   "--tls-cert", str(tls / "server.crt"), "--tls-key", str(tls / "server.key"),
                                   "--agent-ca", str(tls / "ca.crt"), listen=listen, metrics_listen=ports.metrics,
                                   ui_listen=ports.ui, log_file=logs / "federation-server.log",
                                   secure=tokens is not None)
            children.append(server)
            said = "tokens required" if tokens is not None else "--insecure-dev: no tokens"
            click.echo(f"federation-server listening on {server.address} ({said}), "
                       f"agents over mTLS on {server.agent_address} (certificates in {tls}), "
                       f"metrics on http://{server.metrics}/metrics, dashboard on {server.dashboard}")
            for (name, file, label), admin in zip(DEMO_CLUSTERS, ports.agent_admin, strict=True):
                on_kube = kube is not None and name == KUBE_CLUSTER
                backend = ["--kubeconfig", str(kube), "--namespace", KUBE_NAMESPACE] if on_kube else [
                    "--simulate", str(examples / "clusters" / f"{file}.yaml")]
                agent = AgentProcess(name, server.agent_address, *backend, "--label", label,
                                     "--tls-ca", str(tls / "ca.crt"), "--tls-cert", str(tls / f"{name}.crt"),
                                     "--tls-key", str(tls / f"{name}.key"), admin_listen=admin,
                                     log_file=logs / f"member-agent-{name}.log")
                children.append(agent)
                click.echo(f"member-agent {name} started ({file}{' on the Kubernetes test bed' if on_kube else ''}), "
                           f"fault injection on {agent.admin}")
            click.echo(f"logs: {', '.join(str(c.log_file) for c in children)}")
            click.echo()
            _run(server.address, "apply", "-f", str(examples / "admin" / "federation.yaml"), env=client)
            if tokens is not None:
                tokens.update(_tenant_tokens(server.address, client, examples))
            yield server
        except (KeyboardInterrupt, _Stopped):
            click.echo("\ninterrupted: stopping")
            raise
        finally:
            for child in reversed(children):
                child.stop()
            click.echo(f"stopped {len(children)} processes; PostgreSQL data stays in {data_dir}, logs in {logs}")


def _seconds(a: Any, b: Any) -> str:
    return f"{b.ToDatetime().timestamp() - a.ToDatetime().timestamp():.1f}s" if a.seconds and b.seconds else "-"


def progress(jobs: list[common_pb2.Job], width: int = 20) -> str:
    """One line: a bar of the jobs that have ended, then pending/running/done per cluster."""
    done = sum(j.status.phase in ENDED for j in jobs)
    filled = width * done // len(jobs) if jobs else width
    counts: dict[str, dict[str, int]] = {}
    for job in jobs:
        per = counts.setdefault(job.status.cluster or "queued", {"pending": 0, "running": 0, "done": 0})
        per[STAGES.get(job.status.phase, "done")] += 1
    clusters = "  ".join(f"{c}: " + " ".join(f"{n} {stage}" for stage, n in per.items() if n)
                         for c, per in sorted(counts.items()))
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{len(jobs)} done  {clusters}"


def _watch_until_done(address: str, timeout: float) -> list[common_pb2.Job]:
    """The progress line, redrawn every second on a terminal (a new line per change otherwise), until
    every job has ended; then the jobs."""
    stub = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(address))
    deadline = time.monotonic() + timeout
    live, last = sys.stdout.isatty(), ""
    while True:
        jobs = list(stub.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000)).jobs)
        line = progress(jobs)
        if live:
            click.echo(f"\r\x1b[K{line}", nl=False)
        elif line != last:
            click.echo(line)
        last = line
        if all(j.status.phase in ENDED for j in jobs) or time.monotonic() > deadline:
            if live:
                click.echo()
            return jobs
        time.sleep(1)


def _summary(jobs: list[common_pb2.Job]) -> str:
    rows = []
    for j in jobs:
        s = j.status
        nodes = sorted({p.node for p in s.placements})
        shown = ",".join(nodes[:3]) + (f",+{len(nodes) - 3}" if len(nodes) > 3 else "")
        rows.append([j.id, j.spec.queue, common_pb2.JobPhase.Name(s.phase).capitalize(), s.cluster or "-",
                     s.hypernode or "-", s.tier or "-", len(s.placements), shown or "-",
                     _seconds(s.create_time, s.start_time), _seconds(s.start_time, s.finish_time)])
    return render_table(("JOB", "QUEUE", "PHASE", "CLUSTER", "HYPERNODE", "TIER", "PODS", "NODES", "WAITED", "RAN"),
                        rows)


def _data_dir(default: str) -> Any:
    return click.option("--data-dir", type=click.Path(path_type=Path), default=Path(default), metavar="DIR",
                        show_default=True, help="Embedded PostgreSQL data, its own (logs/ and certs/ beside it); "
                                                "wiped first so every run starts the same; refused while another "
                                                "local federation runs on it.")
_examples = click.option("--examples", type=click.Path(path_type=Path, exists=True, file_okay=False), metavar="DIR",
                         default=Path("examples"), show_default=True,
                         help="Where the clusters, admin objects and jobs come from.")


@contextlib.contextmanager
def _testbed(directory: Path, cluster: Path) -> Iterator[tuple[Testbed, Path]]:
    """The Kubernetes test bed (built first when needed) holding `cluster`'s Nodes, HyperNodes and Pods, and
    a kubeconfig for the member agent's ServiceAccount; stopped on the way out."""
    from federation.testbed.cluster import TestbedError, running  # the Kubernetes client: only when it runs

    try:
        tools = build.ensure(click.echo)
    except build.BuildError as err:
        raise click.ClickException(str(err)) from None
    shutil.rmtree(directory, ignore_errors=True)
    click.echo(f"starting kube-apiserver, etcd, kube-controller-manager and KWOK in {directory} ...")
    try:
        with running(directory, tools) as bed:
            objects = [o for o in yaml.safe_load_all(cluster.read_text()) if o]
            bed.apply(objects)
            agent = bed.agent_kubeconfig(directory / "agent.kubeconfig")
            kinds = ", ".join(f"{sum(o['kind'] == k for o in objects)} {k}s" for k in ("Node", "HyperNode", "Pod"))
            click.echo(f"API server {bed.server}: {kinds} from {cluster}")
            yield bed, agent
    except TestbedError as err:
        raise click.ClickException(str(err)) from None


@dev.command()
@_data_dir(".demo/demo/postgres")
@_examples
@click.option("--timeout", type=float, default=180, show_default=True, help="Seconds to wait for the jobs.")
@click.option("--kube", "on_kube", is_flag=True,
              help="Run the H100 cluster on the Kubernetes test bed (a real API server, nodes faked by KWOK).")
def demo(data_dir: Path, examples: Path, timeout: float, on_kube: bool) -> None:
    """Server on an embedded PostgreSQL, three simulated clusters, the example jobs run to the end."""
    try:
        with contextlib.ExitStack() as stack:
            kube = None
            if on_kube:
                file = examples / "clusters" / f"{next(f for n, f, _ in DEMO_CLUSTERS if n == KUBE_CLUSTER)}.yaml"
                _, kube = stack.enter_context(_testbed(data_dir.parent / "kube", file))
            server = stack.enter_context(_federation(data_dir, examples, "127.0.0.1:0", kube))
            _run(server.address, "submit", *map(str, sorted((examples / "jobs").glob("*.yaml"))))
            _run(server.address, "clusters")
            click.secho("\nwatching the jobs (pending/running/done per cluster):", bold=True)
            jobs = _watch_until_done(server.address, timeout)
            click.secho("\nsummary", bold=True)
            click.echo(_summary(jobs))
    except (KeyboardInterrupt, _Stopped):
        raise click.exceptions.Exit(130) from None
    unfinished = [j.id for j in jobs if j.status.phase != common_pb2.SUCCEEDED]
    if unfinished:
        raise click.ClickException(f"not every job succeeded: {', '.join(unfinished)}")


@dev.command("kube")
@click.option("--dir", "directory", type=click.Path(path_type=Path, file_okay=False), default=Path(".demo/kube"),
              show_default=True, help="The test bed's data, logs and kubeconfigs; wiped first.")
@click.option("--cluster", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              default=Path("examples/clusters/h100-spine-leaf.yaml"), show_default=True,
              help="Nodes, HyperNodes and Pods to create in it.")
def kube_testbed(directory: Path, cluster: Path) -> None:
    """A Kubernetes test bed on loopback for a member agent, until Ctrl-C: kube-apiserver (RBAC on), etcd,
    kube-controller-manager and KWOK, built from their Go modules on first use."""
    try:
        with _stoppable(), _testbed(directory, cluster) as (bed, agent):
            click.secho(f"\nkubeconfig (admin): {bed.admin_kubeconfig}", bold=True)
            click.secho(f"kubeconfig (member-agent's ServiceAccount): {agent}", bold=True)
            click.echo(f"try:  kubectl --kubeconfig {bed.admin_kubeconfig} get nodes,hypernodes\n"
                       f"      member-agent --cluster h100 --kubeconfig {agent} --namespace {KUBE_NAMESPACE} "
                       f"--label accelerator=h100 --server 127.0.0.1:50051\nstop with Ctrl-C")
            while True:
                time.sleep(3600)
    except (KeyboardInterrupt, _Stopped):
        click.echo("stopped the test bed")


@dev.command()
@_data_dir(".demo/up/postgres")
@_examples
@click.option("--listen", default="127.0.0.1:50051", show_default=True,
              help="The server's address: fedctl's default, so plain `fedctl` commands reach it.")
@click.option("--metrics-listen", default="127.0.0.1:9464", show_default=True,
              help="The server's Prometheus /metrics (port 0 picks one).")
@click.option("--agent-admin-port", type=click.IntRange(0, 65533), default=7001, show_default=True,
              help="The agents' fault-injection ports: this one (h100) and the next two (gb300, cpu); 0 picks any.")
@click.option("--ui-listen", default="127.0.0.1:8080", show_default=True,
              help="The web dashboard (port 0 picks one).")
@click.option("--tokens", "with_tokens", is_flag=True,
              help="Require bearer tokens, as a real federation does: an admin token and one per example tenant "
                   "are made and printed (for fedctl's --token or FEDERATION_TOKEN, and the dashboard's sign-in).")
def up(data_dir: Path, examples: Path, listen: str, metrics_listen: str, agent_admin_port: int,
       ui_listen: str, with_tokens: bool) -> None:
    """The same federation as the demo, kept running for `fedctl` until Ctrl-C (or SIGTERM), on fixed ports."""
    admin = tuple(f"127.0.0.1:{agent_admin_port + i if agent_admin_port else 0}" for i in range(len(DEMO_CLUSTERS)))
    tokens: dict[str, str] | None = {} if with_tokens else None
    try:
        with _federation(data_dir, examples, listen, ports=DevPorts(metrics_listen, ui_listen, admin),
                         tokens=tokens) as server:
            if tokens is not None:
                click.echo("\ntokens (each works for fedctl --token or FEDERATION_TOKEN, and signs in to the "
                           "dashboard):")
                for who, bearer in tokens.items():
                    click.echo(f"  {who + ':':10} {bearer}")
                click.echo(f"  the API is served over TLS: export FEDERATION_CA={data_dir.parent / 'certs' / 'ca.crt'} "
                           f"FEDERATION_TOKEN={tokens['admin']}")
            click.secho(f"\nfederation ready at {server.address}", bold=True)
            click.secho(f"dashboard at {server.dashboard}", bold=True)
            hint = "" if server.address == "127.0.0.1:50051" else f"--server {server.address} "
            click.echo(f"try:  fedctl {hint}submit {examples / 'tour' / 'llama-pretrain.yaml'}\n"
                       f"      fedctl {hint}list jobs\n      fedctl {hint}clusters\nstop with Ctrl-C")
            while True:
                time.sleep(3600)
    except (KeyboardInterrupt, _Stopped):
        pass  # the way to stop it
