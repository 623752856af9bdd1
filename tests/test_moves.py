"""Issue 42 (5), the rule: a gang on degraded hardware goes only where it would run on healthy hardware now."""

from federation.scheduling.fit import ClusterView, JobView, TierFree
from federation.scheduling.moves import healthier

GPU = "nvidia.com/gpu"


def cluster(name: str, free: int, healthy: int | None = None, labels: dict[str, str] | None = None) -> ClusterView:
    """One leaf of 8-GPU nodes with `free` GPUs free, `healthy` of them on healthy hardware (None: all)."""
    tiers = [TierFree(0, "node", {GPU: min(free, 8)}, {GPU: 8}), TierFree(1, "leaf", {GPU: free}, {GPU: 32})]
    sound = None if healthy is None else [TierFree(0, "node", {GPU: min(healthy, 8)}, {GPU: 8}),
                                          TierFree(1, "leaf", {GPU: healthy}, {GPU: 32})]
    return ClusterView(name, labels or {}, {GPU: free}, tiers, capacity={GPU: 32}, healthy_tiers=sound)


GANG = JobView("g", {GPU: 16}, {GPU: 8}, mode="hard", highest_tier=1)


def test_only_a_cluster_with_healthy_room_now_takes_it() -> None:
    assert healthier(GANG, [cluster("home", 0), cluster("b", 8)], "home") is None  # no room elsewhere
    assert healthier(GANG, [cluster("home", 0), cluster("b", 32, healthy=8)], "home") is None  # room, degraded
    assert healthier(GANG, [cluster("home", 0), cluster("c", 16), cluster("b", 32, healthy=16)], "home") == "b"
    assert healthier(GANG, [cluster("home", 32)], "home") is None  # never its own cluster


def test_refused_busy_and_unselected_clusters_are_passed_over() -> None:
    clusters = [cluster("b", 32), cluster("c", 32), cluster("d", 32, labels={"zone": "x"})]
    assert healthier(GANG, clusters, "home", refused={"b"}) == "c"
    assert healthier(GANG, clusters, "home", refused={"b"}, busy={"c"}) == "d"
    picky = JobView("p", {GPU: 16}, {GPU: 8}, {"zone": "y"}, "hard", 1)
    assert healthier(picky, clusters, "home") is None
