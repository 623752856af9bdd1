"""Resource quantities: Kubernetes quantity strings at the edges, canonical integers inside.

Users type quantities the Kubernetes way ("500m", "64Gi", "8"). They are parsed once, at the
edge, into integers so that the scheduler only ever adds and compares ints: cpu in millicores
(the finest unit Kubernetes accepts), every other resource in its base unit, which must then be
whole (half a GPU or half a byte is a typo, not a request).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping

CPU = "cpu"
GPU = "nvidia.com/gpu"
# Thousandths of GPU devices, whole and fractional together: what quotas and fair shares count GPUs in beside `GPU`
# (whole devices), so that a queue's share of fractional GPUs is exact; a member agent books it on a node's devices.
# People see it as fractional `GPU` (`format_resources`).
SHARE = "gpu-share.federation.dev/thousandths"
WHOLE = 1000  # a device, in SHARE
MIG_PROFILE = "nvidia.com/mig-"  # NVIDIA's device plugin, mixed strategy: a MIG profile's slices (mig-1g.10gb)
_BYTE_RESOURCES = ("memory", "ephemeral-storage")
_BINARY_SUFFIXES = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))

Resources = dict[str, int]
FLAVOR = "@"  # "nvidia.com/gpu@h100": that resource on the clusters of flavor h100 (quotas and shares only)


def base(resource: str) -> str:
    """The resource a (possibly flavored) name is of."""
    return resource.partition(FLAVOR)[0]


def with_share(amounts: Mapping[str, int]) -> Resources:
    """`amounts` with a `SHARE` beside each (flavored) `GPU` amount that has none: quotas are written in whole GPUs,
    and inventories from agents that do not book devices, or jobs stored before shares were counted, hold whole
    GPUs only."""
    missing = {f"{SHARE}{sep}{flavor}": amount * WHOLE for name, amount in amounts.items()
               for resource, sep, flavor in [name.partition(FLAVOR)]
               if resource == GPU and f"{SHARE}{sep}{flavor}" not in amounts}
    if not missing:  # what agents report and jobs store now: no copy (inventories are read every cycle)
        return amounts if isinstance(amounts, dict) else dict(amounts)
    return {**amounts, **missing}


class QuantityError(ValueError):
    """A quantity string that does not parse or is not a whole amount of its resource."""


# Kubernetes' quantity grammar (apimachinery's resource.Quantity), ASCII digits only, with the exponent
# bounded: "1e1000000" is a valid quantity there, and a Decimal that size costs seconds to handle.
_QUANTITY = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
                       r"(?:[eE][+-]?[0-9]{1,2}|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$")
MAX_QUANTITY_CHARS = 40
MAX_AMOUNT = 2**53  # canonical units; larger sums would lose precision in JSON and overflow the scheduler's arrays


@functools.lru_cache(maxsize=65_536, typed=True)
def parse_amount(resource: str, quantity: str | int | float) -> int:
    """Parse one quantity into the canonical integer for `resource`, in time bounded by its length. Remembered:
    a batch of jobs, and every job the scheduler reads, repeats the same few quantities."""
    resource = base(resource)
    text = str(quantity)
    if isinstance(quantity, bool) or len(text) > MAX_QUANTITY_CHARS or not _QUANTITY.match(text):
        raise QuantityError(f"{text[:MAX_QUANTITY_CHARS]!r} is not a valid quantity")
    from kubernetes.utils.quantity import parse_quantity  # on first use: the package takes 0.2-0.5 s to import

    try:
        value = parse_quantity(text)
    except (ValueError, TypeError) as err:
        raise QuantityError(f"{quantity!r} is not a valid quantity") from err
    if value < 0:
        raise QuantityError(f"{quantity!r} must not be negative")
    if resource in (CPU, SHARE):  # both in thousandths: millicores, and GPUs as shares
        value *= 1000
        unit = "1m"
    else:
        unit = "1"
    if value != value.to_integral_value():
        raise QuantityError(f"{quantity!r} is finer than {unit} of {resource}")
    if value > MAX_AMOUNT:
        raise QuantityError(f"{text!r} is more of {resource} than any cluster has (at most {MAX_AMOUNT})")
    return int(value)


def parse_resources(quantities: Mapping[str, str]) -> Resources:
    """Parse a map of quantity strings; zero amounts are dropped."""
    parsed = {name: parse_amount(name, q) for name, q in quantities.items()}
    return {name: amount for name, amount in parsed.items() if amount}


def parse_shown(resource: str, quantity: str) -> int:
    """An amount as `format_resources` shows it, back in canonical units: GPUs (maybe fractional) in `SHARE`."""
    return parse_amount(SHARE if base(resource) == GPU else resource, quantity)


def format_shown(resource: str, amount: int) -> str:
    """`parse_shown`'s amount as `format_resources` shows it."""
    return format_amount(SHARE if base(resource) == GPU else resource, amount)


def _is_bytes(resource: str) -> bool:
    return resource in _BYTE_RESOURCES or resource.startswith("hugepages-")


def format_amount(resource: str, amount: int) -> str:
    """The shortest exact quantity string for a canonical amount."""
    resource = base(resource)
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if resource == SHARE:  # as GPUs
        sign, amount = ("-", -amount) if amount < 0 else ("", amount)
        return sign + f"{amount // WHOLE}.{amount % WHOLE:03d}".rstrip("0").rstrip(".")
    if _is_bytes(resource) and amount:
        for suffix, size in _BINARY_SUFFIXES:
            if amount % size == 0:
                return f"{amount // size}{suffix}"
    return str(amount)


def format_resources(amounts: Mapping[str, int]) -> dict[str, str]:
    """For people: every amount as a quantity, with GPU shares shown as the (fractional) GPUs they are, in place of
    the whole devices beside them ("nvidia.com/gpu": "2.5")."""
    out = {name: format_amount(name, amount) for name, amount in amounts.items() if base(name) != SHARE}
    for name, amount in amounts.items():
        if base(name) == SHARE:
            out[GPU + name[len(SHARE):]] = format_amount(name, amount)
    return dict(sorted(out.items()))


def add(a: Mapping[str, int], b: Mapping[str, int], times: int = 1) -> Resources:
    out = dict(a)
    for name, amount in b.items():
        out[name] = out.get(name, 0) + amount * times
    return out


def total(requests: Iterable[tuple[Mapping[str, int], int]]) -> Resources:
    """Sum of (per-replica request, replicas) pairs."""
    out: Resources = {}
    for request, replicas in requests:
        out = add(out, request, replicas)
    return out
