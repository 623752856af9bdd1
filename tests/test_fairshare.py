"""Hierarchical water-filling and dominant shares."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling.fairshare import EPSILON, Claim, dominant_share, excess, hierarchical, water_fill
from federation.scheduling.ordering import _level

GPU = "nvidia.com/gpu"


def test_weights_split_what_is_left() -> None:
    assert water_fill(100, [(1, 0, 1000), (3, 0, 1000)]) == pytest.approx([25, 75])


def test_guarantees_come_first_then_weights() -> None:
    assert water_fill(100, [(1, 40, 1000), (1, 0, 1000)]) == pytest.approx([70, 30])


def test_demand_and_limit_cap_and_leftovers_flow_on() -> None:
    # the first can use only 10: the rest flows to the hungry ones by weight
    assert water_fill(100, [(1, 0, 10), (1, 0, 1000), (2, 0, 1000)]) == pytest.approx([10, 30, 60])
    assert water_fill(100, [(5, 0, 20), (1, 0, 20)]) == pytest.approx([20, 20])  # nobody hungry: 60 unused


def test_oversubscribed_guarantees_scale_down() -> None:
    assert water_fill(60, [(1, 60, 100), (1, 30, 100)]) == pytest.approx([40, 20])


def test_no_demand_no_guarantee() -> None:
    assert water_fill(100, [(1, 50, 0), (1, 0, 100)]) == pytest.approx([0, 100])


def test_hierarchy_tenants_then_queues_multi_resource() -> None:
    total = {GPU: 64, "cpu": 1000}
    tenants = [Claim("a", 1), Claim("b", 3, guarantee={GPU: 8})]
    queues = {"a": [Claim("a1", demand={GPU: 64, "cpu": 100})],
              "b": [Claim("b1", 1, demand={GPU: 64, "cpu": 900}), Claim("b2", 1, demand={GPU: 8})]}
    tree = hierarchical(total, tenants, queues)
    # GPUs: b's guarantee 8 first, then 56 split 1:3 → a 14, b 8 + 42 = 50
    assert tree.tenants["a"][GPU] == pytest.approx(14)
    assert tree.tenants["b"][GPU] == pytest.approx(50)
    # b's 50 GPUs between its queues: equal weights, b2 capped by demand 8 → b1 42
    assert tree.queues["b2"][GPU] == pytest.approx(8) and tree.queues["b1"][GPU] == pytest.approx(42)
    # cpu: a demands 100 of its 250; the rest flows to b (900 demanded)
    assert tree.tenants["a"]["cpu"] == pytest.approx(100) and tree.tenants["b"]["cpu"] == pytest.approx(900)


def test_dominant_share_is_the_largest_share_of_deserved() -> None:
    deserved_share = {GPU: 16.0, "cpu": 400.0}
    assert dominant_share({GPU: 8, "cpu": 300}, deserved_share) == pytest.approx(0.75)
    assert dominant_share({GPU: 8}, deserved_share, extra={GPU: 8}) == pytest.approx(1.0)
    assert dominant_share({"memory": 1}, deserved_share) == float("inf")
    assert dominant_share({}, deserved_share) == 0.0


_RESOURCES = st.sampled_from([GPU, "cpu", "memory", "nvidia.com/gpu-share"])
_AMOUNTS = st.dictionaries(_RESOURCES, st.integers(min_value=0, max_value=64), max_size=4)


@settings(max_examples=2000, deadline=None)
@given(usage=st.dictionaries(_RESOURCES, st.one_of(st.integers(0, 200), st.floats(0, 200)), max_size=4),
       share=st.dictionaries(_RESOURCES, st.one_of(st.just(0.0), st.floats(0, 100)), max_size=4),
       level=st.dictionaries(_RESOURCES, st.floats(0, 400), max_size=4), wanted=_AMOUNTS)
def test_a_heads_level_is_its_dominant_shares_with_the_whole_and_half_job(
        usage: dict[str, float], share: dict[str, float], level: dict[str, float], wanted: dict[str, int]) -> None:
    """The head order's one-pass level against the shares it stands for, figure for figure."""
    half = {r: a // 2 for r, a in wanted.items()}
    after = dominant_share(usage, share, wanted)
    over = after > 1 + EPSILON
    expected = (over, excess(usage, share, level, wanted) if over else dominant_share(usage, share, half), after)
    assert _level(usage, share, level, wanted, half) == expected
