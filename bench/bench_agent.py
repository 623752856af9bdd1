"""Agent placement latency and simulated binding rate.

1. Placement: a 1,024-GPU gang (128 pods x 8 GPUs, soft tier 1) on a simulated 10,000-node cluster of
   8-GPU nodes in 4 HyperNode tiers (2 x 5 x 10 x 10 domains of 10 nodes), with 50% of nodes busy,
   chosen at random (seeded). Each run places the gang on a fresh draw; we report the median.
2. Binding: pods bound per second by the simulated backend through the agent core (assign -> place
   -> bind -> report) for a stream of 8-pod gangs on the same cluster.

Writes agent.json and agent.md. Usage: python -m bench.bench_agent [--quick] [--runs 21] [--gangs 1000]
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Sequence

from bench.common import bar, machine, measured, out_dir, parser, write
from federation.v1 import common_pb2
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.placement import GangRequest, Placement, TaskRequest, place
from member_agent.simulated import SimulatedBackend
from member_agent.state import ClusterState
from member_agent.topology import build, load_objects

GPU = "nvidia.com/gpu"
FANOUT = [2, 5, 10, 10, 10]  # 2 x 5 x 10 x 10 domains, 10 nodes each: 10,000 nodes, tiers 1-4 + root


def cluster(seed: int, fanout: Sequence[int] = FANOUT) -> ClusterState:
    """8-GPU nodes in a regular HyperNode tree, half of them (drawn with `seed`) fully busy."""
    nodes, hypernodes, _ = load_objects(clusters.tree("n", fanout, clusters.H100))
    state = ClusterState(build(nodes, hypernodes))
    rng = random.Random(seed)
    for node in sorted(state.free):
        if rng.random() < 0.5:
            state.allocate(node, {GPU: 8, "cpu": 96_000})
    return state


GANG = GangRequest(tasks=(TaskRequest("worker", 128, {GPU: 8, "cpu": 96_000, "memory": 1600 * 2**30}),),
                   mode="soft", highest_tier=1)


def placement_times(runs: int, fanout: Sequence[int], desc: str) -> tuple[list[float], list[int]]:
    """Seconds to place the 1,024-GPU gang, each run on a fresh draw of busy nodes; and the tiers it landed in."""
    times, tiers = [], []
    with bar(runs, desc, "runs") as progress:
        for run in range(runs):
            state = cluster(seed=run, fanout=fanout)
            start = time.perf_counter()
            result = place(state, GANG)
            times.append(time.perf_counter() - start)
            assert isinstance(result, Placement), result
            assert len(result.pods) == 128
            tiers.append(result.tier)
            progress.update()
    return times, tiers


def bench_placement(runs: int) -> dict[str, object]:
    times, tiers = placement_times(runs, FANOUT, "placing 128 x 8 GPUs on 10,000 nodes")
    return {"runs": runs, "median_ms": round(statistics.median(times) * 1000, 2),
            "p90_ms": round(sorted(times)[int(0.9 * (runs - 1))] * 1000, 2),
            "min_ms": round(min(times) * 1000, 2), "max_ms": round(max(times) * 1000, 2),
            "tiers_landed": sorted(set(tiers)), "target_median_ms": 50}


async def _bind(gangs: int) -> float:
    state = cluster(seed=0)
    agent = Agent("bench", {}, SimulatedBackend(state, default_duration=3600))
    spec = common_pb2.JobSpec(name="g", queue="q", tasks=[common_pb2.TaskSpec(
        name="w", replicas=8, resources={GPU: "1", "cpu": "1"})])
    with bar(gangs, "binding 8-pod gangs", "gangs") as progress:
        start = time.perf_counter()
        for i in range(gangs):
            await agent.assign(common_pb2.Job(id=f"g-{i}", spec=spec), attempt=1)
            agent.drain_outbox()
            progress.update()
        elapsed = time.perf_counter() - start
    bound = sum(len(j.pods) for j in agent.jobs.values())
    assert bound == gangs * 8, bound
    return bound / elapsed


def main(argv: Sequence[str] | None = None) -> None:
    p = parser(__doc__)
    p.add_argument("--runs", type=int, default=None, help="placements timed (default 21, quick 5)")
    p.add_argument("--gangs", type=int, default=None, help="gangs bound (default 1000, quick 200)")
    args = p.parse_args(argv)
    runs = args.runs or (5 if args.quick else 21)
    gangs = args.gangs or (200 if args.quick else 1000)
    placement = bench_placement(runs)
    rate = round(asyncio.run(_bind(gangs)))
    report = {
        "benchmark": "member-agent placement latency and simulated binding rate",
        "cluster": "10,000 nodes x 8 GPUs, HyperNode tiers 1-4 (fan-out 2x5x10x10, 10 nodes per tier-1 domain), "
                   "50% of nodes busy at random",
        "placement_1024_gpu_gang": placement,
        "binding": {"gangs": gangs, "pods_per_gang": 8, "pods_per_s": rate, "target_pods_per_s": 1000},
        "measured_at": measured(), "machine": machine(),
    }
    markdown = "\n".join([
        f"# Member agent ({report['measured_at']})", "",
        f"{report['cluster']}; {report['machine']}.", "",
        "| measure | result | target |", "|---|---|---|",
        f"| placement of a 128 x 8-GPU gang, median of {runs} | {placement['median_ms']} ms "
        f"(p90 {placement['p90_ms']} ms) | < 50 ms |",
        f"| pods bound per second (simulated backend, {gangs} gangs of 8) | {rate} | >= 1000 |", ""])
    write(out_dir(args), "agent", report, markdown, [
        ("128 x 8-GPU gang on 10,000 nodes, median", f"{placement['median_ms']} ms (target < 50 ms)"),
        ("simulated binding", f"{rate} pods/s (target >= 1000)")])


if __name__ == "__main__":
    main()
