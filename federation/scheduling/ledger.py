"""What each queue, parent queue and tenant holds as one cycle goes, beside what they deserve.

One account for the parts that read it (the order of queue heads, limits, reclaim, admission on arrival) and one
place that changes it (a gang starting or leaving): without it each part kept its own copy in step by hand.
Versions count each member's changes, so a part that keeps answers per member (the order's queue levels, reclaim's
share checks, the compiled search) knows one went stale without comparing amounts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from federation.scheduling.fairshare import Tree, compiled_dominant_share
from federation.scheduling.model import QueueInfo, add_into


class Ledger:
    """Usage per queue (each parent counting its children's), per tenant and in all, with deserved shares once
    the cycle has worked them out."""

    def __init__(self, queues: Mapping[str, QueueInfo], tenants: Iterable[str],
                 chain: Mapping[str, list[str]]) -> None:
        self.queues = queues
        self.chain = chain
        self.queue_usage: dict[str, dict[str, int]] = {q: {} for q in queues}
        self.tenant_usage: dict[str, dict[str, int]] = {t: {} for t in tenants}
        self.total_usage: dict[str, int] = {}  # of every gang running or started by this cycle
        self.queue_version: dict[str, int] = {}  # queue -> how often its usage changed
        # tenant -> how often its (or its queues') usage changed: a queue's place in the order, which reads only
        # those, is unchanged while this is.
        self.tenant_version: dict[str, int] = {}
        self.shares: Tree | None = None
        self.capacity: dict[str, float] = {}  # what tenants share (flavors included), once shares are known
        self.over_share: set[str] = set()  # reclaimable leaf queues holding more than they deserve
        self.over_version = 0  # how often `over_share` changed
        self.dominant_share = compiled_dominant_share()

    def deserve(self, shares: Tree, capacity: Mapping[str, int], leaves: Iterable[str]) -> None:
        """Take the deserved shares worked out for `capacity`; `leaves`: the queues jobs run in (not parents)."""
        self.shares = shares
        self.capacity = {r: float(a) for r, a in capacity.items()}
        self.over_share = {q for q in leaves if self.queues[q].reclaimable
                           and self.dominant_share(self.queue_usage[q], shares.queues.get(q, {})) > 1}
        self.over_version += 1

    def use(self, queue: str, amounts: Mapping[str, int], sign: int = 1) -> None:
        """Count a gang starting (+1) or leaving (-1) against its queue, the queue's parents and its tenant."""
        for q in self.chain[queue]:
            add_into(self.queue_usage[q], amounts, sign)
            self.queue_version[q] = self.queue_version.get(q, 0) + 1
        tenant = self.queues[queue].tenant
        add_into(self.tenant_usage[tenant], amounts, sign)
        add_into(self.total_usage, amounts, sign)
        self.tenant_version[tenant] = self.tenant_version.get(tenant, 0) + 1
        if self.shares is not None and self.queues[queue].reclaimable:
            over = self.dominant_share(self.queue_usage[queue], self.shares.queues.get(queue, {})) > 1
            if over != (queue in self.over_share):
                (self.over_share.add if over else self.over_share.discard)(queue)
                self.over_version += 1

    def usage_of(self, key: str | tuple[str, str]) -> dict[str, int]:
        """A queue's usage (keyed by its name) or a tenant's (keyed ("tenant", name))."""
        return self.queue_usage[key] if isinstance(key, str) else self.tenant_usage[key[1]]

    def version_of(self, key: str | tuple[str, str]) -> int:
        return self.queue_version.get(key, 0) if isinstance(key, str) else self.tenant_version.get(key[1], 0)

    def deserved(self, key: str | tuple[str, str]) -> Mapping[str, float]:
        assert self.shares is not None
        return self.shares.queues.get(key, {}) if isinstance(key, str) else self.shares.tenants.get(key[1], {})

    def share_after(self, queue: str, extra: Mapping[str, int]) -> tuple[float, float]:
        """The tenant's dominant share and the largest of the queue's and its parents' with `extra` started."""
        assert self.shares is not None
        tenant = self.queues[queue].tenant
        deserved, chain, dominant_share = self.shares.queues, self.chain[queue], self.dominant_share
        tenant_share = dominant_share(self.tenant_usage[tenant], self.shares.tenants.get(tenant, {}), extra)
        if len(chain) == 1:  # a queue without parents (most): asked for every head a cycle considers
            return tenant_share, dominant_share(self.queue_usage[queue], deserved.get(queue, {}), extra)
        return tenant_share, max(dominant_share(self.queue_usage[q], deserved.get(q, {}), extra) for q in chain)
