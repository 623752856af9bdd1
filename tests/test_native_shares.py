"""Differential property: the compiled deserved shares (native/) are the Python ones, their oracle, float for float:
every tenant and queue in the same order, each resource in the same order with the same share; and the compiled
function leaves to the Python one what it does not work out itself."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling import native
from federation.scheduling.fairshare import Claim, Tree, hierarchical, hierarchical_in_python

RESOURCES = ["nvidia.com/gpu", "cpu", "memory", "flavor/a100:nvidia.com/gpu"]
AMOUNTS = st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 5000), max_size=4)
WEIGHTS = st.sampled_from([1, 2, 3]) | st.floats(0.0, 8.0)


@st.composite
def claims(draw: st.DrawFn, name: str) -> Claim:
    return Claim(name, draw(WEIGHTS), draw(AMOUNTS), draw(st.none() | AMOUNTS), draw(AMOUNTS),
                 draw(st.just({}) | AMOUNTS))


@st.composite
def trees(draw: st.DrawFn) -> tuple[dict[str, int], list[Claim], dict[str, list[Claim]], dict[str, list[Claim]]]:
    """A federation's total, its tenants, each tenant's top queues, and parent queues' children (names unique)."""
    total = draw(st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 20_000), max_size=4))
    tenants = [draw(claims(f"t{i}")) for i in range(draw(st.integers(0, 5)))]
    queues_of: dict[str, list[Claim]] = {}
    children_of: dict[str, list[Claim]] = {}
    made = 0

    def queue() -> Claim:
        nonlocal made
        made += 1
        return draw(claims(f"q{made}"))

    for tenant in tenants:
        top = queues_of[tenant.name] = [queue() for _ in range(draw(st.integers(0, 4)))]
        for parent in top:  # parent queues' children, two levels down at most
            children = [queue() for _ in range(draw(st.integers(0, 3)))]
            if children:
                children_of[parent.name] = children
            for child in children:
                if grandchildren := [queue() for _ in range(draw(st.integers(0, 2)))]:
                    children_of[child.name] = grandchildren
    return total, tenants, queues_of, children_of


def _exactly(tree: Tree) -> list[object]:
    """Every member and resource in order with its share: equal dicts in another order are not the same answer."""
    return [[(k, list(v.items())) for k, v in level.items()] for level in (tree.tenants, tree.queues)]


def test_the_compiled_shares_are_built() -> None:
    assert native.compiled is not None and hasattr(native.compiled, "hierarchical")


@settings(max_examples=600, deadline=None)
@given(trees())
def test_the_compiled_shares_are_the_python_ones(
        tree: tuple[dict[str, int], list[Claim], dict[str, list[Claim]], dict[str, list[Claim]]]) -> None:
    total, tenants, queues_of, children_of = tree
    assert native.compiled is not None
    found = native.compiled.hierarchical(total, tenants, queues_of, children_of)
    assert found is not None
    assert _exactly(Tree(*found)) == _exactly(hierarchical_in_python(total, tenants, queues_of, children_of))
    assert _exactly(hierarchical(total, tenants, queues_of, children_of)) == _exactly(Tree(*found))


def test_what_the_compiled_shares_cannot_work_out_is_left_to_the_python_ones() -> None:
    assert native.compiled is not None
    tenants = [Claim("t", guarantee={"cpu": 1})]
    for total, queues_of in (({"cpu": 2 ** 70}, {}),  # past 64 bits
                             ({"cpu": 0.5}, {}),  # not a whole amount
                             ({"cpu": 8}, {"t": [Claim("q", demand={"cpu": 1.5})]})):
        assert native.compiled.hierarchical(total, tenants, queues_of) is None
        assert _exactly(hierarchical(total, tenants, queues_of)) == \
            _exactly(hierarchical_in_python(total, tenants, queues_of))
