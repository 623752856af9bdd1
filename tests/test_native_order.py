"""Differential property: one level of a queue head's fair-share key and a dominant share, compiled
(native/src/order.rs), are the Python `ordering._level` and `fairshare.dominant_share`, their oracles, float for float
(infinities and the sign of a zero included); they decline (None) only what they document, and a cycle using them
decides as one using the Python functions."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling import fairshare, ledger, native, ordering
from federation.scheduling.cycle import schedule
from federation.scheduling.fairshare import dominant_share
from federation.scheduling.ordering import _level
from tests.test_queue_manager_property import World, same

RESOURCES = ["nvidia.com/gpu", "cpu", "memory", "example.com/fpga"]
EXACT = 2**53
SMALL = st.integers(-50, 5_000)
# Amounts as the ledger holds them: mostly whole numbers, floats where past usage is counted in, now and then one too
# large for a float to hold exactly (which the compiled function must leave to Python).
USED = st.one_of(SMALL, SMALL, st.floats(-10.0, 5_000.0, allow_nan=False), st.integers(EXACT - 3, EXACT + 3))
SHARE = st.one_of(st.floats(0.0, 6_000.0, allow_nan=False), st.sampled_from([0.0, 1e-10, 1e-9, 2e-9]), SMALL)
WANTED = st.one_of(st.integers(0, 512), st.integers(0, 512), st.integers(EXACT - 600, EXACT))


def test_the_compiled_level_is_built() -> None:
    assert getattr(native.compiled, "order_level", None) is not None
    assert ordering.compiled_level() is not ordering._level
    assert getattr(native.compiled, "dominant_share", None) is not None
    assert fairshare.compiled_dominant_share() is not dominant_share


def _exact(found: tuple[bool, float, float]) -> tuple[bool, str, str]:
    return found[0], repr(found[1]), repr(found[2])


@settings(max_examples=2_000, deadline=None)
@given(st.dictionaries(st.sampled_from(RESOURCES), USED, max_size=4),
       st.dictionaries(st.sampled_from(RESOURCES), SHARE, max_size=4),
       st.dictionaries(st.sampled_from(RESOURCES), SHARE, max_size=4),
       st.dictionaries(st.sampled_from(RESOURCES), WANTED, max_size=4))
def test_compiled_level_is_the_python_one(usage: dict[str, float], share: dict[str, float], level: dict[str, float],
                                          wanted: dict[str, int]) -> None:
    half = {r: a // 2 for r, a in wanted.items()}
    assert native.compiled is not None
    found = native.compiled.order_level(usage, share, level, wanted, half)
    expected = _level(usage, share, level, wanted, half)
    small = all(isinstance(a, float) or abs(a) < 2**40 for d in (usage, share, level, wanted) for a in d.values())
    if small:
        assert found is not None  # declines nothing a federation's usage and shares are made of
    if found is not None:
        assert _exact(found) == _exact(expected)
    assert _exact(ordering.compiled_level()(usage, share, level, wanted, half)) == _exact(expected)


@settings(max_examples=2_000, deadline=None)
@given(st.dictionaries(st.sampled_from(RESOURCES), USED, max_size=4),
       st.dictionaries(st.sampled_from(RESOURCES), SHARE, max_size=4),
       st.none() | st.dictionaries(st.sampled_from(RESOURCES), WANTED, max_size=4))
def test_compiled_dominant_share_is_the_python_one(usage: dict[str, float], deserved: dict[str, float],
                                                   extra: dict[str, int] | None) -> None:
    assert native.compiled is not None
    found = native.compiled.dominant_share(usage, deserved, extra)
    expected = dominant_share(usage, deserved, extra)
    if all(isinstance(a, float) or abs(a) < 2**40 for d in (usage, deserved, extra or {}) for a in d.values()):
        assert found is not None
    if found is not None:
        assert repr(found) == repr(expected)
    assert repr(fairshare.compiled_dominant_share()(usage, deserved, extra)) == repr(expected)


def test_what_is_not_a_dict_of_numbers_is_left_to_python() -> None:
    assert native.compiled is not None
    level = native.compiled.order_level
    assert level({"cpu": "3"}, {"cpu": 1.0}, {}, {}, {}) is None
    assert level({"cpu": 3}, {"cpu": 1.0}, {}, {"cpu": 2}, [1]) is None
    assert level({"cpu": 3}, {"cpu": 1.0}, {}, {"cpu": 2}, {}) is None  # no half of the request: Python's KeyError
    assert level({"cpu": EXACT}, {"cpu": 1.0}, {}, {}, {}) is None
    assert level({"cpu": 3}, {"cpu": 1.0}, {"cpu": 10}, {"cpu": 2}, {"cpu": 1}) == _level(
        {"cpu": 3}, {"cpu": 1.0}, {"cpu": 10}, {"cpu": 2}, {"cpu": 1})
    share = native.compiled.dominant_share
    assert share({"cpu": "3"}, {"cpu": 1.0}) is None
    assert share({"cpu": 3}, {"cpu": 1.0}, [("cpu", 1)]) is None
    assert share({"cpu": 3}, {"cpu": 2.0}, {"cpu": EXACT}) is None
    assert share({"cpu": 3}, {"cpu": 2.0}, {"cpu": 1}) == 2.0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_cycle_ordered_by_the_compiled_levels_decides_as_by_the_python_ones(seed: int) -> None:
    rng = random.Random(seed)
    world = World(rng)
    world.submit(rng.randrange(5, 60))
    for step in range(8):
        for event in rng.choices(["submit", "cancel", "end", "reconfigure", "refuse"], k=rng.randrange(1, 5)):
            if event == "submit":
                world.submit(rng.randrange(1, 15))
            else:
                getattr(world, event)()
        snapshot = world.snapshot(list(world.pending.values()))
        compiled = schedule(snapshot)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ordering, "compiled_level", lambda: _level)
            patch.setattr(ledger, "compiled_dominant_share", lambda: dominant_share)
            in_python = schedule(snapshot)
        same(in_python, compiled)
        world.apply(compiled, step)
