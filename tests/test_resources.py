import pytest

from federation.kernel.resources import QuantityError, format_amount, parse_amount, parse_resources


@pytest.mark.parametrize(("resource", "quantity", "amount"), [
    ("cpu", "500m", 500), ("cpu", "2", 2000), ("cpu", "0.25", 250), ("memory", "64Gi", 64 * 2**30),
    ("memory", "1G", 10**9), ("nvidia.com/gpu", "8", 8), ("nvidia.com/gpu", 8, 8), ("memory", "1.5Gi", 3 * 2**29),
])
def test_parse(resource: str, quantity: str, amount: int) -> None:
    assert parse_amount(resource, quantity) == amount


@pytest.mark.parametrize(("resource", "quantity", "message"), [
    ("cpu", "abc", "not a valid quantity"), ("nvidia.com/gpu", "0.5", "finer than 1"),
    ("cpu", "0.0001", "finer than 1m"), ("memory", "-1Gi", "negative"), ("cpu", "", "not a valid quantity"),
])
def test_parse_rejects(resource: str, quantity: str, message: str) -> None:
    with pytest.raises(QuantityError, match=message):
        parse_amount(resource, quantity)


@pytest.mark.parametrize(("resource", "amount", "text"), [
    ("cpu", 500, "500m"), ("cpu", 3000, "3"), ("memory", 64 * 2**30, "64Gi"), ("memory", 1000, "1000"),
    ("nvidia.com/gpu", 8, "8"), ("hugepages-2Mi", 2**21, "2Mi"),
])
def test_format_round_trips(resource: str, amount: int, text: str) -> None:
    assert format_amount(resource, amount) == text
    assert parse_amount(resource, text) == amount


def test_zero_amounts_are_dropped() -> None:
    assert parse_resources({"cpu": "0", "nvidia.com/gpu": "2"}) == {"nvidia.com/gpu": 2}
