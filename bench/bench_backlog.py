"""Issue 30: a cycle whose cost follows change, not the backlog. The queue manager's walk against the cycle from
scratch, on the same snapshots in the same run.

The federation and jobs are `bench.bench_scheduler`'s (clusters of 500 8-GPU nodes, 100 tenants x 10 queues,
gangs of 1 to 256 GPUs). Per configuration (pending jobs, clusters):
- a new leader's first cycle: building the queue manager from every waiting job and walking it, against the cycle
  from scratch over the same list; and the process's peak memory once the manager holds them;
- the federation settling: rounds of churn walked before any is measured (`WARM_ROUNDS`). A first cycle on 1,000
  clusters does not fill them, the next round does, and for rounds after that reclaim moves tens of thousands of
  GPUs a round back to the queues below their shares; those rounds are timed and reported apart ("settling");
- steady state under churn: before each round 1% of the running gangs end and new jobs keep the backlog at its
  size; the walk (its manager kept up to date by the same add/remove events the server's job cache applies) and
  the cycle from scratch decide on the same snapshot, their dispatches are checked equal, and the walk's are
  carried out. CPU time (`time.process_time`) per cycle, and jobs placed per second of cycle time.
The process takes the scheduler process's collector settings (`federation.kernel.heap`): with CPython's defaults,
collections were 7 % of a steady cycle on 1,000 clusters here; the scheduler process collects far less often.

Writes backlog.json and backlog.md.
Usage: python -m bench.bench_backlog [--quick]
"""

from __future__ import annotations

import random
import resource
import statistics
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from bench.bench_scheduler import apply, federation, finish, jobs, organisation, views
from bench.common import bar, machine, measured, out_dir, parser, write
from federation.kernel import heap
from federation.scheduling import choice, native
from federation.scheduling.cycle import Decisions, PendingJob, RunningJob, Snapshot, schedule, schedule_backlog
from federation.scheduling.queues import QueueManager
from federation.scheduling.running import Running

CHURN = 0.01  # of the running gangs, ending before each round
# Rounds walked before the steady ones are measured. On 1,000 clusters (seed 7) reclaim evicted 3,600, 4,200, 4,000,
# 3,200, 1,500 and 600 gangs in the first six rounds after the fill and 100 to 200 a round from the twelfth on, the
# cycle going from 1.4-1.6 s to 0.6 s; on 100 clusters the rounds were alike from the fifth on.
WARM_ROUNDS = 12


def _cpu(fn: Any, *args: Any) -> tuple[Any, float]:
    started = time.process_time()
    out = fn(*args)
    return out, time.process_time() - started


class Churn:
    """A federation in steady state under churn: each round 1% of the running gangs end and new jobs keep the
    backlog at its size. The queue manager is kept up to date by the same add/remove events the server's job cache
    applies, so a walk and the cycle from scratch can decide on the same snapshot."""

    def __init__(self, n_jobs: int, n_clusters: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n_jobs = n_jobs
        self.template, self.capacity = federation(n_clusters)
        self.tenants, self.queues = organisation(100, 10, self.rng)
        self.pending: dict[str, PendingJob] = {j.id: j for j in jobs(n_jobs, self.queues, self.rng)}
        self.listed = list(self.pending.values())
        self.manager, self.build_seconds = _cpu(QueueManager, self.listed)
        self.free = {c.name: dict(c.free) for c in self.template}
        self.running: dict[str, RunningJob] = {}
        self.kept = Running()  # the same gangs, kept across cycles by the same events as the server's cache applies
        self.next_seq = n_jobs

    def first(self) -> Snapshot:
        """A new leader's snapshot: every job waiting, nothing running."""
        return Snapshot(self.tenants, self.queues, self.listed, [], self.template, self.capacity)

    def next(self) -> Snapshot:
        """The next round's snapshot: some gangs ended, the backlog topped up."""
        for job_id in self.rng.sample(sorted(self.running), max(1, int(len(self.running) * CHURN))):
            finish(self.running.pop(job_id), self.free)
            self.kept.discard(job_id)
        for job in jobs(self.n_jobs - len(self.pending), self.queues, self.rng, self.next_seq):
            self.pending[job.id] = job
            self.manager.add(job)
            self.next_seq += 1
        return Snapshot(self.tenants, self.queues, list(self.pending.values()), self.kept,
                        views(self.template, self.free), self.capacity)

    def warm_up(self, rounds: int) -> list[tuple[float, int]]:
        """Rounds walked and carried out, not measured against the cycle from scratch: each one's CPU seconds and
        the gangs it preempted."""
        out = []
        for _ in range(rounds):
            decisions, took = _cpu(schedule_backlog, self.next(), self.manager)
            out.append((took, len(decisions.preempt)))
            self.carry_out(decisions)
        return out

    def carry_out(self, decisions: Decisions) -> None:
        """What the agents would report back: dispatched gangs run, preempted ones leave."""
        for job_id in decisions.assign:
            self.manager.remove(job_id)
        apply(decisions, self.free, self.pending, self.running)
        for job_id in decisions.assign:
            self.kept.add(self.running[job_id])
        for job_id in decisions.preempt:
            self.kept.discard(job_id)


def afresh(snapshot: Snapshot) -> Snapshot:
    """The snapshot as the cycle from scratch takes it: the running gangs as a plain list, read anew."""
    return replace(snapshot, running=list(snapshot.running))


def tuned_churn(n_jobs: int, n_clusters: int, seed: int) -> Churn:
    """A `Churn` in a process with the scheduler process's collector settings (process-wide)."""
    heap.tune()  # as `federation-server serve` sets them
    churn = Churn(n_jobs, n_clusters, seed)
    heap.settle()  # as the scheduler does once its cache is loaded (the queue manager holds what the cache holds)
    return churn


def steady(n_jobs: int, n_clusters: int, rounds: int, seed: int) -> dict[str, Any]:
    churn = tuned_churn(n_jobs, n_clusters, seed)
    progress = bar(rounds + 2, f"{n_jobs:,} pending, {n_clusters} clusters", "cycles (the settling ones as one)")
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    first = churn.first()
    walked, first_walk = _cpu(schedule_backlog, first, churn.manager)
    oracle, first_oracle = _cpu(schedule, afresh(first))
    assert walked.assign == oracle.assign, "the walk and the cycle from scratch disagree"
    churn.carry_out(walked)
    settling = churn.warm_up(WARM_ROUNDS)
    progress.update(2)
    walk_times, oracle_times, python_times, numpy_times, placed = [], [], [], [], 0
    for _ in range(rounds):
        snapshot = churn.next()
        walked, took = _cpu(schedule_backlog, snapshot, churn.manager)
        oracle, took_oracle = _cpu(schedule, afresh(snapshot))
        assert walked.assign == oracle.assign and walked.preempt == oracle.preempt, "the walk disagrees"
        compiled, native.compiled = native.compiled, None
        try:
            by_python, took_python = _cpu(schedule_backlog, snapshot, churn.manager)
        finally:
            native.compiled = compiled
        assert by_python.assign == walked.assign and by_python.preempt == walked.preempt, "the searches disagree"
        table, choice.compiled_table = choice.compiled_table, lambda: None
        try:
            by_numpy, took_numpy = _cpu(schedule_backlog, snapshot, churn.manager)
        finally:
            choice.compiled_table = table
        assert by_numpy.assign == walked.assign and by_numpy.preempt == walked.preempt, "the tables disagree"
        walk_times.append(took)
        oracle_times.append(took_oracle)
        python_times.append(took_python)
        numpy_times.append(took_numpy)
        placed += len(walked.assign)
        churn.carry_out(walked)
        progress.update()
    progress.close()
    return {"pending": n_jobs, "clusters": n_clusters, "rounds": rounds, "running_at_end": len(churn.running),
            "settling_rounds": len(settling),
            "settling_median_seconds": statistics.median(t for t, _ in settling),
            "settling_max_seconds": max(t for t, _ in settling),
            "settling_preempted": [n for _, n in settling],
            "first_walk_seconds": first_walk, "first_oracle_seconds": first_oracle,
            "manager_build_seconds": churn.build_seconds, "peak_rss_mib": peak_mib,
            "walk_median_seconds": statistics.median(walk_times), "walk_max_seconds": max(walk_times),
            "oracle_median_seconds": statistics.median(oracle_times),
            "python_search_median_seconds": statistics.median(python_times), "compiled": compiled is not None,
            "numpy_table_median_seconds": statistics.median(numpy_times),
            "numpy_table_jobs_per_second": placed / sum(numpy_times),
            "walk_jobs_per_second": placed / sum(walk_times), "oracle_jobs_per_second": placed / sum(oracle_times),
            "jobs_placed": placed}


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    configs = [(3_000, 10, 3)] if args.quick else [(100_000, 100, 5), (1_000_000, 100, 3), (100_000, 1_000, 2),
                                                         (1_000_000, 1_000, 2)]
    rows = [steady(n, c, rounds, args.seed) for n, c, rounds in configs]
    results = {"benchmark": "backlog", "date": measured(), "machine": machine(), "quick": args.quick,
               "churn": CHURN, "steady": rows}
    headline = [(f"steady cycle, {r['pending']:,} pending, {r['clusters']} clusters",
                 f"walk {r['walk_median_seconds']:.3f} s (with numpy's cluster scores "
                 f"{r['numpy_table_median_seconds']:.3f} s, with nothing compiled "
                 f"{r['python_search_median_seconds']:.3f} s) vs from scratch {r['oracle_median_seconds']:.3f} s")
                for r in rows]
    write(out_dir(args), "backlog", results, report(results), headline)


def report(r: dict) -> str:
    lines = [f"# A cycle whose cost follows change: queue manager walk vs cycle from scratch ({r['date']})", "",
             f"Machine: {r['machine']}. Both decide on the same snapshots in the same run (dispatches and preemptions "
             f"checked equal); CPU seconds of the pure core. Steady state: before each cycle {r['churn']:.0%} of the "
             f"running gangs end and new jobs keep the backlog at its size; the steady rounds come after "
             f"{WARM_ROUNDS} rounds of it walked and carried out (settling: the federation filling and reclaim "
             "evicting gangs back to their shares; their walks are timed apart). First cycle: a new leader, the "
             "manager built from every waiting job (its time shown separately) then walked. The compiled code "
             "(native/: reclaim's victim search, cluster scores and reservations, usage sums, deserved shares, the "
             "head order's keys and dominant shares) runs in both; two more walks on the same snapshots are the "
             "baselines for it: with the cluster scores and reservations of numpy, and with nothing compiled (the "
             "Python and numpy code throughout).", "",
             "| pending | clusters | steady cycle, walk (median / max s) | settling rounds, walk (median / max s) | "
             "gangs preempted per settling round, first / last | steady cycle, walk with numpy's cluster scores "
             "(median s) | steady cycle, walk with nothing compiled (median s) | steady cycle, from scratch "
             "(median s) | jobs placed / s, walk | jobs placed / s, walk with numpy's cluster scores | "
             "jobs placed / s, from scratch | first cycle, walk + build (s) | first cycle, from scratch (s) | "
             "peak RSS (MiB) |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in r["steady"]:
        assert s["compiled"], "the compiled victim search is not installed: `make` builds it"
        lines.append(f"| {s['pending']:,} | {s['clusters']:,} | {s['walk_median_seconds']:.3f} / "
                     f"{s['walk_max_seconds']:.3f} | {s['settling_median_seconds']:.3f} / "
                     f"{s['settling_max_seconds']:.3f} | {s['settling_preempted'][0]:,} / "
                     f"{s['settling_preempted'][-1]:,} | {s['numpy_table_median_seconds']:.3f} | "
                     f"{s['python_search_median_seconds']:.3f} | {s['oracle_median_seconds']:.3f} | "
                     f"{s['walk_jobs_per_second']:,.0f} | {s['numpy_table_jobs_per_second']:,.0f} | "
                     f"{s['oracle_jobs_per_second']:,.0f} | "
                     f"{s['first_walk_seconds']:.3f} + {s['manager_build_seconds']:.3f} | "
                     f"{s['first_oracle_seconds']:.3f} | {s['peak_rss_mib']:,.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
