"""Expected start times: the forward simulation books each waiting job at the earliest room it has."""

import pytest

from federation.scheduling.fit import ClusterView
from federation.scheduling.forecast import GRID, HORIZON, Holding, Start, Waiting, after_cycle, expected_starts

GPU = "nvidia.com/gpu"
HOUR = 3600.0


def _grid_after(seconds: float) -> float:
    """The first grid point at or after `seconds`: where the forecast rounds an end up to."""
    return float(next(t for t in GRID if t >= seconds))


def test_a_job_that_fits_now_starts_now() -> None:
    starts = expected_starts([ClusterView("a", {}, {GPU: 8})], [], [Waiting("j", {GPU: 8}, HOUR)])
    assert starts["j"].seconds == 0 and starts["j"].cluster == "a"


def test_a_job_starts_when_the_gang_holding_its_room_is_expected_to_end() -> None:
    clusters = [ClusterView("a", {}, {GPU: 0}), ClusterView("b", {}, {GPU: 4})]
    holding = [Holding("a", {GPU: 8}, 2 * HOUR), Holding("b", {GPU: 4}, 5 * HOUR)]
    starts = expected_starts(clusters, holding, [Waiting("j", {GPU: 8}, HOUR)])
    assert starts["j"].cluster == "a"
    assert starts["j"].seconds == _grid_after(2 * HOUR)
    assert 2 * HOUR <= starts["j"].seconds < 2.2 * HOUR


def test_what_a_cycle_sent_is_off_its_cluster_until_it_is_expected_to_end() -> None:
    """The cycle read `a` with 8 GPUs free and sent a 2-hour job there: the next 8-GPU job waits for it, on `a`,
    rather than starting at once on room already taken (or on `b`, which frees only later)."""
    clusters = [ClusterView("a", {}, {GPU: 8}), ClusterView("b", {}, {GPU: 0})]
    starts = after_cycle(clusters, [Holding("a", {GPU: 8}, 2 * HOUR)], [Holding("b", {GPU: 8}, 3 * HOUR)],
                         [Waiting("j", {GPU: 8}, HOUR)])
    assert starts["j"] == Start(_grid_after(2 * HOUR), "a")


def test_jobs_queue_behind_each_other_and_a_short_one_backfills_without_delaying_them() -> None:
    clusters = [ClusterView("a", {}, {GPU: 2})]
    holding = [Holding("a", {GPU: 6}, HOUR)]
    waiting = [Waiting("first", {GPU: 8}, 3 * HOUR), Waiting("second", {GPU: 8}, HOUR),
               Waiting("short", {GPU: 2}, 10 * 60.0), Waiting("long", {GPU: 2}, 10 * HOUR)]
    starts = expected_starts(clusters, holding, waiting)
    assert starts["first"].seconds == _grid_after(HOUR)
    assert starts["second"].seconds >= starts["first"].seconds + 3 * HOUR  # after the first has run
    assert starts["short"].seconds == 0  # done before the first needs the room
    assert starts["long"].seconds >= starts["second"].seconds + HOUR  # would delay both: goes after them


def test_only_clusters_the_selector_admits_and_room_that_never_comes_gives_no_estimate() -> None:
    clusters = [ClusterView("a", {"gpu": "h100"}, {GPU: 0}), ClusterView("b", {"gpu": "a100"}, {GPU: 8})]
    holding = [Holding("a", {GPU: 8}, HOUR)]
    waiting = [Waiting("h100", {GPU: 8}, HOUR, {"gpu": "h100"}), Waiting("huge", {GPU: 64}, HOUR),
               Waiting("unknown", {"example.com/fpga": 1}, HOUR)]
    starts = expected_starts(clusters, holding, waiting)
    assert starts["h100"].cluster == "a" and starts["h100"].seconds == _grid_after(HOUR)
    assert "huge" not in starts and "unknown" not in starts


def test_no_ready_cluster_gives_no_estimate() -> None:
    assert expected_starts([], [Holding("gone", {GPU: 8}, HOUR)], [Waiting("j", {GPU: 8}, HOUR)]) == {}


def test_a_start_past_the_horizon_is_reported_as_the_horizon() -> None:
    starts = expected_starts([ClusterView("a", {}, {GPU: 0})], [Holding("a", {GPU: 8}, 2 * HORIZON)],
                             [Waiting("j", {GPU: 8}, HOUR)])
    assert starts["j"].seconds == pytest.approx(HORIZON)
