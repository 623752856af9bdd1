"""Usage history in fair share (issue 46 (1)): decayed past usage, and the order it gives queue heads."""

import pytest

from federation.scheduling.cycle import PendingJob, QueueInfo, Snapshot, TenantInfo, schedule
from federation.scheduling.fit import ClusterView, JobView, TierFree
from federation.scheduling.usage import decayed, mean

GPU = "nvidia.com/gpu"
DAY = 86400.0


def test_history_decays_by_half_each_half_life_and_gains_what_was_held() -> None:
    assert decayed({GPU: 100.0}, DAY, DAY, {}) == pytest.approx({GPU: 50.0})
    assert decayed({GPU: 100.0}, 0, DAY, {GPU: 8}) == {GPU: 100.0}  # no time, no change
    # held for ever, the mean is what is held; for one half-life from nothing, half of it
    forever = decayed({}, 1000 * DAY, DAY, {GPU: 8})
    assert mean(forever, DAY) == pytest.approx({GPU: 8.0})
    assert mean(decayed({}, DAY, DAY, {GPU: 8}), DAY) == pytest.approx({GPU: 4.0})
    # steps add up to one long step (exact for what is held constant)
    stepped = {}
    for _ in range(24):
        stepped = decayed(stepped, 3600, DAY, {GPU: 8})
    assert stepped == pytest.approx(decayed({}, DAY, DAY, {GPU: 8}))
    # 500 GPU-hours a day ago, nothing since, half-life one day: 250 GPU-hours left, a mean of ~7.2 GPUs
    left = decayed({GPU: 500 * 3600.0}, DAY, DAY, {})
    assert left[GPU] / 3600 == pytest.approx(250) and mean(left, DAY, weight=2)[GPU] == pytest.approx(
        2 * 250 * 3600 * 0.6931471805599453 / DAY)
    assert decayed({GPU: 1e-12}, DAY, DAY, {}) == {}  # what is left of nothing is dropped


def snapshot(past: dict[str, dict[str, float]] | None = None) -> Snapshot:
    tenants = [TenantInfo("alpha"), TenantInfo("beta")]
    queues = [QueueInfo("a", "alpha"), QueueInfo("b", "beta")]
    pending = [PendingJob(JobView(f"{q}{i}", {GPU: 8}, {GPU: 8}), q, 0, i) for q in ("a", "b") for i in range(4)]
    cluster = ClusterView("c1", {}, {GPU: 16}, [TierFree(0, "node", {GPU: 8})], {GPU: 16})
    return Snapshot(tenants, queues, pending, [], [cluster], {GPU: 16}, past_tenants=past or {})


def test_a_tenant_that_used_much_in_the_past_is_served_after_one_that_did_not() -> None:
    # Equal now: one each, alpha first by name
    assert set(schedule(snapshot()).assign) == {"a0", "b0"}
    # alpha's past counts as 12 GPUs held: beta is served until it has caught up (both of the 16 GPUs)
    d = schedule(snapshot({"alpha": {GPU: 12.0}}))
    assert set(d.assign) == {"b0", "b1"}
    assert d.shares is not None and d.shares.tenants["alpha"][GPU] == pytest.approx(8)  # shares: as they were
    # a little past usage only breaks the tie
    assert set(schedule(snapshot({"alpha": {GPU: 1.0}})).assign) == {"b0", "a0"}
