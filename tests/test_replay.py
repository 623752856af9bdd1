"""The trace replay: deterministic, and each policy behaves as it says (on a small synthetic trace)."""

from bench.replay.capacity import Shape
from bench.replay.sim import Replay
from bench.replay.trace import TraceJob

SHAPE = Shape(clusters=2, spines=1, leaves=2, nodes=4)  # 2 clusters x 2 leaves x 4 nodes x 8 GPUs = 128


def flood_then_latecomer() -> list[TraceJob]:
    """Tenant a fills the federation with 64 one-node jobs of an hour; tenant b arrives a minute later."""
    jobs = [TraceJob(f"a-{i}", "a", float(i), 3600.0, 8) for i in range(64)]
    jobs += [TraceJob(f"b-{i}", "b", 60.0 + i, 3600.0, 8) for i in range(8)]
    jobs += [TraceJob("gang", "b", 120.0, 1800.0, 32)]  # four nodes: one leaf holds it exactly
    return jobs


def starts(policy: str) -> dict[str, tuple[float, float, str, int]]:
    result = Replay(flood_then_latecomer(), SHAPE, policy, interval=30.0).run()
    return {r.job.id: (r.first_start, r.finish, r.cluster, r.leaves) for r in result.records}


def test_the_same_trace_gives_the_same_simulated_results() -> None:
    for policy in ("fair", "topology-off", "fifo"):
        assert starts(policy) == starts(policy)


def test_fifo_starts_jobs_in_submission_order_and_fair_share_serves_the_latecomer() -> None:
    fifo, fair = starts("fifo"), starts("fair")
    order = sorted(fifo, key=lambda j: fifo[j][0])
    submitted = [j.id for j in flood_then_latecomer()]
    assert order == submitted  # nothing overtakes
    wait = {name: sum(s[j][0] for j in s if j.startswith("b-")) / 8 for name, s in (("fifo", fifo), ("fair", fair))}
    assert wait["fair"] < wait["fifo"] / 2  # b is owed half the federation once a's jobs end


def test_gangs_stay_in_one_leaf_only_with_topology() -> None:
    result = Replay(flood_then_latecomer(), SHAPE, "fair", interval=30.0).run()
    gang = next(r for r in result.records if r.job.id == "gang")
    assert gang.finish > gang.first_start >= 0 and gang.leaves == 1
    assert all(r.finish > 0 for r in result.records)  # everything ran to the end


def test_with_usage_history_a_tenant_that_ran_alone_gets_less_once_another_comes() -> None:
    """fair-history: a's hour alone on the federation counts against it (a short half-life and a heavy weight make
    it count for much) once b arrives, so b holds more of the next hours than without history; the same trace
    gives the same result."""
    from bench.replay.sim import Decay

    jobs = [TraceJob(f"a-{i}", "a", float(i), 3600.0, 8) for i in range(16)]
    jobs += [TraceJob(f"{t}-late-{i}", t, 3600.0 + i, 3600.0, 8) for t in ("a", "b") for i in range(16)]

    def b_share(policy: str) -> float:
        result = Replay(jobs, SHAPE, policy, interval=30.0, history=Decay(600.0, 4.0)).run()
        second_hour = {t: days[0] for t, days in result.tenant_gpu_hours.items()}
        return second_hour["b"] / (second_hour["a"] + second_hour["b"])

    without, with_history = b_share("fair"), b_share("fair-history")
    assert with_history > without
    assert with_history == b_share("fair-history")
