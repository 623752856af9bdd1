"""SubmitJobs throughput: jobs per second accepted into PostgreSQL, batches of 100, against PostgreSQL's own.

Starts a real federation-server on an embedded PostgreSQL, submits N jobs over gRPC in batches
of 100 (one client, then several concurrent clients; then those clients spread over two front ends, the
second a `serve --role api` process on the same database), and writes the medians of repeated runs to
api.json and api.md. Beside them, the ceiling: what the same PostgreSQL ingests when a client does
nothing but write what a submission writes (a job row and an event row per job, the federation's
schema and indexes, in a database of its own, transactions of 100, pipelined).
Usage: python -m bench.bench_api [--quick] [--jobs 10000] [--runs 3]
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import psycopg
from google.protobuf import json_format
from psycopg.types.json import Jsonb
from sqlalchemy import create_engine, make_url

from bench.common import bar, machine, measured, out_dir, parser, write
from federation.cli.dev import ServerProcess
from federation.store.database import embedded_postgres
from federation.store.models import Base
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

BATCH = 100


def job(i: int, run: int) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=f"bench-{run}-{i}", queue="bench",
        network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=1),
        tasks=[common_pb2.TaskSpec(name="worker", replicas=1 + i % 8,
                                   resources={"nvidia.com/gpu": "8", "cpu": "32", "memory": "256Gi"})])


def postgres_ceiling(uri: str, jobs: int, run: int) -> float:
    """Jobs per second PostgreSQL ingests as a job row and an event row each, in transactions of BATCH."""
    spec = Jsonb(json_format.MessageToDict(job(0, run), preserving_proto_field_name=True))
    request = Jsonb({"nvidia.com/gpu": 8, "cpu": 32_000, "memory": 256 * 2**30})
    with psycopg.connect(uri, autocommit=True) as conn:
        start = time.perf_counter()
        for first in range(0, jobs, BATCH):
            ids = [f"ceiling-{run}-{i}" for i in range(first, min(jobs, first + BATCH))]
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany("INSERT INTO jobs (id, name, tenant, queue, priority_class, priority, phase, reason, "
                                "cluster, hypernode, tier, attempt, retries, request, placements, spec) VALUES "
                                "(%s, %s, 'bench', 'bench', '', 0, 'PENDING', '', '', '', 0, 0, 0, %s, '[]', %s)",
                                [(i, i, request, spec) for i in ids])
                cur.executemany("INSERT INTO job_events (seq, tenant_seq, job_id, tenant, queue, type, phase, "
                                "message, attempt, cluster) VALUES "
                                "(%s, %s, %s, 'bench', 'bench', 'Submitted', 'PENDING', '', 0, '')",
                                [(run * jobs + first + k, run * jobs + first + k, i) for k, i in enumerate(ids)])
        return jobs / (time.perf_counter() - start)


def ceiling_database(uri: str) -> str:
    """A database of its own on the same server, with the federation's schema: the ceiling's writes stay
    out of the federation's event log."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS ceiling")
        conn.execute("CREATE DATABASE ceiling")
    url = make_url(uri).set(drivername="postgresql+psycopg", database="ceiling")
    engine = create_engine(url)
    with engine.begin() as conn:
        Base.metadata.create_all(conn)
    engine.dispose()
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


async def submit_all(addresses: Sequence[str], jobs: int, clients: int, run: int) -> float:
    """Jobs per second accepted from `clients` concurrent clients, spread over the front ends at `addresses`."""
    batches = [[job(i, run) for i in range(start, min(jobs, start + BATCH))] for start in range(0, jobs, BATCH)]
    channels = [grpc.aio.insecure_channel(address) for address in addresses]
    try:
        stubs = [jobs_pb2_grpc.JobServiceStub(channel) for channel in channels]
        queue: asyncio.Queue[list[common_pb2.JobSpec]] = asyncio.Queue()
        for batch in batches:
            queue.put_nowait(batch)

        async def client(stub: jobs_pb2_grpc.JobServiceStub) -> int:
            accepted = 0
            while not queue.empty():
                batch = queue.get_nowait()
                response = await stub.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=batch))
                accepted += len(response.results)
            return accepted

        start = time.perf_counter()
        accepted = sum(await asyncio.gather(*(client(stubs[i % len(stubs)]) for i in range(clients))))
        elapsed = time.perf_counter() - start
    finally:
        for channel in channels:
            await channel.close()
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

    quiet = {"FEDERATION_LOG_LEVEL": "warning"}
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp, embedded_postgres(Path(tmp) / "pg") as uri:
        server = ServerProcess("--database-url", uri, "--auto-migrate", env=quiet)
        second = None
        try:
            channel = grpc.insecure_channel(server.address)
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="bench")))
            admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="bench", tenant="bench")))
            second = ServerProcess("--database-url", uri, "--role", "api", env=quiet)  # a second front end
            settings = [(clients, [server.address]) for clients in args.clients]
            settings += [(clients, [server.address, second.address]) for clients in args.clients if clients > 1]
            results = {}
            with bar(len(settings) * runs, "SubmitJobs runs", "runs") as progress:
                for clients, addresses in settings:
                    rates = []
                    for _ in range(runs):
                        rates.append(asyncio.run(submit_all(addresses, jobs, clients, progress.n)))
                        progress.update()
                    key = f"{clients}" if len(addresses) == 1 else f"{clients}, over {len(addresses)} front ends"
                    results[key] = {"runs_jobs_per_s": [round(r) for r in rates],
                                    "median_jobs_per_s": round(statistics.median(rates))}
            ceiling_uri = ceiling_database(uri)
            ceilings = [postgres_ceiling(ceiling_uri, jobs, run) for run in range(runs)]
        finally:
            if second is not None:
                second.stop()
            server.stop()

    ceiling = round(statistics.median(ceilings))
    target, target_two = ceiling // 4, ceiling * 2 // 5  # one front end a quarter of it; two, two fifths
    report = {
        "benchmark": "SubmitJobs throughput (jobs accepted into PostgreSQL per second)",
        "jobs_per_run": jobs, "batch_size": BATCH, "runs": runs, "by_clients": results,
        "postgres_ceiling_jobs_per_s": ceiling, "postgres_ceiling_runs": [round(c) for c in ceilings],
        "target_jobs_per_s": target, "target_two_front_ends_jobs_per_s": target_two, "measured_at": measured(),
        "machine": f"{machine()}; server, embedded PostgreSQL and client on the same machine",
    }
    lines = [f"# SubmitJobs throughput ({report['measured_at']})", "",
             f"{jobs:,} jobs per run in batches of {BATCH}, median of {runs} runs; {report['machine']}.", "",
             "| concurrent clients | median jobs/s | runs | of PostgreSQL's ceiling |", "|---|---|---|---:|"]
    lines += [f"| {c} | {r['median_jobs_per_s']} | {', '.join(map(str, r['runs_jobs_per_s']))} | "
              f"{r['median_jobs_per_s'] / ceiling:.0%} |" for c, r in results.items()]
    lines += ["", f"PostgreSQL's ceiling on the same machine in the same run: **{ceiling:,} jobs/s** "
                  f"({', '.join(f'{c:,.0f}' for c in ceilings)}); targets: a quarter of it with one front end "
                  f"({target:,} jobs/s), two fifths with two ({target_two:,} jobs/s)."]
    one = max(r["median_jobs_per_s"] for c, r in results.items() if "front ends" not in c)
    two = max((r["median_jobs_per_s"] for c, r in results.items() if "front ends" in c), default=0)
    write(out_dir(args), "api", report, "\n".join(lines) + "\n",
          [(f"SubmitJobs, {c.replace(',', ' client(s),', 1) if ',' in c else c + ' client(s)'}, median",
            f"{r['median_jobs_per_s']:,} jobs/s") for c, r in results.items()]
          + [("SubmitJobs vs PostgreSQL's own ceiling", f"one front end {one:,} ({one / ceiling:.0%}), two "
              f"{two:,} ({two / ceiling:.0%}) of {ceiling:,} jobs/s; targets 25 % and 40 %: "
              f"{'met' if one >= target else 'not met'}, {'met' if two >= target_two else 'not met'}")])


if __name__ == "__main__":
    main()
