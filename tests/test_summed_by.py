"""Adding up running gangs per key in one pass (`scheduling.model.summed_by`) gives what adding them one by one does:
the cycle's setup, the in-flight room and the drift check read these sums."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from federation.scheduling.model import add_into, summed_by

RESOURCES = ["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-1g.10gb"]
amount = st.integers(-10, 10**6)
requests = st.dictionaries(st.sampled_from(RESOURCES), amount, max_size=4)


def _one_by_one(keys: list[object], amounts: list[dict[str, int]]) -> dict[object, dict[str, int]]:
    out: dict[object, dict[str, int]] = {}
    for key, request in zip(keys, amounts, strict=True):
        add_into(out.setdefault(key, {}), request)
    return out


@given(st.lists(st.tuples(st.sampled_from(["q1", "q2", ("c1", "q1"), ("c2", "q3")]), requests), max_size=60))
def test_sums_per_key_equal_adding_one_by_one(gangs: list[tuple[object, dict[str, int]]]) -> None:
    keys = [key for key, _ in gangs]
    amounts = [request for _, request in gangs]
    summed = summed_by(keys, amounts)
    assert summed == _one_by_one(keys, amounts)  # a resource named at 0 is in its key's sum too
    assert all(type(a) is int for sums in summed.values() for a in sums.values())

