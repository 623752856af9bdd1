"""Time to recover from faults, with real processes: the server, simulated H100 member agents, PostgreSQL.

1. A failed pod under RestartTask (issue 5 (a)): from `member-agent fault fail-pod` to the job showing the
   restart (retries + 1), for a 16-pod gang; repeated on fresh jobs.
2. A killed agent (issue 5 (d)): `kill -9` of the agent holding a running job and a job dispatched to it
   but not placed (the agent was frozen first); from the kill to each job running on the other cluster.
   The server runs with --heartbeat-timeout and --lost-grace as printed: recovery cannot be sooner.
3. A killed server (issue 5 (e)): SIGKILL, restart on the same database and port; from the kill to the
   first answered SubmitJob, to both agents Ready again, and to that job running.
4. A frozen leader (issue 41 (8)): two replicas (API and scheduler process each), a job accepted by the
   leader, then the leader's processes stopped (SIGSTOP) at once; from the freeze to the job dispatched by
   the standby, and to it running (its cluster's agent was on the frozen replica: it moves to the standby).
   The bound asked is the lease (--leader-lease) plus one cycle.
5. A leader partitioned from PostgreSQL (issue 41 (8)): the same, each replica on PostgreSQL through a proxy of
   its own and the leader's cut off (its sessions hang, as on a network that drops packets) instead of frozen.

Wall-clock times on a shared 2-core machine: medians of --runs repetitions.
Writes faults.json and faults.md. Usage: python -m bench.bench_faults [--quick] [--runs 5]
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import psutil
from sqlalchemy.engine import make_url

from bench.common import bar, machine, measured, out_dir, parser, write
from federation.cli.dev import BIN, AgentProcess, ServerProcess
from federation.store import database
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.netproxy import Proxy, proxied

CLUSTER = Path(__file__).resolve().parent.parent / "examples" / "clusters" / "h100-spine-leaf.yaml"
GPU = "nvidia.com/gpu"
TIMEOUT, GRACE = 3.0, 3.0  # --heartbeat-timeout and --lost-grace of the server under test
LEASE = 4.0  # --leader-lease of the two replicas of the frozen-leader runs (the default)


def until(probe: Callable[[], Any], timeout: float = 120) -> float:
    """Seconds until `probe` is truthy (a failed call counts as not yet)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        try:
            if probe():
                return time.monotonic() - started
        except grpc.RpcError:
            pass
        time.sleep(0.05)
    raise TimeoutError("did not recover in time")


class Federation:
    def __init__(self, url: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.address = f"127.0.0.1:{s.getsockname()[1]}"
        self.serve = ("--database-url", url, "--listen", self.address, "--heartbeat-timeout", str(TIMEOUT),
                      "--lost-grace", str(GRACE))
        self.server = ServerProcess(*self.serve)
        self.agents = {n: self.start_agent(n) for n in ("east", "west")}
        channel = grpc.insecure_channel(self.address, options=[("grpc.initial_reconnect_backoff_ms", 100),
                                                               ("grpc.max_reconnect_backoff_ms", 500)])
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)
        until(lambda: self.ready() == {"east", "west"})
        self.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        self.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        self.n = 0

    def start_agent(self, name: str) -> AgentProcess:
        return AgentProcess(name, self.address, "--simulate", str(CLUSTER), "--heartbeat", "0.5")

    def ready(self) -> set[str]:
        return {c.name for c in self.admin.ListClusters(admin_pb2.ListClustersRequest(), timeout=2).clusters
                if c.status == admin_pb2.READY and c.nodes}

    def submit(self, pods: int, restart: bool = False) -> str:
        self.n += 1
        spec = common_pb2.JobSpec(
            name="bench", queue="train", request_id=f"bench-{self.n}",
            annotations={"federation.dev/sim-duration": "600s"},
            network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=2),
            tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: "4", "cpu": "8"})])
        if restart:
            spec.policies.add(events=["PodFailed"], action="RestartTask")
        return self.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), timeout=5).job.id

    def status(self, job_id: str) -> common_pb2.JobStatus:
        return self.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id), timeout=2).status

    def running_on(self, job_id: str, cluster: str = "") -> bool:
        s = self.status(job_id)
        return s.phase == common_pb2.RUNNING and (not cluster or s.cluster == cluster)

    def cancel_all(self, ids: list[str]) -> None:
        for job_id in ids:
            self.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id), timeout=5)

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        self.server.stop()


def pod_restart(fed: Federation) -> float:
    job_id = fed.submit(16, restart=True)
    until(lambda: fed.running_on(job_id))
    agent = fed.agents[fed.status(job_id).cluster]
    started = time.monotonic()
    subprocess.run([str(BIN / "member-agent"), "fault", "fail-pod", job_id, "worker", "5", "--agent", agent.admin],
                   check=True, capture_output=True)
    seconds = time.monotonic() - started + until(lambda: fed.status(job_id).retries == 1)
    fed.cancel_all([job_id])
    return seconds


def agent_killed(fed: Federation) -> tuple[float, float]:
    running = fed.submit(8)
    until(lambda: fed.running_on(running))
    first = fed.status(running).cluster
    other = ({"east", "west"} - {first}).pop()
    fed.agents[first].proc.send_signal(signal.SIGSTOP)
    queued = fed.submit(8)
    until(lambda: fed.status(queued).phase == common_pb2.DISPATCHED)
    fed.agents[first].kill()
    killed = time.monotonic()
    queued_back = until(lambda: fed.running_on(queued, other))
    running_back = time.monotonic() - killed + until(lambda: fed.running_on(running, other))
    fed.cancel_all([running, queued])
    fed.agents[first] = fed.start_agent(first)
    until(lambda: fed.ready() == {"east", "west"})
    return queued_back, running_back


def server_killed(fed: Federation) -> tuple[float, float, float]:
    fed.server.kill()
    killed = time.monotonic()
    fed.server = ServerProcess(*fed.serve)
    job_id = ""

    def answered() -> bool:
        nonlocal job_id
        job_id = fed.submit(2)
        return True

    answering = time.monotonic() - killed + until(answered)  # the restart itself included
    agents_back = time.monotonic() - killed + until(lambda: fed.ready() == {"east", "west"})
    job_running = time.monotonic() - killed + until(lambda: fed.running_on(job_id))
    fed.cancel_all([job_id])
    return answering, agents_back, job_running


def _epoch(server: ServerProcess) -> int:
    """The lease epoch under which this replica last became the leader (0: never)."""
    said = re.findall(rb"now the scheduling leader \(lease epoch (\d+)\)", server.log)
    return int(said[-1]) if said else 0


def _signal_tree(server: ServerProcess, signum: int) -> None:
    """To the replica and its scheduler process: the whole replica freezes or wakes, as a paused VM would."""
    for pid in [server.proc.pid, *(c.pid for c in psutil.Process(server.proc.pid).children(recursive=True))]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def leader_stalled(url: str, runs: int, fault: str) -> list[tuple[float, float]]:
    """(seconds to the standby's dispatch, seconds to running) of a job the leader accepted just before it stalled:
    frozen (SIGSTOP), or cut off from PostgreSQL (its proxy relays nothing)."""
    proxies = [proxied(make_url(url)) for _ in range(2)]
    servers = [ServerProcess("--database-url", through.render_as_string(hide_password=False), "--heartbeat-timeout",
                             str(TIMEOUT), "--lost-grace", str(GRACE), "--leader-lease", str(LEASE))
               for _, through in proxies]
    agent = AgentProcess("east", "ipv4:" + ",".join(s.address for s in servers), "--simulate", str(CLUSTER),
                         "--heartbeat", "0.5")
    stubs = [jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(s.address)) for s in servers]
    admin = admin_pb2_grpc.AdminServiceStub(grpc.insecure_channel(servers[0].address))
    out = []
    try:
        until(lambda: any(c.status == admin_pb2.READY and c.nodes
                          for c in admin.ListClusters(admin_pb2.ListClustersRequest(), timeout=2).clusters))
        with contextlib.suppress(grpc.RpcError):  # made by the run before
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="failover")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="failover", tenant="failover")))
        for run in range(runs):
            out.append(_stall_after_accepting(servers, [p for p, _ in proxies], stubs, f"{fault}-{run}", fault))
    finally:
        for server in servers:
            _signal_tree(server, signal.SIGCONT)
        for proxy, _ in proxies:
            proxy.heal()
        agent.stop()
        for server in servers:
            server.stop()
        for proxy, _ in proxies:
            proxy.close()
    return out


def _stall_after_accepting(servers: list[ServerProcess], proxies: list[Proxy],
                           stubs: list[jobs_pb2_grpc.JobServiceStub], run: str, fault: str) -> tuple[float, float]:
    until(lambda: max(map(_epoch, servers)) > 0)
    lead = max(range(2), key=lambda i: _epoch(servers[i]))
    leader, standby = stubs[lead], stubs[1 - lead]
    spec = common_pb2.JobSpec(name="bench", queue="failover", request_id=run,
                              annotations={"federation.dev/sim-duration": "600s"},
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=2, resources={GPU: "8", "cpu": "8"})])
    job_id = leader.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec), timeout=10).job.id
    if fault == "frozen":
        _signal_tree(servers[lead], signal.SIGSTOP)
    else:
        proxies[lead].partition()
    stalled = time.monotonic()

    def phase() -> int:
        return standby.GetJob(jobs_pb2.GetJobRequest(id=job_id), timeout=2).status.phase

    dispatched = until(lambda: phase() != common_pb2.PENDING)
    running = time.monotonic() - stalled + until(lambda: phase() == common_pb2.RUNNING)
    _signal_tree(servers[lead], signal.SIGCONT)
    proxies[lead].heal()
    standby.CancelJob(jobs_pb2.CancelJobRequest(id=job_id), timeout=10)
    until(lambda: phase() == common_pb2.CANCELLED)
    return dispatched, running


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--runs", type=int, default=None, help="repetitions of each fault (default 5, quick 1)")
    args = p.parse_args(argv)
    runs = args.runs or (1 if args.quick else 5)
    with tempfile.TemporaryDirectory() as tmp, database.embedded_postgres(Path(tmp) / "pg") as raw:
        url = database.sqlalchemy_url(raw)
        database.upgrade(url)
        fed = Federation(url.render_as_string(hide_password=False))
        try:
            pods, agents, servers = [], [], []
            with bar(3 * runs, "faults", "faults") as progress:
                for kind, results, fault in (("pod restarts", pods, pod_restart), ("agent kills", agents, agent_killed),
                                             ("server kills", servers, server_killed)):
                    progress.set_postfix_str(kind)
                    for _ in range(runs):
                        results.append(fault(fed))
                        progress.update()
        finally:
            fed.close()
        frozen = leader_stalled(url.render_as_string(hide_password=False), runs, "frozen")
        partitioned = leader_stalled(url.render_as_string(hide_password=False), runs, "partitioned")

    def median(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    results = {
        "benchmark": "faults", "date": measured(), "machine": machine(),
        "runs": runs, "heartbeat_timeout": TIMEOUT, "lost_grace": GRACE,
        "pod_restart_seconds": median(pods),
        "agent_kill_queued_seconds": median([a[0] for a in agents]),
        "agent_kill_running_seconds": median([a[1] for a in agents]),
        "server_kill_answering_seconds": median([s[0] for s in servers]),
        "server_kill_agents_ready_seconds": median([s[1] for s in servers]),
        "server_kill_job_running_seconds": median([s[2] for s in servers]),
        "leader_lease": LEASE,
        "leader_frozen_dispatched_seconds": median([f[0] for f in frozen]),
        "leader_frozen_running_seconds": median([f[1] for f in frozen]),
        "leader_partitioned_dispatched_seconds": median([f[0] for f in partitioned]),
        "leader_partitioned_running_seconds": median([f[1] for f in partitioned]),
        "raw": {"pod_restart": pods, "agent_kill": agents, "server_kill": servers, "leader_frozen": frozen,
                "leader_partitioned": partitioned},
    }
    write(out_dir(args), "faults", results, report(results), [
        ("failed pod restarted (RestartTask)", f"{results['pod_restart_seconds']} s"),
        ("killed agent's running job runs elsewhere",
         f"{results['agent_kill_running_seconds']} s (heartbeat timeout {TIMEOUT:g} s + grace {GRACE:g} s)"),
        ("killed server answers again", f"{results['server_kill_answering_seconds']} s"),
        ("frozen leader's accepted job dispatched by the standby",
         f"{results['leader_frozen_dispatched_seconds']} s (lease {LEASE:g} s + one cycle)"),
        ("leader cut off from PostgreSQL: its accepted job dispatched by the standby",
         f"{results['leader_partitioned_dispatched_seconds']} s (lease {LEASE:g} s + one cycle)")])


def report(r: dict[str, Any]) -> str:
    return "\n".join([
        f"# Fault recovery benchmark ({r['date']})", "",
        f"Machine: {r['machine']}. Real processes: federation-server, two simulated H100 member agents (32 nodes "
        f"each), embedded PostgreSQL. Server flags: --heartbeat-timeout {r['heartbeat_timeout']:g} "
        f"--lost-grace {r['lost_grace']:g}. Wall clock, median of {r['runs']} runs.", "",
        "| fault | recovered when | seconds |", "|---|---|---:|",
        f"| one pod of a 16-pod gang fails (RestartTask) | the job shows the restart | {r['pod_restart_seconds']} |",
        f"| agent `kill -9` | its dispatched, unplaced job runs on the other cluster | "
        f"{r['agent_kill_queued_seconds']} |",
        f"| agent `kill -9` | its running job runs on the other cluster | {r['agent_kill_running_seconds']} |",
        f"| server SIGKILL and restart | a SubmitJob is answered | {r['server_kill_answering_seconds']} |",
        f"| server SIGKILL and restart | both agents Ready again | {r['server_kill_agents_ready_seconds']} |",
        f"| server SIGKILL and restart | a job submitted then runs | {r['server_kill_job_running_seconds']} |",
        f"| leader SIGSTOP just after accepting a job (of two replicas) | the standby dispatches it | "
        f"{r['leader_frozen_dispatched_seconds']} |",
        f"| leader SIGSTOP just after accepting a job (of two replicas) | it runs (its agent moved to the standby) "
        f"| {r['leader_frozen_running_seconds']} |",
        f"| leader cut off from PostgreSQL just after accepting a job | the standby dispatches it | "
        f"{r['leader_partitioned_dispatched_seconds']} |",
        f"| leader cut off from PostgreSQL just after accepting a job | it runs (its agent moved to the standby) | "
        f"{r['leader_partitioned_running_seconds']} |",
        "", "The agent-kill figures include the heartbeat timeout (and, for running work, the grace): recovery "
        "cannot be sooner than those settings. The stalled-leader figures are bounded below by the lease "
        f"({r['leader_lease']:g} s): the standby may lead only once it has expired; the bound asked is the lease "
        "plus one cycle.", ""])


if __name__ == "__main__":
    main()
