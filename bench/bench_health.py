"""Hardware failures at the Llama 3 rate: proactive drain against restart-after-crash, in the same run.

Two replays under `bench.replay.failures`' model (per-GPU failure rate from Meta's Llama 3 405B run; a share
of failures warned beforehand, the parameter `--warned`; the agent's own placement and drain-timing cores):

1. the Microsoft ITP trace's gangs (8 GPUs and more) on one spine-leaf cluster sized for 60% load, over
   several failure draws (seeds), both policies meeting the same failures;
2. one synchronous 16,384-GPU gang for 54 days (Llama 3's own scale) on 2,112 nodes (64 spares), for each
   warned share: its effective training time is what Meta reports keeping above 90%.

Simulated time: the same seeds give the same figures. Writes health.json and health.md.
Usage: python -m bench.bench_health [--quick] [--seeds N] [--warned 0.5]
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bench.common import machine, measured, out_dir, parser, write
from bench.replay.capacity import Shape, build, shape_for
from bench.replay.failures import LLAMA3_GPU_FAILURE_RATE, POLICIES, FailureModel, Outcome, draw_failures, replay
from bench.replay.trace import DAY, TraceJob, gpu_seconds, load_itp, span

BASELINE, DRAIN = POLICIES


def _figures(o: Outcome) -> dict[str, Any]:
    return {"failures": o.failures, "failures_hitting_gangs": o.failures_hitting_gangs, "crashes": o.crashes,
            "moves": o.moves, "moved_at_checkpoint": o.moved_at_checkpoint, "useful_gpu_h": o.useful_gpu_h,
            "held_gpu_h": o.held_gpu_h, "lost_gpu_h": o.lost_gpu_h, "effective": o.effective,
            "unfinished": o.unfinished}


def _sum(outcomes: list[Outcome]) -> Outcome:
    total = Outcome()
    for o in outcomes:
        for name in ("useful_gpu_h", "held_gpu_h", "crashes", "moves", "moved_at_checkpoint", "failures",
                     "failures_hitting_gangs", "unfinished"):
            setattr(total, name, getattr(total, name) + getattr(o, name))
    return total


def trace_gangs(days: float | None, seeds: int, model: FailureModel) -> dict[str, Any]:
    jobs = load_itp(days=days)
    gangs = [j for j in jobs if j.gpus >= 8]
    window = span(jobs)
    shape = shape_for(gpu_seconds(gangs) / window, 0.6, clusters=1)
    nodes = list(next(iter(build(shape).values())).topology.nodes)
    runs: dict[str, list[Outcome]] = {p: [] for p in POLICIES}
    for seed in range(seeds):
        failures = draw_failures(nodes, window + 30 * DAY, model, seed)
        for policy in POLICIES:
            runs[policy].append(replay(jobs, shape, failures, model, policy))
    return {"gangs": len(gangs), "days": window / DAY, "nodes": len(nodes), "seeds": seeds,
            "policies": {p: _figures(_sum(o)) for p, o in runs.items()},
            "per_seed_lost_gpu_h": {p: [o.lost_gpu_h for o in runs[p]] for p in POLICIES}}


def llama_scale(gpus: int, days: float, warned: list[float], model: FailureModel) -> list[dict[str, Any]]:
    nodes_needed = gpus // 8
    leaves = 32 if nodes_needed >= 1024 else 4
    shape = Shape(1, 4, leaves // 4, nodes_needed // leaves + max(2, 64 // leaves))
    nodes = list(next(iter(build(shape).values())).topology.nodes)
    job = TraceJob("llama3-405b", "meta", 0.0, days * DAY, gpus)
    out = []
    for share in warned:
        m = replace(model, warned=share)
        failures = draw_failures(nodes, days * 1.5 * DAY, m, 0)
        out.append({"warned": share, "gpus": gpus, "days": days, "nodes": len(nodes),
                    "policies": {p: _figures(replay([job], shape, failures, m, p)) for p in POLICIES}})
    return out


def _reduction(policies: dict[str, Any]) -> float:
    base = policies[BASELINE]["lost_gpu_h"]
    return 1 - policies[DRAIN]["lost_gpu_h"] / base if base else 0.0


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--seeds", type=int, default=None, help="failure draws for the trace replay (default 10; quick 2)")
    p.add_argument("--warned", type=float, default=0.5, help="share of failures warned beforehand (default 0.5)")
    args = p.parse_args()
    out = out_dir(args)
    model = FailureModel(warned=args.warned)
    seeds = args.seeds or (2 if args.quick else 10)
    trace = trace_gangs(7 if args.quick else None, seeds, model)
    warned = [args.warned] if args.quick else sorted({0.25, args.warned, 0.75})
    scale = llama_scale(2048 if args.quick else 16_384, 7 if args.quick else 54, warned, model)
    data = {"measured": measured(), "machine": machine(), "quick": args.quick,
            "model": {"gpu_failure_rate_per_h": model.gpu_rate, "warned": model.warned, "lead_h": model.lead / 3600,
                      "repair_h": model.repair / 3600, "checkpoint_min": model.checkpoint / 60,
                      "restart_min": model.restart / 60},
            "trace": trace, "scale": scale}
    t = trace["policies"]
    main_scale = next(s for s in scale if s["warned"] == args.warned)
    s = main_scale["policies"]
    lines = [
        "## health\n",
        f"Hardware failures at the Llama 3 rate ({LLAMA3_GPU_FAILURE_RATE * 1e5:.2f} per 100,000 GPU-hours: 419 "
        f"interruptions in 54 days on 16,384 GPUs), {model.warned:.0%} of them warned beforehand (mean lead "
        f"{model.lead / 3600:g} h), nodes repaired in {model.repair / 3600:g} h; gangs checkpoint every "
        f"{model.checkpoint / 60:g} min and need {model.restart / 60:g} min to restart from one. "
        "**proactive-drain** is the agent's placement and drain-timing cores; **restart-after-crash** (the "
        "baseline, same run, same failures) reads no health. Simulated time; `python -m bench.bench_health`.\n",
        f"### The ITP trace's {trace['gangs']:,} gangs, {trace['days']:.0f} days, {trace['nodes']} nodes, "
        f"{trace['seeds']} failure draws\n",
        "| policy | failures hitting gangs | crashes | moves (at a checkpoint) | GPU-h lost to failures | "
        "effective training time |",
        "|---|---|---|---|---|---|",
    ]
    for name in POLICIES:
        f = t[name]
        lines.append(f"| {name} | {f['failures_hitting_gangs']} | {f['crashes']} | {f['moves']} "
                     f"({f['moved_at_checkpoint']}) | {f['lost_gpu_h']:,.0f} | {f['effective']:.4%} |")
    lines += ["", f"Proactive drain loses **{_reduction(t):.0%} fewer GPU-hours** to failures than "
                  "restart-after-crash (target: at least a third).\n",
              f"### One {main_scale['gpus']:,}-GPU gang for {main_scale['days']:g} days on {main_scale['nodes']:,} "
              "nodes\n",
              "| warned share | policy | crashes | moves (at a checkpoint) | GPU-h lost to failures | "
              "effective training time | fewer GPU-h lost |",
              "|---|---|---|---|---|---|---|"]
    for run in scale:
        for name in POLICIES:
            f = run["policies"][name]
            fewer = f"{_reduction(run['policies']):.0%}" if name == DRAIN else "baseline"
            lines.append(f"| {run['warned']:.0%} | {name} | {f['crashes']} | {f['moves']} ({f['moved_at_checkpoint']}) "
                         f"| {f['lost_gpu_h']:,.0f} | {f['effective']:.2%} | {fewer} |")
    lines.append("")
    headline = [
        ("trace: fewer GPU-h lost (drain vs crash)", f"{_reduction(t):.0%} ({t[DRAIN]['lost_gpu_h']:,.0f} vs "
                                                      f"{t[BASELINE]['lost_gpu_h']:,.0f})"),
        (f"{main_scale['gpus']:,}-GPU gang: effective training time",
         f"{s[DRAIN]['effective']:.1%} drain vs {s[BASELINE]['effective']:.1%} crash"),
        (f"{main_scale['gpus']:,}-GPU gang: fewer GPU-h lost", f"{_reduction(s):.0%}"),
    ]
    write(out, "health", data, "\n".join(lines), headline)


if __name__ == "__main__":
    main()
