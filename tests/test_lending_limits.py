"""Lending limits (Kueue's lendingLimit): the part of a guarantee never lent to the other members of its level."""

from dataclasses import replace

import pytest

from federation.scheduling.cycle import PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fairshare import Claim, hierarchical, kept_back
from federation.scheduling.fit import ClusterView, JobView, TierFree
from federation.scheduling.flavors import FlavorInfo

GPU = "nvidia.com/gpu"


def cluster(name: str, free: int, capacity: int = 16, labels: dict[str, str] | None = None) -> ClusterView:
    return ClusterView(name, labels or {}, {GPU: free}, [TierFree(0, "node", {GPU: min(free, 8)})], {GPU: capacity})


def job(job_id: str, queue: str, gpus: int, seq: int) -> PendingJob:
    return PendingJob(JobView(job_id, {GPU: gpus}, {GPU: min(gpus, 8)}), queue, 0, seq)


def running(job_id: str, queue: str, gpus: int, seq: int, on: str = "c1") -> RunningJob:
    return RunningJob(job_id, queue, on, 0, seq, {GPU: gpus}, preemptible=True, started=-600.0)


def snap(tenants: list[TenantInfo], queues: list[QueueInfo], pending: list[PendingJob],
         gangs: list[RunningJob] = (), capacity: int = 16, **more: object) -> Snapshot:
    used = sum(g.request[GPU] for g in gangs)
    return Snapshot(tenants, queues, pending, list(gangs), [cluster("c1", capacity - used, capacity)],
                    {GPU: capacity}, **more)  # type: ignore[arg-type]


def test_kept_back_is_the_guarantee_less_the_lending_limit() -> None:
    assert kept_back({GPU: 8, "cpu": 10}, {GPU: 2}) == {GPU: 6}
    assert kept_back({GPU: 8}, {GPU: 8}) == {}  # lends it all
    assert kept_back({GPU: 8}, {}) == {}
    assert kept_back({}, {GPU: 0}) == {}  # nothing guaranteed, nothing kept


def test_what_a_lender_keeps_back_and_does_not_use_is_shared_out_to_nobody() -> None:
    lender = Claim("a", guarantee={GPU: 8}, lending_limit={GPU: 2})
    tree = hierarchical({GPU: 16}, [lender, Claim("b")], {"a": [Claim("qa", demand={GPU: 1})],
                                                            "b": [Claim("qb", demand={GPU: 16})]})
    # a keeps 6 back and wants 1 of them: 5 idle are nobody's; b deserves the 10 left
    assert tree.tenants["a"][GPU] == pytest.approx(1) and tree.tenants["b"][GPU] == pytest.approx(10)
    lends_all = hierarchical({GPU: 16}, [replace(lender, lending_limit={}), Claim("b")],
                             {"a": [Claim("qa", demand={GPU: 1})], "b": [Claim("qb", demand={GPU: 16})]})
    assert lends_all.tenants["b"][GPU] == pytest.approx(15)
    # queues of one tenant: the same among siblings
    tree = hierarchical({GPU: 16}, [Claim("t")], {"t": [Claim("q1", guarantee={GPU: 8}, lending_limit={GPU: 0}),
                                                        Claim("q2", demand={GPU: 16})]})
    assert tree.queues["q2"][GPU] == pytest.approx(8)


TENANTS = [TenantInfo("lender", guarantee={GPU: 8}, lending_limit={GPU: 2}), TenantInfo("borrower")]
QUEUES = [QueueInfo("ql", "lender"), QueueInfo("qb", "borrower")]


def test_others_never_start_in_room_a_lender_keeps_back() -> None:
    pending = [job(f"b{i}", "qb", 1, i) for i in range(16)]
    d = schedule(snap(TENANTS, QUEUES, pending))
    assert len(d.assign) == 10  # 16 less the 6 the lender keeps back
    assert d.waiting["b10"] == ("nvidia.com/gpu=6 is kept back for another tenant by lending limits: too little of "
                                "the rest is free")
    owner, needed, _ = d.limited["b10"]
    assert owner == "federation" and needed == {GPU: 1}
    # without the lending limit the borrower takes everything
    d = schedule(snap([replace(TENANTS[0], lending_limit={}), TENANTS[1]], QUEUES, pending))
    assert len(d.assign) == 16


def test_the_lender_gets_what_it_kept_back_without_reclaim() -> None:
    borrowed = [running(f"b{i}", "qb", 1, i) for i in range(10)]
    d = schedule(snap(TENANTS, QUEUES, [job("l", "ql", 6, 100)], borrowed))
    assert d.assign == {"l": "c1"} and not d.preempt
    # lending it all, the borrower held all 16 and the lender reclaims what it is guaranteed
    all_borrowed = [running(f"b{i}", "qb", 1, i) for i in range(16)]
    d = schedule(snap([replace(TENANTS[0], lending_limit={}), TENANTS[1]], QUEUES, [job("l", "ql", 6, 100)],
                      all_borrowed))
    assert not d.assign and len(d.preempt) == 6


def test_a_member_short_of_its_share_reclaims_what_was_borrowed_not_the_room_kept_back() -> None:
    tenants = [*TENANTS, TenantInfo("guaranteed", guarantee={GPU: 4})]
    queues = [*QUEUES, QueueInfo("qg", "guaranteed")]
    # the borrower took all 10 that are lent or unguaranteed, 4 of them the third tenant's guarantee: the 6 GPUs
    # free are the lender's
    borrowed = [running(f"b{i}", "qb", 1, i) for i in range(10)]
    d = schedule(snap(tenants, queues, [job("g", "qg", 4, 100)], borrowed))
    assert "g" not in d.assign and d.making_room == {"g": "c1"}
    assert len(d.preempt) == 4 and all(v.startswith("b") for v in d.preempt)
    assert d.waiting["g"] == "waiting for preempted job(s) to exit in cluster c1"
    # the next cycle, the borrower's gangs still exiting: it waits for them and evicts nothing more
    exiting = snap(tenants, queues, [job("g", "qg", 4, 100)], borrowed, making_room={"g": "c1"})
    d = schedule(exiting)
    assert not d.preempt and not d.assign and d.reserved == {"g": "c1"}
    # once they have exited it starts
    d = schedule(snap(tenants, queues, [job("g", "qg", 4, 100)], borrowed[4:], making_room={"g": "c1"}))
    assert d.assign == {"g": "c1"}
    # past its deserved share (4 guaranteed + 3 of the 6 lent and unguaranteed left over) it waits, evicting nothing
    d = schedule(snap(tenants, queues, [job("g", "qg", 8, 100)], borrowed))
    assert d.limited["g"][0] == "federation" and not d.preempt and not d.assign


def test_sibling_queues_keep_their_reserve_from_each_other_only() -> None:
    tenants = [TenantInfo("t"), TenantInfo("other")]
    queues = [QueueInfo("keeper", "t", guarantee={GPU: 8}, lending_limit={GPU: 0}), QueueInfo("sib", "t"),
              QueueInfo("outsider", "other")]
    d = schedule(snap(tenants, queues, [job(f"s{i}", "sib", 1, i) for i in range(16)]))
    assert len(d.assign) == 8 and "queue keeper" in d.waiting["s8"]
    # a queue's reserve is among its tenant's queues: other tenants are not held by it
    d = schedule(snap(tenants, queues, [job(f"o{i}", "outsider", 1, i) for i in range(16)]))
    assert len(d.assign) == 16


def test_a_flavored_reserve_keeps_its_flavor_only() -> None:
    flavors = [FlavorInfo("h100", GPU, {"gpu": "h100"}), FlavorInfo("a100", GPU, {"gpu": "a100"})]
    clusters = [cluster("fast", 8, 8, {"gpu": "h100"}), cluster("slow", 8, 8, {"gpu": "a100"})]
    tenants = [TenantInfo("lender", guarantee={f"{GPU}@h100": 8}, lending_limit={f"{GPU}@h100": 0}),
               TenantInfo("borrower")]
    s = Snapshot(tenants, QUEUES, [job(f"b{i}", "qb", 1, i) for i in range(16)], [], clusters, {GPU: 16},
                 flavors=flavors)
    d = schedule(s)
    assert len(d.assign) == 8 and set(d.assign.values()) == {"slow"}
