"""What the start-time forecast is told about each waiting job, from the cycle's own decisions, so that a job's
reason, its per-cluster rows (ExplainJob) and its expected start never contradict each other.

Pure. A job held by a limit may start only once gangs counted under that limit have ended enough to make
room under it; a cluster that refused it, or could never hold it (its selector, capacity, largest node or
tier limit), is never where it is expected to start; and "now" is forecast only where the same check that
writes its per-cluster row says it fits now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from federation.scheduling.cycle import Decisions, PendingJob, Snapshot, queue_chains
from federation.scheduling.fit import ClusterView, Shape, check, could_hold, covers
from federation.scheduling.forecast import Holding, Waiting, limit_clears


def after_dispatch(snap: Snapshot, d: Decisions, pending: Mapping[str, PendingJob] | None = None
                   ) -> list[ClusterView]:
    """The clusters as the cycle leaves them: what it dispatched taken off their free resources. `pending`: the
    waiting jobs by id, at least those dispatched (default: `snap.pending`)."""
    gone: dict[str, dict[str, int]] = {}
    pending = pending if pending is not None else {job.id: job for job in snap.pending}
    for job_id, cluster in d.assign.items():
        into = gone.setdefault(cluster, {})
        for r, a in pending[job_id].view.request.items():
            into[r] = into.get(r, 0) + a
    return [ClusterView(c.name, c.labels, {r: a - gone.get(c.name, {}).get(r, 0) for r, a in c.free.items()},
                        c.tiers, c.capacity, c.domains, partitionable=c.partitionable, node_labels=c.node_labels)
            for c in snap.clusters]


def holds(d: Decisions) -> dict[str, str]:
    """Waiting jobs that fit nowhere now whatever is free, and why: a limit holds them, or they can never run as
    things stand. ExplainJob's rows say so wherever the room alone would do."""
    out = {job_id: f"held by its limit: {why}" for job_id, (_, _, why) in d.limited.items()}
    for job_id in d.cannot_run:
        out[job_id] = d.waiting.get(job_id, "it cannot run as things stand")
    return out


def reserved_room(d: Decisions, pending: Mapping[str, PendingJob]) -> dict[str, tuple[dict[str, int], list[str]]]:
    """Per cluster, the room the cycle holds there for waiting jobs, and those jobs in order. `pending`: the
    waiting jobs by id (looked up for the reserved ones only)."""
    out: dict[str, tuple[dict[str, int], list[str]]] = {}
    for job_id, cluster in d.reserved.items():
        room, holders = out.setdefault(cluster, ({}, []))
        holders.append(job_id)
        for r, a in pending[job_id].view.request.items():
            room[r] = room.get(r, 0) + a
    return out


def waiting(snap: Snapshot, d: Decisions, order: Sequence[str], runs_for: Callable[[PendingJob], float],
            holding: Sequence[Holding], pending: Mapping[str, PendingJob] | None = None) -> list[Waiting]:
    """The forecast's view of the jobs of `order` still waiting after the cycle `d`, in that order. `holding`:
    every gang holding resources once the cycle is carried out, with its queue and when it is expected to end.
    `pending`: the waiting jobs by id, at least those of `order`, dispatched or reserved (default: `snap.pending`)."""
    pending = pending if pending is not None else {job.id: job for job in snap.pending}
    chains = queue_chains(snap.queues)
    tenant_of = {q.name: q.tenant for q in snap.queues}
    clusters = after_dispatch(snap, d, pending)
    reserved = reserved_room(d, pending)
    could: dict[Shape, frozenset[str]] = {}
    out = []
    for job_id in order:
        job = pending.get(job_id)
        if job is None or job_id in d.assign or job_id in d.cannot_run:
            continue  # started, or it never can as things stand: no expected start
        shape = job.view.shape
        if shape not in could:
            could[shape] = frozenset(c.name for c in snap.clusters if could_hold(job.view, c))
        refused = snap.refused.get(job_id, {})
        allowed = could[shape] - refused.keys()
        now = frozenset(c.name for c in clusters if c.name in allowed and check(job.view, c) is None
                        and _outside_reservations(job, c, reserved.get(c.name)))
        not_before = 0.0
        held = d.limited.get(job_id)
        if held is not None:
            kind, _, name = held[0].partition(" ")
            # "federation": room others keep back holds it, so any gang ending anywhere makes room.
            under = list(holding) if kind == "federation" else [
                h for h in holding if (name in chains.get(h.queue, ()) if kind == "queue"
                                       else tenant_of.get(h.queue) == name)]
            not_before = limit_clears(held[1], under)
            now = frozenset()
        out.append(Waiting(job.id, job.view.request, runs_for(job), job.view.cluster_selector, allowed, now,
                           not_before))
    return out


def _outside_reservations(job: PendingJob, cluster: ClusterView, reserved: tuple[dict[str, int], list[str]] | None
                          ) -> bool:
    """Whether the job fits the cluster's free room less what is reserved there for other jobs (ExplainJob's
    "the room it needs is reserved for ..." row)."""
    if reserved is None:
        return True
    room, holders = reserved
    own = job.view.request if job.id in holders else {}
    left = {r: a - room.get(r, 0) + own.get(r, 0) for r, a in cluster.free.items()}
    return covers(left, job.view.request) or holders == [job.id]
