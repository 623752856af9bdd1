"""Scheduling throughput under churn, on the pure core and on the whole server with PostgreSQL.

The federation: member clusters of 500 nodes of 8 GPUs (4,000 GPUs) in spine-leaf HyperNode trees
(5 spines x 10 leaves x 10 nodes), 100 tenants x 10 queues, and pending jobs of mixed gang sizes
(1, 8, 16, 64 and 256 GPUs; hard and soft tier limits; some with cluster selectors), drawn with a
fixed seed. How one cycle grows with the backlog and the federation is `bench.bench_scale`.

1. Sustained, pure core (`federation.scheduling.cycle.schedule`): starting full, each round a random
   tenth of the running gangs finish, the freed resources go back to their clusters and a cycle runs;
   jobs placed per second of cycle time.
2. The server's whole cycle on PostgreSQL (`Scheduler.cycle`: catch up, decide, write dispatches
   and reasons), first and sustained under churn, for 10k and 100k pending jobs (--db-jobs).

Writes scheduler.json and scheduler.md.
Usage: python -m bench.bench_scheduler [--quick] [--db-jobs N ...] [--no-db]
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Sequence

from bench.common import bar, machine, measured, out_dir, parser, write
from federation.scheduling.cycle import Decisions, PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, JobView, TierFree

GPU = "nvidia.com/gpu"
CPU = "cpu"
NODE = {GPU: 8, CPU: 192_000}
SPINES, LEAVES, NODES = 5, 10, 10  # per cluster: 500 nodes
# (GPUs, share of jobs): single pods up to a node, then gangs of 8-GPU pods.
MIX = [(1, 0.30), (8, 0.30), (16, 0.20), (64, 0.15), (256, 0.05)]


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
    progress = bar(rounds, f"sustained, {n_jobs:,} pending", "rounds")
    for _ in range(rounds):
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
        progress.update()
    progress.close()
    used = sum(j.request[GPU] for j in running.values())
    return {"pending": n_jobs, "clusters": n_clusters, "rounds": rounds, "jobs_placed": placed,
            "cycle_seconds_total": seconds, "jobs_per_second": placed / seconds if seconds else 0.0,
            "median_cycle_seconds": statistics.median(cycle_times), "max_cycle_seconds": max(cycle_times),
            "gpu_utilisation_at_end": used / capacity[GPU]}


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--db-jobs", type=int, nargs="+", default=None,
                   help="pending jobs for the on-PostgreSQL cycle, one run each (default 10,000 100,000; quick 1,000)")
    p.add_argument("--no-db", action="store_true", help="skip the on-PostgreSQL cycle")
    args = p.parse_args(argv)
    n_clusters = 10 if args.quick else 100
    steady = sustained(3_000 if args.quick else 100_000, n_clusters, 5 if args.quick else 20, args.seed)
    results = {
        "benchmark": "scheduler", "date": measured(), "machine": machine(),
        "federation": f"{n_clusters} clusters x {SPINES * LEAVES * NODES} nodes x 8 GPUs, 100 tenants x 10 queues",
        "quick": args.quick, "sustained": steady,
    }
    headline = [("sustained, pure core", f"{steady['jobs_per_second']:,.0f} jobs placed/s, median cycle "
                                                   f"{steady['median_cycle_seconds']:.3f} s ({steady['pending']:,} "
                                                   f"pending, {n_clusters} clusters)")]
    if not args.no_db:
        from bench.db_cycle import db_cycle

        results["db_cycle"] = [db_cycle(n, n_clusters, args.seed, **({"settle": 2, "rounds": 3} if args.quick else {}))
                               for n in (args.db_jobs or ([1_000] if args.quick else [10_000, 100_000]))]
        headline += [(f"server cycle on PostgreSQL, {d['pending']:,} pending",
                      f"median {d['median_seconds']:.3f} s, {d['jobs_per_second']:,.0f} jobs placed/s")
                     for d in results["db_cycle"]]
    write(out_dir(args), "scheduler", results, report(results), headline)


def report(r: dict) -> str:
    s = r["sustained"]
    lines = [f"# Scheduler throughput ({r['date']})", "", f"Machine: {r['machine']}. Federation: {r['federation']}.",
             "", f"Sustained, pure core (CPU time, `time.process_time`), {s['pending']:,} pending kept topped up, "
             f"{s['rounds']} rounds where a tenth of the running gangs finish: **{s['jobs_per_second']:,.0f} jobs "
             f"placed per second** of cycle time ({s['jobs_placed']:,} jobs), median cycle "
             f"{s['median_cycle_seconds']:.3f} s (max {s['max_cycle_seconds']:.3f} s), GPU utilisation at the end "
             f"{s['gpu_utilisation_at_end']:.0%}."]
    if "db_cycle" in r:
        lines += ["", "Whole server cycle (`Scheduler.cycle`: catch up the job cache from the event log, snapshot, "
                  "decide, write preemptions and dispatches with their events, then changed reasons), wall-clock "
                  "time, PostgreSQL on the same 2 cores. The first cycle also loads the cache; sustained rounds: "
                  "before each, a tenth of the dispatched gangs end and as many new jobs arrive, and the leader reads "
                  "their events into its job cache as the server does when told of a change (`Scheduler.follow`, "
                  "timed on its own: the events read, and the seconds it took; beside it, the cycle and that reading "
                  "together, what one cycle cost when it caught up the log itself); last, a second replica kept as "
                  "a hot standby takes over and its first cycle as leader is timed.", "",
                  "Event-loop lag: how late the loop ran a 10 ms timer while the sustained cycles ran (what an "
                  "RPC, a heartbeat or the lease's renewal beside them waited), beside the baseline of the same "
                  "run, the longest decide step: what the loop waited, whole, when the cycle decided on it.", "",
                  "| pending jobs | clusters | first cycle (s) | dispatched by it | sustained cycle, median (s) | "
                  "max (s) | jobs placed / s | median step times (s) | events read before it / seconds | "
                  "cycle and reading (s) | standby's first cycle as leader (s) | loop lag p99 / max (s) | "
                  "longest decide (s) |",
                  "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        for d in r["db_cycle"]:
            steps = ", ".join(f"{k} {v:.3f}" for k, v in d["median_step_seconds"].items())
            lines.append(f"| {d['pending']:,} | {d['clusters']} | {d['first_seconds']:.3f} | "
                         f"{d['first_dispatched']:,} | {d['median_seconds']:.3f} | {d['max_seconds']:.3f} | "
                         f"{d['jobs_per_second']:,.0f} | {steps} | {d['ingest_events']:,.0f} / "
                         f"{d['ingest_median_seconds']:.3f} | {d['cycle_and_ingest_median_seconds']:.3f} | "
                         f"{d['takeover_seconds']:.3f} | "
                         f"{d['loop_lag_p99_seconds']:.3f} / {d['loop_lag_max_seconds']:.3f} | "
                         f"{d['decide_max_seconds']:.3f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
