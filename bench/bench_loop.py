"""How long each heavy handler holds the API's event loop, on the largest input its bounds allow.

A real federation-server on an embedded PostgreSQL, seeded with clusters reporting every HyperNode the
inventory allows (1,000 each) and a backlog of jobs. A probe thread calls GetVersion every 10 ms on a
channel of its own; for each handler, its longest answer while the handler runs is the longest the handler
held the loop (plus one GetVersion), set beside the longest answer over an idle second just before (the
baseline of the same run). Usage: python -m bench.bench_loop [--quick]
"""

from __future__ import annotations

import json
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy import create_engine, make_url, text

from bench.common import machine, measured, out_dir, parser, write
from federation.cli.dev import ServerProcess
from federation.store.database import embedded_postgres
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

GPU = "nvidia.com/gpu"
PROBE_EVERY = 0.01  # seconds between two GetVersion calls of the probe


class Probe:
    """GetVersion in a loop on a channel of its own: (when it was sent, how long it took)."""

    def __init__(self, address: str) -> None:
        self.stub = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(address))
        self.samples: list[tuple[float, float]] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.is_set():
            sent = time.perf_counter()
            self.stub.GetVersion(jobs_pb2.GetVersionRequest(), timeout=120)
            self.samples.append((sent, time.perf_counter() - sent))
            time.sleep(PROBE_EVERY)

    def longest(self, start: float, end: float) -> float:
        """The longest answer to a call sent between `start` and `end`, or still out at `end`."""
        return max((took for sent, took in self.samples if start <= sent <= end), default=0.0)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(130)


def clusters_rows(uri: str, clusters: int, hypernodes: int) -> None:
    """Clusters as their agents would report them, written straight to PostgreSQL: 8-GPU nodes under leaves
    under spines, every HyperNode listed."""
    leaves = hypernodes - hypernodes // 10
    tops = hypernodes - leaves
    listed = [{"name": f"s{i}", "tier": 2, "parent": "", "free": {GPU: 32}, "allocatable": {GPU: 64}}
              for i in range(tops)]
    listed += [{"name": f"l{i}", "tier": 1, "parent": f"s{i % max(tops, 1)}", "free": {GPU: 8},
                "allocatable": {GPU: 32}} for i in range(leaves)]
    inventory = {"allocatable": {GPU: 32 * leaves, "cpu": 1_000_000 * leaves},
                 "used": {GPU: 24 * leaves, "cpu": 0}, "capacity": {GPU: 32 * leaves}, "healthy": True,
                 "nodes": 4 * leaves, "ready_nodes": 4 * leaves, "hypernodes": listed,
                 "topology": [{"tier": 0, "tier_name": "node", "max_free": {GPU: 8}, "max_capacity": {GPU: 8}},
                              {"tier": 1, "tier_name": "leaf", "max_free": {GPU: 8}, "max_capacity": {GPU: 32}},
                              {"tier": 2, "tier_name": "spine", "max_free": {GPU: 32}, "max_capacity": {GPU: 64}}],
                 "gpu_free_nodes": [3 * leaves, 0, 0, 0, 0, 0, 0, 0, leaves]}
    engine = create_engine(make_url(uri).set(drivername="postgresql+psycopg"))
    with engine.begin() as conn:
        for c in range(clusters):
            conn.execute(text(
                "INSERT INTO clusters (name, labels, status, cordoned, agent_version, last_heartbeat, inventory, "
                "problem, instance, drift, created_at) VALUES (:name, '{}', 'READY', false, 'bench', "
                "now() + interval '1 hour', CAST(:inventory AS jsonb), '', '', '{}', now())"),
                {"name": f"c{c:03d}", "inventory": json.dumps(inventory)})
    engine.dispose()


def job(i: int, tasks: int = 1) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=f"loop-{i}", queue="bench", network_topology=common_pb2.NetworkTopology(mode="hard",
                                                                                   highest_tier_allowed=1),
        tasks=[common_pb2.TaskSpec(name=f"t{t}", replicas=1, resources={GPU: "8", "cpu": "8"})
               for t in range(tasks)])


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    args = p.parse_args(argv)
    clusters, jobs = (10, 500) if args.quick else (100, 1_000)
    hypernodes = 1_000  # what an inventory may list (MAX_REPORTED_HYPERNODES)
    with tempfile.TemporaryDirectory(prefix="bench-loop-") as tmp, embedded_postgres(Path(tmp) / "pg") as uri:
        server = ServerProcess("--database-url", uri, "--auto-migrate", "--heartbeat-timeout", "7200",
                               env={"FEDERATION_LOG_LEVEL": "warning"})
        probe = None
        try:
            channel = grpc.insecure_channel(server.address, options=[
                ("grpc.max_receive_message_length", 64 * 2**20), ("grpc.max_send_message_length", 64 * 2**20)])
            api, admin = jobs_pb2_grpc.JobServiceStub(channel), admin_pb2_grpc.AdminServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="bench")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="bench", tenant="bench")))
            clusters_rows(uri, clusters, hypernodes)
            stored = api.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[job(i) for i in range(jobs)]))
            first = stored.results[0].job_id
            probe = Probe(server.address)
            time.sleep(1.0)

            def replay() -> None:
                stream = api.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0), timeout=5)
                try:
                    for _ in stream:
                        pass
                except grpc.RpcError as err:
                    if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        raise

            # Built before they are timed: the client's own work is not the server's loop.
            dry_run = jobs_pb2.SubmitJobsRequest(specs=[job(jobs + i, 64) for i in range(jobs)], dry_run=True)
            batch = jobs_pb2.SubmitJobsRequest(specs=[job(2 * jobs + i) for i in range(jobs)])
            handlers: list[tuple[str, Callable[[], Any]]] = [
                (f"SubmitJobs dry run, {jobs:,} jobs of 64 tasks", lambda: api.SubmitJobs(dry_run)),
                (f"SubmitJobs, {jobs:,} jobs", lambda: api.SubmitJobs(batch)),
                ("ListJobs, a page of 1,000", lambda: api.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000))),
                ("WatchJobs, the event log replayed from 0 (5 s)", replay),
                (f"ListClusters, {clusters} clusters of {hypernodes:,} HyperNodes",
                 lambda: admin.ListClusters(admin_pb2.ListClustersRequest())),
                (f"ExplainJob over {clusters} clusters of {hypernodes:,} HyperNodes",
                 lambda: api.ExplainJob(jobs_pb2.ExplainJobRequest(id=first))),
                ("GetQueueStatus", lambda: admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="bench"))),
            ]
            rows = []
            for name, call in handlers:
                idle_from = time.perf_counter()
                time.sleep(1.0)
                idle = probe.longest(idle_from, time.perf_counter())
                start = time.perf_counter()
                call()
                end = time.perf_counter()
                time.sleep(0.2)  # the probe's call still out at the end comes back
                rows.append({"handler": name, "call_seconds": round(end - start, 3),
                             "longest_probe_seconds": round(probe.longest(start, end), 3),
                             "idle_longest_probe_seconds": round(idle, 3)})
        finally:
            if probe is not None:
                probe.stop()
            server.stop()
    report = {"benchmark": "how long each heavy handler holds the API's event loop", "rows": rows,
              "clusters": clusters, "hypernodes_per_cluster": hypernodes, "jobs": jobs, "measured_at": measured(),
              "machine": f"{machine()}; server, embedded PostgreSQL and clients on the same machine"}
    lines = [f"# The API's event loop under its heaviest handlers ({report['measured_at']})", "",
             f"A GetVersion every {PROBE_EVERY * 1000:.0f} ms beside each call; its longest answer while the call "
             f"ran, and over an idle second just before (the baseline). {report['machine']}.", "",
             "| handler, largest input | call | longest GetVersion during it | idle, just before |",
             "|---|---:|---:|---:|"]
    lines += [f"| {r['handler']} | {r['call_seconds']:.3f} s | {r['longest_probe_seconds'] * 1000:.0f} ms | "
              f"{r['idle_longest_probe_seconds'] * 1000:.0f} ms |" for r in rows]
    worst = max(rows, key=lambda r: r["longest_probe_seconds"])
    write(out_dir(args), "loop", report, "\n".join(lines) + "\n",
          [(r["handler"], f"GetVersion at most {r['longest_probe_seconds'] * 1000:.0f} ms during it "
            f"(idle {r['idle_longest_probe_seconds'] * 1000:.0f} ms)") for r in rows]
          + [("the worst", f"{worst['handler']}: {worst['longest_probe_seconds'] * 1000:.0f} ms")])


if __name__ == "__main__":
    main()
