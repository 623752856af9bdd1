"""Orders that flow end to end: N one-GPU jobs released at once to one simulated cluster, until all Running.

A federation-server process (`serve`'s default: the scheduler in a process of its own) on an embedded
PostgreSQL and one simulated member agent whose cluster has room for all of them (N/8 nodes of 8 GPUs). The
jobs are submitted while the cluster is cordoned, then it is uncordoned: the release. Timed from the release to
the last job's Running event, and to the last Dispatched event, as jobs per second, by the time the federation
recorded each event (`JobEvent.time`: the server's clock, on this machine); beside it, when a WatchJobs client saw
the last Running event (a watcher gets the log one event per stream message, and may trail it). The agent's
stream must not be dropped (its reconnects are counted from its log). No job may be dispatched before the release.

Writes flow.json and flow.md.
Usage: python -m bench.bench_flow [--quick] [--jobs N]
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import psutil
import yaml

from bench.common import bar, machine, measured, out_dir, parser, write
from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.clusters import tree

GPU = "nvidia.com/gpu"
SUBMIT_BATCH = 1000


class Phases:
    """When each job's Dispatched and Running events were recorded (`recorded`, seconds since the epoch) and seen
    (`at`, `time.perf_counter`), from one WatchJobs stream."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.at: dict[str, dict[str, float]] = {"Dispatched": {}, "Running": {}}
        self.recorded: dict[str, dict[str, float]] = {"Dispatched": {}, "Running": {}}
        self.stream = jobs_pb2_grpc.JobServiceStub(channel).WatchJobs(jobs_pb2.WatchJobsRequest())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if event.type in self.at:
                    self.at[event.type].setdefault(event.job_id, time.perf_counter())
                    self.recorded[event.type].setdefault(event.job_id, event.time.ToNanoseconds() / 1e9)
        except grpc.RpcError:
            pass


def run(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-flow-") as tmp:
        cluster = Path(tmp) / "big.yaml"
        cluster.write_text(yaml.safe_dump_all(tree("big", [1, max(n // 8, 1)], {GPU: "8", "cpu": "64"})))
        quiet = {"FEDERATION_LOG_LEVEL": "warning"}
        server = ServerProcess("--data-dir", str(Path(tmp) / "pg"), "--auto-migrate", "--submit-rate", "0",
                               env=quiet, timeout=180)
        agent = AgentProcess("big", server.address, "--simulate", str(cluster), timeout=180)  # its log: reconnects
        try:
            channel = grpc.insecure_channel(server.address)
            admin, jobs = admin_pb2_grpc.AdminServiceStub(channel), jobs_pb2_grpc.JobServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="bench")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="flow", tenant="bench")))
            while not any(c.status == admin_pb2.READY and c.nodes for c in admin.ListClusters(
                    admin_pb2.ListClustersRequest()).clusters):
                time.sleep(0.2)
            admin.CordonCluster(admin_pb2.CordonClusterRequest(name="big"))
            phases = Phases(channel)
            spec = common_pb2.JobSpec(queue="flow", annotations={"federation.dev/sim-duration": "100000s"},
                                      tasks=[common_pb2.TaskSpec(name="worker", replicas=1, resources={GPU: "1"})])
            with bar(n, "jobs submitted", "jobs") as progress:
                for start in range(0, n, SUBMIT_BATCH):
                    count = min(SUBMIT_BATCH, n - start)
                    specs = [common_pb2.JobSpec(name=f"flow-{start + i}", queue=spec.queue,
                                                annotations=spec.annotations, tasks=spec.tasks) for i in range(count)]
                    jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs), timeout=300)
                    progress.update(count)
            agent_process, api = psutil.Process(agent.proc.pid), psutil.Process(server.proc.pid)
            scheduler = [c for c in api.children(recursive=True) if "postgres" not in c.name()]
            before = (_cpu(agent_process), _cpu(api), sum(_cpu(c) for c in scheduler))
            released, released_at = time.perf_counter(), time.time()
            admin.UncordonCluster(admin_pb2.UncordonClusterRequest(name="big"))
            deadline = released + max(600.0, n / 5)
            with bar(n, "jobs running", "jobs") as progress:
                while len(phases.at["Running"]) < n and time.perf_counter() < deadline:
                    progress.update(len(phases.at["Running"]) - progress.n)
                    time.sleep(0.5)
            running, dispatched = phases.recorded["Running"], phases.recorded["Dispatched"]
            seen = phases.at["Running"]
            phases.stream.cancel()
            agent_cpu = _cpu(agent_process) - before[0]  # from the release on, as the times
            server_cpu = {"api": _cpu(api) - before[1], "scheduler": sum(_cpu(c) for c in scheduler) - before[2]}
        finally:
            agent.stop()
            server.stop()
        reconnects = agent.log.decode().count(" as cluster big") - 1  # "connected to … as cluster big"
    all_running = len(running) == n
    early = sum(1 for t in dispatched.values() if t < released_at)
    assert not early, f"{early} jobs were dispatched to the cordoned cluster before the release"
    return {"jobs": n, "all_running": all_running, "running": len(running), "dispatched": len(dispatched),
            "seconds_to_dispatched": (max(dispatched.values()) - released_at) if dispatched else None,
            "seconds_to_running": (max(running.values()) - released_at) if all_running else None,
            "seconds_to_running_seen": (max(seen.values()) - released) if all_running else None,
            "reconnects": reconnects, "agent_cpu_seconds": agent_cpu,
            "agent_cpu_ms_per_job": 1000 * agent_cpu / n,
            "api_cpu_ms_per_job": 1000 * server_cpu["api"] / n,
            "scheduler_cpu_ms_per_job": 1000 * server_cpu["scheduler"] / n}


def _cpu(process: psutil.Process) -> float:
    """CPU seconds the process used so far."""
    times = process.cpu_times()
    return times.user + times.system


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--jobs", type=int, default=None, help="jobs released at once (default 10,000; quick 1,000)")
    args = p.parse_args(argv)
    result = run(args.jobs or (1_000 if args.quick else 10_000))
    results = {"benchmark": "flow", "date": measured(), "machine": machine(), "quick": args.quick, **result}
    n = result["jobs"]
    to_run, to_dispatch = result["seconds_to_running"], result["seconds_to_dispatched"]
    rate = (f"{n / to_run:,.0f} jobs/s ({to_run:.1f} s)" if to_run
            else f"not all Running: {result['running']:,} of {n:,}")
    dispatch_rate = f"{n / to_dispatch:,.0f} jobs/s ({to_dispatch:.1f} s)" if to_dispatch else "-"
    to_see = result["seconds_to_running_seen"]
    seen_rate = f"{n / to_see:,.0f} jobs/s ({to_see:.1f} s)" if to_see else "-"
    lines = [f"# Orders that flow ({results['date']})", "",
             f"Machine: {results['machine']}; server (API and scheduler processes), embedded PostgreSQL and one "
             f"simulated agent on the same cores. {n:,} one-GPU jobs submitted to a cordoned cluster with room for "
             f"all, then released (uncordoned); timed from the release to the last Dispatched and the last Running "
             f"event as the federation recorded them, and to when a WatchJobs client saw the last Running event.", "",
             "| jobs | release to all Dispatched | release to all Running | seen by a watcher | agent reconnects "
             "| CPU per job: agent | API process | scheduler process |",
             "|---:|---|---|---|---:|---:|---:|---:|",
             f"| {n:,} | {dispatch_rate} | {rate} | {seen_rate} | {result['reconnects']} | "
             f"{result['agent_cpu_ms_per_job']:.1f} ms | {result['api_cpu_ms_per_job']:.1f} ms | "
             f"{result['scheduler_cpu_ms_per_job']:.1f} ms |", "",
             "CPU from the release to the last Running event, per job released; the scheduler process is the API "
             "process's child (`serve`'s default)."]
    write(out_dir(args), "flow", results, "\n".join(lines) + "\n",
          [(f"{n:,} jobs released to one cluster", f"all Running at {rate} (a watcher saw it at {seen_rate}); "
            f"dispatched at {dispatch_rate}; "
            f"{result['reconnects']} reconnects; agent CPU {result['agent_cpu_ms_per_job']:.1f} ms per job")])


if __name__ == "__main__":
    main()
