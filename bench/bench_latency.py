"""Submit-to-dispatch latency of a job that fits at once, while a backlog waits (issue 30), through the real server.

A federation-server process on an embedded PostgreSQL and two simulated member agents: `busy` (two 8-GPU nodes)
runs one gang of 16 GPUs and has a backlog of N more waiting for it (16 GPUs each: no other cluster can hold
them); `idle` (one 8-GPU node) is empty. Probes of one GPU, one at a time, each submitted after the last was
dispatched: the time from the SubmitJob call to the job's Dispatched event on a WatchJobs stream, with no
backlog and with N jobs waiting, in the same run. Meanwhile a client calls GetJob every 50 ms: how long the
API takes to answer while the scheduler works through the backlog; and every 0.5 s ListClusters, for the oldest
heartbeat the federation had recorded (an agent's heartbeat the API process was late to write), and the server's
log is searched for a lease not renewed in time or decisions dropped for it. For `serve`'s default (the scheduler in a
process of its own, jobs that fit dispatched on arrival), and as baselines in the same run: the same without
admission on arrival (`--no-admit-on-arrival`: every job waits for a cycle), and one process doing everything
(`--role all`).

Then `serve`'s default once more with a larger backlog (1,000,000 unless `--large` says otherwise; none when quick).

Writes latency.json and latency.md.
Usage: python -m bench.bench_latency [--quick] [--backlog N] [--probes N] [--large N]
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
import yaml

from bench.common import bar, machine, measured, out_dir, parser, write
from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent.clusters import tree

GPU = "nvidia.com/gpu"
SUBMIT_BATCH = 500


def _cluster(directory: Path, name: str, nodes: int) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump_all(tree(name, [1, nodes], {GPU: "8", "cpu": "64"})))
    return path


def _job(name: str, queue: str, gpus: int) -> common_pb2.JobSpec:
    pods = max(gpus // 8, 1)
    return common_pb2.JobSpec(name=name, queue=queue, annotations={"federation.dev/sim-duration": "100000s"},
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=pods,
                                                         resources={GPU: str(min(gpus, 8))})])


class Dispatches:
    """When each job's Dispatched event arrived, from one WatchJobs stream."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.seen: dict[str, float] = {}
        self.changed = threading.Condition()
        self.stream = jobs_pb2_grpc.JobServiceStub(channel).WatchJobs(jobs_pb2.WatchJobsRequest())
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                if event.type == "Dispatched":
                    with self.changed:
                        self.seen[event.job_id] = time.perf_counter()
                        self.changed.notify_all()
        except grpc.RpcError:
            pass  # cancelled at the end

    def wait(self, job_id: str, timeout: float = 600) -> float:
        with self.changed:
            if not self.changed.wait_for(lambda: job_id in self.seen, timeout):
                raise TimeoutError(f"{job_id} was not dispatched within {timeout} s")
            return self.seen[job_id]


def _probe(jobs: Any, dispatches: Dispatches, n: int, label: str) -> list[float]:
    out = []
    for i in range(n):
        # From the call, not its answer: a job dispatched on arrival may be dispatched before the answer is read.
        submitted = time.perf_counter()
        job_id = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=_job(f"probe-{label}-{i}", "probe", 1))).job.id
        out.append(dispatches.wait(job_id) - submitted)
        jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id))  # its GPU back for the next probe
        time.sleep(0.2)
    return out


class Poller:
    """GetJob every POLL_EVERY seconds from its own channel, each answer's time kept, while it runs; and every
    HEARTBEAT_EVERY seconds the age of each cluster's last heartbeat the federation recorded (how late the API
    process, beside the scheduler's cycles, got to an agent's heartbeat)."""

    def __init__(self, address: str, job_id: str) -> None:
        channel = grpc.insecure_channel(address)
        self.stub, self.admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
        self.job_id, self.seconds, self.heartbeat_ages, self.stopped = job_id, [], [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last_heartbeats = 0.0
        while not self.stopped.is_set():
            started = time.perf_counter()
            self.stub.GetJob(jobs_pb2.GetJobRequest(id=self.job_id), timeout=60)
            self.seconds.append(time.perf_counter() - started)
            if started - last_heartbeats >= HEARTBEAT_EVERY:
                last_heartbeats = started
                clusters = self.admin.ListClusters(admin_pb2.ListClustersRequest(), timeout=60).clusters
                self.heartbeat_ages.append(max(time.time() - c.last_heartbeat.ToMicroseconds() / 1e6
                                               for c in clusters))
            self.stopped.wait(POLL_EVERY)

    def stop(self) -> list[float]:
        self.stopped.set()
        self.thread.join()
        return self.seconds


POLL_EVERY = 0.05
HEARTBEAT_EVERY = 0.5
HEARTBEAT = 2.0  # the agents' heartbeat period (member-agent's default)
# What the server logs when the lease is not renewed in time, or a cycle's (or arrivals') decisions are dropped for it.
LEASE_TROUBLE = ("cannot renew the scheduling lease", "expired or was taken over", "were not written")


def _summary(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"p50": statistics.median(ordered), "p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "max": ordered[-1], "probes": len(ordered)}


def run(backlog: int, probes: int, role: str, arrivals: bool = True) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        server = ServerProcess("--data-dir", str(Path(tmp) / "pg"), "--auto-migrate", "--role", role,
                               "--admit-on-arrival" if arrivals else "--no-admit-on-arrival",
                               env={"FEDERATION_LOG_LEVEL": "warning"}, timeout=180)
        agents = []
        try:
            for name, nodes in (("busy", 2), ("idle", 1)):
                agents.append(AgentProcess(name, server.address, "--simulate", str(_cluster(Path(tmp), name, nodes)),
                                           env={"FEDERATION_LOG_LEVEL": "warning"}, timeout=180))
            channel = grpc.insecure_channel(server.address)
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            jobs = jobs_pb2_grpc.JobServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="bench")))
            for queue in ("backlog", "probe"):
                admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name=queue, tenant="bench")))
            while sum(c.status == admin_pb2.READY for c in admin.ListClusters(admin_pb2.ListClustersRequest())
                      .clusters) < 2:
                time.sleep(0.2)
            dispatches = Dispatches(channel)
            first = jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=_job("runs", "backlog", 16))).job.id
            dispatches.wait(first)
            poller = Poller(server.address, first)
            empty = _probe(jobs, dispatches, probes, "empty")
            polled_empty = poller.stop()
            with bar(backlog, "backlog submitted", "jobs") as progress:
                for start in range(0, backlog, SUBMIT_BATCH):
                    specs = [_job(f"b{i}", "backlog", 16) for i in range(start, min(backlog, start + SUBMIT_BATCH))]
                    jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs))
                    progress.update(len(specs))
            poller = Poller(server.address, first)
            waited = _probe(jobs, dispatches, probes, "backlog")
            polled = poller.stop()
            heartbeat_ages = poller.heartbeat_ages
            dispatches.stream.cancel()
        finally:
            for agent in agents:
                agent.stop()
            server.stop()
        lease_trouble = [line for line in server.log.decode(errors="replace").splitlines()
                         if any(t in line for t in LEASE_TROUBLE)]
    return {"role": role, "arrivals": arrivals, "backlog": backlog, "empty": _summary(empty),
            "with_backlog": _summary(waited),
            "get_job_empty": _summary(polled_empty), "get_job_with_backlog": _summary(polled),
            "heartbeat_age_max": max(heartbeat_ages, default=0.0), "heartbeat_ages": len(heartbeat_ages),
            "lease_trouble": lease_trouble, "seconds_empty": empty, "seconds_with_backlog": waited}


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--backlog", type=int, default=None, help="jobs waiting (default 100,000; quick 2,000)")
    p.add_argument("--probes", type=int, default=None, help="probe jobs per setting (default 100; quick 10)")
    p.add_argument("--large", type=int, default=None,
                   help="jobs waiting in one more run of `serve`'s default (default 1,000,000; quick: none)")
    args = p.parse_args(argv)
    backlog, probes = args.backlog or (2_000 if args.quick else 100_000), args.probes or (10 if args.quick else 100)
    large = args.large if args.large is not None else (0 if args.quick else 1_000_000)
    runs = [run(backlog, probes, "both"), run(backlog, probes, "both", arrivals=False), run(backlog, probes, "all")]
    if large:
        runs.append(run(large, probes, "both"))
    results = {"benchmark": "latency", "date": measured(), "machine": machine(), "quick": args.quick,
               **runs[0], "runs": runs}
    split, cycle_only, one = runs[:3]
    lines = [f"# Submit-to-dispatch latency ({results['date']})", "",
             f"Machine: {results['machine']}; server, embedded PostgreSQL, two simulated agents and the client on the "
             f"same cores. A one-GPU job that fits at once on an idle cluster, one at a time, from the SubmitJob call "
             f"to its Dispatched event; {split['with_backlog']['probes']} probes per setting. Meanwhile GetJob every "
             f"{POLL_EVERY * 1000:.0f} ms, each answer timed. `both`: `serve`'s default, the scheduler in a process "
             f"of its own; the baselines in the same run: `both, cycle only`, without admission on arrival, and "
             f"`all`, one process doing everything. With the backlog: the oldest heartbeat the federation had "
             f"recorded (every {HEARTBEAT_EVERY} s; agents beat every {HEARTBEAT:.0f} s), and the server's log lines "
             f"of a lease not renewed in time or decisions dropped for it.", "",
             "| server | jobs waiting | dispatch p50 (s) | p99 (s) | max (s) | GetJob p50 (s) | p99 (s) | max (s) "
             "| heartbeat age max (s) | lease trouble |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        for label, d, g in (("0", r["empty"], r["get_job_empty"]),
                            (f"{r['backlog']:,}", r["with_backlog"], r["get_job_with_backlog"])):
            server = r["role"] + ("" if r["arrivals"] else ", cycle only")
            beats = (f"{r['heartbeat_age_max']:.2f} | {len(r['lease_trouble'])}" if label != "0" else "- | -")
            lines.append(f"| {server} | {label} | {d['p50']:.3f} | {d['p99']:.3f} | {d['max']:.3f} | "
                         f"{g['p50']:.3f} | {g['p99']:.3f} | {g['max']:.3f} | {beats} |")
    w, e, g, base = split["with_backlog"], split["empty"], split["get_job_with_backlog"], one["get_job_with_backlog"]
    c = cycle_only["with_backlog"]
    write(out_dir(args), "latency", results, "\n".join(lines) + "\n",
          [(f"submit-to-dispatch, {backlog:,} waiting", f"p50 {w['p50']:.3f} s, p99 {w['p99']:.3f} s "
            f"(cycle only: p50 {c['p50']:.3f} s, p99 {c['p99']:.3f} s; no backlog: p50 {e['p50']:.3f} s, "
            f"p99 {e['p99']:.3f} s)"),
           (f"GetJob while {backlog:,} wait", f"p99 {g['p99']:.3f} s, max {g['max']:.3f} s (one process: p99 "
            f"{base['p99']:.3f} s, max {base['max']:.3f} s)"),
           (f"heartbeats and the lease while {backlog:,} wait",
            f"oldest heartbeat {split['heartbeat_age_max']:.2f} s (beats every {HEARTBEAT:.0f} s), lease trouble "
            f"{len(split['lease_trouble'])} (one process: {one['heartbeat_age_max']:.2f} s, "
            f"{len(one['lease_trouble'])})"),
           *[(f"submit-to-dispatch, {r['backlog']:,} waiting", f"p50 {r['with_backlog']['p50']:.3f} s, p99 "
              f"{r['with_backlog']['p99']:.3f} s (no backlog, same run: p50 {r['empty']['p50']:.3f} s, p99 "
              f"{r['empty']['p99']:.3f} s; GetJob p99 {r['get_job_with_backlog']['p99']:.3f} s)") for r in runs[3:]]])


if __name__ == "__main__":
    main()
