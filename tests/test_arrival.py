"""Admission on arrival (issue 40, 3): a job that fits at once is dispatched when submitted, never by taking what
the last cycle gave, reserved or made room for, never past a deserved share, and only as its queue's head.

The random worlds are the queue manager's differential test's: cycles decided by the walk, then jobs submitted
and judged by `Arrivals` against what that cycle left. Each property is checked against the snapshot and the
decisions themselves, not against the arrival path's own bookkeeping.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from federation.scheduling.arrival import Admitted, Arrivals, Arriving
from federation.scheduling.cycle import PendingJob, RunningJob, schedule, shares, walk_backlog
from federation.scheduling.fairshare import EPSILON, dominant_share
from federation.scheduling.fit import JobView
from tests.test_queue_manager_property import GPU, World


def _arrive(world: World, n: int) -> list[PendingJob]:
    before = set(world.pending)
    world.submit(n)
    return sorted((world.pending[j] for j in set(world.pending) - before), key=lambda job: job.seq)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_arrivals_take_only_room_the_last_cycle_left_and_stay_within_their_shares(seed: int) -> None:
    rng = random.Random(seed)
    world = World(rng)
    world.submit(rng.randrange(5, 60))
    for step in range(4):
        for event in rng.choices(["submit", "cancel", "end", "reconfigure", "refuse"], k=rng.randrange(1, 4)):
            if event == "submit":
                world.submit(rng.randrange(1, 15))
            else:
                getattr(world, event)()
        snap = world.snapshot([])
        waiting = dict(world.pending)
        cycle = walk_backlog(snap, world.manager)
        decisions = cycle.out
        arrivals = Arrivals(cycle)
        world.apply(decisions, step)
        new = _arrive(world, rng.randrange(1, 8))
        now_waiting = list(world.pending.values())
        # Clusters cordoned (or gone silent) since the cycle: nothing arriving is sent there.
        usable = {view.name for view in snap.clusters if rng.random() < 0.8}
        judged = arrivals.admit_all(world.manager, new, usable)
        admitted = {job_id: found.cluster for job_id, found in judged.items() if isinstance(found, Admitted)}
        assert set(admitted.values()) <= usable
        jobs = {job.id: job for job in new}

        # Room: what the arrivals take in a cluster fits what the cycle left free there after its dispatches and
        # the room it holds for reservations and preemptions.
        for view in snap.clusters:
            given_out = sum(waiting[j].view.request[GPU] for j, c in decisions.assign.items()
                            if c == view.name and j not in decisions.provisioning)
            held = sum(waiting[j].view.request[GPU] for j, c in decisions.reserved.items() if c == view.name)
            taken = sum(jobs[j].view.request[GPU] for j, c in admitted.items() if c == view.name)
            assert taken <= max(view.free[GPU] - given_out - held, 0), (view.name, taken)

        # Only heads (every job before it in its queue admitted before it), never after a cut-short cycle, never a
        # tenant whose preempted gangs are still leaving.
        victims = {world.queues[[q.name for q in world.queues].index(v.queue)].tenant
                   for v in snap.running if v.id in decisions.preempt}
        tenant_of = {q.name: q.tenant for q in world.queues}
        for job in new:
            if job.id in admitted:
                assert all(other.id in admitted for other in now_waiting
                           if other.queue == job.queue and other.rank < job.rank)
                assert tenant_of[job.queue] not in victims
                assert not decisions.cut_short

        # Shares: with the admitted arrivals running, as the next cycle's shares count them (their demand included),
        # each one's queue, its parents and its tenant are within what they deserve.
        for job_id, name in admitted.items():
            job = world.pending.pop(job_id)
            world.manager.remove(job_id)
            world.running[job_id] = RunningJob(job_id, job.queue, name, job.priority, job.seq, job.view.request,
                                             preemptible=True)
            world.free[name] -= job.view.request[GPU] // 8 or 1
        if admitted:
            tree, queue_usage, tenant_usage = shares(world.snapshot(list(world.pending.values())))
            parents = {q.name: q.parent for q in world.queues}
            for job_id in admitted:
                queue = jobs[job_id].queue
                chain = [queue] + ([parents[queue]] if parents[queue] else [])
                for q in chain:
                    assert dominant_share(queue_usage[q], tree.queues.get(q, {})) <= 1 + EPSILON, (job_id, q)
                tenant = tenant_of[queue]
                assert dominant_share(tenant_usage[tenant], tree.tenants.get(tenant, {})) <= 1 + EPSILON


def _within_shares(world: World, queues: list[str]) -> None:
    """Each of these queues, its parent and its tenant within what it deserves, as the next cycle's shares count
    what runs and waits now."""
    tree, queue_usage, tenant_usage = shares(world.snapshot(list(world.pending.values())))
    parents = {q.name: q.parent for q in world.queues}
    tenant_of = {q.name: q.tenant for q in world.queues}
    for queue in queues:
        for q in [queue] + ([parents[queue]] if parents[queue] else []):
            assert dominant_share(queue_usage[q], tree.queues.get(q, {})) <= 1 + EPSILON, q
        tenant = tenant_of[queue]
        assert dominant_share(tenant_usage[tenant], tree.tenants.get(tenant, {})) <= 1 + EPSILON, tenant


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1))
@example(406)  # worlds where such a job fits but puts its queue (406) or tenant (1403) past a share
@example(1403)
def test_jobs_sent_while_a_cycle_decides_never_take_room_its_kept_decisions_give(seed: int) -> None:
    """Jobs submitted after a cycle's snapshot, judged against what the cycle before left while it decides: where
    the deciding cycle's decisions are kept (`took`), the cycle's dispatches, its reserved room and those jobs fit
    each cluster's free room together, and each such job's queue and tenant stay within their shares; where they
    are not, only those jobs were sent, and the next cycle runs without any."""
    rng = random.Random(seed)
    world = World(rng)
    world.submit(rng.randrange(5, 60))
    arrivals: Arrivals | None = None
    for step in range(5):
        for event in rng.choices(["submit", "cancel", "end", "reconfigure", "refuse"], k=rng.randrange(1, 4)):
            if event == "submit":
                world.submit(rng.randrange(1, 15))
            else:
                getattr(world, event)()
        snap = world.snapshot([])
        waiting = dict(world.pending)
        backlog_queues = set(world.manager.order)
        meanwhile = _arrive(world, rng.randrange(1, 8))
        for job in meanwhile:  # not in the backlog the deciding cycle walks: the server's cache reads them after
            world.manager.remove(job.id)
        admitted: dict[str, str] = {}
        if arrivals is not None:
            usable = {view.name for view in snap.clusters if rng.random() < 0.8}
            judged = arrivals.admit_all(Arriving(world.manager, meanwhile), meanwhile, usable)
            admitted = {job_id: found.cluster for job_id, found in judged.items() if isinstance(found, Admitted)}
            assert set(admitted.values()) <= usable
        cycle = walk_backlog(snap, world.manager)
        decisions = cycle.out
        after = Arrivals(cycle)
        jobs = {job.id: job for job in meanwhile}
        for job_id in admitted:  # only a queue's head: none of its queue waited at the snapshot, none before it since
            job = jobs[job_id]
            assert job.queue not in backlog_queues
            assert all(other.id in admitted for other in meanwhile
                       if other.queue == job.queue and other.rank < job.rank)
        kept = after.took([(jobs[j], c) for j, c in admitted.items()], world.manager) if admitted else True
        for job in meanwhile:
            if job.id not in admitted:
                world.manager.add(job)
        if kept:
            for view in snap.clusters:
                given_out = sum(waiting[j].view.request[GPU] for j, c in decisions.assign.items()
                                if c == view.name and j not in decisions.provisioning)
                held = sum(waiting[j].view.request[GPU] for j, c in decisions.reserved.items() if c == view.name)
                taken = sum(jobs[j].view.request[GPU] for j, c in admitted.items() if c == view.name)
                assert taken <= max(view.free[GPU] - given_out - held, 0), (view.name, given_out, held, taken)
            world.apply(decisions, step)
        for job_id, name in admitted.items():
            job = world.pending.pop(job_id)
            world.running[job_id] = RunningJob(job_id, job.queue, name, job.priority, job.seq, job.view.request,
                                             preemptible=True)
            world.free[name] -= job.view.request[GPU] // 8 or 1
        if kept and admitted:
            _within_shares(world, [jobs[j].queue for j in admitted])
        arrivals = after if kept else None  # a dropped cycle: the next one decides with nothing sent meanwhile


def _idle_world() -> World:
    world = World(random.Random(7))
    world.queues = [replace(q, limit={}, state="OPEN") for q in world.queues]
    world.tenants = [replace(t, limit={}, guarantee={}, lending_limit={}) for t in world.tenants]
    world.flavors, world.can_add, world.past = [], 0, ({}, {})
    return world


def _job(name: str, gpus: int, queue: str, seq: int) -> PendingJob:
    return PendingJob(JobView(name, {GPU: gpus}, {GPU: min(gpus, 8)}), queue, 0, seq)


def test_a_job_that_fits_an_idle_federation_goes_where_a_cycle_would_send_it() -> None:
    world = _idle_world()
    arrivals = Arrivals(walk_backlog(world.snapshot([]), world.manager))
    job = _job("fits", 16, "t1-b", 1)
    world.pending[job.id] = job
    world.manager.add(job)
    arrivals.reshare(world.manager)
    found = arrivals.admit(job, True)
    assert isinstance(found, Admitted)
    assert found.cluster == schedule(world.snapshot([job])).assign[job.id]
    # and the room it took is gone for the next arrival: a second job of the whole federation's free room fits
    # nowhere the last cycle left
    whole = sum(world.free.values()) * 8
    assert isinstance(arrivals.admit(_job("rest", whole, "t0-b", 2), True), str)


def test_room_held_for_a_waiting_gang_is_not_taken_on_arrival() -> None:
    """A 64-GPU gang waits with room reserved for it in the one cluster it could run in; a small job submitted
    meanwhile that would fit only in that room waits for the cycle, which keeps it waiting too."""
    world = _idle_world()
    world.free = {"c0": 4, "c1": 0, "c2": 0}
    big = _job("big", 64, "t0-a", 1)
    world.pending[big.id] = big
    world.manager.add(big)
    world.running["r"] = RunningJob("r", "t1-a", "c0", 0, 0, {GPU: 32}, preemptible=False)
    cycle = walk_backlog(world.snapshot([]), world.manager)
    assert cycle.out.reserved == {"big": "c0"}
    arrivals = Arrivals(cycle)
    small = _job("small", 8, "t0-b", 2)
    world.pending[small.id] = small
    world.manager.add(small)
    arrivals.reshare(world.manager)
    assert isinstance(arrivals.admit(small, True), str)
    assert "small" not in schedule(world.snapshot(list(world.pending.values()))).assign


def test_a_job_past_its_share_or_behind_its_queue_head_waits_for_the_cycle() -> None:
    """192 GPUs: tenant t0 (weight 2) runs 128 of them, t1 (weight 1) deserves the other 64, which its queues
    t1-a (weight 1, 16 GPUs waiting for region b) and t1-b (weight 3) share 16 and 48 once t1-b asks for more."""
    world = _idle_world()
    world.free = {"c0": 8, "c1": 0, "c2": 0}
    world.running["r1"] = RunningJob("r1", "t0-a", "c1", 0, 0, {GPU: 64}, preemptible=False)
    world.running["r2"] = RunningJob("r2", "t0-a", "c2", 0, 0, {GPU: 64}, preemptible=False)
    wants_b = PendingJob(JobView("wants-b", {GPU: 16}, {GPU: 8}, {"region": "b"}), "t1-a", 0, 1)
    world.pending[wants_b.id] = wants_b
    world.manager.add(wants_b)
    arrivals = Arrivals(walk_backlog(world.snapshot([]), world.manager))
    greedy, first, second = _job("greedy", 64, "t1-b", 2), _job("first", 40, "t1-b", 3), _job("second", 8, "t1-b", 4)
    for job in (greedy, first, second):
        world.manager.add(job)
    arrivals.reshare(world.manager)
    assert "deserved share" in str(arrivals.admit(greedy, True))
    assert arrivals.admit(second, False) == "not its queue's head"
    assert isinstance(arrivals.admit(first, True), Admitted)


def test_nothing_goes_on_arrival_after_a_cycle_cut_short_by_its_burst() -> None:
    world = _idle_world()
    for i in range(3):
        job = _job(f"w{i}", 8, "t0-b", i)
        world.pending[job.id] = job
        world.manager.add(job)
    cycle = walk_backlog(replace(world.snapshot([]), burst=1), world.manager)
    assert cycle.out.cut_short
    assert "cut short" in str(Arrivals(cycle).admit(_job("late", 1, "t1-b", 9), True))


def test_jobs_submitted_together_into_an_idle_queue_go_one_after_the_other_while_within_its_share() -> None:
    """Each admitted job no longer waits, so the next of its queue is the head: three small jobs go, a fourth
    that would take the queue past its share waits for the cycle."""
    world = _idle_world()
    world.free = {"c0": 8, "c1": 0, "c2": 0}
    world.running["r1"] = RunningJob("r1", "t0-a", "c1", 0, 0, {GPU: 64}, preemptible=False)
    world.running["r2"] = RunningJob("r2", "t0-a", "c2", 0, 0, {GPU: 64}, preemptible=False)
    wants_b = PendingJob(JobView("wants-b", {GPU: 16}, {GPU: 8}, {"region": "b"}), "t1-a", 0, 1)
    world.manager.add(wants_b)
    arrivals = Arrivals(walk_backlog(world.snapshot([]), world.manager))
    burst = [_job(f"b{i}", 16, "t1-b", 2 + i) for i in range(4)]  # t1-b deserves 48 of them (see above)
    for job in burst:
        world.manager.add(job)
    judged = arrivals.admit_all(world.manager, burst, {"c0", "c1", "c2"})
    assert [isinstance(judged[job.id], Admitted) for job in burst] == [True, True, True, False]
    assert "deserved share" in str(judged["b3"])
