"""A scheduling cycle leaves no reference cycles behind: what it built is freed by reference counting the moment the
server drops it.

The scheduler process freezes what it holds out of the collector (`federation.kernel.heap`) and collects rarely. A
cycle that left its objects in a reference cycle kept them, and the snapshot they hold (a list of every waiting job),
until a collection walked them: at 1,000,000 waiting jobs the server's periodic collection took 1.4 s, with the
interpreter held, and a job submitted then waited for it.
"""

from __future__ import annotations

import gc
from dataclasses import replace
from types import FunctionType

import pytest

from bench.bench_backlog import Churn
from federation.scheduling.arrival import Arrivals
from federation.scheduling.choice import summary
from federation.scheduling.cycle import schedule, walk_backlog


def _left_behind() -> list[object]:
    """What a collection now finds unreachable (freed all the same)."""
    flags = gc.get_debug()
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(flags)
        gc.garbage.clear()


def _ours(objects: list[object]) -> list[str]:
    """The kinds of those objects that are the scheduler's own, or its functions: what another thread of the test
    process (pytest-xdist's) leaves meanwhile is not the cycle's."""
    kinds = {f"{o.__module__}.{o.__qualname__}" if isinstance(o, FunctionType) else
             f"{type(o).__module__}.{type(o).__qualname__}" for o in objects}
    return sorted(kind for kind in kinds if kind.startswith("federation."))


def _cycle_and_its_readers(churn: Churn, n: int) -> None:
    """A walked cycle, read as the server reads it: every reason, clusters' reasons for gangs that fit nowhere,
    jobs judged on arrival against what it left; and the cycle from scratch on the next snapshot."""
    cycle = walk_backlog(churn.next(), churn.manager)
    decisions = cycle.out
    assert dict(decisions.waiting.items())  # every reason, as the server's first write reads them
    assert all(summary(cycle.clusters.reasons(job.view, {})) for job in list(churn.pending.values())[:50])
    arrivals = Arrivals(cycle)
    arrived = [replace(job, view=replace(job.view, id=f"arrived-{n}-{i}"), seq=churn.next_seq + i)
               for i, job in enumerate(list(churn.pending.values())[:20])]
    churn.next_seq += len(arrived)
    churn.manager.extend(arrived)
    assert arrivals.admit_all(churn.manager, arrived, set(churn.free))
    churn.carry_out(decisions)
    assert schedule(churn.next()).assign or decisions.assign or decisions.preempt


@pytest.mark.parametrize("seed", [3, 11])
def test_a_walked_cycle_and_what_it_leaves_for_arrivals_are_freed_without_a_collection(
        seed: int) -> None:
    churn = Churn(3_000, 10, seed)
    churn.carry_out(walk_backlog(churn.first(), churn.manager).out)
    preempted = sum(n for _, n in churn.warm_up(4))
    assert preempted, "the federation never reclaimed: the cycles below would not build the victim search"
    _cycle_and_its_readers(churn, 0)  # the first time: modules imported on first use leave their own garbage
    gc.collect()

    gc.disable()  # what a collection would free during the pass is counted too
    try:
        _cycle_and_its_readers(churn, 1)
    finally:
        gc.enable()
    found = _ours(_left_behind())
    assert not found, f"reference cycles left behind: {found}"
    gc.collect()
