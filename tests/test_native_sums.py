"""Differential property: the compiled `summed_by` (native/) adds up exactly as the Python one, its oracle: the same
keys in the same order, the same resources in each sum in the same order (one named at 0 included), the same
totals; and it leaves to the Python one what it does not add up itself."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling import native
from federation.scheduling.model import summed_by, summed_in_python

RESOURCES = ["nvidia.com/gpu", "cpu", "memory", "nvidia.com/mig-1g.10gb", "flavor/a100:nvidia.com/gpu"]
KEYS = st.sampled_from(["q1", "q2", "q3"]) | st.tuples(st.sampled_from(["c1", "c2"]), st.sampled_from(["q1", "q2"]))
AMOUNTS = st.dictionaries(st.sampled_from(RESOURCES), st.integers(-(2 ** 40), 2 ** 40), max_size=4)


def test_the_compiled_sums_are_built() -> None:
    assert native.compiled is not None and hasattr(native.compiled, "summed_by")


def _exactly(a: dict, b: dict) -> bool:
    """Every key and resource in order, with its total: equal dicts in another order are not the same answer."""
    return [(k, list(v.items())) for k, v in a.items()] == [(k, list(v.items())) for k, v in b.items()]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(KEYS, AMOUNTS), max_size=60))
def test_the_compiled_sums_are_the_python_ones(pairs: list[tuple[object, dict[str, int]]]) -> None:
    keys, amounts = [k for k, _ in pairs], [a for _, a in pairs]
    given_amounts = [dict(a) for a in amounts]
    assert native.compiled is not None
    compiled = native.compiled.summed_by(keys, amounts)
    assert compiled is not None
    assert _exactly(compiled, summed_in_python(keys, amounts))
    assert amounts == given_amounts  # what it was given is left as it was


def test_what_the_compiled_sums_cannot_add_is_left_to_the_python_ones() -> None:
    assert native.compiled is not None
    for keys, amounts in ((["q1", "q1"], [{"cpu": 2 ** 62}, {"cpu": 2 ** 62}]),  # past 64 bits
                          (["q1"], [{"cpu": 2 ** 70}]),
                          (["q1", "q2"], [{"cpu": 1}, {"cpu": 0.5}])):
        assert native.compiled.summed_by(keys, amounts) is None
        assert _exactly(summed_by(keys, amounts), summed_in_python(keys, amounts))
