"""SubmitJobs throughput: jobs per second accepted into PostgreSQL, batches of 100.

Starts a real federation-server on an embedded PostgreSQL, submits N jobs over gRPC in batches
of 100 (one client, then several concurrent clients), and writes the medians of repeated runs to
bench/results/api.json and api.md. Usage: python bench/bench_api.py [--jobs 10000] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import grpc

from federation.cli.dev import ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

RESULTS = Path(__file__).resolve().parent / "results"
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


def progress(done: int, total: int, label: str) -> None:
    width = 30
    filled = width * done // total
    sys.stdout.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done}/{total} {label}   ")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        server = ServerProcess("--data-dir", str(Path(tmp) / "pg"), "--auto-migrate", env={"FEDERATION_LOG_LEVEL":
                                                                                          "warning"})
        try:
            channel = grpc.insecure_channel(server.address)
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="bench")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="bench", tenant="bench")))
            results = {}
            total, done = len(args.clients) * args.runs, 0
            for clients in args.clients:
                rates = []
                for _ in range(args.runs):
                    progress(done, total, f"{clients} client(s)")
                    rates.append(asyncio.run(submit_all(server.address, args.jobs, clients, done)))
                    done += 1
                results[str(clients)] = {"runs_jobs_per_s": [round(r) for r in rates],
                                         "median_jobs_per_s": round(statistics.median(rates))}
            progress(done, total, "done")
            print()
        finally:
            server.stop()

    report = {
        "benchmark": "SubmitJobs throughput (jobs accepted into PostgreSQL per second)",
        "jobs_per_run": args.jobs, "batch_size": BATCH, "runs": args.runs, "by_clients": results,
        "target_jobs_per_s": 2000,
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
                   "server, embedded PostgreSQL and client on the same machine",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "api.json").write_text(json.dumps(report, indent=2) + "\n")
    lines = ["# SubmitJobs throughput", "", f"{args.jobs} jobs per run in batches of {BATCH}, median of "
             f"{args.runs} runs; {report['machine']}; measured {report['measured_at']}.", "",
             "| concurrent clients | median jobs/s | runs |", "|---|---|---|"]
    lines += [f"| {c} | {r['median_jobs_per_s']} | {', '.join(map(str, r['runs_jobs_per_s']))} |"
              for c, r in results.items()]
    (RESULTS / "api.md").write_text("\n".join(lines) + "\n")
    for clients, r in results.items():
        print(f"SubmitJobs, {clients} client(s): median {r['median_jobs_per_s']} jobs/s (target 2000)")


if __name__ == "__main__":
    main()
