"""HyperJobs (Volcano Global's `training.volcano.sh/v1alpha1` HyperJob): one training job split into sub-jobs that
run in different member clusters. Each sub-job is a job of its own (its attempt, cluster and reconciliation as any
job's); what makes them one is here: which HyperJob a sub-job belongs to, and the `hyperjob` admission check its
agent carries out, holding the sub-job's room until the federation commits every sub-job together. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

HOLD_CHECK = "hyperjob"  # the admission check of a HyperJob's sub-job: its room held, then committed
HELD = "HELD"  # the hold check's state once its agent booked the sub-job's room (READY: committed)
HOLD_SECONDS = 120.0  # how long an agent holds a sub-job's room for the federation's commit, by default
WHOLE = "whole"  # a HyperJob's restart policy: its sub-jobs stop and start again together


@dataclass(frozen=True, slots=True)
class Part:
    """A sub-job's place in its HyperJob, as the cycle reads it."""

    id: str  # the HyperJob's
    name: str
    index: int
    parts: int
    min_available: int  # 0: all
    max_domains: int  # 0: no bound
    clusters: tuple[str, ...]  # empty: any
    cluster_topology: str  # a cluster label key every sub-job's cluster shares a value of ("": none)
    restart: str = ""  # "whole": its sub-jobs stop and start again together; else each alone

    @property
    def needed(self) -> int:
        """Sub-jobs that must run together."""
        return self.min_available or self.parts


def part_of(spec: Mapping[str, Any]) -> Part | None:
    """The sub-job's place, from its stored spec (None: not a HyperJob's)."""
    h = spec.get("hyperjob")
    if not h or not h.get("id"):
        return None
    return Part(h["id"], h.get("name", ""), int(h.get("index", 0)), int(h.get("parts", 1)),
                int(h.get("min_available", 0)), int(h.get("max_domains", 0)), tuple(h.get("cluster_names", ())),
                h.get("cluster_topology", ""), h.get("restart", ""))


def hold_state(checks: Iterable[Any]) -> str | None:
    """How a sub-job's hold stands (PENDING, HELD, READY: committed), from its admission checks; None without one.
    Checks as dicts (the store's) or messages (an Assign's)."""
    for c in checks:
        name, state = (c["name"], c["state"]) if isinstance(c, Mapping) else (c.name, c.state)
        if name == HOLD_CHECK:
            return state
    return None


def with_hold(checks: Iterable[Mapping[str, Any]], state: str, message: str) -> list[dict[str, Any]]:
    """A sub-job's admission checks (the store's) with its hold check set so."""
    return [{**c, "state": state, "message": message} if c["name"] == HOLD_CHECK else dict(c) for c in checks]


def held_said(checks: Iterable[Mapping[str, Any]], cluster: str, reason: str) -> list[dict[str, Any]]:
    """A sub-job's checks once its agent says its room is held (HELD), waiting for the commit."""
    return with_hold(checks, HELD, f"room held in cluster {cluster}" + (f": {reason}" if reason else ""))
