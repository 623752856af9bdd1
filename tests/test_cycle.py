"""The pure scheduling cycle: order, fairness, quotas, cluster choice, reservation, reclaim, preemption."""

from dataclasses import replace

from federation.scheduling.cycle import PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, DomainFree, JobView, TierFree

GPU = "nvidia.com/gpu"


def cluster(name: str, free: int, leaf: int | None = None, labels: dict | None = None) -> ClusterView:
    tiers = [TierFree(0, "node", {GPU: min(free, 8)}), TierFree(1, "leaf", {GPU: min(free, leaf or free)}),
             TierFree(2, "spine", {GPU: free})]
    return ClusterView(name, labels or {}, {GPU: free}, tiers)


def job(job_id: str, queue: str, gpus: int, seq: int, priority: int = 0, **view: object) -> PendingJob:
    return PendingJob(JobView(job_id, {GPU: gpus}, {GPU: min(gpus, 8)}, **view), queue, priority, seq)  # type: ignore


def snap(tenants: list[TenantInfo], queues: list[QueueInfo], pending: list[PendingJob], clusters: list[ClusterView],
         running: list[RunningJob] | None = None, capacity: int | None = None) -> Snapshot:
    total = capacity if capacity is not None else sum(c.free[GPU] for c in clusters) + sum(
        r.request[GPU] for r in running or [])
    return Snapshot(tenants, queues, pending, running or [], clusters, {GPU: total})


def test_weights_decide_who_gets_a_full_federation() -> None:
    pending = [job(f"a{i}", "qa", 8, i) for i in range(10)] + [job(f"b{i}", "qb", 8, 100 + i) for i in range(10)]
    d = schedule(snap([TenantInfo("ta", 1), TenantInfo("tb", 3)], [QueueInfo("qa", "ta"), QueueInfo("qb", "tb")],
                      pending, [cluster("c1", 64)]))
    assigned = sorted(d.assign)
    assert sum(j.startswith("a") for j in assigned) == 2 and sum(j.startswith("b") for j in assigned) == 6
    assert d.shares is not None and round(d.shares.tenants["tb"][GPU]) == 48
    assert d.waiting["a2"].startswith("no ready cluster fits: c1: not enough free")


def test_queue_priority_first_then_job_priority_then_age() -> None:
    pending = [job("low-old", "batch", 8, 1), job("urgent", "prod", 8, 5), job("young-high", "batch", 8, 9, 10)]
    d = schedule(snap([TenantInfo("t")], [QueueInfo("batch", "t"), QueueInfo("prod", "t", priority=5)], pending,
                      [cluster("c1", 16)]))
    assert set(d.assign) == {"urgent", "young-high"}
    d = schedule(snap([TenantInfo("t")], [QueueInfo("batch", "t")], pending[::2], [cluster("c1", 8)]))
    assert set(d.assign) == {"young-high"}  # job priority before age


def test_limits_hold_and_smaller_jobs_are_not_blocked_by_them() -> None:
    pending = [job("big", "q", 16, 1), job("a", "q", 8, 2), job("b", "q", 8, 3), job("c", "q", 8, 4)]
    d = schedule(snap([TenantInfo("t", limit={GPU: 64})], [QueueInfo("q", "t", limit={GPU: 24})], pending,
                      [cluster("c1", 64)]))
    assert set(d.assign) == {"big", "a"}
    assert d.waiting["b"] == "queue at limit nvidia.com/gpu=24"
    d = schedule(snap([TenantInfo("t", limit={GPU: 8})], [QueueInfo("q", "t")], pending, [cluster("c1", 64)]))
    assert set(d.assign) == {"a"} and d.waiting["b"] == "tenant t at limit nvidia.com/gpu=8"
    # a gang over the limit by itself could never run under it: it says so, and holds nothing up
    assert d.waiting["big"] == "cannot run: needs nvidia.com/gpu=16, more than tenant t's limit nvidia.com/gpu=8"
    assert d.cannot_run == {"big"}


def test_cluster_choice_lowest_tier_then_tightest_fit() -> None:
    clusters = [cluster("roomy", 64, leaf=8), cluster("tight", 24, leaf=16), cluster("exact", 16, leaf=16)]
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [job("j", "q", 16, 1)], clusters))
    assert d.assign == {"j": "exact"}  # fits at tier 1 in tight and exact; exact leaves least over
    hard = job("h", "q", 16, 1, mode="hard", highest_tier=1)
    other = RunningJob("r", "q2", "roomy", 0, 0, {GPU: 64}, preemptible=False)  # q is over its share: no reservation
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t"), QueueInfo("q2", "t")], [hard],
                      [cluster("roomy", 64, leaf=8)], [other], capacity=16))
    assert d.waiting["h"] == ("no ready cluster fits: roomy: no HyperNode of tier 1 or below has enough free: "
                              "nvidia.com/gpu 8/16 free")


def test_head_of_a_queue_below_its_share_holds_a_reservation() -> None:
    queues = [QueueInfo("big", "t1"), QueueInfo("small", "t2")]
    tenants = [TenantInfo("t1"), TenantInfo("t2")]
    running = [RunningJob("r", "small", "c1", 0, 0, {GPU: 48}, preemptible=False)]
    pending = [job("wide", "big", 32, 1), job("tiny", "small", 8, 2)]
    # 64 GPUs: each tenant deserves 32; "wide" would take big exactly to its share, but only 16 are free
    d = schedule(snap(tenants, queues, pending, [cluster("c1", 16)], running))
    assert d.waiting["wide"].startswith("waiting for resources in cluster c1, reserved so smaller jobs do not starve")
    assert "tiny" not in d.assign  # the free GPUs are held for the wide gang
    d = schedule(snap(tenants, queues, pending[1:], [cluster("c1", 16)], running))
    assert d.assign == {"tiny": "c1"}  # without the wide gang waiting, the small one runs


def test_jobs_behind_a_reservation_say_why_unless_they_fit_nowhere_anyway() -> None:
    tenants = [TenantInfo("t1"), TenantInfo("t2")]
    queues = [QueueInfo("big", "t1"), QueueInfo("small", "t2"), QueueInfo("first", "t2", priority=1)]
    running = [RunningJob("r", "small", "c1", 0, 0, {GPU: 48}, preemptible=False)]
    pending = [job("giant-elsewhere", "first", 128, 0), job("wide", "big", 32, 1), job("after", "big", 8, 2),
               job("giant", "big", 128, 3)]
    d = schedule(snap(tenants, queues, pending, [cluster("c1", 16)], running))
    assert d.waiting["wide"].startswith("waiting for resources in cluster c1, reserved")
    assert d.waiting["after"] == "behind wide, which holds the room it needs in cluster c1"
    # Both giants are past their shares: served after the wide gang within its share (queue "first"'s priority
    # orders it only among heads past a share), they find the free GPUs held and say so alike.
    assert d.waiting["giant"] == d.waiting["giant-elsewhere"] == (
        "no ready cluster fits: c1: not enough free: nvidia.com/gpu 0/128 free")


def test_reclaim_takes_whole_gangs_from_over_share_queues_youngest_first() -> None:
    tenants = [TenantInfo("owner", guarantee={GPU: 16}), TenantInfo("borrower")]
    queues = [QueueInfo("mine", "owner", guarantee={GPU: 16}), QueueInfo("lent", "borrower"),
              QueueInfo("locked", "borrower", reclaimable=False)]
    running = [RunningJob(f"b{i}", "lent", "c1", 0, i, {GPU: 8}, preemptible=True) for i in range(6)]
    running += [RunningJob("keep", "locked", "c1", 0, 99, {GPU: 8}, preemptible=True),
                RunningJob("vip", "lent", "c1", 0, 100, {GPU: 8}, preemptible=False)]
    d = schedule(snap(tenants, queues, [job("need", "mine", 16, 200)], [cluster("c1", 0)], running, capacity=64))
    assert set(d.preempt) == {"b5", "b4"}  # two youngest whole gangs: exactly enough
    # the borrower reads no name of the owner's (another tenant)
    assert set(d.preempt.values()) == {"reclaimed for a job of another tenant, below its deserved share"}
    assert d.waiting["need"] == "waiting for preempted job(s) to exit in cluster c1"


HOUR = 3600.0  # (the snapshots here are taken at 0: a gang started=-HOUR has run an hour)


def _borrowing(running: list[RunningJob]) -> Snapshot:
    """An owner due 16 GPUs, with nothing free; a borrower running `running` in queue `lent`."""
    tenants = [TenantInfo("owner", guarantee={GPU: 16}), TenantInfo("borrower")]
    queues = [QueueInfo("mine", "owner", guarantee={GPU: 16}), QueueInfo("lent", "borrower")]
    return snap(tenants, queues, [job("need", "mine", 8, 200)], [cluster("c1", 0)], running, capacity=64)


def test_reclaim_takes_the_gang_losing_least_work_since_its_checkpoint_and_reports_it() -> None:
    running = [RunningJob(f"b{i}", "lent", "c1", 0, i, {GPU: 8}, preemptible=True) for i in range(8)]
    running[0] = RunningJob("saved", "lent", "c1", 0, 0, {GPU: 8}, True, started=-(10 * HOUR + 60), checkpoint=HOUR)
    running[7] = RunningJob("young", "lent", "c1", 0, 7, {GPU: 8}, True, started=-600)
    running[1:7] = [RunningJob(f"b{i}", "lent", "c1", 0, i, {GPU: 8}, True, started=-(5 * HOUR)) for i in range(1, 7)]
    d = schedule(_borrowing(running))
    assert set(d.preempt) == {"saved"}  # a minute since its last checkpoint: less lost than the 10-minute-old one
    assert d.lost == {"saved": 60 * 8}
    running[0] = RunningJob("saved", "lent", "c1", 0, 0, {GPU: 8}, True, started=-(10 * HOUR + 60))  # no checkpoints
    d = schedule(_borrowing(running))
    assert set(d.preempt) == {"young"} and d.lost == {"young": 600 * 8}


def test_a_gang_in_its_protected_run_time_or_near_its_end_is_not_reclaimed() -> None:
    protected = [RunningJob(f"p{i}", "lent", "c1", 0, i, {GPU: 8}, True, started=-60, protected_run=600)
                 for i in range(8)]
    d = schedule(_borrowing(protected))
    assert not d.preempt and "protected run time" in d.waiting["need"]
    # 9 h into an expected 10 h: losing 9 h of work to save a 1 h wait does not pay; 1 h into 10 h does
    ending = [RunningJob(f"e{i}", "lent", "c1", 0, i, {GPU: 8}, True, started=-(9 * HOUR), expected=10 * HOUR)
              for i in range(8)]
    d = schedule(_borrowing(ending))
    assert not d.preempt and "would lose more work" in d.waiting["need"]
    ending[3] = RunningJob("early", "lent", "c1", 0, 3, {GPU: 8}, True, started=-HOUR, expected=10 * HOUR)
    assert set(schedule(_borrowing(ending)).preempt) == {"early"}
    # past its expected end it is expected to run half as long again as it has: 30 h in, not worth 30 h lost
    overdue = [RunningJob(f"o{i}", "lent", "c1", 0, i, {GPU: 8}, True, started=-(30 * HOUR), expected=10 * HOUR,
                          checkpoint=4 * HOUR) for i in range(8)]
    assert set(schedule(_borrowing(overdue)).preempt) == {"o7"}  # 2 h since its checkpoint < 15 h to go


def test_reclaim_never_leaves_the_lender_below_the_reclaimer() -> None:
    """Kueue's LessThanOrEqualToFinalShare: found by the ITP trace replay, where equal tenants took the same
    GPUs from each other back and forth (490,000 evictions for 69,000 jobs) without this rule."""
    tenants = [TenantInfo("a"), TenantInfo("b")]
    queues = [QueueInfo("qa", "a"), QueueInfo("qb", "b")]
    running = [RunningJob("big", "qb", "c1", 0, 1, {GPU: 24}, preemptible=True),
               RunningJob("small", "qb", "c1", 0, 2, {GPU: 8}, preemptible=True)]
    pending = [job("need", "qa", 16, 3), job("more", "qb", 8, 4)]  # both queues deserve 16 of 32
    d = schedule(snap(tenants, queues, pending, [cluster("c1", 0)], running, capacity=32))
    assert d.preempt == {}  # evicting 'big' too would leave qb at 0 while qa stood at its full share
    assert d.waiting["need"].startswith("waiting for resources in cluster c1, reserved")
    lighter = [RunningJob(f"g{i}", "qb", "c1", 0, i, {GPU: 8}, preemptible=True) for i in range(4)]
    d = schedule(snap(tenants, queues, pending, [cluster("c1", 0)], lighter, capacity=32))
    assert set(d.preempt) == {"g3", "g2"}  # qb keeps 16, its share, exactly what qa will have


def test_a_gang_with_a_hard_tier_limit_reserves_instead_of_evicting() -> None:
    """Evicting is judged on totals, which cannot promise one leaf: the gang would evict, not fit, evict
    again (the ITP replay's thrash). It reserves; a gang free to spread still reclaims."""
    tenants = [TenantInfo("a"), TenantInfo("b")]
    queues = [QueueInfo("qa", "a"), QueueInfo("qb", "b")]
    running = [RunningJob(f"g{i}", "qb", "c1", 0, i, {GPU: 8}, preemptible=True) for i in range(4)]
    hard = job("hard", "qa", 16, 9, mode="hard", highest_tier=1)
    d = schedule(snap(tenants, queues, [hard], [cluster("c1", 0)], running, capacity=32))
    assert d.preempt == {} and d.waiting["hard"].startswith("waiting for resources in cluster c1, reserved")
    d = schedule(snap(tenants, queues, [job("soft", "qa", 16, 9, mode="soft", highest_tier=1)], [cluster("c1", 0)],
                      running, capacity=32))
    assert set(d.preempt) == {"g3", "g2"}


def test_priority_preempts_within_its_queue_never_a_non_preemptible_job() -> None:
    running = [RunningJob("fixed", "q", "c1", 10, 1, {GPU: 8}, preemptible=False),
               RunningJob("spare", "q", "c1", 10, 2, {GPU: 8}, preemptible=True)]
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [job("hi", "q", 8, 3, priority=100)],
                      [cluster("c1", 0)], running, capacity=16))
    assert d.preempt == {"spare": "preempted for hi (priority 100) in queue q"}
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [job("hi", "q", 16, 3, priority=100)],
                      [cluster("c1", 0)], running, capacity=16))
    assert d.preempt == {}  # evicting 'spare' alone would not make room: nothing is preempted


def test_a_job_waits_for_the_gangs_preempted_for_it_and_keeps_their_room() -> None:
    running = [RunningJob(f"low{i}", "q", c, 10, i, {GPU: 8}, preemptible=True) for i, c in enumerate("aabb")]
    clusters = [cluster("a", 0), cluster("b", 0)]
    first = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [job("hi", "q", 8, 9, priority=100)],
                          clusters, running, capacity=32))
    assert len(first.preempt) == 1 and first.making_room == {"hi": "a"}
    still = [r for r in running if r.id not in first.preempt]
    pending = [job("hi", "q", 8, 9, priority=100), job("next", "q", 8, 10)]
    # The victim has not exited yet (no free GPU shown): nothing more is preempted, the job waits.
    d = schedule(Snapshot([TenantInfo("t")], [QueueInfo("q", "t")], pending, still, clusters, {GPU: 32},
                          making_room={"hi": "a"}))
    assert d.preempt == {} and d.assign == {}
    assert d.waiting["hi"] == "waiting for preempted job(s) to exit in cluster a"
    # It has exited: the job takes the room made for it.
    d = schedule(Snapshot([TenantInfo("t")], [QueueInfo("q", "t")], pending, still,
                          [cluster("a", 8), cluster("b", 0)], {GPU: 32}, making_room={"hi": "a"}))
    assert d.assign == {"hi": "a"} and d.preempt == {}


def test_closed_queues_and_disabled_tenants_explain_themselves() -> None:
    queues = [QueueInfo("shut", "t", state="CLOSED"), QueueInfo("q", "off")]
    d = schedule(snap([TenantInfo("t"), TenantInfo("off", disabled=True)], queues,
                      [job("a", "shut", 8, 1), job("b", "q", 8, 2)], [cluster("c1", 64)]))
    assert d.assign == {} and d.waiting == {"a": "queue shut is closed", "b": "tenant off is disabled"}
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [job("a", "q", 8, 1)], []))
    assert d.waiting == {"a": "no member cluster is ready"}


def capacity_cluster(name: str, free: int, capacity: int, leaf_capacity: int, labels: dict | None = None,
                     node: int = 8) -> ClusterView:
    """A cluster whose agent reports what one node and one leaf hold at all, beside what is free."""
    tiers = [TierFree(0, "node", {GPU: min(free, node)}, {GPU: node}),
             TierFree(1, "leaf", {GPU: min(free, leaf_capacity)}, {GPU: leaf_capacity}),
             TierFree(2, "spine", {GPU: free}, {GPU: capacity})]
    return ClusterView(name, labels or {}, {GPU: free}, tiers, capacity={GPU: capacity})


def test_a_gang_that_can_never_run_says_so_holds_nothing_and_blocks_nobody() -> None:
    """The issue's first example: 8 pods x 8 GPUs under a hard tier-1 limit where no leaf holds 64 GPUs."""
    clusters = [capacity_cluster("h100", 32, 256, 32), capacity_cluster("gb300", 32, 288, 32)]
    leaf = job("leaf-too-small-9", "q", 64, 1, mode="hard", highest_tier=1)
    after = job("after", "q", 32, 2)
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [leaf, after], clusters, capacity=544))
    assert d.waiting["leaf-too-small-9"] == ("cannot run: needs nvidia.com/gpu=64 within one HyperNode of tier 1; "
                                             "the most any cluster offers is nvidia.com/gpu=32 (h100)")
    assert d.cannot_run == {"leaf-too-small-9"} and d.reserved == {}
    assert "after" in d.assign  # nothing holds it up
    # Larger than any cluster: the reason says what the largest cluster has, not a passing limit.
    huge = job("huge", "q", 512, 3)
    d = schedule(snap([TenantInfo("t", limit={GPU: 1024})], [QueueInfo("q", "t")], [huge], clusters, capacity=544))
    assert d.waiting["huge"] == ("cannot run: needs nvidia.com/gpu=512 in one cluster; the most any cluster offers "
                                 "is nvidia.com/gpu=288 (gb300)")
    big_pod = PendingJob(JobView("fat", {GPU: 16}, {GPU: 16}), "q", 0, 4)
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [big_pod], clusters, capacity=544))
    assert d.waiting["fat"] == ("cannot run: needs nvidia.com/gpu=16 on one node for its largest pod; the most any "
                                "cluster offers is nvidia.com/gpu=8 (h100)")


def test_a_waiting_gangs_reason_names_a_cluster_too_small_for_it_the_same_whatever_runs_there() -> None:
    """A cluster that could hold the gang once its gangs end is "not enough free" with its free room; one that never
    could is "too small" with what it has in all, which a gang starting or ending there does not change."""
    gang = job("big", "q", 16, 1)
    reasons = set()
    for free in (8, 7, 0):
        clusters = [capacity_cluster("large", 0, 64, 32), capacity_cluster("small", free, 8, 8)]
        d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [gang], clusters, capacity=72))
        reasons.add(d.waiting["big"])
    assert len(reasons) == 1, reasons  # the same text each time: not rewritten
    assert "large: not enough free: nvidia.com/gpu 0/16 free; small: too small: nvidia.com/gpu 8/16 in all" in \
        reasons.pop()


def test_a_reservation_does_not_hold_up_its_queue_elsewhere_or_in_room_it_does_not_need() -> None:
    tenants = [TenantInfo("t1"), TenantInfo("t2")]
    queues = [QueueInfo("big", "t1"), QueueInfo("other", "t2")]
    running = [RunningJob("r", "other", "a", 0, 0, {GPU: 48}, preemptible=False)]
    clusters = [capacity_cluster("a", 16, 64, 64), capacity_cluster("b", 8, 8, 8)]
    # "wide" (32) fits only in a, once r ends: it holds a's room; "small" (8) goes to b at once.
    pending = [job("wide", "big", 32, 1), job("small", "big", 8, 2), job("also-a", "big", 8, 3)]
    d = schedule(snap(tenants, queues, pending, clusters, running, capacity=72))
    assert d.reserved == {"wide": "a"} and d.assign == {"small": "b"}
    assert d.waiting["also-a"] == "behind wide, which holds the room it needs in cluster a"


def test_a_reservation_is_only_where_the_gang_could_ever_fit() -> None:
    tenants = [TenantInfo("t1"), TenantInfo("t2")]
    queues = [QueueInfo("q", "t1"), QueueInfo("o", "t2")]
    running = [RunningJob("r", "o", "roomy", 0, 0, {GPU: 64}, preemptible=False),
               RunningJob("s", "o", "narrow", 0, 0, {GPU: 16}, preemptible=False)]
    # narrow has the most free now, but its leaves hold 8: a hard tier-1 16-GPU gang could never fit there
    clusters = [capacity_cluster("roomy", 0, 64, 16), capacity_cluster("narrow", 16, 32, 8)]
    hard = job("hard", "q", 16, 1, mode="hard", highest_tier=1)
    d = schedule(snap(tenants, queues, [hard], clusters, running, capacity=96))
    assert d.reserved == {"hard": "roomy"}


def test_a_queue_below_its_share_reclaims_from_an_over_share_sibling_of_its_tenant() -> None:
    tenants = [TenantInfo("t")]
    queues = [QueueInfo("mine", "t", guarantee={GPU: 16}), QueueInfo("sibling", "t")]
    running = [RunningJob(f"s{i}", "sibling", "c1", 0, i, {GPU: 8}, preemptible=True) for i in range(8)]
    d = schedule(snap(tenants, queues, [job("need", "mine", 16, 9)], [cluster("c1", 0)], running, capacity=64))
    assert set(d.preempt) == {"s7", "s6"} and d.making_room == {"need": "c1"}
    assert all(r.startswith("reclaimed for need") for r in d.preempt.values())


def test_a_gang_with_a_hard_tier_limit_frees_the_one_hypernode_that_costs_least() -> None:
    """Topology-aware preemption: leaf l1 has 8 GPUs free and one borrowed gang; leaf l0 two. The 16-GPU gang
    limited to tier 1 evicts the one gang in l1, not anything in l0 and not by whole-cluster totals."""
    tenants = [TenantInfo("owner", guarantee={GPU: 16}), TenantInfo("borrower")]
    queues = [QueueInfo("mine", "owner", guarantee={GPU: 16}), QueueInfo("lent", "borrower")]
    domains = [DomainFree("s", 2, "", {GPU: 8}), DomainFree("l0", 1, "s", {GPU: 0}),
               DomainFree("l1", 1, "s", {GPU: 8})]
    c1 = ClusterView("c1", {}, {GPU: 8}, [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 8}),
                                          TierFree(2, "spine", {GPU: 8})], domains=domains)
    running = [RunningJob("young", "lent", "c1", 0, 3, {GPU: 8}, True, started=-(HOUR / 2), hypernode="l0"),
               RunningJob("younger", "lent", "c1", 0, 4, {GPU: 8}, True, started=-(HOUR / 4), hypernode="l0"),
               RunningJob("old", "lent", "c1", 0, 1, {GPU: 8}, True, started=-HOUR, hypernode="l1")]
    hard = job("need", "mine", 16, 9, mode="hard", highest_tier=1)
    d = schedule(snap(tenants, queues, [hard], [c1], running, capacity=32))
    assert set(d.preempt) == {"old"} and d.making_room == {"need": "c1"}
    assert d.lost == {"old": HOUR * 8}
    # The gang in l1 protected, l0 freed only by taking the borrower below its share: nothing is evicted.
    running[2] = RunningJob("old", "lent", "c1", 0, 1, {GPU: 8}, True, started=-HOUR, protected_run=HOUR + 60,
                            hypernode="l1")
    d = schedule(snap(tenants, queues, [hard], [c1], running, capacity=32))
    assert d.preempt == {} and d.waiting["need"].endswith("the queues over their share would drop below it")


def test_a_hard_tier_gang_its_cluster_could_hold_moves_small_young_gangs_out_of_one_hypernode() -> None:
    """16 GPUs free in c1, 8 in each leaf: the 16-GPU gang limited to tier 1 fits no leaf, and nobody is over
    their share to reclaim from. The young 8-GPU gang in l0 is moved (it restarts on the room outside l0); the
    one in l1, hours into its run, is not: moving it would lose more than the budget allows."""
    tenants = [TenantInfo("owner"), TenantInfo("other")]
    queues = [QueueInfo("mine", "owner"), QueueInfo("theirs", "other")]
    domains = [DomainFree("s", 2, "", {GPU: 16}), DomainFree("l0", 1, "s", {GPU: 8}),
               DomainFree("l1", 1, "s", {GPU: 8})]
    c1 = ClusterView("c1", {}, {GPU: 16}, [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 8}),
                                           TierFree(2, "spine", {GPU: 16})], domains=domains)
    young = RunningJob("young", "theirs", "c1", 0, 2, {GPU: 8}, True, started=-60, hypernode="l0")
    old = RunningJob("old", "theirs", "c1", 0, 1, {GPU: 8}, True, started=-(3 * HOUR), hypernode="l1")
    hard = job("need", "mine", 16, 9, mode="hard", highest_tier=1)
    d = schedule(snap(tenants, queues, [hard], [c1], [young, old], capacity=32))
    assert set(d.preempt) == {"young"} and d.making_room == {"need": "c1"} and d.lost == {"young": 60 * 8}
    assert d.preempt["young"] == "moved to restart elsewhere in its cluster, making one HyperNode whole for a job " \
                                 "of another tenant"
    for blocked in (replace(young, started=-(3 * HOUR)),  # loses too much
                    replace(young, request={GPU: 16}),  # larger than one of the gang's pods
                    replace(young, priority=5),  # above the gang's priority
                    replace(young, preemptible=False)):
        d = schedule(snap(tenants, queues, [hard], [c1], [blocked, old]))  # `other` holds no more than its share
        assert d.preempt == {} and d.waiting["need"].startswith("waiting for resources in cluster c1"), blocked
    short = replace(c1, free={GPU: 8}, domains=[DomainFree("s", 2, "", {GPU: 8}), DomainFree("l0", 1, "s", {GPU: 8}),
                                                 DomainFree("l1", 1, "s", {GPU: 0})])
    d = schedule(snap(tenants, queues, [hard], [short], [young, old], capacity=24))
    assert d.preempt == {}  # short of room in the cluster, not of room in one place: not moving's business


def test_a_queue_that_does_not_reclaim_says_which_rule_stopped_it() -> None:
    tenants = [TenantInfo("owner", guarantee={GPU: 16}), TenantInfo("borrower")]
    queues = [QueueInfo("mine", "owner", guarantee={GPU: 16}), QueueInfo("lent", "borrower")]
    fixed = [RunningJob(f"b{i}", "lent", "c1", 0, i, {GPU: 8}, preemptible=False) for i in range(8)]
    d = schedule(snap(tenants, queues, [job("need", "mine", 16, 9)], [cluster("c1", 0)], fixed, capacity=64))
    assert d.preempt == {}
    assert d.waiting["need"].endswith(
        "not reclaimed: the queues over their share run no preemptible gangs that would make room")
    hard = job("need", "mine", 16, 9, mode="hard", highest_tier=1)
    loose = [RunningJob(f"b{i}", "lent", "c1", 0, i, {GPU: 8}, preemptible=True) for i in range(8)]
    d = schedule(snap(tenants, queues, [hard], [cluster("c1", 0)], loose, capacity=64))
    assert d.preempt == {} and "not reclaimed: a gang with a hard tier limit evicts only inside a HyperNode, and " \
        "of the clusters that could hold it c1 report no HyperNodes" in d.waiting["need"]
    # Issue 42 (3): a cluster that lists its HyperNodes but sent the gang back was said to report none.
    listed = replace(cluster("c1", 0), domains=[DomainFree("s", 2, "", {GPU: 0}), DomainFree("l0", 1, "s", {GPU: 0})])
    sent_back = replace(snap(tenants, queues, [hard], [listed], loose, capacity=64),
                        refused={"need": {"c1": "rejected it recently: no node with 8 free"}})
    d = schedule(sent_back)
    assert d.preempt == {} and "of the clusters that could hold it c1 sent it back recently" in d.waiting["need"], \
        d.waiting["need"]
    # Many clusters are not named one by one: at 1,000 clusters the reason listed hundreds of them, and changed
    # whenever one joined or left. One that did send the gang back is still named.
    many = [cluster(f"c{i}", 0) for i in range(1, 6)]
    spread = [replace(gang, cluster=many[i % 5].name) for i, gang in enumerate(loose)]
    for refusals, said in (({}, "more than 3 report no HyperNodes"),
                           ({"c2": "rejected it recently"}, "c2 sent it back recently and more than 3 report no "
                                                             "HyperNodes"),
                           ({"c2": "rejected it recently", "c3": "rejected it recently"},
                            "c2, c3 sent it back recently and c1, c4, c5 report no HyperNodes")):
        d = schedule(replace(snap(tenants, queues, [hard], many, spread, capacity=64), refused={"need": refusals}))
        assert d.preempt == {} and f"of the clusters that could hold it {said}" in d.waiting["need"], d.waiting["need"]
    locked = [QueueInfo("mine", "owner", guarantee={GPU: 16}), QueueInfo("lent", "borrower", reclaimable=False)]
    d = schedule(snap(tenants, locked, [job("need", "mine", 16, 9)], [cluster("c1", 0)], loose, capacity=64))
    assert d.preempt == {}
    assert d.waiting["need"].endswith("not reclaimed: no reclaimable queue holds more than its deserved share")


def test_a_preempted_job_says_who_preempted_it_until_it_runs_again() -> None:
    cause = "reclaimed for need-7 (priority 0) in queue mine"
    pending = [PendingJob(JobView("victim", {GPU: 16}, {GPU: 8}), "q", 0, 1, cause)]
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], pending, [cluster("c1", 8)], capacity=8))
    assert d.waiting["victim"].startswith(f"{cause}; ")
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], pending, [cluster("c1", 16)]))
    assert d.assign == {"victim": "c1"} and "victim" not in d.waiting


def test_flavors_share_each_gpu_model_and_a_guarantee_of_one_model_reclaims_it() -> None:
    """The issue's example: a queue guaranteed 16 H100 GPUs waits while another tenant holds all 256 of them,
    because without flavors shares are computed over all 544 GPUs of both models."""
    from federation.scheduling.flavors import FlavorInfo

    h100 = capacity_cluster("h100", 0, 256, 32, {"accelerator": "h100"})
    gb300 = capacity_cluster("gb300", 288, 288, 72, {"accelerator": "gb300"})
    tenants = [TenantInfo("research"), TenantInfo("product")]
    held = [RunningJob(f"p{i}", "train", "h100", 0, i, {GPU: 8}, preemptible=True) for i in range(32)]
    want = job("need-h100", "serve", 16, 100, cluster_selector={"accelerator": "h100"})

    def cycle(guarantee: dict, flavors: list) -> object:
        queues = [QueueInfo("serve", "product", guarantee=guarantee), QueueInfo("train", "research")]
        return schedule(Snapshot(tenants, queues, [want], held, [h100, gb300], {GPU: 544}, flavors=flavors))

    d = cycle({GPU: 16}, [])
    assert d.preempt == {}  # research deserves 272 of 544 GPUs: at 256 it is under, so nothing is reclaimed
    flavors = [FlavorInfo("h100", GPU, {"accelerator": "h100"}), FlavorInfo("gb300", GPU, {"accelerator": "gb300"})]
    d = cycle({f"{GPU}@h100": 16}, flavors)
    assert len(d.preempt) == 2 and d.making_room == {"need-h100": "h100"}  # over its H100 share: two gangs back
    assert d.shares is not None and d.shares.queues["serve"][f"{GPU}@h100"] == 16


def test_a_queue_uses_its_flavors_in_its_order_and_never_another() -> None:
    from federation.scheduling.flavors import FlavorInfo

    flavors = [FlavorInfo("h100", GPU, {"accelerator": "h100"}), FlavorInfo("gb300", GPU, {"accelerator": "gb300"})]
    clusters = [capacity_cluster("h100", 16, 64, 32, {"accelerator": "h100"}),
                capacity_cluster("gb300", 64, 64, 64, {"accelerator": "gb300"})]
    queues = [QueueInfo("q", "t", flavors=("h100", "gb300")), QueueInfo("only", "t", flavors=("gb300",))]
    pending = [job("a", "q", 16, 1), job("b", "q", 16, 2), job("c", "only", 8, 3)]
    d = schedule(Snapshot([TenantInfo("t")], queues, pending, [], clusters, {GPU: 128}, flavors=flavors))
    assert d.assign == {"a": "h100", "b": "gb300", "c": "gb300"}  # h100 first while it has room
    limited = [QueueInfo("q", "t", limit={f"{GPU}@h100": 8})]
    d = schedule(Snapshot([TenantInfo("t")], limited, [job("a", "q", 16, 1)], [], clusters, {GPU: 128},
                          flavors=flavors))
    assert d.assign == {"a": "gb300"}  # its H100 limit keeps it off h100


def test_hierarchical_queues_share_their_parent_and_keep_its_limit() -> None:
    """Volcano's hierarchy root/eng/{prod,dev} with weights 3:1 under eng, beside a flat queue of the tenant."""
    queues = [QueueInfo("eng", "t", 3), QueueInfo("prod", "t", 3, parent="eng"),
              QueueInfo("dev", "t", 1, parent="eng"), QueueInfo("ops", "t", 1)]
    pending = [job(f"{q}{i}", q, 4, 100 * n + i) for n, q in enumerate(["prod", "dev", "ops"]) for i in range(20)]
    d = schedule(snap([TenantInfo("t")], queues, pending, [cluster("c1", 64)]))
    held = {q: 4 * sum(j.startswith(q) for j in d.assign) for q in ("prod", "dev", "ops")}
    assert held == {"prod": 36, "dev": 12, "ops": 16}  # eng deserves 48 (3:1 with ops), shared 3:1 below it
    assert d.shares is not None and round(d.shares.queues["eng"][GPU]) == 48 and d.usage["eng"] == {GPU: 48}
    limited = [QueueInfo("eng", "t", 3, limit={GPU: 24}), *queues[1:]]
    d = schedule(snap([TenantInfo("t")], limited, pending, [cluster("c1", 64)]))
    assert d.usage["eng"] == {GPU: 24} and d.waiting["dev19"] == "parent queue eng at limit nvidia.com/gpu=24"
    closed = [QueueInfo("eng", "t", 3, state="CLOSED"), *queues[1:]]
    d = schedule(snap([TenantInfo("t")], closed, pending, [cluster("c1", 64)]))
    assert d.waiting["prod0"] == "parent queue eng is closed" and all(j.startswith("ops") for j in d.assign)
    stray = [job("stray", "eng", 4, 999)]  # a job left in a queue that has since become a parent
    d = schedule(snap([TenantInfo("t")], queues, stray, [cluster("c1", 64)]))
    assert d.waiting["stray"] == "queue eng is a parent queue: jobs go to its leaf queues"


def test_queue_priority_never_hands_out_room_a_sibling_then_reclaims() -> None:
    """Issue 42 (4): freed room went to the high-priority queue past its deserved share, then its low-priority
    sibling, under its share, reclaimed it (7 preemptions of 7 jobs in 18 s). The rule: priority orders the heads
    that stay within their shares; a head past its share comes after every one of those, so room past a share is
    only what no sibling within its share could use now. Over cycles in which jobs end one by one, nothing
    dispatched is reclaimed, and each queue ends at its share."""
    tenants = [TenantInfo("t")]
    queues = [QueueInfo("hi", "t", priority=10), QueueInfo("lo", "t")]
    running = [RunningJob("hi-r0", "hi", "c1", 0, 0, {GPU: 8}, True, started=-3600),
               RunningJob("hi-r1", "hi", "c1", 0, 1, {GPU: 8}, True, started=-3600),
               RunningJob("lo-r0", "lo", "c1", 0, 2, {GPU: 8}, True, started=-3600)]
    pending = [job(f"hi{i}", "hi", 8, 10 + i) for i in range(6)] + [job(f"lo{i}", "lo", 8, 20 + i) for i in range(6)]
    free, dispatched = 8, set()
    for step in range(6):
        d = schedule(snap(tenants, queues, pending, [cluster("c1", free)], running, capacity=32))
        assert not set(d.preempt) & dispatched, (step, d.preempt)
        assert not d.preempt, (step, d.preempt)  # nobody is ever past a share a sibling is short of
        starts = {i for i in d.assign}
        dispatched |= starts
        running += [RunningJob(p.id, p.queue, "c1", 0, p.seq, p.view.request, True, started=-1.0)
                    for p in pending if p.id in starts]
        pending = [p for p in pending if p.id not in starts]
        free -= 8 * len(starts)
        held = {q: sum(r.request[GPU] for r in running if r.queue == q) for q in ("hi", "lo")}
        # Each deserves 16 of the 32 GPUs: neither is past it while the other, short of it, waits.
        assert not any(held[a] > 16 and held[b] < 16 for a, b in (("hi", "lo"), ("lo", "hi"))), (step, held)
        assert held["lo"] == 16 or step == 0, (step, held)  # the room that freed went where it was short
        running.sort(key=lambda r: (r.started, r.seq))  # the longest running ends next
        ended, running = running[0], running[1:]
        free += ended.request[GPU]


def test_gangs_are_fitted_node_by_node_to_what_agents_report_free() -> None:
    """Issue 42 (3, 10): the server judged a gang by free totals and the largest free node, the agent by node: with
    64 GPUs free, one node's 8 of them taken, a second gang of two 8-GPU pods was sent and refused. The agents
    report how many nodes have each number of GPUs free; a cycle fits pods to it, and takes a gang's pods off it
    as the agent would place them."""
    hist = (0, 0, 0, 0, 10, 0, 0, 0, 3)  # 10 nodes with 4 GPUs free, 3 with 8: 64 free
    c1 = replace(cluster("c1", 64), gpu_free_nodes=hist)
    a, b = job("a", "q", 16, 1, pod_gpus=8), job("b", "q", 16, 2, pod_gpus=8)
    small = job("small", "q", 16, 3, pod_gpus=4)
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [a, b, small], [c1]))
    assert d.assign == {"a": "c1", "small": "c1"}  # b's second pod has no node with 8 free once a is placed
    assert "c1: its nodes hold 1 of its 2 pods of 8 nvidia.com/gpu" in d.waiting["b"], d.waiting["b"]
    unreported = replace(c1, gpu_free_nodes=None)  # an agent that does not say: totals, as before
    d = schedule(snap([TenantInfo("t")], [QueueInfo("q", "t")], [a, b], [unreported]))
    assert d.assign == {"a": "c1", "b": "c1"}
