"""Differential property: the compiled cluster scores and reservations (native/table.rs) are exactly the numpy ones,
their oracle: every cluster's score bit for bit (infinite where the gang does not fit), the same cluster chosen, and
the same free room, tier maxima and healthy tier maxima after every reservation, over tables with and without
HyperNode tiers, degraded hardware, reported GPU nodes and selectors, shape after shape as gangs are reserved."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling import choice
from federation.scheduling.choice import ClusterTable
from federation.scheduling.fit import ClusterView, JobView, TierFree
from tests.test_choice import CPU, GPU, cluster, job


def test_the_compiled_table_is_built() -> None:
    assert choice.compiled_table() is not None


@st.composite
def degraded(draw: st.DrawFn, name: str) -> ClusterView:
    """A cluster as `cluster` draws it, some of whose hardware may be degraded: healthy tier maxima at or below its
    tier maxima (a tier missing among them, or none at all)."""
    view = draw(cluster(name))
    if not view.tiers or not draw(st.booleans()):
        return view
    healthy = [TierFree(t.tier, t.tier_name, {r: draw(st.integers(0, a)) for r, a in t.max_free.items()})
               for t in view.tiers if draw(st.integers(0, 4))]
    return ClusterView(view.name, view.labels, view.free, view.tiers, node_labels=view.node_labels,
                       gpu_free_nodes=view.gpu_free_nodes, healthy_tiers=healthy)


def _both(clusters: list[ClusterView]) -> tuple[ClusterTable, ClusterTable]:
    capacity = {GPU: 64 * len(clusters), CPU: 512 * len(clusters)}
    compiled, oracle = ClusterTable(clusters, capacity), ClusterTable(clusters, capacity)
    oracle.compiled = None
    return compiled, oracle


def _same_room(compiled: ClusterTable, oracle: ClusterTable) -> None:
    assert np.array_equal(compiled.free, oracle.free)
    assert np.array_equal(compiled.tiers, oracle.tiers)
    assert (compiled.healthy is None) == (oracle.healthy is None)
    if compiled.healthy is not None:
        assert np.array_equal(compiled.healthy, oracle.healthy)
    assert np.array_equal(compiled.gpu_hist, oracle.gpu_hist)


def _same_scores(compiled: ClusterTable, oracle: ClusterTable, gang: JobView) -> None:
    mine, theirs = compiled._scored(gang), oracle._scored(gang)
    assert (mine is None) == (theirs is None)
    if mine is not None:
        assert mine.tobytes() == theirs.tobytes()  # bit for bit, infinities included


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=10, unique=True).flatmap(
    lambda ids: st.tuples(*[degraded(f"c{i}") for i in ids])), st.lists(job(), min_size=1, max_size=4),
    st.lists(st.integers(0, 3), min_size=1, max_size=40))
def test_compiled_scores_and_reservations_are_the_numpy_ones(clusters: tuple[ClusterView, ...],
                                                             shapes: list[JobView], order: list[int]) -> None:
    compiled, oracle = _both(list(clusters))
    for n in order:
        gang = shapes[n % len(shapes)]
        _same_scores(compiled, oracle, gang)
        chosen = compiled.best(gang, {})  # kept scores, rescored where clusters took work
        assert chosen == oracle.best(gang, {})
        if chosen is not None:
            compiled.reserve(gang, chosen)
            oracle.reserve(gang, chosen)
            _same_room(compiled, oracle)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=2, max_size=10, unique=True).flatmap(
    lambda ids: st.tuples(*[degraded(f"c{i}") for i in ids])), job(), st.data())
def test_compiled_scores_with_refusals_and_a_passed_over_note(clusters: tuple[ClusterView, ...], gang: JobView,
                                                              data: st.DataObject) -> None:
    compiled, oracle = _both(list(clusters))
    refused = {c.name: "rejected it" for c in clusters if data.draw(st.booleans(), label=f"refuse {c.name}")}
    assert compiled.best(gang, refused) == oracle.best(gang, refused)
    chosen = oracle.best(gang, {})
    if chosen is not None:
        assert compiled.passed_over(gang, chosen) == oracle.passed_over(gang, chosen)


def test_a_table_of_another_shape_is_refused_not_read_past() -> None:
    """The compiled pass checks the arrays it is given against each other: a wrong one is an error, never memory read
    past an array's end."""
    table, _ = _both([ClusterView("a", {}, {GPU: 8, CPU: 64}, [TierFree(0, "node", {GPU: 8, CPU: 64})])])
    assert table.compiled is not None
    scores, reserve = table.compiled
    gang = JobView("j", {GPU: 2}, {GPU: 1})
    asks = table._asks(gang)
    assert asks is not None
    with pytest.raises(ValueError, match="tier table"):
        scores(np.empty(1), None, table.free, table.tiers[:, :, :1].copy(), None,
               table.selects(gang).view(np.uint8), None, 0, *asks.lists, None, 0)
    with pytest.raises(ValueError, match="past the table"):
        scores(np.empty(1), [1], table.free, table.tiers, None, table.selects(gang).view(np.uint8), None, 0,
               *asks.lists, None, 0)
    with pytest.raises(ValueError, match="does not match"):
        reserve(1, asks.request, table.free, table.tiers, None)


def test_a_table_of_no_resource_is_left_to_numpy() -> None:
    """Clusters that report no resource at all make a table without columns: numpy answers there, as before."""
    table = ClusterTable([ClusterView("a", {}, {}), ClusterView("b", {}, {})], {})
    assert table.compiled is None
    gang = JobView("j", {}, {})
    assert table.best(gang, {}) == "a"
    table.reserve(gang, "a")
    assert table.best(gang, {}) == "a"
