"""SubmitJobs throughput: jobs per second accepted into PostgreSQL, batches of 100.

Starts a real federation-server on an embedded PostgreSQL, submits N jobs over gRPC in batches
of 100 (one client, then several concurrent clients), and writes the medians of repeated runs to
api.json and api.md. Usage: python -m bench.bench_api [--quick] [--jobs 10000] [--runs 3]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc

from bench.common import bar, machine, measured, out_dir, parser, write
from federation.cli.dev import ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

BATCH = 100


def job(i: int, run: int) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=f"bench-{run}-{i}", queue="bench",
        network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=1),
        tasks=[common_pb2.TaskSpec(name="worker", replicas=1 + i % 8,
                                   resources={"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"})])


async def submit_all(address: str, jobs: int, clients: int, run: int) -> float:
    batches = [[job(i, run) for i in range(start, min(jobs, start + BATCH))] for start in range(0, jobs, BATCH)]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        queue: asyncio.Queue[list[common_pb2.JobSpec]] = asyncio.Queue()
        for batch in batches:
            queue.put_nowait(batch)

        async def client() -> int:
            accepted = 0
            while not queue.empty():
                batch = queue.get_nowait()
                response = await stub.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=batch))
                accepted += len(response.results)
            return accepted

        start = time.perf_counter()
        accepted = sum(await asyncio.gather(*(client() for _ in range(clients))))
        elapsed = time.perf_counter() - start
    assert accepted == jobs
    return jobs / elapsed


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--jobs", type=int, default=None, help="jobs per run (default 10,000, quick 1,000)")
    p.add_argument("--runs", type=int, default=None, help="runs per client count (default 3, quick 1)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    args = p.parse_args(argv)
    jobs = args.jobs or (1_000 if args.quick else 10_000)
    runs = args.runs or (1 if args.quick else 3)

    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        server = ServerProcess("--data-dir", str(Path(tmp) / "pg"), "--auto-migrate", env={"FEDERATION_LOG_LEVEL":
                                                                                          "warning"})
        try:
            channel = grpc.insecure_channel(server.address)
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="bench")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="bench", tenant="bench")))
            results = {}
            with bar(len(args.clients) * runs, "SubmitJobs runs", "runs") as progress:
                for clients in args.clients:
                    rates = []
                    for _ in range(runs):
                        rates.append(asyncio.run(submit_all(server.address, jobs, clients, progress.n)))
                        progress.update()
                    results[str(clients)] = {"runs_jobs_per_s": [round(r) for r in rates],
                                             "median_jobs_per_s": round(statistics.median(rates))}
        finally:
            server.stop()

    report = {
        "benchmark": "SubmitJobs throughput (jobs accepted into PostgreSQL per second)",
        "jobs_per_run": jobs, "batch_size": BATCH, "runs": runs, "by_clients": results,
        "target_jobs_per_s": 2000, "measured_at": measured(),
        "machine": f"{machine()}; server, embedded PostgreSQL and client on the same machine",
    }
    lines = [f"# SubmitJobs throughput ({report['measured_at']})", "",
             f"{jobs:,} jobs per run in batches of {BATCH}, median of {runs} runs; {report['machine']}.", "",
             "| concurrent clients | median jobs/s | runs |", "|---|---|---|"]
    lines += [f"| {c} | {r['median_jobs_per_s']} | {', '.join(map(str, r['runs_jobs_per_s']))} |"
              for c, r in results.items()]
    write(out_dir(args), "api", report, "\n".join(lines) + "\n",
          [(f"SubmitJobs, {c} client(s), median", f"{r['median_jobs_per_s']:,} jobs/s (target 2,000)")
           for c, r in results.items()])


if __name__ == "__main__":
    main()
