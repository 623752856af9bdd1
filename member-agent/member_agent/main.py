"""`member-agent`: run the agent of one member cluster, or inject faults into a running one."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
import urllib.error
import urllib.parse
import urllib.request
import warnings
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import grpc

from federation.kernel import heap
from member_agent import client, health, provisioning
from member_agent.agent import Agent
from member_agent.discovery import preset_keys
from member_agent.faults import STATES, Fault, load_faults
from member_agent.model import ENDED_POD_RETENTION, MIG_WAIT, PROVISION_TIMEOUT, Backend
from member_agent.nodehealth import HealthRules, load_rules
from member_agent.simulated import SimulatedBackend, read_cluster_file
from member_agent.topology import TopologyError

log = logging.getLogger("member_agent")


def _labels(values: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in values:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--label")
        out[key] = value
    return out


class _Admin(BaseHTTPRequestHandler):
    """POST /faults/node/NAME/fail|restore (the node is lost or back), /faults/node/NAME/healthy|degraded|failed
    and /faults/hypernode/NAME/healthy|degraded (hardware health, `?reason=XID+79&rate=0.5`), and
    /faults/pod/JOB/TASK/INDEX/fail|recover."""

    agent: Agent
    loop: asyncio.AbstractEventLoop

    def do_POST(self) -> None:
        path, _, query = self.path.partition("?")
        parts = path.strip("/").split("/")
        params = {k: v[-1] for k, v in urllib.parse.parse_qs(query).items()}
        result: bool | None = None
        if len(parts) == 4 and parts[:2] == ["faults", "node"] and parts[3] in ("fail", "restore"):
            result = self._call(self.agent.node_ready, parts[2], parts[3] == "restore")
        elif len(parts) == 4 and parts[0] == "faults" and parts[1] in ("node", "hypernode") and parts[3] in STATES:
            try:
                rate = float(params["rate"]) if "rate" in params else None
            except ValueError:
                rate = None
            result = self._call(self.agent.inject, Fault(0, parts[1], parts[2], parts[3], params.get("reason", ""),
                                                         rate))
        elif len(parts) == 6 and parts[:2] == ["faults", "pod"] and parts[4].isdigit():
            job_id, task, index = parts[2], parts[3], int(parts[4])
            if parts[5] == "fail":
                result = self._call(self.agent.pod_failed, job_id, task, index, "failed by fault injection")
            elif parts[5] == "recover":
                result = self._call(self.agent.pod_recovered, job_id, task, index)
        status = 404 if result is None else (200 if result else 409)
        body = json.dumps({"ok": bool(result)}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def _call(self, fn: Any, *args: Any) -> bool:
        async def call() -> bool:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(10)

    def log_message(self, format: str, *args: Any) -> None:
        log.info("admin: " + format, *args)


def _start_admin(address: str, agent: Agent, loop: asyncio.AbstractEventLoop) -> str:
    host, _, port = address.rpartition(":")
    handler = type("Admin", (_Admin,), {"agent": agent, "loop": loop})
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"{server.server_address[0]}:{server.server_address[1]}"


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--cluster", envvar="MEMBER_CLUSTER", help="This member cluster's name (a DNS-1123 label).")
@click.option("--server", envvar="FEDERATION_SERVER", default="localhost:50051", show_default=True,
              help="Address of the federation server.")
@click.option("--simulate", "cluster_file", metavar="FILE",
              type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="Run a simulated cluster from a YAML file of Nodes, HyperNodes and Pods.")
@click.option("--kubeconfig", type=click.Path(path_type=Path, exists=True, dir_okay=False), metavar="PATH",
              help="Run against this Kubernetes cluster (kubeconfig file).")
@click.option("--in-cluster", is_flag=True, help="Run against the Kubernetes cluster this pod runs in.")
@click.option("--namespace", envvar="MEMBER_NAMESPACE", default="default", show_default=True,
              help="Namespace of the gangs' pods (Kubernetes backend).")
@click.option("--scheduler-name", default="federation-agent", show_default=True,
              help="schedulerName of the pods it creates, so no other scheduler takes them.")
@click.option("--topology-label", "topology_labels", multiple=True, metavar="KEY",
              help="Node label keys from the widest domain to tier 1, when the cluster has no HyperNodes.")
@click.option("--discover", "discover", default="", metavar="PRESETS",
              help="Build the topology from the node labels of these presets, widest first (aws, gke, gke-placement, "
                   "nvlink, plain; e.g. aws,nvlink) and write it to the cluster as HyperNode objects, kept current.")
@click.option("--health-rules", type=click.Path(path_type=Path, exists=True, dir_okay=False), metavar="FILE",
              help="Which node conditions, taints and HyperNode conditions mean degraded or failed (YAML); default: "
                   "NVSentinel's and Node Problem Detector's names.")
@click.option("--dcgm-metrics", "dcgm_url", default="", metavar="URL",
              help="Also read node health from NVIDIA dcgm-exporter's Prometheus metrics at this URL (every 15 s): "
                   "XIDs, ECC and row remaps, NVLink and PCIe replays, thermal throttling, against the thresholds "
                   "of --health-rules (Kubernetes backend).")
@click.option("--faults", "faults_file", type=click.Path(path_type=Path, exists=True, dir_okay=False), metavar="FILE",
              help="Inject these hardware faults at their times (simulated clusters): a YAML list of "
                   "{at, node|hypernode, state, reason}.")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE",
              help="A label of this cluster, for jobs' cluster selectors.")
@click.option("--heartbeat", type=float, default=2.0, show_default=True, help="Seconds between heartbeats.")
@click.option("--reconcile-period", envvar="MEMBER_RECONCILE_PERIOD", type=click.FloatRange(min=0.1), default=30.0,
              show_default=True, help="Seconds between two reconciliations with the server (every pod the agent "
              "manages against the attempts the federation runs here; the rest is deleted). Also on every connect.")
@click.option("--fence-after", envvar="MEMBER_FENCE_AFTER", type=click.FloatRange(min=1), default=None,
              help="Seconds cut off from every federation server after which the agent stops the gangs it runs, so "
                   "that none runs twice once the server runs them elsewhere. Default: the server's --lost-grace, "
                   "as it says at registration (300 before any).")
@click.option("--mig-wait", envvar="MEMBER_MIG_WAIT", type=click.FloatRange(min=1), default=MIG_WAIT,
              show_default=True, help="Seconds a gang waits for nodes NVIDIA's MIG manager repartitions for it to "
              "report their new layout before it is sent back to the federation.")
@click.option("--node-groups", "node_groups_file", envvar="MEMBER_NODE_GROUPS",
              type=click.Path(path_type=Path, exists=True, dir_okay=False), metavar="FILE",
              help="The node groups this cluster's autoscaler can grow, a YAML list of {name, maxNodes, capacity, "
                   "labels} (Kubernetes backend): a gang of a queue with the provisioning admission check may be sent "
                   "here when it fits no cluster as it is, and its agent asks for the nodes (a ProvisioningRequest).")
@click.option("--provision-timeout", envvar="MEMBER_PROVISION_TIMEOUT", type=click.FloatRange(min=1),
              default=PROVISION_TIMEOUT, show_default=True,
              help="Seconds a gang waits for the nodes it asked for before it is sent back to the federation.")
@click.option("--ended-pod-retention", envvar="MEMBER_ENDED_POD_RETENTION", type=click.FloatRange(min=0),
              default=ENDED_POD_RETENTION, show_default=True,
              help="Seconds the pods of a job that succeeded or failed are kept after it ends, with their logs (as "
                   "Volcano keeps a finished job's pods); pods still running when it ends are stopped at once. 0 "
                   "deletes them with the job.")
@click.option("--admin-listen", default="", metavar="HOST:PORT",
              help="Serve fault injection over HTTP here (simulated clusters).")
@click.option("--health-listen", envvar="MEMBER_HEALTH_LISTEN", default="", metavar="HOST:PORT",
              help="Serve /metrics, /healthz and /readyz over HTTP here (port 0 picks one; '' turns it off).")
@click.option("--tls-ca", envvar="MEMBER_TLS_CA", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="PEM CA that signed the server's certificate: connect over mTLS (with --tls-cert, --tls-key) to "
                   "the server's --agent-listen address.")
@click.option("--tls-cert", envvar="MEMBER_TLS_CERT", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="PEM client certificate naming this cluster (its common name must equal --cluster).")
@click.option("--tls-key", envvar="MEMBER_TLS_KEY", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="PEM private key of --tls-cert.")
@click.option("--log-level", envvar="MEMBER_AGENT_LOG_LEVEL", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]),
              help="Least severe log messages shown (debug, info, warning, error).")
@click.pass_context
def cli(ctx: click.Context, cluster: str | None, server: str, cluster_file: Path | None, kubeconfig: Path | None,
        in_cluster: bool, namespace: str, scheduler_name: str, topology_labels: tuple[str, ...],
        discover: str, health_rules: Path | None, dcgm_url: str, faults_file: Path | None, labels: tuple[str, ...],
        heartbeat: float, reconcile_period: float, fence_after: float | None, mig_wait: float,
        node_groups_file: Path | None, provision_timeout: float, ended_pod_retention: float, admin_listen: str,
        health_listen: str, tls_ca: Path | None, tls_cert: Path | None, tls_key: Path | None, log_level: str) -> None:
    """Member agent: places gangs topology-aware in one cluster and reports to the federation."""
    if ctx.invoked_subcommand is not None:
        return
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
    if not cluster:
        raise click.UsageError("--cluster is required")
    if sum(map(bool, (cluster_file, kubeconfig, in_cluster))) != 1:
        raise click.UsageError("give exactly one of --simulate FILE, --kubeconfig PATH or --in-cluster")
    if any((tls_ca, tls_cert, tls_key)) and not all((tls_ca, tls_cert, tls_key)):
        raise click.UsageError("mTLS needs all of --tls-ca, --tls-cert and --tls-key")
    credentials = grpc.ssl_channel_credentials(tls_ca.read_bytes(), tls_key.read_bytes(), tls_cert.read_bytes()) \
        if tls_ca and tls_cert and tls_key else None
    cluster_labels = _labels(labels)
    try:
        discovered = preset_keys(discover)
        rules = load_rules(health_rules) if health_rules else HealthRules()
        faults = load_faults(faults_file) if faults_file else []
        node_groups = provisioning.load(node_groups_file) if node_groups_file else []
    except ValueError as err:  # an unknown preset, a bad rules or fault file: named with its field
        raise click.ClickException(str(err)) from err
    if discovered and topology_labels:
        raise click.UsageError("give --discover or --topology-label, not both")
    if faults and not cluster_file:
        raise click.UsageError("--faults is for simulated clusters; on a test bed use python -m "
                               "federation.testbed.faults")
    simulated = None
    if cluster_file is not None:
        try:
            simulated = SimulatedBackend(read_cluster_file(cluster_file), retention=ended_pod_retention)
        except TopologyError as err:
            raise click.ClickException(f"{cluster_file}: {err}") from err

    async def agent_of() -> Agent:
        backend = simulated or await _kubernetes(cluster, kubeconfig, namespace, scheduler_name,
                                                 tuple(discovered) or topology_labels, rules, bool(discovered),
                                                 dcgm_url, ended_pod_retention)
        return Agent(cluster, cluster_labels, backend, fence_after=fence_after, mig_wait=mig_wait,
                     node_groups=node_groups, provision_timeout=provision_timeout)

    heap.tune()
    asyncio.run(_run(agent_of, server, heartbeat, reconcile_period, admin_listen, health_listen, credentials,
                     faults))


async def _kubernetes(cluster: str, kubeconfig: Path | None, namespace: str, scheduler: str,
                      topology_labels: tuple[str, ...], rules: HealthRules, write_hypernodes: bool,
                      dcgm_url: str, retention: float) -> Backend:
    """Connect, check the role grants every call the agent makes, and read the cluster."""
    from aiohttp import ClientError
    from kubernetes_asyncio.config import ConfigException

    from member_agent.kube import KubernetesBackend, StartError
    from member_agent.kubeapi import Kube, KubeError

    try:
        kube = await Kube.connect(str(kubeconfig) if kubeconfig else None)
    except (ConfigException, OSError, ValueError) as err:
        raise click.ClickException(f"cannot use {kubeconfig or 'the in-cluster configuration'}: {err}") from err
    backend = KubernetesBackend(kube, cluster, namespace, scheduler, topology_labels, health=rules,
                                write_hypernodes=write_hypernodes, dcgm_url=dcgm_url, retention=retention)
    try:
        await backend.check_access()
        await backend.start()
    except (StartError, TopologyError) as err:
        await backend.stop()
        raise click.ClickException(str(err)) from err
    except (KubeError, ClientError, OSError) as err:
        await backend.stop()
        raise click.ClickException(f"cannot read the cluster through its API server: {err}") from err
    return backend


async def _run(agent_of: Any, server: str, heartbeat: float, reconcile_period: float, admin_listen: str,
               health_listen: str, credentials: grpc.ChannelCredentials | None, faults: list[Fault]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    agent: Agent = await agent_of()
    heap.settle()  # the cluster as read (its nodes, pods and HyperNodes) lives as long as the agent
    connected = asyncio.Event()
    if health_listen:
        def readiness() -> str:
            return "" if connected.is_set() else "not connected to the federation server"

        _, address = await health.start(health_listen, readiness)
        print(f"member-agent health on {address} (/metrics, /healthz, /readyz)", flush=True)
    if admin_listen:
        print(f"member-agent admin listening on {_start_admin(admin_listen, agent, loop)}", flush=True)
    topology = agent.state.topology
    print(f"member-agent {agent.cluster}: {len(topology.nodes)} nodes, tiers {topology.tiers()}, "
          f"server {server}{' (mTLS)' if credentials else ''}", flush=True)
    task = asyncio.create_task(client.run(server, agent, heartbeat, connected, credentials,
                                                reconcile_period))
    for f in faults:  # the schedule counts from the agent's start
        loop.call_later(f.at, lambda f=f: agent.inject(f) or log.warning("fault for unknown %s %s", f.kind, f.name))
    await stop.wait()
    task.cancel()
    backend_stop = getattr(agent.backend, "stop", None)
    if backend_stop is not None:
        await backend_stop()


@cli.group()
def fault() -> None:
    """Inject faults into a running simulated agent (its --admin-listen address)."""


def _post(agent_address: str, path: str) -> None:
    request = urllib.request.Request(f"http://{agent_address}{path}", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10):
            pass
    except urllib.error.HTTPError as err:
        raise click.ClickException(f"{path}: {'not found' if err.code in (404, 409) else err.reason}") from err
    except urllib.error.URLError as err:
        raise click.ClickException(f"cannot reach the agent at {agent_address}: {err.reason}") from err


_agent_option = click.option("--agent", "agent_address", required=True, metavar="HOST:PORT",
                             help="The agent's --admin-listen address.")


def _health_fault(name: str, kind: str, state: str, summary: str) -> None:
    @fault.command(name, help=summary)
    @click.argument("name")
    @click.option("--reason", default="", help="What a health monitor would say (e.g. 'XID 79').")
    @_agent_option
    def command(name: str, reason: str, agent_address: str) -> None:
        query = f"?{urllib.parse.urlencode({'reason': reason})}" if reason else ""
        _post(agent_address, f"/faults/{kind}/{name}/{state}{query}")
        click.echo(f"{kind}/{name} {state}")


_health_fault("degrade-node", "node", "degraded", "NODE's hardware degrades (works, may fail): its gangs move off it.")
_health_fault("break-node", "node", "failed", "NODE's hardware fails (as NVSentinel reports it): it gets nothing.")
_health_fault("heal-node", "node", "healthy", "NODE's hardware is healthy again.")
_health_fault("degrade-link", "hypernode", "degraded", "HyperNode NAME's switches or cables degrade.")
_health_fault("heal-link", "hypernode", "healthy", "HyperNode NAME's links are healthy again.")


@fault.command("fail-node")
@click.argument("node")
@_agent_option
def fail_node(node: str, agent_address: str) -> None:
    """Mark NODE lost: it offers nothing and its pods fail (event Unknown)."""
    _post(agent_address, f"/faults/node/{node}/fail")
    click.echo(f"node/{node} failed")


@fault.command("restore-node")
@click.argument("node")
@_agent_option
def restore_node(node: str, agent_address: str) -> None:
    """Bring NODE back."""
    _post(agent_address, f"/faults/node/{node}/restore")
    click.echo(f"node/{node} restored")


def _pod_fault(name: str, action: str, done: str, summary: str) -> None:
    @fault.command(name, help=summary)
    @click.argument("job_id")
    @click.argument("task")
    @click.argument("index", type=int)
    @_agent_option
    def command(job_id: str, task: str, index: int, agent_address: str) -> None:
        _post(agent_address, f"/faults/pod/{job_id}/{task}/{index}/{action}")
        click.echo(f"pod {job_id}/{task}/{index} {done}")


_pod_fault("fail-pod", "fail", "failed", "Fail pod INDEX of TASK of job JOB_ID.")
_pod_fault("recover-pod", "recover", "recovered",
           "Pod INDEX of TASK of job JOB_ID runs again (as if its container restarted) before its policy acted.")
