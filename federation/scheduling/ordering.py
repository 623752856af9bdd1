"""The fair-share order of queue heads: which queue the cycle serves next.

Heads within every share come before heads past one; among them, the queue of highest priority; then, level by
level (tenants, then a tenant's queues, then a parent queue's children), first those that stay within what they
deserve with the whole head job started, the one least far into it with half the job started first (Sainte-Laguë's
divisor: counting the whole job starves queues deserving less than one, counting none lets them take two); then
those it would take past their share, the smallest overshoot first. So no member is left a whole job short while
another is served past its share, nor served a whole job past it while another is short of it. Past usage counts
beside what is held when history is on (`usage.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from federation.kernel.resources import Resources
from federation.scheduling import native
from federation.scheduling.fairshare import EPSILON, excess
from federation.scheduling.ledger import Ledger
from federation.scheduling.model import PendingJob, QueueInfo


def _level(usage: Mapping[str, float], share: Mapping[str, float], level: Mapping[str, float],
           wanted: Mapping[str, int], half: Mapping[str, int]) -> tuple[bool, float, float]:
    """One level of a queue's key: over its share with the whole job, how far (its overshoot of what the level
    shares out if over, else its share with half the job), and its share with the whole job.

    Both shares are `dominant_share`'s, of the same resources, worked out in one pass: this is most of what ordering
    the heads costs, asked for every head and again whenever a sibling's service moves its tenant."""
    after = with_half = 0.0
    for resource, amount in wanted.items():
        used = usage.get(resource, 0)
        whole, part = used + amount, used + half[resource]
        if whole <= 0 and part <= 0:
            continue
        have = share.get(resource, 0.0)
        if have <= EPSILON:
            after = float("inf") if whole > 0 else after
            with_half = float("inf") if part > 0 else with_half
            continue
        if whole / have > after:
            after = whole / have
        if part / have > with_half:
            with_half = part / have
    for resource, used in usage.items():
        if used <= 0 or resource in wanted:
            continue
        have = share.get(resource, 0.0)
        if have <= EPSILON:
            after = with_half = float("inf")
            break
        if used / have > after:
            after = used / have
        if used / have > with_half:
            with_half = used / have
    over = after > 1 + EPSILON
    return over, excess(usage, share, level, wanted) if over else with_half, after


def compiled_level() -> Callable[..., tuple[bool, float, float]]:
    """`_level`, compiled where `make` built native/ (native/src/order.rs: the keys were about a fifth of a steady
    cycle, nearly all of it the interpreter's cost per step); the Python function answers what the compiled one
    declines, and is the oracle it is held to (tests/test_native_order.py)."""
    return native.or_python("order_level", _level)


def compiled_keys() -> Any:
    """The compiled whole key (native/src/order.rs, `HeadKeys`) while `native.compiled` is on, else None: with the
    levels compiled the keys were still a sixth of a steady cycle at 1,000 queues, the interpreter's cost of reading
    and keeping what they are made of. The Python key stays the oracle (tests/test_native_order.py) and answers what
    it declines."""
    return getattr(native.compiled, "HeadKeys", None)


def _with_past(usage: Mapping[str, int], past: Mapping[str, float] | None) -> Mapping[str, float]:
    """Usage as ordering counts it: with what the member's history adds (none: usage itself, no copy)."""
    if not past:
        return usage
    out: dict[str, float] = dict(usage)
    for r, a in past.items():
        out[r] = out.get(r, 0) + a
    return out


class HeadOrder:
    """Each queue's key for its head (the least is served first), read from the ledger as it stands."""

    def __init__(self, ledger: Ledger, queues: Mapping[str, QueueInfo], past_tenants: Mapping[str, Mapping[str, float]],
                 past_queues: Mapping[str, Mapping[str, float]], wanted: Callable[[PendingJob], Resources]) -> None:
        self.ledger = ledger
        self.queues = queues
        self.past_tenants = past_tenants
        self.past_queues = past_queues
        self.wanted = wanted
        self.depth = 1 + max((len(c) for c in ledger.chain.values()), default=0)
        self._level = compiled_level()
        self._compiled_keys = compiled_keys()
        self._compiled: Any = None  # a HeadKeys, made at the first key (the deserved shares are known by then)
        # queue -> (its chain's versions, its head, the key's queue levels, their shares after): the queue levels
        # change only when a queue of the chain is used, so they are kept for its head and those versions (a queue
        # without parents: its own version, not a tuple of one).
        self._levels: dict[str, tuple[int | tuple[int, ...], PendingJob, tuple[float, ...], tuple[float, ...]]] = {}
        # (tenant, id of what a head asks) -> (the tenant's usage version, that ask, half of it, the key's tenant
        # level): heads of a tenant's queues asking alike read it while the tenant's usage stands.
        self._tenant_levels: dict[tuple[str, int], tuple[int, Resources, dict[str, int],
                                                         tuple[bool, float, float]]] = {}

    def key(self, queue: str, job: PendingJob) -> tuple[float, ...]:
        if self._compiled_keys is not None:
            if self._compiled is None:
                self._compiled = self._compile()
            found = self._compiled.key(queue, job, self.wanted(job))
            if found is not None:
                return found  # type: ignore[no-any-return]
        return self._key(queue, job)

    def _compile(self) -> Any:
        ledger = self.ledger
        assert ledger.shares is not None and self._compiled_keys is not None
        facts = {name: (q.tenant, -q.priority, list(ledger.chain[name]))
                 for name, q in self.queues.items() if name in ledger.chain}
        # The ledger's own dictionaries, read as they change; like the Python key's kept answers, it takes the deserved
        # shares as fixed once the walk keys heads (a cycle works them out once, before).
        return self._compiled_keys(
            facts, self.depth, ledger.shares.tenants, ledger.shares.queues, ledger.capacity, ledger.tenant_usage,
            ledger.queue_usage, ledger.tenant_version, ledger.queue_version, dict(self.past_tenants),
            dict(self.past_queues))

    def _key(self, queue: str, job: PendingJob) -> tuple[float, ...]:
        ledger = self.ledger
        assert ledger.shares is not None
        wanted = self.wanted(job)
        tenant = self.queues[queue].tenant
        share = ledger.shares.tenants.get(tenant, {})
        version = ledger.tenant_version.get(tenant, 0)
        known = self._tenant_levels.get((tenant, id(wanted)))
        if known is None or known[0] != version or known[1] is not wanted:
            half = {r: a // 2 for r, a in wanted.items()}
            known = self._tenant_levels[tenant, id(wanted)] = (version, wanted, half, self._level(
                _with_past(ledger.tenant_usage[tenant], self.past_tenants.get(tenant)), share, ledger.capacity, wanted,
                half))
        half, (over, measure, after) = known[2], known[3]
        # A sibling served since the queue was pushed changes the tenant level alone.
        chain = ledger.chain[queue]
        used = ledger.queue_version
        versions = used.get(queue, 0) if len(chain) == 1 else tuple([used.get(q, 0) for q in chain])
        kept = self._levels.get(queue)
        if kept is None or kept[0] != versions or kept[1] is not job:
            levels: list[float] = []
            afters = []
            level = share
            for q in reversed(chain):
                q_share = ledger.shares.queues.get(q, {})
                q_over, q_measure, q_after = self._level(_with_past(ledger.queue_usage[q], self.past_queues.get(q)),
                                                    q_share, level, wanted, half)
                levels += (q_over, q_measure)
                afters.append(q_after)
                level = q_share
            levels += (False, 0.0) * (self.depth - 1 - len(afters))  # leaves of different depths: level by level
            kept = self._levels[queue] = (versions, job, tuple(levels), tuple(afters))
        # Queue priority orders heads that stay within every share they are under; past a share a head comes
        # after all of those: room past its share is only borrowed (a sibling within its share reclaims it), so
        # priority giving it first would hand out what is taken back a cycle later.
        past = over or any(kept[2][0::2])
        return (past, -self.queues[queue].priority, over, measure, *kept[2], after, *kept[3])
