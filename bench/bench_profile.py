"""Where a steady cycle's time goes, per phase: the queue manager's walk beside the cycle from scratch, on the same
snapshot in the same run.

The federation, jobs and churn are `bench.bench_backlog`'s. After its rounds of churn that let the federation settle
(`WARM_ROUNDS`), one cycle of each is timed
with the decision core's phases wrapped: each phase's time excludes the phases it calls, so the phases and the
rest add up to the cycle. The wrappers cost a little per call; the cycle's own time is measured once more
unwrapped, beside them.

Phases (methods of `federation.scheduling.cycle._Cycle`, of its parts and of the backlogs it walks):
- setup: the cycle's parts from the snapshot (the ledger's usage, the preemptor's pools and victims in order);
- shares: hierarchical deserved shares over the queues' demand;
- queue order: each queue head's fair-share key, read when the queue is pushed on the heap;
- cluster choice: whether and where the head fits now;
- reclaim and preemption: the `Preemptor`'s victim search for a head that does not fit (whole clusters, inside a
  HyperNode, or for room others keep back by lending limits);
- moves: room made by moving gangs inside a cluster, for a gang with a hard tier limit;
- reservations: holding room for a head that must wait;
- settling the rest: the reasons of the jobs behind each head that certainly wait (a walk per gang shape);
- other: the loop itself, the heap, limits, decisions.

Writes profile.json and profile.md.
Usage: python -m bench.bench_profile [--quick]
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from bench.bench_backlog import WARM_ROUNDS, Churn, afresh, tuned_churn
from bench.common import bar, machine, measured, out_dir, parser, write
from federation.scheduling.backlog import Lists, Walked
from federation.scheduling.cycle import Decisions, _Cycle, schedule, schedule_backlog
from federation.scheduling.ordering import HeadOrder
from federation.scheduling.preemption import Preemptor
from federation.scheduling.reservations import Reservations

PHASES: dict[str, tuple[tuple[type, str], ...]] = {
    "setup": ((_Cycle, "__init__"),),
    "shares": ((_Cycle, "compute_shares"),),
    "queue order": ((HeadOrder, "key"),),
    "cluster choice": ((_Cycle, "choose"),),
    "reclaim and preemption": ((Preemptor, "victims"), (Preemptor, "victims_in_hypernode"),
                               (Preemptor, "victims_for_kept")),
    "moves": ((Preemptor, "moves_in_hypernode"),),
    "reservations": ((_Cycle, "hold"), (Reservations, "cluster_for")),
    "settling the rest": ((Walked, "settle"), (Lists, "settle"), (_Cycle, "verdict")),
}
SETTLING_ROUNDS = 2  # 1,000 clusters once more, two rounds after the fill: reclaim evicting thousands of gangs a round


@contextmanager
def phases() -> Iterator[dict[str, float]]:
    """Wrap the phases' methods for the duration; yields seconds per phase, each net of the phases it calls."""
    seconds = dict.fromkeys(PHASES, 0.0)
    stack: list[list[float]] = []  # per phase under way: [its start, the time spent in phases it called]
    originals: dict[tuple[type, str], Callable[..., Any]] = {}

    def wrapped(phase: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            frame = [time.process_time(), 0.0]
            stack.append(frame)
            try:
                return method(*args, **kwargs)
            finally:
                stack.pop()
                took = time.process_time() - frame[0]
                seconds[phase] += took - frame[1]
                if stack:
                    stack[-1][1] += took
        return timed

    for phase, methods in PHASES.items():
        for owner, name in methods:
            originals[owner, name] = getattr(owner, name)
            setattr(owner, name, wrapped(phase, originals[owner, name]))
    try:
        yield seconds
    finally:
        for (owner, name), method in originals.items():
            setattr(owner, name, method)


def profiled(decide: Callable[[], Decisions]) -> dict[str, Any]:
    """The cycle's seconds per phase (wrapped), and its seconds unwrapped."""
    with phases() as seconds:
        started = time.process_time()
        decisions = decide()
        total = time.process_time() - started
    started = time.process_time()
    again = decide()
    plain = time.process_time() - started
    assert again.assign == decisions.assign, "the same cycle decided twice differently"
    return {"phases": {**seconds, "other": max(total - sum(seconds.values()), 0.0)}, "wrapped_seconds": total,
            "seconds": plain, "dispatched": len(decisions.assign), "preempted": len(decisions.preempt)}


def point(n_jobs: int, n_clusters: int, seed: int, warm: int, tuned: bool = False) -> dict[str, Any]:
    """`tuned`: with the scheduler process's collector settings (process-wide), as `bench_backlog` measures; with
    CPython's defaults, a cycle on 1,000 clusters spent a fifth more, in collections charged to whichever phase
    allocated last."""
    churn = tuned_churn(n_jobs, n_clusters, seed) if tuned else Churn(n_jobs, n_clusters, seed)
    churn.carry_out(schedule_backlog(churn.first(), churn.manager))
    churn.warm_up(warm)
    snapshot = churn.next()
    # Neither changes the manager: the walk reads it, the cycle from scratch reads the snapshot's list.
    walk = profiled(lambda: schedule_backlog(snapshot, churn.manager))
    scratch = profiled(lambda: schedule(afresh(snapshot)))
    return {"pending": n_jobs, "clusters": n_clusters, "warm_rounds": warm, "running": len(snapshot.running),
            "walk": walk, "from_scratch": scratch}


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    configs = [(3_000, 10, WARM_ROUNDS), (3_000, 100, WARM_ROUNDS)] if args.quick else [
        (100_000, 100, WARM_ROUNDS), (1_000_000, 100, WARM_ROUNDS), (100_000, 1_000, WARM_ROUNDS),
        (100_000, 1_000, SETTLING_ROUNDS)]
    progress = bar(len(configs), "steady cycles profiled", "configurations")
    rows = []
    for n, c, warm in configs:
        rows.append(point(n, c, args.seed, warm, tuned=True))
        progress.update()
    progress.close()
    results = {"benchmark": "profile", "date": measured(), "machine": machine(), "quick": args.quick, "points": rows}
    headline = []
    for r in rows:
        top = max(r["walk"]["phases"].items(), key=lambda kv: kv[1])
        kind = "steady cycle" if r["warm_rounds"] == WARM_ROUNDS else f"settling cycle (round {r['warm_rounds'] + 1})"
        headline.append((f"{kind}, {r['pending']:,} pending, {r['clusters']:,} clusters: most time in",
                         f"{top[0]} ({top[1] / max(r['walk']['wrapped_seconds'], 1e-9):.0%} of "
                         f"{r['walk']['seconds']:.3f} s; from scratch {r['from_scratch']['seconds']:.3f} s)"))
    write(out_dir(args), "profile", results, report(results), headline)


def report(r: dict) -> str:
    lines = [f"# Where a steady cycle's time goes ({r['date']})", "",
             f"Machine: {r['machine']}. One cycle under churn (`bench.bench_backlog`'s federation): steady, after "
             f"{WARM_ROUNDS} rounds, and on 1,000 clusters also one while it settles, after {SETTLING_ROUNDS} (reclaim "
             "evicting thousands of gangs a round back to their shares); the queue manager's walk beside the cycle "
             "from scratch on the same snapshot. "
             "Seconds per phase, each net of the phases it calls, with the share of the cycle; the cycle's time "
             "unwrapped is the last row.", ""]
    for s in r["points"]:
        walk, scratch = s["walk"], s["from_scratch"]
        after = "steady" if s["warm_rounds"] == WARM_ROUNDS else "settling"
        lines += [f"## {s['pending']:,} pending, {s['clusters']:,} clusters, {after}, after {s['warm_rounds']} rounds "
                  f"({s['running']:,} gangs running; "
                  f"{walk['dispatched']:,} dispatched, {walk['preempted']:,} preempted)", "",
                  "| phase | walk (s) | share | from scratch (s) | share |", "|---|---:|---:|---:|---:|"]
        for phase in walk["phases"]:
            a, b = walk["phases"][phase], scratch["phases"][phase]
            lines.append(f"| {phase} | {a:.3f} | {a / max(walk['wrapped_seconds'], 1e-9):.0%} | {b:.3f} | "
                         f"{b / max(scratch['wrapped_seconds'], 1e-9):.0%} |")
        lines += [f"| **the cycle, unwrapped** | **{walk['seconds']:.3f}** | | **{scratch['seconds']:.3f}** | |", ""]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
