"""Differential property (issue 30): the queue manager's walk decides exactly as the cycle from scratch.

Random event sequences, with and without flavors, lending limits, past usage and nodes on demand (jobs submitted
and cancelled, gangs ending, limits raised and lowered, queues closed and opened, clusters filling and emptying,
refusals, room made by preemption) drive one `QueueManager`, kept across cycles by those events alone, and the
same jobs as a plain list.
Every cycle both schedulers run on the same snapshot; their dispatches, preemptions, reservations, work lost,
usage, and every waiting job's reason, limit and can-never-run verdict must be equal, in the same order. The
from-scratch walk (`schedule`) is the oracle.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from federation.kernel.hyperjob import Part
from federation.kernel.resources import FLAVOR
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
from federation.scheduling.fit import ClusterView, DomainFree, JobView, NodeGroupRoom, TierFree
from federation.scheduling.flavors import FlavorInfo
from federation.scheduling.queues import QueueManager, Reasons
from federation.scheduling.running import Running

GPU = "nvidia.com/gpu"
NODE = 8


def cluster(name: str, region: str, free_nodes: int, nodes: int = 8) -> ClusterView:
    """A cluster of `nodes` 8-GPU nodes in two leaves, `free_nodes` of them free (filling the first leaf first)."""
    free = free_nodes * NODE
    leaf = nodes // 2
    leaves = [min(free_nodes, leaf), max(free_nodes - leaf, 0)]
    return ClusterView(
        name, {"region": region}, {GPU: free},
        [TierFree(0, "node", {GPU: NODE if free else 0}), TierFree(1, "leaf", {GPU: max(leaves) * NODE}),
         TierFree(2, "cluster", {GPU: free})],
        {GPU: nodes * NODE},
        [DomainFree(f"{name}-leaf{i}", 1, f"{name}-spine", {GPU: n * NODE}) for i, n in enumerate(leaves)]
        + [DomainFree(f"{name}-spine", 2, "", {GPU: free})])


class World:
    """Tenants, queues, clusters and jobs, changed by random events; the manager sees only add and remove."""

    def __init__(self, rng: random.Random, hyperjobs: bool = False) -> None:
        self.rng = rng
        self.hyperjobs = hyperjobs  # some submissions are HyperJobs' sub-jobs
        self.tenants = [TenantInfo("t0", 2), TenantInfo("t1", 1, limit={GPU: 48} if rng.random() < 0.5 else {})]
        self.queues = [QueueInfo("t0-a", "t0", 1, priority=1), QueueInfo("t0-b", "t0", 2),
                       QueueInfo("t0-p", "t0", 1), QueueInfo("t0-c", "t0", 1, parent="t0-p"),
                       QueueInfo("t1-a", "t1", 1, limit={GPU: 32}), QueueInfo("t1-b", "t1", 3)]
        self.free = {"c0": 8, "c1": 4, "c2": 6}
        # Half the worlds have GPU flavors by region, one queue preferring each and a flavored limit.
        self.flavors = [FlavorInfo("fast", GPU, {"region": "b"}), FlavorInfo("slow", GPU, {"region": "a"})] \
            if rng.random() < 0.5 else []
        if self.flavors:
            self.queues[1] = QueueInfo("t0-b", "t0", 2, flavors=("fast", "slow"))
            self.queues[5] = QueueInfo("t1-b", "t1", 3, flavors=("slow",), limit={f"{GPU}{FLAVOR}slow": 40})
        if rng.random() < 0.5:  # lenders: part of a tenant's and a queue's guarantee never lent
            self.tenants[1] = replace(self.tenants[1], guarantee={GPU: 64}, lending_limit={GPU: 16})
            self.queues[2] = replace(self.queues[2], guarantee={GPU: 32}, lending_limit={GPU: 8})
        # A queue whose gangs may go to nodes one cluster's autoscaler can add (the provisioning check).
        self.can_add = 3 if rng.random() < 0.5 else 0
        if self.can_add:
            self.queues[0] = replace(self.queues[0], admission_checks=("provisioning",))
        # Past usage counted in the order (history on), for a tenant and a queue of each
        self.past = ({"t1": {GPU: 40.5}}, {"t0-b": {GPU: 12.25}, "t0-c": {GPU: 3.0}}) if rng.random() < 0.5 \
            else ({}, {})
        self.pending: dict[str, PendingJob] = {}
        self.running: dict[str, RunningJob] = {}
        self.kept = Running()  # the same gangs, kept across cycles by the same events (the walk's)
        self.manager = QueueManager()
        self.refused: dict[str, dict[str, str]] = {}
        self.making_room: dict[str, str] = {}
        self.seq = 0

    def submit(self, n: int) -> None:
        leaves = [q.name for q in self.queues if q.name != "t0-p"] + ["t0-p", "gone"]
        for _ in range(n):
            if self.hyperjobs and self.rng.random() < 0.05:  # sub-jobs: never settled with others of their shape
                self.seq += 1
                name, queue, parts = f"h{self.seq}", self.rng.choice(leaves[:-1]), self.rng.randint(2, 3)
                for i in range(parts):
                    gpus = self.rng.choice([8, 16, 32])
                    job = PendingJob(JobView(f"{name}-{i}", {GPU: gpus}, {GPU: NODE},
                                             group=Part(name, name, i, parts, 0, 0, (), "")), queue, 0, self.seq + i)
                    self.pending[job.id] = job
                    self.manager.add(job)
                self.seq += parts
                continue
            self.seq += 1
            gpus = self.rng.choice([1, 4, 8, 16, 16, 32, 200])
            pod = min(gpus, NODE)
            mode, tier = self.rng.choice([("", 0), ("hard", 1), ("soft", 1)]) if gpus > NODE else ("", 0)
            selector = {"region": self.rng.choice(["a", "b"])} if self.rng.random() < 0.2 else {}
            job = PendingJob(JobView(f"j{self.seq}", {GPU: gpus}, {GPU: pod}, selector, mode, tier),
                             self.rng.choice(leaves), self.rng.choice([0, 0, 5]), self.seq)
            self.pending[job.id] = job
            self.manager.add(job)

    def cancel(self) -> None:
        if self.pending:
            job_id = self.rng.choice(sorted(self.pending))
            del self.pending[job_id]
            assert self.manager.remove(job_id) is not None

    def end(self) -> None:
        for job_id in self.rng.sample(sorted(self.running), len(self.running) // 3):
            gang = self.running.pop(job_id)
            self.kept.discard(job_id)
            self.free[gang.cluster] += gang.request[GPU] // NODE or 1

    def reconfigure(self) -> None:
        i = self.rng.randrange(len(self.queues))
        q = self.queues[i]
        change = self.rng.choice(["limit", "state", "priority"])
        if change == "limit":
            q = replace(q, limit={} if q.limit else {GPU: 24})
        elif change == "state":
            q = replace(q, state="CLOSED" if q.state == "OPEN" else "OPEN")
        else:
            q = replace(q, priority=2 - q.priority)
        self.queues[i] = q

    def refuse(self) -> None:
        if self.pending:
            job_id = self.rng.choice(sorted(self.pending))
            self.refused.setdefault(job_id, {})[self.rng.choice(sorted(self.free))] = "rejected it recently: test"

    def snapshot(self, pending: list[PendingJob], kept: bool = False) -> Snapshot:
        """`kept`: the gangs as the `Running` kept across cycles (the walk's), else as a fresh list (the oracle's)."""
        clusters = [cluster(name, "a" if name != "c1" else "b", max(free, 0)) for name, free in self.free.items()]
        if self.can_add:
            clusters[2] = replace(clusters[2], node_groups=(NodeGroupRoom("g", {GPU: NODE}, self.can_add),))
        capacity = {GPU: sum(c.capacity[GPU] for c in clusters)}
        running = self.kept if kept else list(self.running.values())
        return Snapshot(self.tenants, self.queues, pending, running, clusters, capacity,
                        refused={j: r for j, r in self.refused.items() if j in self.pending},
                        making_room={j: c for j, c in self.making_room.items() if j in self.pending},
                        flavors=self.flavors, past_tenants=self.past[0], past_queues=self.past[1])

    def apply(self, d: Decisions, now: int) -> None:
        for grown in d.provisioning.values():  # its nodes joined
            self.can_add -= grown.nodes
            self.free[grown.cluster] += grown.nodes
        for job_id, name in d.assign.items():
            job = self.pending.pop(job_id)
            self.manager.remove(job_id)
            self.making_room.pop(job_id, None)
            self.running[job_id] = RunningJob(job_id, job.queue, name, job.priority, job.seq, job.view.request,
                                              preemptible=job.seq % 4 != 0, started=-float(now % 7) * 100,
                                              group=job.view.group.id if job.view.group else "")
            self.kept.add(self.running[job_id])
            self.free[name] -= job.view.request[GPU] // NODE or 1
        for job_id, why in d.preempt.items():
            gang = self.running.pop(job_id)
            self.kept.discard(job_id)
            self.free[gang.cluster] += gang.request[GPU] // NODE or 1
            job = PendingJob(JobView(job_id, dict(gang.request), {GPU: min(gang.request[GPU], NODE)}), gang.queue,
                             gang.priority, gang.seq, cause=f"preempted: {why}")
            self.pending[job_id] = job
            self.manager.add(job)
        self.making_room.update(d.making_room)


def same(oracle: Decisions, walked: Decisions) -> None:
    assert walked.assign == oracle.assign
    assert walked.provisioning == oracle.provisioning and walked.checks == oracle.checks
    assert list(walked.preempt.items()) == list(oracle.preempt.items())
    assert walked.making_room == oracle.making_room
    assert walked.lost == oracle.lost
    assert list(walked.reserved.items()) == list(oracle.reserved.items())
    assert list(walked.waiting.items()) == list(oracle.waiting.items())  # every reason, in the order met
    assert list(walked.limited.items()) == list(oracle.limited.items())
    assert set(walked.cannot_run) == set(oracle.cannot_run)
    assert walked.usage == oracle.usage
    for job_id in oracle.waiting:  # looked up one by one (ExplainJob, the server's writes) as well as walked
        assert walked.waiting[job_id] == oracle.waiting[job_id]
        assert (job_id in walked.cannot_run) == (job_id in oracle.cannot_run)
        assert walked.limited.get(job_id) == oracle.limited.get(job_id)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_walk_decides_as_the_cycle_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    world = World(rng, hyperjobs=True)
    world.submit(rng.randrange(5, 60))
    for step in range(12):
        for event in rng.choices(["submit", "cancel", "end", "reconfigure", "refuse"], k=rng.randrange(1, 5)):
            if event == "submit":
                world.submit(rng.randrange(1, 15))
            else:
                getattr(world, event)()
        listed = list(world.pending.values())
        rng.shuffle(listed)  # the oracle's input order must not matter
        oracle = schedule(world.snapshot(listed))
        walked = schedule_backlog(world.snapshot([], kept=True), world.manager)
        same(oracle, walked)
        world.apply(oracle, step)


def test_a_backlog_of_one_shape_is_walked_once_per_cycle() -> None:
    """The point of the walk: past its head, a queue of jobs that fit nowhere is not visited job by job."""
    world = World(random.Random(1))
    world.free = {"c0": 0, "c1": 0, "c2": 0}
    for i in range(2_000):
        job = PendingJob(JobView(f"w{i}", {GPU: 16}, {GPU: 8}), "t0-b", 0, i)
        world.pending[job.id] = job
        world.manager.add(job)
    walked = schedule_backlog(world.snapshot([]), world.manager)
    oracle = schedule(world.snapshot(list(world.pending.values())))
    same(oracle, walked)
    reasons = walked.waiting
    assert isinstance(reasons, Reasons)
    assert len(reasons.explicit) == 1  # its head decided on its own; the other 1,999 are read from one range
    assert len(reasons.walk.log) == 2 and len(reasons) == 2_000


def test_a_load_at_once_is_the_same_manager_as_job_by_job() -> None:
    """A new leader loads every waiting job at once (`extend`): the same queues, shapes, totals and causes as the
    events one by one would leave, including a job given twice and jobs joining a queue already held."""
    world = World(random.Random(3))
    world.submit(300)
    jobs = list(world.pending.values())
    again = PendingJob(jobs[5].view, jobs[5].queue, 9, jobs[5].seq, cause="preempted: test")
    one_by_one = QueueManager()
    for job in [*jobs, again]:
        one_by_one.add(job)
    at_once = QueueManager(jobs[:100])
    at_once.extend([*jobs[100:], again])

    def contents(m: QueueManager) -> tuple[object, ...]:
        return ({q: [j.id for j in order] for q, order in m.order.items()},
                {q: {s: [j.id for j in same] for s, same in shapes.items()} for q, shapes in m.shapes.items()},
                m.totals, sorted(m.caused), sorted(m.jobs))

    assert contents(at_once) == contents(one_by_one)
    assert at_once.jobs[again.id].priority == 9


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 4))
def test_a_burst_stops_the_cycle_where_the_unbounded_one_would_have_dispatched_more(seed: int, burst: int) -> None:
    """Armada's scheduling burst: a bounded cycle dispatches exactly the first `burst` jobs the unbounded one
    would, in its order, says it was cut short, and the walk agrees with the oracle under it too."""
    rng = random.Random(seed)
    world = World(rng)
    world.submit(rng.randrange(20, 60))
    for step in range(6):
        unbounded = schedule(world.snapshot(list(world.pending.values())))
        bounded = replace(world.snapshot(list(world.pending.values())), burst=burst)
        oracle = schedule(bounded)
        same(oracle, schedule_backlog(replace(bounded, pending=[], running=world.kept), world.manager))
        assert list(oracle.assign.items()) == list(unbounded.assign.items())[:burst]
        if len(unbounded.assign) > burst:
            assert oracle.cut_short
        world.apply(oracle, step)
        world.submit(rng.randrange(0, 5))


def test_equal_shapes_are_one_object_and_share_their_amounts() -> None:
    """A million waiting jobs of a few hundred shapes: one Shape and one set of amounts per shape, kept when a view is
    pickled (the caches and the queue manager key on the shape by identity)."""
    import pickle

    a = JobView("a", {GPU: 16}, {GPU: 8}, {"region": "x"}, "hard", 1)
    b = JobView("b", {GPU: 16}, {GPU: 8}, {"region": "x"}, "hard", 1)
    c = JobView("c", {GPU: 16}, {GPU: 8}, {"region": "y"}, "hard", 1)
    assert a.shape is b.shape and a.shape is not c.shape
    assert a.request is b.request and a.largest_pod is b.largest_pod and a.cluster_selector is b.cluster_selector
    back = pickle.loads(pickle.dumps(b))
    assert back == b and back.shape is a.shape


def test_a_verdict_kept_for_a_shape_is_worked_out_again_once_a_gang_is_placed() -> None:
    """Shapes' verdicts are kept between queues while the clusters stand as they were: a gang placed in the cluster
    that a waiting shape was behind a reservation in must make its later jobs' reason be worked out again (there it
    no longer fits even once the reservation ends)."""
    x = ClusterView("x", {}, {GPU: 16}, [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 8}),
                                         TierFree(2, "spine", {GPU: 16})])
    tenants = [TenantInfo("tb", 10), TenantInfo("ta", 1), TenantInfo("tc", 1)]
    queues = [QueueInfo("b1", "tb"), QueueInfo("a1", "ta", priority=20), QueueInfo("c1", "tc", priority=10),
              QueueInfo("a2", "ta", priority=5)]

    def wide(job_id: str, queue: str, seq: int) -> PendingJob:
        return PendingJob(JobView(job_id, {GPU: 14}, {GPU: 8}), queue, 0, seq)

    pending = [PendingJob(JobView("hold", {GPU: 12}, {GPU: 4}, mode="hard", highest_tier=1), "b1", 0, 0),
               wide("s1", "a1", 1), wide("s2", "a1", 2), PendingJob(JobView("p", {GPU: 4}, {GPU: 4}), "c1", 0, 3),
               wide("s4", "a2", 4), wide("s5", "a2", 5)]
    snapshot = Snapshot(tenants, queues, pending, [], [x], {GPU: 16})
    oracle = schedule(snapshot)
    assert oracle.reserved == {"hold": "x"} and oracle.assign == {"p": "x"}
    assert oracle.waiting["s2"].startswith("behind a job of another tenant")  # 4 free + 12 held would do
    assert not oracle.waiting["s5"].startswith("behind")  # after p, 0 free + 12 held would not
    same(oracle, schedule_backlog(replace(snapshot, pending=[]), QueueManager(pending)))


def test_a_verdict_naming_the_gang_room_is_held_for_is_kept_for_its_tenant_alone() -> None:
    """Until room is held, equal shapes get equal verdicts whatever their tenant and the walk keeps one for all; once
    it is, a shape waiting behind the held room names the gang holding it to that gang's tenant alone."""
    x = ClusterView("x", {}, {GPU: 16}, [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 8}),
                                         TierFree(2, "spine", {GPU: 16})])
    tenants = [TenantInfo("tb", 10), TenantInfo("ta", 1)]
    queues = [QueueInfo("b1", "tb"), QueueInfo("a1", "ta", priority=20)]

    def wide(job_id: str, queue: str, seq: int) -> PendingJob:
        return PendingJob(JobView(job_id, {GPU: 14}, {GPU: 8}), queue, 0, seq)

    pending = [PendingJob(JobView("hold", {GPU: 12}, {GPU: 4}, mode="hard", highest_tier=1), "b1", 0, 0),
               wide("s1", "a1", 1), wide("s2", "a1", 2), wide("w1", "b1", 3), wide("w2", "b1", 4)]
    snapshot = Snapshot(tenants, queues, pending, [], [x], {GPU: 16})
    oracle = schedule(snapshot)
    assert oracle.reserved == {"hold": "x"}
    assert oracle.waiting["w2"].startswith("behind hold,")
    assert oracle.waiting["s2"].startswith("behind a job of another tenant,")
    same(oracle, schedule_backlog(replace(snapshot, pending=[]), QueueManager(pending)))


def test_a_verdict_kept_for_a_shape_is_worked_out_again_once_an_earlier_cluster_first_holds_room() -> None:
    """A shape kept as waiting behind room held in cluster x must wait behind cluster a's holder once room is first
    held in a, where it would fit but for that room too (the first such cluster by name is the one named), without
    the table being started over for every cluster that first holds room."""
    def tiers(most: int) -> list[TierFree]:
        return [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 8}), TierFree(2, "spine", {GPU: most})]

    a = ClusterView("a", {"pool": "p", "zone": "1"}, {GPU: 16}, tiers(16))
    x = ClusterView("x", {"pool": "p", "zone": "2"}, {GPU: 16}, tiers(16))
    z = ClusterView("z", {}, {GPU: 200}, tiers(200))  # room in the shares that no gang below may use
    tenants = [TenantInfo("t1", 2), TenantInfo("t3", 1)]
    queues = [QueueInfo("q1", "t1", priority=40), QueueInfo("q3", "t3", priority=20),
              QueueInfo("q4", "t1", priority=10)]

    def wide(job_id: str, queue: str, seq: int) -> PendingJob:  # no node holds its largest pod: fits nowhere
        return PendingJob(JobView(job_id, {GPU: 14}, {GPU: 12}, {"pool": "p"}), queue, 0, seq)

    def hard(job_id: str, queue: str, seq: int, zone: str) -> PendingJob:  # no leaf holds it: holds room
        return PendingJob(JobView(job_id, {GPU: 10}, {GPU: 4}, {"zone": zone}, mode="hard", highest_tier=1), queue,
                          0, seq)

    pending = [hard("h1", "q1", 0, "2"), wide("w1", "q1", 1), wide("w2", "q1", 2), hard("h3", "q3", 3, "1"),
               wide("w4", "q4", 4), wide("w5", "q4", 5)]
    snapshot = Snapshot(tenants, queues, pending, [], [a, x, z], {GPU: 232})
    oracle = schedule(snapshot)
    assert oracle.reserved["h1"] == "x" and oracle.reserved["h3"] == "a"
    assert oracle.waiting["w2"] == "behind h1, which holds the room it needs in cluster x"
    assert oracle.waiting["w5"] == "behind a job of another tenant, which holds the room it needs in cluster a"
    same(oracle, schedule_backlog(replace(snapshot, pending=[]), QueueManager(pending)))


def test_a_verdict_naming_another_tenant_is_kept_for_every_tenant_but_the_holders() -> None:
    """Whom a gang waits behind is the same text for every tenant but the holder's: worked out for one such tenant, it
    serves the others, while the holder's tenant, asking after it, is told the holder's name."""
    def tiers(most: int) -> list[TierFree]:
        return [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 8}), TierFree(2, "spine", {GPU: most})]

    x = ClusterView("x", {"pool": "p"}, {GPU: 16}, tiers(16))
    z = ClusterView("z", {"pool": "q"}, {GPU: 200}, tiers(200))  # where no wide gang may go
    tenants = [TenantInfo("tb", 10), TenantInfo("tc", 10)]
    queues = [QueueInfo("b1", "tb", priority=30), QueueInfo("c1", "tc", priority=20),
              QueueInfo("b2", "tb", priority=10)]

    def wide(job_id: str, queue: str, seq: int) -> PendingJob:
        return PendingJob(JobView(job_id, {GPU: 14}, {GPU: 8}, {"pool": "p"}), queue, 0, seq)

    pending = [PendingJob(JobView("hold", {GPU: 12}, {GPU: 4}, {"pool": "p"}, mode="hard", highest_tier=1), "b1", 0, 0),
               wide("c1a", "c1", 1), wide("c1b", "c1", 2), wide("c1c", "c1", 3),
               # b2's head goes to z (room held in x stays as it was), then its wide gangs wait behind "hold"
               PendingJob(JobView("b2a", {GPU: 1}, {GPU: 1}, {"pool": "q"}), "b2", 0, 4),
               wide("b2b", "b2", 5), wide("b2c", "b2", 6)]
    snapshot = Snapshot(tenants, queues, pending, [], [x, z], {GPU: 216})
    oracle = schedule(snapshot)
    assert oracle.reserved["hold"] == "x" and oracle.assign == {"b2a": "z"}
    assert oracle.waiting["c1c"] == "behind a job of another tenant, which holds the room it needs in cluster x"
    assert oracle.waiting["b2c"] == "behind hold, which holds the room it needs in cluster x"
    same(oracle, schedule_backlog(replace(snapshot, pending=[]), QueueManager(pending)))
