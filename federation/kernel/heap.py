"""The cyclic garbage collector in a process that holds a large state for as long as it lives: the server's job cache
(a few objects per waiting job, hundreds of thousands of them), an agent's view of its cluster (every node and pod
as the API server sent them, hundreds of thousands of objects on 10,240 nodes).

A full collection walks every object the process holds, with the interpreter held. With CPython's default thresholds
a busy process set one off every few seconds: the server's loop stalled 100-140 ms each time (bench/bench_loop.py),
and an agent binding gangs on 10,240 KWOK nodes spent a fifth to a quarter of its CPU in collections (0.44 s in two
of them while binding 500 single-pod jobs). What lives that long is never garbage: frozen out of every collection,
it is still freed by reference counting when it goes; and collections come far less often.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 50, 100)  # allocations before a young collection; young, then middle, collections per older

FULL_AFTER = 0.25  # a full pass once the objects frozen since the last one are this part of those it left frozen


class _Frozen:
    """What the last full pass left frozen, and what was frozen since."""
    after_full = 0
    since_full = 0


def tune() -> None:
    """At a process's start: what exists now (modules, the schema) is never garbage; collect far less often.
    Process-wide, so where a process starts, not where an object does."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    _Frozen.after_full, _Frozen.since_full = gc.get_freeze_count(), 0


def settle() -> None:
    """Once the process has loaded its state (and again from time to time): collect garbage once, then exempt every
    object alive from later collections.

    Most times only what is not frozen yet is collected: objects made since the last settle, a walk as long as they
    are many. Garbage can hide in the frozen part only as reference cycles that died after they were frozen, so the
    frozen part is walked too (unfrozen first) only once a quarter of it is new since the last such pass, CPython's
    own rule for its oldest generation: on a million waiting jobs that walk holds the interpreter 0.7 s, and done
    every time it stalled a job submitted meanwhile as long."""
    before = gc.get_freeze_count()
    full = _Frozen.since_full > FULL_AFTER * _Frozen.after_full
    if full:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    if full:
        _Frozen.after_full, _Frozen.since_full = frozen, 0
    else:
        _Frozen.since_full += frozen - before
