"""The Microsoft ITP trace (ElasticFlow's raw per-cluster CSVs) as jobs of a federation.

Mapping (the trace has no tenants): each of the ten source clusters is a tenant with equal weight
and one queue; every job keeps its submission time, duration and GPU count. The ten files share
one collection start, so they merge onto one timeline (see the trace's SOURCE.md).
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

DAY = 86_400.0


def traces() -> Path:
    """The shared traces: $FEDERATION_TRACES, else `shared/traces` beside the checkout, else /work's."""
    if os.environ.get("FEDERATION_TRACES"):
        return Path(os.environ["FEDERATION_TRACES"])
    beside = Path(__file__).resolve().parents[3] / "shared" / "traces"
    return beside if beside.is_dir() else Path("/work/shared/traces")


@dataclass(frozen=True, slots=True)
class TraceJob:
    id: str
    tenant: str
    submit: float  # seconds from the start of the trace
    duration: float
    gpus: int


def load_itp(directory: Path | None = None, days: float | None = None) -> list[TraceJob]:
    """Every job of the ten clusters (submitted within the first `days`, if given), by submission."""
    directory = directory or traces() / "microsoft-elasticflow-itp"
    paths = sorted(directory.glob("cluster*.csv"))
    if not paths:
        raise FileNotFoundError(f"no ITP trace in {directory} (set FEDERATION_TRACES)")
    jobs = []
    for path in paths:
        tenant = path.stem.replace("cluster", "itp")
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                submit = float(row["submission_time"])
                if days is not None and submit >= days * DAY:
                    continue
                jobs.append(TraceJob(f"{tenant}-{len(jobs)}", tenant, submit, float(row["duration"]),
                                     int(row["num_gpu"])))
    jobs.sort(key=lambda j: (j.submit, j.id))
    return jobs


def span(jobs: Sequence[TraceJob]) -> float:
    """From the first submission to the last: the window the offered load is measured over."""
    return max(j.submit for j in jobs) - min(j.submit for j in jobs)


def gpu_seconds(jobs: Sequence[TraceJob]) -> float:
    return sum(j.gpus * j.duration for j in jobs)
