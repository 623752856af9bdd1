"""Answers a cycle keeps between heads (the queues a head may reclaim from, kept until the queues over their share
change) decide exactly as answers worked out afresh for each head: the same random worlds as the queue manager's
differential test, each cycle decided twice on one snapshot."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from federation.scheduling.cycle import PendingJob, schedule
from federation.scheduling.preemption import Preemptor
from federation.scheduling.running import Listed
from tests.test_queue_manager_property import World, same


def _afresh(self: Preemptor, job: PendingJob, queue_within: bool, tenant_within: bool) -> set[str]:
    """The rule as written: worked out from the ledger for every head."""
    tenant = self.queues[job.queue].tenant
    return {q for q in self.ledger.over_share if q != job.queue and queue_within
            and (self.queues[q].tenant == tenant or tenant_within)}


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_kept_reclaimable_queues_decide_as_worked_out_afresh(seed: int) -> None:
    rng = random.Random(seed)
    world = World(rng)
    world.submit(rng.randrange(5, 60))
    for step in range(10):
        for event in rng.choices(["submit", "cancel", "end", "reconfigure", "refuse"], k=rng.randrange(1, 5)):
            if event == "submit":
                world.submit(rng.randrange(1, 15))
            else:
                getattr(world, event)()
        snapshot = world.snapshot(list(world.pending.values()))
        kept = schedule(snapshot)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Preemptor, "_reclaimable", _afresh)
            fresh = schedule(snapshot)
        same(fresh, kept)
        world.apply(kept, step)


def _always(self: Preemptor, job: PendingJob) -> bool:
    return True


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_a_head_past_its_share_searches_only_where_its_queue_runs_gangs_below_it(seed: int) -> None:
    """A head past its queue's share may evict only its own queue's preemptible gangs below its priority; one whose
    queue runs none skips the search (`Preemptor.may_preempt_in_queue`) and decides as if it had searched. The kept
    gangs' lowest priority per queue follows starts and ends as a list read afresh gives it."""
    rng = random.Random(seed)
    world = World(rng)
    world.submit(rng.randrange(5, 60))
    for step in range(10):
        for event in rng.choices(["submit", "cancel", "end", "reconfigure", "refuse"], k=rng.randrange(1, 5)):
            if event == "submit":
                world.submit(rng.randrange(1, 15))
            else:
                getattr(world, event)()
        listed = Listed(list(world.running.values()))
        for queue in [q.name for q in world.queues] + ["gone"]:
            assert world.kept.lowest_preemptible(queue) == listed.lowest_preemptible(queue)
        snapshot = world.snapshot(list(world.pending.values()), kept=rng.random() < 0.5)
        skipping = schedule(snapshot)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(Preemptor, "may_preempt_in_queue", _always)
            searching = schedule(snapshot)
        same(searching, skipping)
        world.apply(skipping, step)
