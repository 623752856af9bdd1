"""Deserved shares: hierarchical water-filling over tenants, then each tenant's queues.

Pure. At each level and for each resource, every member first gets its guarantee (when it has
demand), then what is left flows to the members still hungry in proportion to their weights,
never past a member's cap (the smaller of its limit and its demand). What one member cannot use
flows on to the others, round after round, until nothing is left or nobody is hungry. When
guarantees alone exceed the capacity, they are scaled down together. A member with a lending limit
(Kueue's `lendingLimit`) lends at most that much of its unused guarantee: the rest of it is kept
back, so it is not shared out to the others at that level (`kept_back`).

A queue's or tenant's *dominant share* is the largest, over resources, of usage / deserved: how
far it is into what it deserves (DRF, measured against the deserved share so weights, guarantees
and limits all count). Its *excess* is the largest, over resources, of (usage - deserved) / what its
level shares out: how far past its share it is, in a unit common to all members of the level.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from federation.scheduling import native

EPSILON = 1e-9


@dataclass(frozen=True)
class Claim:
    """One member of a level: its weight, guarantee, limit (absent = unlimited), demand and lending limit (the
    most of its unused guarantee others at its level may use; a resource absent = all of it)."""

    name: str
    weight: float = 1.0
    guarantee: Mapping[str, int] = field(default_factory=dict)
    limit: Mapping[str, int] | None = None
    demand: Mapping[str, int] = field(default_factory=dict)
    lending_limit: Mapping[str, int] = field(default_factory=dict)


def kept_back(guarantee: Mapping[str, int], lending_limit: Mapping[str, int]) -> dict[str, int]:
    """The part of a guarantee never lent: guarantee less lending limit, for each resource that has both."""
    return {r: guarantee.get(r, 0) - lent for r, lent in lending_limit.items() if guarantee.get(r, 0) > lent}


def _cap(claim: Claim, resource: str) -> float:
    demand = float(claim.demand.get(resource, 0))
    if claim.limit is not None and resource in claim.limit:
        return min(demand, float(claim.limit[resource]))
    return demand


def water_fill(total: float, claims: Sequence[tuple[float, float, float]]) -> list[float]:
    """Share `total` among (weight, guarantee, cap) claims; returns each one's share."""
    shares = [min(g, c) for _, g, c in claims]
    floor = sum(shares)
    if floor > total + EPSILON:  # guarantees over-subscribed: scale them down together
        return [s * total / floor for s in shares]
    left = total - floor
    hungry = [i for i, (_, _, c) in enumerate(claims) if shares[i] < c - EPSILON]
    while left > EPSILON and hungry:
        weights = sum(claims[i][0] for i in hungry)
        if weights <= 0:
            break
        given = 0.0
        for i in hungry:
            offer = left * claims[i][0] / weights
            take = min(offer, claims[i][2] - shares[i])
            shares[i] += take
            given += take
        left -= given
        hungry = [i for i in hungry if shares[i] < claims[i][2] - EPSILON]
        if given <= EPSILON:
            break
    return shares


def deserved(total: Mapping[str, int], claims: Sequence[Claim]) -> dict[str, dict[str, float]]:
    """Each claim's deserved amount of every resource of `total`. What a member keeps back of its guarantee and
    does not use (its demand is less) is taken off `total` first: nobody else at the level may have it."""
    out: dict[str, dict[str, float]] = {c.name: {} for c in claims}
    kept = [kept_back(c.guarantee, c.lending_limit) if c.lending_limit else {} for c in claims]
    for resource, amount in total.items():
        idle = sum(max(0.0, k.get(resource, 0) - _cap(c, resource)) for c, k in zip(claims, kept, strict=True))
        shares = water_fill(max(0.0, float(amount) - idle),
                            [(c.weight, float(c.guarantee.get(resource, 0)), _cap(c, resource)) for c in claims])
        for claim, share in zip(claims, shares, strict=True):
            out[claim.name][resource] = share
    return out


@dataclass(frozen=True)
class Tree:
    """Deserved shares of tenants and of queues (queue names are global)."""

    tenants: dict[str, dict[str, float]]
    queues: dict[str, dict[str, float]]


def hierarchical(total: Mapping[str, int], tenants: Sequence[Claim], queues_of: Mapping[str, Sequence[Claim]],
                 children_of: Mapping[str, Sequence[Claim]] | None = None) -> Tree:
    """Tenants share the federation; each tenant's top queues share what the tenant deserves, and each parent
    queue's children share what it deserves (Volcano's hierarchical queues), as deep as the tree goes.

    A member's demand is what its children could use added up: each child's demand, capped by its limit
    (a parent's own claim demand is ignored), so nobody is given what none of its children may take.

    Compiled where `make` built native/ (every cycle shares out again: a few thousand calls of a few steps each,
    about 6 % of a steady cycle), else `hierarchical_in_python`, the oracle, which also answers what the compiled one
    declines. Names are unique at each level, as the admin API keeps them.
    """
    compiled = getattr(native.compiled, "hierarchical", None)  # None too in a build of native/ from before it
    if compiled is not None and isinstance(total, dict) and isinstance(queues_of, dict) and \
            (children_of is None or isinstance(children_of, dict)) and \
            (found := compiled(total, list(tenants), queues_of, children_of)) is not None:
        return Tree(*found)
    return hierarchical_in_python(total, tenants, queues_of, children_of)


def hierarchical_in_python(total: Mapping[str, int], tenants: Sequence[Claim],
                           queues_of: Mapping[str, Sequence[Claim]],
                           children_of: Mapping[str, Sequence[Claim]] | None = None) -> Tree:
    """`hierarchical`, step by step."""
    out = _ShareOut(children_of or {})
    tenant_claims = [out.with_demand(t, queues_of.get(t.name, ())) for t in tenants]
    tenant_shares = deserved(total, tenant_claims)
    for t in tenant_claims:
        out.share_out(tenant_shares[t.name], queues_of.get(t.name, ()))
    return Tree(tenant_shares, out.queue_shares)


class _ShareOut:
    """One share-out down the queue tree: each queue's claim with its children's demand is worked out once. A class,
    not nested functions: recursive closures are reference cycles, freed only by a full collection."""

    def __init__(self, children_of: Mapping[str, Sequence[Claim]]) -> None:
        self.children_of = children_of
        self.settled: dict[str, Claim] = {}  # queue -> its claim with the demand of its children
        self.queue_shares: dict[str, dict[str, float]] = {}

    def with_demand(self, claim: Claim, children: Sequence[Claim]) -> Claim:
        if not children:
            return claim
        demand: dict[str, int] = {}
        for child in map(self.queue_claim, children):
            for r in child.demand:
                demand[r] = demand.get(r, 0) + round(_cap(child, r))
        return Claim(claim.name, claim.weight, claim.guarantee, claim.limit, demand, claim.lending_limit)

    def queue_claim(self, claim: Claim) -> Claim:
        if claim.name not in self.settled:
            self.settled[claim.name] = self.with_demand(claim, self.children_of.get(claim.name, ()))
        return self.settled[claim.name]

    def share_out(self, have: Mapping[str, float], children: Sequence[Claim]) -> None:
        if not children:
            return
        claims = [self.queue_claim(c) for c in children]
        shares = deserved({r: round(a) for r, a in have.items()}, claims)
        self.queue_shares.update(shares)
        for child in claims:
            self.share_out(shares[child.name], self.children_of.get(child.name, ()))


def dominant_share(usage: Mapping[str, float], deserved_share: Mapping[str, float],
                   extra: Mapping[str, int] | None = None) -> float:
    """Largest over resources of (usage + extra) / deserved; using what one does not deserve is infinite."""
    share = 0.0
    for resource, used in _summed(usage, extra):
        if used <= 0:
            continue
        have = deserved_share.get(resource, 0.0)
        if have <= EPSILON:
            return float("inf")
        if used / have > share:
            share = used / have
    return share


def compiled_dominant_share() -> Callable[..., float]:
    """`dominant_share`, compiled where `make` built native/ (native/src/order.rs; the ledger asks a few thousand
    times a cycle), the Python function answering what it declines and its oracle (tests/test_native_order.py)."""
    return native.or_python("dominant_share", dominant_share)


def keeps_share(usage: Mapping[str, int], deserved_share: Mapping[str, float], taken: Mapping[str, int]) -> bool:
    """Whether `usage` less `taken` is still at or above the deserved share (`dominant_share` of it at least 1):
    asked for every gang reclaim looks at, so without building the difference."""
    for resource, used in usage.items():
        used -= taken.get(resource, 0)
        if used <= 0:
            continue
        have = deserved_share.get(resource, 0.0)
        if have <= EPSILON or used / have >= 1.0 - EPSILON:
            return True
    return False


def _summed(usage: Mapping[str, float], extra: Mapping[str, int] | None) -> list[tuple[str, float]]:
    """(resource, usage + extra) over both; asked for millions of times a cycle, so without building sets."""
    if not extra:
        return list(usage.items())
    out = [(r, a + usage.get(r, 0)) for r, a in extra.items()]
    out += [(r, a) for r, a in usage.items() if r not in extra]
    return out


def excess(usage: Mapping[str, float], deserved_share: Mapping[str, float], level: Mapping[str, float],
           extra: Mapping[str, int] | None = None) -> float:
    """Largest over resources of (usage + extra - deserved) / level: members of one level compared by how
    much of it they would hold past their share, so the smallest overshoot is served first (absolute, where
    a dominant share's ratio would let a member deserving little overshoot by more than a job)."""
    worst = float("-inf")
    for resource, used in _summed(usage, extra):
        if used <= 0:
            continue
        over = used - deserved_share.get(resource, 0.0)
        total = level.get(resource, 0.0)
        worst = max(worst, over / total if total > EPSILON else (float("inf") if over > EPSILON else 0.0))
    return worst
