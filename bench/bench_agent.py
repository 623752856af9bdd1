"""Agent placement latency and simulated binding rate.

1. Placement: a 1,024-GPU gang (128 pods x 8 GPUs, soft tier 1) on a simulated 10,000-node cluster of
   8-GPU nodes in 4 HyperNode tiers (2 x 5 x 10 x 10 domains of 10 nodes), with 50% of nodes busy,
   chosen at random (seeded). Each run places the gang on a fresh draw; we report the median.
2. Binding: pods bound per second by the simulated backend through the agent core (assign -> place
   -> bind -> report) for a stream of 8-pod gangs on the same cluster.

Writes bench/results/agent.json and agent.md. Usage: python bench/bench_agent.py [--runs 21]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from federation.v1 import common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.placement import GangRequest, Placement, TaskRequest, place
from member_agent.simulated import SimulatedBackend
from member_agent.state import ClusterState
from member_agent.topology import build, load_objects

RESULTS = Path(__file__).resolve().parent / "results"
GPU = "nvidia.com/gpu"
FANOUT = [2, 5, 10, 10, 10]  # 2 x 5 x 10 x 10 domains, 10 nodes each: 10,000 nodes, tiers 1-4 + root


def progress(done: int, total: int, label: str) -> None:
    filled = 30 * done // total
    sys.stdout.write(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {label}   ")
    sys.stdout.flush()


def cluster(seed: int) -> ClusterState:
    nodes, hypernodes, _ = load_objects(clusters.tree("n", FANOUT, clusters.H100))
    state = ClusterState(build(nodes, hypernodes))
    rng = random.Random(seed)
    for node in sorted(state.free):
        if rng.random() < 0.5:
            state.allocate(node, {GPU: 8, "cpu": 96_000})
    return state


def bench_placement(runs: int) -> dict[str, object]:
    gang = GangRequest(tasks=(TaskRequest("worker", 128, {GPU: 8, "cpu": 96_000, "memory": 1600 * 2**30}),),
                       mode="soft", highest_tier=1)
    times, tiers = [], []
    for run in range(runs):
        progress(run, runs, "placing 128 x 8 GPUs on 10,000 nodes")
        state = cluster(seed=run)
        start = time.perf_counter()
        result = place(state, gang)
        times.append(time.perf_counter() - start)
        assert isinstance(result, Placement), result
        assert len(result.pods) == 128
        tiers.append(result.tier)
    progress(runs, runs, "placement done")
    print()
    return {"runs": runs, "median_ms": round(statistics.median(times) * 1000, 2),
            "p90_ms": round(sorted(times)[int(0.9 * (runs - 1))] * 1000, 2),
            "min_ms": round(min(times) * 1000, 2), "max_ms": round(max(times) * 1000, 2),
            "tiers_landed": sorted(set(tiers)), "target_median_ms": 50}


async def _bind(gangs: int) -> float:
    state = cluster(seed=0)
    agent = Agent("bench", {}, SimulatedBackend(state, default_duration=3600))
    spec = common_pb2.JobSpec(name="g", queue="q", tasks=[common_pb2.TaskSpec(
        name="w", replicas=8, resources={GPU: "1", "cpu": "1"})])
    start = time.perf_counter()
    for i in range(gangs):
        await agent.assign(common_pb2.Job(id=f"g-{i}", spec=spec), attempt=1)
        if i % 50 == 0:
            progress(i, gangs, "binding 8-pod gangs")
        agent.drain_outbox()
    elapsed = time.perf_counter() - start
    progress(gangs, gangs, "binding done")
    print()
    bound = sum(len(j.pods) for j in agent.jobs.values())
    assert bound == gangs * 8, bound
    return bound / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--gangs", type=int, default=1000)
    args = parser.parse_args()
    placement = bench_placement(args.runs)
    rate = asyncio.run(_bind(args.gangs))
    report = {
        "benchmark": "member-agent placement latency and simulated binding rate",
        "cluster": "10,000 nodes x 8 GPUs, HyperNode tiers 1-4 (fan-out 2x5x10x10, 10 nodes per tier-1 domain), "
                   "50% of nodes busy at random",
        "placement_1024_gpu_gang": placement,
        "binding": {"gangs": args.gangs, "pods_per_gang": 8, "pods_per_s": round(rate), "target_pods_per_s": 1000},
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "agent.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "agent.md").write_text("\n".join([
        "# Member agent", "", f"{report['cluster']}; {report['machine']}; measured {report['measured_at']}.", "",
        "| measure | result | target |", "|---|---|---|",
        f"| placement of a 128 x 8-GPU gang, median of {args.runs} | {placement['median_ms']} ms "
        f"(p90 {placement['p90_ms']} ms) | < 50 ms |",
        f"| pods bound per second (simulated backend, {args.gangs} gangs of 8) | {round(rate)} | >= 1000 |", ""]))
    print(f"placement of 128 x 8 GPUs on 10,000 nodes: median {placement['median_ms']} ms (target < 50 ms)")
    print(f"simulated binding: {round(rate)} pods/s (target >= 1000)")


if __name__ == "__main__":
    main()
