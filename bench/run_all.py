"""`make bench`: every benchmark in turn, then one Markdown report of them all.

Each benchmark runs in a process of its own (its memory and its failures stay its own) with the
same `--quick`/`--out`; the report gathers their Markdown sections and plots, headed by every
benchmark's headline figures. A benchmark that fails is named in the report and makes the exit
status non-zero, after the others have run.

Usage: python -m bench.run_all [--quick] [--only NAME,...] [--out DIR] [--report-only]
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from bench.common import machine, measured, out_dir, parser
from bench.replay.trace import traces

ROOT = Path(__file__).resolve().parent.parent
TRACED = {"openb", "replay", "health"}  # these read the public traces (../shared/traces or $FEDERATION_TRACES)
# name: (module, what it measures); the order runs the quick, self-contained ones first
BENCHMARKS = {
    "scale": ("bench.bench_scale", "how a scheduling cycle and a gang placement grow with size"),
    "agent": ("bench.bench_agent", "member-agent placement latency and binding rate"),
    "scheduler": ("bench.bench_scheduler", "scheduling throughput under churn, pure core and on PostgreSQL"),
    "api": ("bench.bench_api", "SubmitJobs throughput into PostgreSQL"),
    "faults": ("bench.bench_faults", "recovery times after pod, agent and server failures"),
    "kube": ("bench.bench_kube", "binding gangs on a real Kubernetes API server with KWOK nodes"),
    "openb": ("bench.bench_openb", "GPU fragmentation on the Alibaba openb trace, devices modelled, against first "
                                   "fit, best fit, least-allocated and FGD"),
    "replay": ("bench.trace_replay", "Microsoft ITP trace replay: fair vs FIFO vs topology-off"),
    "health": ("bench.bench_health", "hardware failures at the Llama 3 rate: proactive drain vs restart-after-crash"),
    "backlog": ("bench.bench_backlog", "a cycle whose cost follows change: queue manager walk vs cycle from scratch"),
    "history": ("bench.bench_history", "a long history: submit path and cycle, ended jobs archived vs left in jobs"),
    "latency": ("bench.bench_latency", "submit-to-dispatch latency of a job that fits at once, with a backlog waiting"),
    "flow": ("bench.bench_flow", "jobs released at once to one simulated cluster, until all Running"),
    "profile": ("bench.bench_profile", "where a steady cycle's time goes, per phase: walk vs cycle from scratch"),
    "loop": ("bench.bench_loop", "how long each heavy handler holds the API's event loop, on its largest input"),
}


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise ValueError(f"unknown benchmark {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    return names


def _section(markdown: str) -> str:
    """A benchmark's own report, one heading level down, to sit under the combined report's title."""
    return re.sub(r"^(#+) ", r"#\1 ", markdown, flags=re.MULTILINE).strip() + "\n"


def report(out: Path, ran: Sequence[str], failed: Sequence[str], quick: bool, seconds: dict[str, float],
           skipped: Sequence[str] = ()) -> str:
    days: dict[str, list[str]] = {}  # each benchmark's results are of the day it last ran (`--only` runs a few)
    for name in ran:
        path = out / f"{name}.json"
        if path.exists() and name not in failed and name not in skipped:
            data = json.loads(path.read_text())
            stamps = [str(data[k])[:10] for k in ("measured", "date", "measured_at") if data.get(k)]
            day = stamps[0] if stamps else "a day unrecorded"
            days.setdefault(day, []).append(name)
    when = "; ".join(f"{', '.join(names)} on {day}" for day, names in sorted(days.items())) or measured()[:10]
    lines = ["# Benchmark report", "",
             f"Measured on {machine()}, by `make bench{' BENCH_ARGS=--quick' if quick else ''}` "
             f"({'quick smoke sizes' if quick else 'full sizes'}): {when}. Each section below is one benchmark's "
             "own report; its JSON beside it holds every figure.", "", "## Headline figures", "",
             "| benchmark | figure | value |", "|---|---|---|"]
    for name in ran:
        path = out / f"{name}.json"
        if name in skipped:
            lines.append(f"| {name} | **not run**: no traces at {traces()} | |")
            continue
        if name in failed or not path.exists():
            lines.append(f"| {name} | **failed** (see its output) | |")
            continue
        for label, value in json.loads(path.read_text()).get("headline", []):
            lines.append(f"| {name} | {label} | {value} |")
    lines += ["", "| benchmark | measures | run time (s) |", "|---|---|---:|"]
    lines += [f"| [{n}](#{n}) | {BENCHMARKS[n][1]} | {f'{seconds[n]:.0f}' if n in seconds else '-'} |" for n in ran]
    for name in ran:
        path = out / f"{name}.md"
        if name not in failed and name not in skipped and path.exists():
            lines += ["", f'<a id="{name}"></a>', "", _section(path.read_text())]
    return "\n".join(lines).rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated benchmarks to run "
                                                                 f"(default all: {', '.join(BENCHMARKS)})")
    p.add_argument("--report-only", action="store_true", help="run nothing; gather the results already there")
    args = p.parse_args(argv)
    try:
        names = _names(args.only)
    except ValueError as err:
        p.error(str(err))
    out = out_dir(args)
    failed: list[str] = []
    skipped = [n for n in names if n in TRACED and not traces().is_dir()]
    seconds: dict[str, float] = {}
    for i, name in enumerate([] if args.report_only else names, 1):
        module, what = BENCHMARKS[name]
        print(f"[{i}/{len(names)}] {name}: {what}", flush=True)
        if name in skipped:
            print(f"  NOT RUN: the traces are not at {traces()} (set FEDERATION_TRACES)", flush=True)
            continue
        started = time.monotonic()
        command = [sys.executable, "-m", module, "--out", str(out)] + (["--quick"] if args.quick else [])
        if subprocess.run(command, check=False, cwd=ROOT).returncode != 0:
            failed.append(name)
            print(f"  {name} FAILED", flush=True)
        seconds[name] = time.monotonic() - started
        print(f"  ({seconds[name]:.0f} s)", flush=True)
    path = out / "README.md"
    # The report is of every benchmark with results here, not only those just run: `make bench-NAME` refreshes one
    # section and keeps the others, each with its own day.
    shown = [n for n in BENCHMARKS if n in names or (out / f"{n}.json").exists()]
    path.write_text(report(out, shown, failed, args.quick, seconds, skipped))
    print(f"report: {path}" + (f"; failed: {', '.join(failed)}" if failed else "")
          + (f"; not run (no traces): {', '.join(skipped)}" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
