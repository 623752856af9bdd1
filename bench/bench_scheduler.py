"""Scheduling cycle time and sustained throughput on a synthetic federation.

The federation: 100 member clusters x 500 nodes of 8 GPUs (400,000 GPUs) in spine-leaf HyperNode
trees (5 spines x 10 leaves x 10 nodes), 100 tenants x 10 queues, and pending jobs of mixed gang
sizes (1, 8, 16, 64 and 256 GPUs; hard and soft tier limits; some with cluster selectors), drawn
with a fixed seed.

1. One cycle of the pure core (`federation.scheduling.cycle.schedule`) from an empty federation,
   for 10k, 30k and 100k pending jobs: how cycle time grows with the backlog.
2. Sustained: starting full, each round a random tenth of the running gangs finish, the freed
   resources go back to their clusters and a cycle runs; jobs placed per second of cycle time.
3. The server's whole cycle on PostgreSQL (`Scheduler.cycle`: catch up, decide, write dispatches
   and reasons), first and sustained under churn, for 10k and 100k pending jobs (--db-jobs).

Writes bench/results/scheduler.json and scheduler.md.
Usage: python bench/bench_scheduler.py [--quick] [--db-jobs N] [--no-db]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from federation.scheduling.cycle import Decisions, PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, JobView, TierFree

RESULTS = Path(__file__).resolve().parent / "results"
GPU = "nvidia.com/gpu"
CPU = "cpu"
NODE = {GPU: 8, CPU: 192_000}
SPINES, LEAVES, NODES = 5, 10, 10  # per cluster: 500 nodes
# (GPUs, share of jobs): single pods up to a node, then gangs of 8-GPU pods.
MIX = [(1, 0.30), (8, 0.30), (16, 0.20), (64, 0.15), (256, 0.05)]


def progress(done: int, total: int, label: str) -> None:
    filled = 30 * done // max(total, 1)
    sys.stdout.write(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {label}   ")
    sys.stdout.flush()


def federation(n_clusters: int) -> tuple[list[ClusterView], dict[str, int]]:
    """Empty clusters as their agents would summarise them: per tier, the most free in one HyperNode."""
    leaf = {r: a * NODES for r, a in NODE.items()}
    spine = {r: a * LEAVES for r, a in leaf.items()}
    whole = {r: a * SPINES for r, a in spine.items()}
    views = [ClusterView(f"c{i:03d}", {"region": f"r{i % 4}"}, dict(whole),
                         [TierFree(0, "node", dict(NODE)), TierFree(1, "leaf", dict(leaf)),
                          TierFree(2, "spine", dict(spine)), TierFree(3, "cluster", dict(whole))])
             for i in range(n_clusters)]
    return views, {r: a * n_clusters for r, a in whole.items()}


def organisation(n_tenants: int, queues_per_tenant: int, rng: random.Random) -> tuple[list[TenantInfo],
                                                                                      list[QueueInfo]]:
    tenants = [TenantInfo(f"t{t:03d}", weight=rng.choice([1, 1, 2, 4])) for t in range(n_tenants)]
    queues = [QueueInfo(f"t{t:03d}-q{q}", f"t{t:03d}", weight=rng.choice([1, 2]), reclaimable=True)
              for t in range(n_tenants) for q in range(queues_per_tenant)]
    return tenants, queues


def jobs(n: int, queues: Sequence[QueueInfo], rng: random.Random, first_seq: int = 0) -> list[PendingJob]:
    sizes = [s for s, _ in MIX]
    weights = [w for _, w in MIX]
    out = []
    for i in range(n):
        gpus = rng.choices(sizes, weights)[0]
        pod = min(gpus, 8)
        request = {GPU: gpus, CPU: gpus * 16_000}
        largest = {GPU: pod, CPU: pod * 16_000}
        mode, tier = ("hard", 1) if gpus in (16, 64) and rng.random() < 0.7 else ("soft", 1) if gpus > 8 else ("", 0)
        selector = {"region": f"r{rng.randrange(4)}"} if rng.random() < 0.2 else {}
        queue = queues[rng.randrange(len(queues))].name
        out.append(PendingJob(JobView(f"j{first_seq + i}", request, largest, selector, mode, tier), queue,
                              rng.choice([0, 0, 0, 10]), first_seq + i))
    return out


def apply(decisions: Decisions, clusters: dict[str, dict[str, int]], pending: dict[str, PendingJob],
          running: dict[str, RunningJob]) -> None:
    """What the agents would report back: assigned gangs hold their resources, preempted ones free them."""
    for job_id, cluster in decisions.assign.items():
        job = pending.pop(job_id)
        running[job_id] = RunningJob(job_id, job.queue, cluster, job.priority, job.seq, job.view.request, True)
        for r, a in job.view.request.items():
            clusters[cluster][r] -= a
    for job_id in decisions.preempt:
        finish(running.pop(job_id), clusters)


def finish(job: RunningJob, clusters: dict[str, dict[str, int]]) -> None:
    for r, a in job.request.items():
        clusters[job.cluster][r] += a


def views(template: Sequence[ClusterView], free: dict[str, dict[str, int]]) -> list[ClusterView]:
    """Tier maxima from the free totals (a coarse stand-in for the agents' summaries): every leaf
    and spine is assumed as free as the cluster's average allows, capped by its size."""
    out = []
    for c in template:
        f = free[c.name]
        tiers = [TierFree(t.tier, t.tier_name, {r: min(a, f[r] if t.tier > 0 else a) for r, a in t.max_free.items()})
                 for t in c.tiers]
        out.append(ClusterView(c.name, c.labels, dict(f), tiers))
    return out


def one_cycle(n_jobs: int, n_clusters: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    clusters, capacity = federation(n_clusters)
    tenants, queues = organisation(100, 10, rng)
    pending = jobs(n_jobs, queues, rng)
    snapshot = Snapshot(tenants, queues, pending, [], clusters, capacity)
    started = time.process_time()
    decisions = schedule(snapshot)
    seconds = time.process_time() - started
    gpus = sum(j.view.request[GPU] for j in pending if j.id in decisions.assign)
    return {"pending": n_jobs, "clusters": n_clusters, "seconds": seconds, "placed": len(decisions.assign),
            "gpus_placed": gpus, "gpu_capacity": capacity[GPU]}


def sustained(n_jobs: int, n_clusters: int, rounds: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    template, capacity = federation(n_clusters)
    tenants, queues = organisation(100, 10, rng)
    pending = {j.id: j for j in jobs(n_jobs, queues, rng)}
    free = {c.name: dict(c.free) for c in template}
    running: dict[str, RunningJob] = {}
    apply(schedule(Snapshot(tenants, queues, list(pending.values()), [], template, capacity)), free, pending, running)
    next_seq = n_jobs
    placed, seconds, cycle_times = 0, 0.0, []
    for r in range(rounds):
        progress(r, rounds, "sustained rounds")
        for job_id in rng.sample(sorted(running), len(running) // 10):
            finish(running.pop(job_id), free)
        arrivals = jobs(n_jobs - len(pending), queues, rng, next_seq)  # keep the backlog topped up
        next_seq += len(arrivals)
        pending.update((j.id, j) for j in arrivals)
        snapshot = Snapshot(tenants, queues, sorted(pending.values(), key=lambda j: j.seq), list(running.values()),
                            views(template, free), capacity)
        started = time.process_time()
        decisions = schedule(snapshot)
        took = time.process_time() - started
        apply(decisions, free, pending, running)
        placed += len(decisions.assign)
        seconds += took
        cycle_times.append(took)
    progress(rounds, rounds, "sustained rounds")
    print()
    used = sum(j.request[GPU] for j in running.values())
    return {"pending": n_jobs, "clusters": n_clusters, "rounds": rounds, "jobs_placed": placed,
            "cycle_seconds_total": seconds, "jobs_per_second": placed / seconds if seconds else 0.0,
            "median_cycle_seconds": statistics.median(cycle_times), "max_cycle_seconds": max(cycle_times),
            "gpu_utilisation_at_end": used / capacity[GPU]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for CI smoke runs")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--db-jobs", type=int, nargs="+", default=[10_000, 100_000],
                        help="pending jobs for the on-PostgreSQL cycle (one run per figure)")
    parser.add_argument("--no-db", action="store_true", help="skip the on-PostgreSQL cycle")
    args = parser.parse_args()
    sizes = [1_000, 3_000] if args.quick else [10_000, 30_000, 100_000]
    n_clusters = 10 if args.quick else 100
    growth = []
    for i, n in enumerate(sizes):
        progress(i, len(sizes), f"one cycle, {n:,} pending")
        growth.append(one_cycle(n, n_clusters, args.seed))
    progress(len(sizes), len(sizes), "one cycle")
    print()
    steady = sustained(sizes[-1], n_clusters, 5 if args.quick else 20, args.seed)
    results = {
        "benchmark": "scheduler", "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "federation": f"{n_clusters} clusters x {SPINES * LEAVES * NODES} nodes x 8 GPUs, 100 tenants x 10 queues",
        "quick": args.quick, "one_cycle": growth, "sustained": steady,
    }
    if not args.no_db:
        from db_cycle import db_cycle

        results["db_cycle"] = [db_cycle(n, 10 if args.quick else n_clusters, args.seed,
                                        **({"settle": 2, "rounds": 3} if args.quick else {}))
                               for n in ([1_000] if args.quick else args.db_jobs)]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scheduler.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "scheduler.md").write_text(report(results))
    print(report(results))


def report(r: dict) -> str:
    lines = [f"# Scheduler benchmark ({r['date']})", "", f"Machine: {r['machine']}. Federation: {r['federation']}.",
             "CPU time of the pure core (`time.process_time`).", "",
             "| pending jobs | one cycle (s) | jobs placed | GPUs placed / capacity |", "|---:|---:|---:|---:|"]
    for g in r["one_cycle"]:
        lines.append(f"| {g['pending']:,} | {g['seconds']:.3f} | {g['placed']:,} | "
                     f"{g['gpus_placed']:,} / {g['gpu_capacity']:,} |")
    s = r["sustained"]
    lines += ["", f"Sustained, {s['pending']:,} pending kept topped up, {s['rounds']} rounds where a tenth of the "
              f"running gangs finish: **{s['jobs_per_second']:,.0f} jobs placed per second** of cycle time "
              f"({s['jobs_placed']:,} jobs), median cycle {s['median_cycle_seconds']:.3f} s "
              f"(max {s['max_cycle_seconds']:.3f} s), GPU utilisation at the end {s['gpu_utilisation_at_end']:.0%}."]
    if "db_cycle" in r:
        lines += ["", "Whole server cycle (`Scheduler.cycle`: catch up the job cache from the event log, snapshot, "
                  "decide, write preemptions and dispatches with their events, then changed reasons), wall-clock "
                  "time, PostgreSQL on the same 2 cores. The first cycle also loads the cache; sustained rounds: "
                  "before each, a tenth of the dispatched gangs end and as many new jobs arrive; last, a second "
                  "replica kept as a hot standby takes over and its first cycle as leader is timed.", "",
                  "| pending jobs | clusters | first cycle (s) | dispatched by it | sustained cycle, median (s) | "
                  "max (s) | jobs placed / s | median step times (s) | standby's first cycle as leader (s) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
        for d in r["db_cycle"]:
            steps = ", ".join(f"{k} {v:.3f}" for k, v in d["median_step_seconds"].items())
            lines.append(f"| {d['pending']:,} | {d['clusters']} | {d['first_seconds']:.3f} | "
                         f"{d['first_dispatched']:,} | {d['median_seconds']:.3f} | {d['max_seconds']:.3f} | "
                         f"{d['jobs_per_second']:,.0f} | {steps} | {d['takeover_seconds']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
