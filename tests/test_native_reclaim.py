"""Differential property: the compiled victim search (native/) decides exactly as the Python one, its oracle.

Random federations of many small clusters under contention (tenants and queues of several priorities, parent queues,
flavors half the time, limits, refusals, gangs in their protected time or with checkpoints and expected run times,
reclaimable and not) run cycle after cycle; each cycle is decided twice on the same snapshot, once with the compiled
search and once with the Python search, and every decision must be equal: dispatches, preemptions and their
wording, room being made, work lost, reservations, every waiting job's reason, usage. The decisions are then
carried out (gangs run, evicted gangs wait again, some end) so later cycles reclaim from what earlier ones placed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bench.bench_backlog import Churn
from federation.kernel.resources import FLAVOR
from federation.scheduling import native
from federation.scheduling.choice import PreemptiblePool
from federation.scheduling.cycle import (
    Decisions,
    PendingJob,
    QueueInfo,
    RunningJob,
    Snapshot,
    TenantInfo,
    schedule,
    schedule_backlog,
)
from federation.scheduling.fit import ClusterView, DomainFree, JobView, TierFree
from federation.scheduling.flavors import FlavorInfo
from federation.scheduling.preemption import Preemptor
from federation.scheduling.running import Running
from tests.test_queue_manager_property import cluster, same

GPU = "nvidia.com/gpu"
NODE = 8


def test_the_compiled_search_is_built() -> None:
    """`make` builds native/ into the virtualenv; without it every cycle would fall back to the Python search."""
    assert native.compiled is not None and hasattr(native.compiled, "ReclaimPool")


@contextmanager
def python_search() -> Iterator[None]:
    compiled, native.compiled = native.compiled, None
    try:
        yield
    finally:
        native.compiled = compiled


def both(snapshot: Snapshot) -> Decisions:
    """The snapshot's decisions by the compiled search, checked equal to the Python search's."""
    compiled = schedule(snapshot)
    with python_search():
        oracle = schedule(snapshot)
    same(oracle, compiled)
    return compiled


def all_three(snapshot: Snapshot, kept: Running) -> Decisions:
    """`both`, and the compiled search once more over the same gangs kept across cycles (its pool built from the
    gangs `kept` read as they started, not from the snapshot's list)."""
    compiled = both(snapshot)
    same(compiled, schedule(replace(snapshot, running=kept)))
    return compiled


class Federation:
    def __init__(self, rng: random.Random, clusters: int) -> None:
        self.rng = rng
        self.tenants = [TenantInfo(f"t{t}", rng.choice([1, 2, 4]),
                                   limit={GPU: 8 * clusters} if rng.random() < 0.2 else {}) for t in range(4)]
        self.flavors = [FlavorInfo("fast", GPU, {"region": "b"}), FlavorInfo("slow", GPU, {"region": "a"})] \
            if rng.random() < 0.5 else []
        self.queues: list[QueueInfo] = []
        for t in self.tenants:
            parent = f"{t.name}-p"
            self.queues.append(QueueInfo(parent, t.name, 1))
            for q in range(rng.randrange(2, 5)):
                flavors = (rng.choice([("fast", "slow"), ("slow",), ()]),) if self.flavors else ((),)
                limit = {f"{GPU}{FLAVOR}slow": 8 * clusters} if self.flavors and rng.random() < 0.3 else {}
                self.queues.append(QueueInfo(
                    f"{t.name}-q{q}", t.name, rng.choice([1, 2, 3]), priority=rng.choice([0, 0, 1, 2]),
                    reclaimable=rng.random() < 0.9, flavors=flavors[0], limit=limit,
                    parent=parent if rng.random() < 0.4 else ""))
        self.leaves = [q.name for q in self.queues if not q.name.endswith("-p")]
        self.nodes = {f"c{i:03d}": rng.choice([4, 6, 8]) for i in range(clusters)}
        self.free = dict(self.nodes)
        self.pending: dict[str, PendingJob] = {}
        self.running: dict[str, RunningJob] = {}
        self.refused: dict[str, dict[str, str]] = {}
        self.making_room: dict[str, str] = {}
        self.seq = 0
        self.kept = Running()  # the same gangs, kept across cycles (`snapshot` brings it up to date)
        # The cycles' clock: the same running gangs (objects) cost more to evict, leave their protected time and
        # stop paying to reclaim as it goes on, which the compiled search must work out anew at every build.
        self.now = 1_000_000.0

    def submit(self, n: int) -> None:
        for _ in range(n):
            self.seq += 1
            gpus = self.rng.choice([1, 2, 8, 8, 16, 24, 32])
            pod = min(gpus, NODE)
            mode, tier = self.rng.choice([("", 0), ("hard", 1), ("soft", 1)]) if gpus > NODE else ("", 0)
            selector = {"region": self.rng.choice(["a", "b"])} if self.rng.random() < 0.15 else {}
            self.pending[f"j{self.seq}"] = PendingJob(
                JobView(f"j{self.seq}", {GPU: gpus}, {GPU: pod}, selector, mode, tier), self.rng.choice(self.leaves),
                self.rng.choice([0, 0, 5, 10]), self.seq)

    def snapshot(self) -> Snapshot:
        for gang in list(self.kept):  # gangs ended, preempted or changed since: as the server's cache hears of them
            if self.running.get(gang.id) is not gang:
                self.kept.discard(gang.id)
        for gang in self.running.values():
            if gang not in self.kept:
                self.kept.add(gang)
        clusters = [cluster(name, "ab"[i % 2], max(self.free[name], 0), self.nodes[name])
                    for i, name in enumerate(sorted(self.nodes))]
        return Snapshot(self.tenants, self.queues, list(self.pending.values()), list(self.running.values()), clusters,
                        {GPU: sum(c.capacity[GPU] for c in clusters)},
                        refused={j: r for j, r in self.refused.items() if j in self.pending},
                        making_room={j: c for j, c in self.making_room.items() if j in self.pending},
                        flavors=self.flavors, now=self.now)

    def carry_out(self, d: Decisions) -> None:
        rng = self.rng
        self.now += rng.choice([0.0, 45.0, 600.0, 4000.0])
        for job_id, name in d.assign.items():
            job = self.pending.pop(job_id)
            self.making_room.pop(job_id, None)
            self.running[job_id] = RunningJob(
                job_id, job.queue, name, job.priority, job.seq, job.view.request, preemptible=rng.random() < 0.85,
                started=self.now - rng.choice([0.0, 30.0, 400.0, 5000.0, rng.uniform(0, 9000), -10.0]) if
                rng.random() < 0.9 else None,
                checkpoint=rng.choice([None, 600.0, 1800.0]), expected=rng.choice([None, 3600.0, 20000.0]),
                protected_run=rng.choice([0.0, 0.0, 0.0, 300.0, 1000.0]), preempted_before=rng.random() < 0.2)
            self.free[name] -= -(-job.view.request[GPU] // NODE)
        for job_id, why in d.preempt.items():
            gang = self.running.pop(job_id)
            self.free[gang.cluster] += -(-gang.request[GPU] // NODE)
            self.pending[job_id] = PendingJob(JobView(job_id, dict(gang.request), {GPU: min(gang.request[GPU], NODE)}),
                                              gang.queue, gang.priority, gang.seq, cause=f"preempted: {why}")
        self.making_room.update(d.making_room)
        if self.running and rng.random() < 0.2:  # a gang of a queue since gone (deleted in a race): never a victim
            gang = self.running[rng.choice(sorted(self.running))]
            self.running[gang.id] = RunningJob(gang.id, "gone", gang.cluster, gang.priority, gang.seq, gang.request,
                                               preemptible=True)
        for job_id in rng.sample(sorted(self.running), len(self.running) // 10):
            gang = self.running.pop(job_id)
            self.free[gang.cluster] += -(-gang.request[GPU] // NODE)
        if self.pending and rng.random() < 0.3:
            self.refused.setdefault(rng.choice(sorted(self.pending)), {})[rng.choice(sorted(self.nodes))] = \
                "rejected it recently: test"


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([12, 40, 120]))
def test_the_compiled_search_decides_as_the_python_one(seed: int, clusters: int) -> None:
    rng = random.Random(seed)
    federation = Federation(rng, clusters)
    federation.submit(clusters * 12)
    for _ in range(6):
        decisions = all_three(federation.snapshot(), federation.kept)
        federation.carry_out(decisions)
        federation.submit(rng.randrange(clusters, clusters * 4))
    assert federation.running  # a federation that ran something, so reclaim had gangs to look at


def test_a_churning_federation_of_many_clusters_decides_the_same() -> None:
    """The benchmark's federation (tenants of ten queues, gangs of 1 to 256 GPUs), 60 clusters, under churn: the
    walk the server runs, with the compiled search and with the Python one, on the same snapshots."""
    churn = Churn(6_000, 60, seed=11)
    snapshot = churn.first()
    preempted = 0
    for _ in range(4):
        walked = schedule_backlog(snapshot, churn.manager)
        with python_search():
            oracle = schedule_backlog(snapshot, churn.manager)
        same(oracle, walked)
        preempted += len(walked.preempt)
        churn.carry_out(walked)
        snapshot = churn.next()
    assert preempted > 0  # reclaim ran and chose victims, so the two searches were compared where they work


class _Panicking:
    """A compiled module whose search and sums fail as the index panic of 2026-11-27 did (a Rust panic reaches Python
    as pyo3's PanicException, a BaseException)."""

    class PanicException(BaseException):
        pass

    class ReclaimPool:
        def __init__(self, *_: object) -> None:
            pass

        def preempted(self, *_: object) -> None:
            pass

        def could_make_room(self, *_: object) -> None:
            raise _Panicking.PanicException("index out of bounds: the len is 3 but the index is 3")

        def victims(self, *_: object) -> None:
            raise _Panicking.PanicException("index out of bounds: the len is 3 but the index is 3")


class _PanickingSearch(_Panicking):
    """The same, with only the search failing: the clusters that could make room come from the real module's sums."""

    real = native.compiled

    class ReclaimPool(_Panicking.ReclaimPool):
        def __init__(self, *args: object) -> None:
            assert _PanickingSearch.real is not None
            self.sums = _PanickingSearch.real.ReclaimPool(*args)

        def preempted(self, gangs: list[RunningJob]) -> None:
            self.sums.preempted(gangs)

        def could_make_room(self, *args: object) -> bytes:
            return self.sums.could_make_room(*args)


@pytest.mark.parametrize("failing", [_Panicking, _PanickingSearch])
def test_a_failing_compiled_search_leaves_the_cycle_to_the_python_one(failing: type[_Panicking]) -> None:
    """The cycle is decided as the Python search decides it, and says what failed (the server logs it), instead of
    the whole cycle failing with it."""
    rng = random.Random(7)
    federation = Federation(rng, 12)
    federation.submit(12 * 12)
    failed = 0
    compiled = native.compiled
    for _ in range(6):
        snapshot = federation.snapshot()
        with python_search():
            oracle = schedule(snapshot)
        native.compiled = failing  # type: ignore[assignment]
        try:
            broken = schedule(snapshot)
        finally:
            native.compiled = compiled
        same(oracle, broken)
        if broken.compiled_failure:
            assert broken.compiled_failure.startswith("PanicException: index out of bounds")
            failed += 1
        assert not oracle.compiled_failure
        federation.carry_out(broken)
        federation.submit(rng.randrange(12, 48))
    assert failed  # reclaim searched, so the failure was met and survived


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([12, 40]))
def test_the_compiled_sums_say_where_room_could_be_made_as_the_python_pool(seed: int, clusters: int) -> None:
    """Which clusters could make room for a head (free plus every preemptible gang not yet evicted of the queues it
    may take from) is what `PreemptiblePool` over the same gangs says, at every ask of a cycle: after evictions, for
    other sets of queues, and for requests naming a resource no cluster has. A cluster said wrongly to be able to make
    room changes no decision (the search then finds nothing there), so the decisions alone would not show it."""
    rng = random.Random(seed)
    federation = Federation(rng, clusters)
    federation.submit(clusters * 12)
    asked = 0
    real = Preemptor.could_make_room

    def checked(self: Preemptor, request: dict[str, int], queues: list[str]) -> np.ndarray:
        nonlocal asked
        found = real(self, request, queues)
        pool = PreemptiblePool(self.clusters, sorted(self.queues))
        for gangs in self.preemptible.given.values():
            for gang in gangs:
                if gang.id not in self.taken:
                    pool.add(gang.cluster, gang.queue, gang.request)
        # Every size up to a few clusters' worth, so that a sum off by one gang shows in some cluster's answer.
        sizes = [({GPU: gpus}, queues) for gpus in range(1, 129, 3)]
        assert found.tolist() == pool.could_make_room(request, queues).tolist()
        # Other queues first, the head's last: the next head's ask starts from this one's sum, kept up to date
        # through the evictions in between.
        for ask, among in (({**request, "example.com/fpga": 1}, queues), ({**request, "example.com/fpga": 0}, queues),
                           (request, queues[:1]), (request, []), *sizes):
            assert real(self, ask, among).tolist() == pool.could_make_room(ask, among).tolist(), (ask, among)
        asked += 1
        return found

    Preemptor.could_make_room = checked  # type: ignore[method-assign]
    try:
        for _ in range(8):
            decisions = schedule(federation.snapshot())
            assert not decisions.compiled_failure
            federation.carry_out(decisions)
            federation.submit(rng.randrange(clusters, clusters * 4))
    finally:
        Preemptor.could_make_room = real  # type: ignore[method-assign]
    assume(asked)  # a federation where no head looked for room to make compares nothing (hypothesis fails if most do)


def test_a_gang_evicted_by_the_python_searches_is_never_chosen_again_by_the_compiled_one() -> None:
    """A gang with a hard tier limit evicts inside a HyperNode by the Python search, before any head asked the
    compiled one, which reads the cycle's gangs only then: the gangs evicted must count as gone there too, or the
    next head takes room back from gangs already evicted."""
    tenants = [TenantInfo("owner", guarantee={GPU: 32}), TenantInfo("borrower")]
    queues = [QueueInfo("first", "owner", priority=1), QueueInfo("second", "owner"), QueueInfo("lent", "borrower")]
    domains = [DomainFree("s", 2, "", {GPU: 0}), DomainFree("l0", 1, "s", {GPU: 0}), DomainFree("l1", 1, "s", {GPU: 0})]
    tiers = [TierFree(0, "node", {GPU: 0}), TierFree(1, "leaf", {GPU: 0}), TierFree(2, "spine", {GPU: 0})]
    c1 = ClusterView("c1", {}, {GPU: 0}, tiers, capacity={GPU: 64}, domains=domains)
    # The youngest two, in l0, are what either search takes first.
    running = [RunningJob(f"g{i}", "lent", "c1", 0, i, {GPU: 8}, True, started=-60.0 * (8 - i),
                          hypernode="l0" if i >= 6 else "l1") for i in range(8)]
    hard = PendingJob(JobView("hard", {GPU: 16}, {GPU: 8}, mode="hard", highest_tier=1), "first", 0, 10)
    waiting = [PendingJob(JobView(f"plain{i}", {GPU: 8}, {GPU: 8}), "second", 0, 11 + i) for i in range(6)]
    decisions = both(Snapshot(tenants, queues, [hard, *waiting], running, [c1], {GPU: 64}))
    assert decisions.making_room == {"hard": "c1", "plain0": "c1"}, dict(decisions.waiting)
    assert {"g6", "g7"} < set(decisions.preempt)


def test_gangs_the_compiled_search_read_before_are_judged_again_at_each_cycles_clock() -> None:
    """The compiled search keeps what each running gang says of itself from one build to the next (`GangMemo`), by
    object: the same objects at a later clock make other decisions. In their protected run time at first; then out
    of it, the youngest loses the least work; then the oldest has passed its checkpoint and loses less."""
    tenants = [TenantInfo("owner", guarantee={GPU: 32}), TenantInfo("borrower")]
    queues = [QueueInfo("mine", "owner"), QueueInfo("lent", "borrower")]
    running = [RunningJob(f"g{i}", "lent", "c1", 0, i, {GPU: 8}, True, started=1_000.0 - 10 * i,
                          checkpoint=1_100.0 if i == 7 else None, protected_run=600.0) for i in range(8)]
    need = PendingJob(JobView("need", {GPU: 8}, {GPU: 8}), "mine", 0, 100)

    def cycle(now: float) -> Decisions:
        return both(Snapshot(tenants, queues, [need], running, [cluster("c1", "a", 0)], {GPU: 64}, now=now))

    assert not cycle(1_100.0).preempt  # every gang within its first 600 s
    assert native.memo is not None and len(native.memo) == len(running)  # read, and kept
    assert set(cycle(1_800.0).preempt) == {"g0"}  # 800 s of work lost, the others 810-870 s
    assert set(cycle(2_100.0).preempt) == {"g7"}  # 70 s since its checkpoint
    assert len(native.memo) == len(running)
