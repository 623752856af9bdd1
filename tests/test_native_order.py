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
from federation.scheduling.fairshare import Tree, dominant_share
from federation.scheduling.fit import JobView
from federation.scheduling.ledger import Ledger
from federation.scheduling.model import PendingJob, QueueInfo
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
    assert ordering.compiled_keys() is not None
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
            patch.setattr(ordering, "compiled_keys", lambda: None)
            patch.setattr(ledger, "compiled_dominant_share", lambda: dominant_share)
            in_python = schedule(snapshot)
        same(in_python, compiled)
        world.apply(compiled, step)


def _keys_in_both(rng: random.Random, past: bool) -> tuple[int, int]:
    """Random tenants, queues (some under parents), shares and heads; usage changed between rounds of keys, a key
    asked of every head after each change from a compiled `HeadOrder` and a Python one over the same ledger. Equal by
    repr (bools not ints, every float bit for bit); how many keys the compiled one answered and how many it left."""
    tenants = [f"t{i}" for i in range(rng.randint(1, 4))]
    queues = [QueueInfo(f"{t}-p", t, rng.choice([0, 1])) for t in tenants if rng.random() < 0.5]
    for i in range(rng.randint(2, 9)):
        parent = rng.choice([None, *[q.name for q in queues]])
        tenant = next(q.tenant for q in queues if q.name == parent) if parent else rng.choice(tenants)
        queues.append(QueueInfo(f"q{i}", tenant, rng.choice([0, 0, 5]), parent=parent))
    infos = {q.name: q for q in queues}
    chain = {}
    for q in queues:
        chain[q.name] = [q.name] + ([q.parent] if q.parent else [])
    ledger = Ledger(infos, tenants, chain)
    amount = lambda: rng.choice([0, 1, 2, 7, 8, 33, 10**6, rng.random() * 50])  # noqa: E731
    share = lambda: {r: amount() for r in rng.sample(RESOURCES, rng.randint(0, 3))}  # noqa: E731
    ledger.shares = Tree({t: share() for t in tenants}, {q.name: share() for q in queues if rng.random() < 0.9})
    ledger.capacity = {r: float(rng.choice([0, 64, 1024])) for r in RESOURCES}
    past_tenants = {t: {RESOURCES[0]: rng.random() * 9} for t in tenants if past and rng.random() < 0.5}
    past_queues = {q.name: {RESOURCES[1]: 3.0} for q in queues if past and rng.random() < 0.3}
    asks = [{r: rng.choice([1, 2, 8, 9, 64]) for r in rng.sample(RESOURCES, rng.randint(1, 3))} for _ in range(4)]
    leaves = [q.name for q in queues if not any(o.parent == q.name for o in queues)]
    heads = {q: PendingJob(JobView(f"j-{q}", rng.choice(asks), {}), q, 0, 0) for q in leaves}
    compiled = ordering.HeadOrder(ledger, infos, past_tenants, past_queues, lambda job: job.view.request)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ordering, "compiled_keys", lambda: None)
        patch.setattr(ordering, "compiled_level", lambda: _level)
        in_python = ordering.HeadOrder(ledger, infos, past_tenants, past_queues, lambda job: job.view.request)
    answered = [0, 0]
    original = compiled._key

    def counted(queue: str, job: PendingJob) -> tuple[float, ...]:
        answered[1] += 1
        return original(queue, job)

    compiled._key = counted  # type: ignore[method-assign]
    for _ in range(12):
        for queue, head in heads.items():
            answered[0] += 1
            assert repr(compiled.key(queue, head)) == repr(in_python.key(queue, head)), (queue, head.view.request)
        for _ in range(rng.randint(0, 3)):  # gangs start and leave; a queue's head changes
            queue = rng.choice(leaves)
            ledger.use(queue, rng.choice(asks), rng.choice([1, 1, -1]))
        if rng.random() < 0.3:
            queue = rng.choice(leaves)
            heads[queue] = PendingJob(JobView(f"k-{queue}-{rng.random()}", rng.choice(asks), {}), queue, 0, 0)
    return answered[0] - answered[1], answered[1]


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.booleans())
def test_the_compiled_head_key_is_the_python_one(seed: int, past: bool) -> None:
    compiled, left = _keys_in_both(random.Random(seed), past)
    if not past:
        assert left == 0  # declines nothing without past usage and with amounts a federation holds
    assert compiled > 0 or past
