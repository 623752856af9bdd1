"""Scale sweep: how one scheduling cycle and one gang placement grow with the federation.

1. Scheduler: one cycle of the pure core (`federation.scheduling.cycle.schedule`) from an empty
   federation (the federation and job mix of `bench.bench_scheduler`), as pending jobs grow
   1k -> 10k -> 100k -> 1M (100 member clusters) and as member clusters grow 10 -> 100 -> 1,000
   (100k pending). CPU time of the cycle, and the memory the snapshot and the cycle take.
2. Agent: placing a 128 x 8-GPU gang (soft tier 1) on a cluster with half its nodes busy, as nodes
   grow 1k -> 10k -> 50k (HyperNode tiers 1-4, 10 nodes per tier-1 domain); median of several
   draws, and the memory of the cluster state.

Each point runs in a fresh child process, so its memory is measured alone: the peak resident size
minus the size of the idle process. Writes scale.json, scale.md and scale.png.
Usage: python -m bench.bench_scale [--quick]
"""

from __future__ import annotations

import multiprocessing
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.bench_agent import cluster, placement_times
from bench.bench_scheduler import GPU, federation, jobs, organisation
from bench.common import bar, machine, measured, out_dir, parser, pyplot, save, write
from federation.scheduling.cycle import Snapshot, schedule

TENANTS, QUEUES_PER_TENANT = 100, 10


def _memory_kb(field: str) -> int:
    """A line of /proc/self/status (VmRSS: resident now; VmHWM: the peak), in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def _measured(point: Callable[..., dict[str, Any]], args: tuple[Any, ...]) -> dict[str, Any]:
    idle = _memory_kb("VmRSS")
    result = point(*args)
    result["memory_mb"] = round((_memory_kb("VmHWM") - idle) / 1024, 1)
    return result


def isolated(point: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """Run one point in a child process of its own, so its peak memory is its own."""
    with multiprocessing.get_context("fork").Pool(1) as pool:
        return pool.apply(_measured, (point, args))


def scheduler_point(n_jobs: int, n_clusters: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    clusters, capacity = federation(n_clusters)
    tenants, queues = organisation(TENANTS, QUEUES_PER_TENANT, rng)
    pending = jobs(n_jobs, queues, rng)
    snapshot = Snapshot(tenants, queues, pending, [], clusters, capacity)
    started = time.process_time()
    decisions = schedule(snapshot)
    seconds = time.process_time() - started
    gpus = sum(j.view.request[GPU] for j in pending if j.id in decisions.assign)
    return {"pending": n_jobs, "clusters": n_clusters, "seconds": round(seconds, 3),
            "placed": len(decisions.assign), "gpus_placed": gpus, "gpu_capacity": capacity[GPU]}


def agent_point(spread: int, runs: int) -> dict[str, Any]:
    fanout = [2, 5, spread, 10, 10]
    nodes = 2 * 5 * spread * 10 * 10
    times, tiers = placement_times(runs, fanout, f"placing on {nodes:,} nodes")
    state = cluster(seed=0, fanout=fanout)  # held while the memory is read
    return {"nodes": nodes, "runs": runs, "median_ms": round(statistics.median(times) * 1000, 2),
            "max_ms": round(max(times) * 1000, 2), "tiers_landed": sorted(set(tiers)), "domains":
            len(state.topology.domains)}


def sweep(quick: bool, seed: int) -> dict[str, Any]:
    pending = [1_000, 10_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    base_clusters = 10 if quick else 100
    clusters = [10, 100] if quick else [10, 100, 1_000]
    base_pending = 10_000 if quick else 100_000
    spreads = [1, 10] if quick else [1, 10, 50]  # 1k, 10k, 50k nodes
    runs = 3 if quick else 7
    points = ([("pending", n, base_clusters) for n in pending]
              + [("clusters", base_pending, c) for c in clusters if c != base_clusters])
    out: dict[str, Any] = {"scheduler": [], "agent": []}
    with bar(len(points) + len(spreads), "scale sweep", "points") as progress:
        for _, n, c in points:
            progress.set_postfix_str(f"{n:,} pending, {c:,} clusters")
            out["scheduler"].append(isolated(scheduler_point, n, c, seed))
            progress.update()
        for spread in spreads:
            progress.set_postfix_str(f"{spread * 1000:,} nodes")
            out["agent"].append(isolated(agent_point, spread, runs))
            progress.update()
    return out


def _series(points: list[dict[str, Any]], vary: str, fixed: str, value: int) -> list[dict[str, Any]]:
    return sorted((p for p in points if p[fixed] == value), key=lambda p: p[vary])


def plot(data: dict[str, Any], out: Path) -> str:
    plt = pyplot()
    sched = data["scheduler"]
    by_pending = _series(sched, "pending", "clusters", data["base_clusters"])
    by_clusters = _series(sched, "clusters", "pending", data["base_pending"])
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, series, key, label in ((axes[0], by_pending, "pending", "pending jobs"),
                                   (axes[1], by_clusters, "clusters", "member clusters")):
        x = [p[key] for p in series]
        ax.loglog(x, [p["seconds"] for p in series], "o-", label="cycle CPU time (s)")
        ax.loglog(x, [max(p["memory_mb"], 0.1) / 1000 for p in series], "s--", label="memory (GB)")
        ax.set_xlabel(label)
        ax.set_title(f"one cycle vs {label}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    agent = data["agent"]
    ax = axes[2]
    ax.loglog([p["nodes"] for p in agent], [p["median_ms"] for p in agent], "o-", label="placement, median (ms)")
    ax.loglog([p["nodes"] for p in agent], [max(p["memory_mb"], 0.1) for p in agent], "s--",
              label="cluster state memory (MB)")
    ax.set_xlabel("nodes in the member cluster")
    ax.set_title("128 x 8-GPU gang placement vs nodes")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return save(fig, out, "scale.png")


def report(data: dict[str, Any], image: str) -> str:
    lines = [f"# Scale sweep ({data['measured']})", "",
             f"Machine: {data['machine']}. Clusters of 500 nodes x 8 GPUs, {TENANTS} tenants x {QUEUES_PER_TENANT} "
             "queues, the job mix of the scheduler benchmark; one cycle from an empty federation, CPU time. Memory: "
             "peak resident size of a fresh process holding the snapshot and running the cycle, above its idle size.",
             "", "| pending jobs | member clusters | GPUs | cycle CPU (s) | jobs placed | memory (MB) |",
             "|---:|---:|---:|---:|---:|---:|"]
    for p in sorted(data["scheduler"], key=lambda p: (p["clusters"], p["pending"])):
        lines.append(f"| {p['pending']:,} | {p['clusters']:,} | {p['gpu_capacity']:,} | {p['seconds']:.3f} | "
                     f"{p['placed']:,} | {p['memory_mb']:,.0f} |")
    lines += ["", "Agent placement of a 128 x 8-GPU gang (soft tier 1), half the nodes busy (random, seeded), median "
              "of the runs; memory: the cluster state and its topology.", "",
              "| nodes | HyperNodes | runs | median (ms) | max (ms) | memory (MB) |", "|---:|---:|---:|---:|---:|---:|"]
    for p in data["agent"]:
        lines.append(f"| {p['nodes']:,} | {p['domains']:,} | {p['runs']} | {p['median_ms']} | {p['max_ms']} | "
                     f"{p['memory_mb']:,.0f} |")
    lines += ["", f"![scale]({image})", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    out = out_dir(args)
    data = sweep(args.quick, args.seed)
    data.update(measured=measured(), machine=machine(), quick=args.quick, seed=args.seed,
                base_clusters=10 if args.quick else 100, base_pending=10_000 if args.quick else 100_000)
    image = plot(data, out)
    largest = max(data["scheduler"], key=lambda p: (p["pending"], p["seconds"]))
    widest = max(data["scheduler"], key=lambda p: (p["clusters"], p["seconds"]))
    biggest = max(data["agent"], key=lambda p: p["nodes"])
    corners = [largest] if widest == largest else [largest, widest]
    def verdict(value: float, target: float) -> str:
        return "" if args.quick else f" (target < {target:g}: {'met' if value < target else 'not met'})"

    headline = [(f"one cycle, {p['pending']:,} pending x {p['clusters']:,} clusters",
                 f"{p['seconds']:.2f} s CPU{verdict(p['seconds'], 1)}, {p['memory_mb']:,.0f} MB") for p in corners]
    headline.append((f"gang placement on {biggest['nodes']:,} nodes, median",
                     f"{biggest['median_ms']} ms{verdict(biggest['median_ms'], 50)}"))
    write(out, "scale", data, report(data, image), headline)


if __name__ == "__main__":
    main()
