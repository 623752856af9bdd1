"""What holds a gang back whatever the room: it could never run (its minimum against the clusters, a limit it is
larger than), a limit of its queue, a parent queue or its tenant it would pass now, or room that others keep back
of their guarantees by lending limits.

Its own state (the lenders, and answers kept per gang shape and queue for the cycle) over the cycle's ledger; the
cycle, its HyperJobs and admission on arrival ask it, and it writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from federation.kernel.admission import PROVISIONING
from federation.kernel.resources import FLAVOR, Resources, base, format_resources
from federation.scheduling.fairshare import kept_back
from federation.scheduling.fit import ClusterView, JobView, Shape, cannot_run
from federation.scheduling.ledger import Ledger
from federation.scheduling.model import PendingJob, QueueInfo, TenantInfo
from federation.scheduling.provisioning import provisionable


def _over(usage: Mapping[str, int], extra: Mapping[str, int], limit: Mapping[str, int]) -> dict[str, int]:
    """Resources of `limit` that usage + extra would exceed (a flavor's limit is judged with the cluster)."""
    if not limit:
        return {}
    return {r: cap for r, cap in limit.items() if FLAVOR not in r and usage.get(r, 0) + extra.get(r, 0) > cap}


def _held_by(job: PendingJob, owner: str, usage: Mapping[str, int], over: Mapping[str, int],
             why: str) -> tuple[str, Resources, str]:
    needed = {r: usage.get(r, 0) + job.view.request.get(r, 0) - cap for r, cap in over.items()}
    return owner, needed, why


def fmt(amounts: Mapping[str, int]) -> str:
    """Amounts as a limit's reason names them (`nvidia.com/gpu=8,cpu=64`)."""
    return ",".join(f"{k}={v}" for k, v in format_resources(amounts).items())


_UNKNOWN = object()  # not worked out yet (None is an answer: the gang could run)


class Quotas:
    """The limits and lending limits of a cycle's tenants and queues, judged against its ledger."""

    def __init__(self, tenants: Mapping[str, TenantInfo], queues: Mapping[str, QueueInfo],
                 clusters: Sequence[ClusterView], ledger: Ledger) -> None:
        self.tenants = tenants
        self.queues = queues
        self.clusters = clusters
        self.ledger = ledger
        self.chain = ledger.chain
        # What lenders keep back of their guarantees (lending limits), and each member's siblings that do.
        self.kept = {("tenant", t.name): kept for t in tenants.values()
                     if not t.disabled and (kept := kept_back(t.guarantee, t.lending_limit))}
        self.kept.update({("queue", q.name): kept for q in queues.values() if (kept := kept_back(q.guarantee,
                                                                                          q.lending_limit))})
        self.keepers: dict[tuple[str, str], list[tuple[str, str]]] = {}  # member -> its siblings that keep some back
        for kind, name in self.kept:
            siblings = ([("tenant", t) for t in self.tenants] if kind == "tenant" else
                        [("queue", q.name) for q in queues.values() if (q.tenant, q.parent) == (
                            self.queues[name].tenant, self.queues[name].parent)])
            for sibling in siblings:
                if sibling != (kind, name):
                    self.keepers.setdefault(sibling, []).append((kind, name))
        # Whether any cluster reports node groups its autoscaler can grow (`provisioning`).
        self.growable = any(c.node_groups for c in clusters)
        # Per gang shape, as the clusters stand; and per shape and queue, with the queue's and tenant's limits.
        self._cannot_run_anywhere: dict[Shape, str | None] = {}
        self._cannot_run: dict[tuple[Shape, str], str | None] = {}
        self._limited: dict[str, bool] = {}

    def limited(self, queue: str) -> bool:
        """Whether a limit applies to the queue's jobs at all (its own, a parent's, its tenant's)."""
        found = self._limited.get(queue)
        if found is None:
            q = self.queues[queue]
            found = self._limited[queue] = bool(self.tenants[q.tenant].limit or
                                                any(self.queues[n].limit for n in self.chain[queue]) or
                                                self.kept_around(queue))
        return found

    def limit(self, job: PendingJob, queue: str) -> tuple[str, Resources, str] | None:
        """The limit holding the job now: its owner, how much of each resource the owner must free first, why."""
        if not self.limited(queue):
            return None  # no limit and no lending limit around it: most queues, a head of each a cycle
        q = self.queues[queue]
        for name in self.chain[queue]:
            over = _over(self.ledger.queue_usage[name], job.view.request, self.queues[name].limit)
            if over:
                why = f"queue at limit {fmt(over)}" if name == queue else f"parent queue {name} at limit {fmt(over)}"
                return _held_by(job, f"queue {name}", self.ledger.queue_usage[name], over, why)
        over = _over(self.ledger.tenant_usage[q.tenant], job.view.request, self.tenants[q.tenant].limit)
        if over:
            return _held_by(job, f"tenant {q.tenant}", self.ledger.tenant_usage[q.tenant], over,
                            f"tenant {q.tenant} at limit {fmt(over)}")
        return self.kept_from(job.view.request, queue, flavored=False)

    def kept_around(self, queue: str) -> bool:
        """Whether any sibling of the queue, of a parent of it or of its tenant keeps part of its guarantee back."""
        return (("tenant", self.queues[queue].tenant) in self.keepers or
                any(("queue", n) in self.keepers for n in self.chain[queue]))

    def kept_from(self, request: Mapping[str, int], queue: str, flavored: bool
                  ) -> tuple[str, Resources, str] | None:
        """Whether a gang of `request` would start in room others keep back (their lending limits), with how much
        must end anywhere before it fits and why. At each level of its queue's path (its tenant among tenants, its
        queue and each parent among their siblings), what the member's siblings keep back and do not use is not
        the gang's to take: the federation's usage, the gang and that must stay within the capacity. That holds a
        gang within its own guarantee too when others borrowed the guarantee: the free room is the lender's, and
        the gang's queue reclaims its own (`reclaim_kept`). `flavored`: judge the flavored resources
        (`r@flavor`, for each flavor the gang could use) instead of the plain ones."""
        q = self.queues[queue]
        path = [("tenant", q.tenant), *(("queue", n) for n in self.chain[queue])]
        withheld: dict[str, float] = {}
        keepers: dict[str, list[str]] = {}
        for member in path:
            for keeper in self.keepers.get(member, ()):
                used = self.ledger.usage_of(keeper[1] if keeper[0] == "queue" else keeper)
                for key, amount in self.kept[keeper].items():
                    if (FLAVOR in key) != flavored:
                        continue
                    idle = amount - used.get(key, 0)
                    if request.get(base(key), 0) <= 0 or idle <= 0:
                        continue
                    withheld[key] = withheld.get(key, 0) + idle
                    keepers.setdefault(key, []).append(f"{keeper[0]} {keeper[1]}")
        needed = {key: round(self.ledger.total_usage.get(key, 0) + request.get(base(key), 0) + idle
                             - self.ledger.capacity.get(key, 0.0))
                  for key, idle in withheld.items()}
        needed = {key: amount for key, amount in needed.items() if amount > 0}
        if not needed:
            return None
        kept = {key: round(withheld[key]) for key in needed}
        owners = {o for key in needed for o in keepers[key]}
        # A tenant reads only its own tenant's names: the keepers among tenants are always others.
        tenants = sum(o.startswith("tenant ") for o in owners)
        who = sorted(o for o in owners if not o.startswith("tenant "))
        who += ["other tenants"] if tenants > 1 else ["another tenant"] if tenants else []
        return "federation", needed, (f"{fmt(kept)} is kept back for {', '.join(who)} by lending limits: too "
                                      "little of the rest is free")

    def cannot_run(self, job: PendingJob, queue: str) -> str | None:
        """Why no cluster or quota could run the job as the federation stands, even with nothing else
        running (its minimum gang against the clusters' capacity, its largest pod against the largest
        node, a hard tier limit against the largest HyperNode of that tier, its queue's and tenant's
        limits); None when something could. Such a job holds no reservation and keeps nothing waiting."""
        shape = job.view.shape
        anywhere = self._cannot_run_anywhere.get(shape, _UNKNOWN)
        if anywhere is _UNKNOWN:
            anywhere = self._cannot_run_anywhere[shape] = cannot_run(job.view, self.clusters)
        if not self.limited(queue) and not self.provisions(queue):
            return anywhere  # the shape alone decides: most queues, tens of thousands of asks a cycle
        key = (shape, queue)
        if key not in self._cannot_run:
            own = over_own_limit(job.view, [self.queues[name] for name in self.chain[queue]],
                                 self.tenants[self.queues[queue].tenant]) if self.limited(queue) else None
            if anywhere and self.provisions(queue) and provisionable(job.view, self.clusters, {}, {}):
                anywhere = None  # not on the clusters as they are, but on nodes one of them can add
            self._cannot_run[key] = anywhere or own
        return self._cannot_run[key]

    def provisions(self, queue: str) -> bool:
        """Whether the queue's gangs may be sent to capacity a cluster's autoscaler can add."""
        return self.growable and PROVISIONING in self.queues[queue].admission_checks


def over_own_limit(job: JobView, queues: Sequence[QueueInfo], tenant: TenantInfo) -> str | None:
    """Why the gang alone is more than its queue's, a parent queue's or its tenant's limit allows (it could
    never run under it). `queues`: its queue, then that queue's parents."""
    for owner, limit in (*((f"queue {q.name}", q.limit) for q in queues), (f"tenant {tenant.name}", tenant.limit)):
        over = {r: cap for r, cap in limit.items() if FLAVOR not in r and job.request.get(r, 0) > cap}
        if over:
            need = {r: job.request[r] for r in over}
            return f"cannot run: needs {fmt(need)}, more than {owner}'s limit {fmt(over)}"
    return None
