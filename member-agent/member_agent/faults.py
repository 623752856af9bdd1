"""Injected hardware faults at given times: a node degrades, fails or recovers; a HyperNode's links degrade.

The same schedule drives a simulated cluster (`member-agent --faults FILE`, applied by the agent itself) and
the Kubernetes test bed (`python -m federation.testbed.faults`, written to the API server the way NVSentinel
writes them: a node condition says why, a taint says a failed node is bad). A schedule is a YAML list:

    - {at: 30s, node: n0-1, state: degraded, reason: XID 79}
    - {at: 2m, hypernode: s0, state: degraded, reason: CableErrors}
    - {at: 5m, node: n0-1, state: healthy}
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from federation.kernel.durations import parse_duration
from member_agent.nodehealth import DEGRADED, FAILED, HEALTHY

STATES = (HEALTHY, DEGRADED, FAILED)


class FaultError(ValueError):
    """A schedule that cannot be used; the message names the file, the entry and the field."""


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the schedule starts
    kind: str  # node | hypernode
    name: str
    state: str  # healthy | degraded | failed (a HyperNode: healthy | degraded)
    reason: str = ""
    rate: float | None = None  # per hour, while degraded (None: the rules' default)


def parse_faults(text: str, where: str = "faults") -> list[Fault]:
    try:
        data = yaml.safe_load(text) or []
    except yaml.YAMLError as err:
        raise FaultError(f"{where}: {err}") from None
    if not isinstance(data, list):
        raise FaultError(f"{where}: must be a list of faults ({{at, node|hypernode, state, reason}})")
    out = []
    for i, item in enumerate(data):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise FaultError(f"{at}: must be a mapping")
        unknown = set(item) - {"at", "node", "hypernode", "state", "reason", "rate"}
        if unknown:
            raise FaultError(f"{at}: unknown field {sorted(unknown)[0]!r}")
        if ("node" in item) == ("hypernode" in item):
            raise FaultError(f"{at}: give exactly one of node or hypernode")
        kind = "node" if "node" in item else "hypernode"
        try:
            seconds = parse_duration(str(item.get("at", "0s")))
        except ValueError as err:
            raise FaultError(f"{at}.at: {err}") from None
        state = item.get("state")
        allowed = STATES if kind == "node" else (HEALTHY, DEGRADED)
        if state not in allowed:
            raise FaultError(f"{at}.state: must be one of {', '.join(allowed)}")
        rate = item.get("rate")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float) or rate < 0):
            raise FaultError(f"{at}.rate: must be a failure rate per hour, at least 0")
        out.append(Fault(seconds, kind, str(item[kind]), state, str(item.get("reason") or ""),
                         None if rate is None else float(rate)))
    return sorted(out, key=lambda f: f.at)


def load_faults(path: Path) -> list[Fault]:
    try:
        text = path.read_text()
    except OSError as err:
        raise FaultError(f"{path}: {err}") from None
    return parse_faults(text, str(path))
