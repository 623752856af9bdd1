"""Issue 43 (1): a change of a gang's pods booked on the agent's cluster state as one, kept or undone as one."""

from __future__ import annotations

import copy

import pytest

from member_agent.booking import Booking
from member_agent.clusters import tree
from member_agent.placement import PodPlacement
from member_agent.simulated import load_cluster

GPU = "nvidia.com/gpu"
REQUESTS = {"worker": {GPU: 4, "cpu": 8_000}}


def snapshot(state):  # type: ignore[no-untyped-def]
    return copy.deepcopy((state.free, state.domain_free, {r: a for r, a in state.used.items() if a}))


def pods(*nodes: str) -> list[PodPlacement]:
    return [PodPlacement("worker", i, node) for i, node in enumerate(nodes)]


def test_a_booking_is_kept_or_undone_as_one() -> None:
    state = load_cluster(tree("n", [1, 2], {GPU: "8", "cpu": "64"}))
    before = snapshot(state)
    booking = Booking(state, REQUESTS, gang=2).book(pods("n0-0", "n0-1"))
    assert state.free["n0-0"][GPU] == 4 and state.free["n0-1"][GPU] == 4  # seen at once by any placement
    booking.discard()
    assert snapshot(state) == before
    Booking(state, REQUESTS, gang=2).book(pods("n0-0", "n0-1")).commit()
    kept = snapshot(state)
    assert state.used[GPU] == 8
    # A trial: the old pods given back for the length of a `with` block, then as they were, even on an error.
    with Booking(state, REQUESTS).free(pods("n0-0")):
        assert state.free["n0-0"][GPU] == 8
    assert snapshot(state) == kept
    with pytest.raises(RuntimeError), Booking(state, REQUESTS).free(pods("n0-0")).book(pods("n0-1")):
        assert state.free["n0-1"][GPU] == 0
        raise RuntimeError("a placement failed")
    assert snapshot(state) == kept
