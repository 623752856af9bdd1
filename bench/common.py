"""What every benchmark shares, so `make bench` can run them alike and gather one report.

Each benchmark is a module with `main(argv)`, takes `--quick` (CI's smoke sizes) and `--out`, and
writes `<name>.json` and `<name>.md` there. The JSON carries `headline`: the few figures the
report's summary quotes, as (label, value) pairs, so `bench.run_all` needs no knowledge of each
benchmark's layout. Quick runs write to `bench/results/quick/` so they never overwrite the
committed full results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm

RESULTS = Path(__file__).resolve().parent / "results"
QUICK = RESULTS / "quick"


def parser(doc: str | None) -> argparse.ArgumentParser:
    """An argument parser with the options every benchmark takes."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes that finish in a minute or two (CI)")
    p.add_argument("--out", type=Path, default=None,
                   help=f"where results go (default {RESULTS.relative_to(RESULTS.parent.parent)}, "
                        "or its quick/ folder with --quick)")
    return p


def out_dir(args: argparse.Namespace) -> Path:
    out: Path = args.out or (QUICK if args.quick else RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    return out


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def measured() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def bar(total: int, desc: str, unit: str = "it") -> tqdm:
    """A progress bar; finished bars give way to the headline figures. In a log (CI) it updates sparsely."""
    return tqdm(total=total, desc=desc, unit=unit, leave=False, dynamic_ncols=True,
                mininterval=0.1 if sys.stderr.isatty() else 30)


def pyplot() -> Any:
    """matplotlib's pyplot, drawing to files only (no display on a server or in CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, out: Path, name: str) -> str:
    """Lay out, write `name` (PNG) in `out`, and free the figure; the name, for the report's link."""
    fig.tight_layout()
    fig.savefig(out / name, dpi=110)
    pyplot().close(fig)
    return name


def write(out: Path, name: str, data: dict[str, Any], markdown: str,
          headline: Sequence[tuple[str, str]], compact: bool = False) -> None:
    """Write the results, and print the headline figures."""
    data = {**data, "headline": [list(h) for h in headline]}
    text = json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=2) + "\n"
    (out / f"{name}.json").write_text(text)
    (out / f"{name}.md").write_text(markdown)
    width = max((len(label) for label, _ in headline), default=0)
    for label, value in headline:
        print(f"  {name}: {label:<{width}}  {value}")
    print(f"  -> {out / (name + '.md')}")
