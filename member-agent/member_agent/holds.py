"""Nodes kept for gangs the federation holds room for in this cluster (its reservations).

A reservation at the federation keeps a cluster's total room for a gang; it does not say which nodes. Small pods
placed meanwhile would spread over every node a gang of whole-node pods needs, so that it never fits however much
is free in total (137 of 256 GPUs free, no node with 8). So the agent keeps nodes for each held gang, in the order
the federation holds them: the nodes closest to holding its pods (most GPUs free first), as many as its pods need,
and none of their free GPUs goes to another job's pods up to what the held pods would take there. Running pods are
never touched: kept nodes fill up for the held gang as they end.

Pure: the state as it is, the holds, the GPUs to keep off each node for other jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from federation.kernel.gpuask import GPU, WHOLE
from federation.kernel.resources import SHARE, Resources
from member_agent.state import ClusterState

MAX_HOLDS = 1_000  # a cluster's held gangs the agent keeps nodes for, at most (the federation holds one per queue)


@dataclass(frozen=True)
class Hold:
    job_id: str
    pods: int
    gpus_per_pod: int


def kept(state: ClusterState, holds: Iterable[Hold], placing: str = "") -> dict[str, Resources]:
    """Per node, the GPUs (and their shares) other jobs' pods may not take there, for the holds in order; the
    job being placed (`placing`) is not kept from its own nodes."""
    out: dict[str, Resources] = {}
    taken: set[str] = set()
    ordered = state.most_free_gpus()  # read as far as the holds need, once for them all (nothing changes here)
    seen: list[str] = []
    for hold in list(holds)[:MAX_HOLDS]:
        if hold.pods <= 0 or hold.gpus_per_pod <= 0:
            continue
        left = hold.pods
        for node in _chain(seen, ordered):
            if left <= 0:
                break
            if node in taken or state.topology.nodes[node].allocatable.get(GPU, 0) < hold.gpus_per_pod:
                continue
            pods = min(state.topology.nodes[node].allocatable.get(GPU, 0) // hold.gpus_per_pod, left)
            left -= pods
            taken.add(node)
            if hold.job_id == placing:
                continue
            keep = min(state.free[node].get(GPU, 0), pods * hold.gpus_per_pod)
            if keep > 0:
                out[node] = {GPU: keep}
                if (shares := min(state.free[node].get(SHARE, 0), keep * WHOLE)) > 0:
                    out[node][SHARE] = shares
    return out


def _chain(seen: list[str], rest: Iterator[str]) -> Iterator[str]:
    """The nodes read so far, then on into the rest, keeping what is read for the next hold."""
    yield from seen
    for node in rest:
        seen.append(node)
        yield node


def holds_from(message: Iterable[object]) -> list[Hold]:
    """The holds of a heartbeat acknowledgement, bounded (the server's, but a bound costs nothing)."""
    return [Hold(h.job_id[:253], max(0, min(h.pods, 100_000)), max(0, min(h.gpus_per_pod, 1_024)))  # type: ignore[attr-defined]
            for h in list(message)[:MAX_HOLDS]]
