"""Health in the pure cores: how a node's conditions and taints read, and where placement then puts a gang."""

from pathlib import Path

import pytest

from member_agent.nodehealth import (
    DEGRADED,
    FAILED,
    HEALTHY,
    HealthConfigError,
    HealthRules,
    NodeHealth,
    hypernode_degraded,
    load_rules,
    node_health,
    summary,
)
from member_agent.placement import Placement, Rejection, place
from member_agent.state import ClusterState
from tests.test_placement import GPU, cluster, gang, placed

RULES = HealthRules()


def test_nvsentinel_condition_and_taint_read_as_failed_and_degraded() -> None:
    fallen = node_health([{"type": "SysLogsGPUFallenOff", "status": "True", "message": "XID 79 GPU fell off bus"}],
                         [], RULES)
    assert (fallen.state, fallen.reasons) == (FAILED, ("XID 79",))
    xid = node_health([{"type": "SysLogsXIDError", "status": "True", "message": "ErrorCode:119 XID=119"},
                       {"type": "Ready", "status": "True"}], [], RULES)
    assert (xid.state, xid.reasons, xid.link) == (DEGRADED, ("XID 119",), False)
    assert xid.failure_rate == RULES.default_failure_rate
    resolved = node_health([{"type": "SysLogsXIDError", "status": "False", "message": "XID 119"}], [], RULES)
    assert resolved.state == HEALTHY
    tainted = node_health([], [{"key": "nvidia.com/gpu-error", "value": "fatal", "effect": "NoSchedule"}], RULES)
    assert (tainted.state, tainted.reasons) == (FAILED, ("taint nvidia.com/gpu-error",))
    soft = node_health([], [{"key": "nvidia.com/gpu-error", "value": "degraded", "effect": "PreferNoSchedule"}], RULES)
    assert soft.state == DEGRADED
    # A taint says it is bad, a condition why: together the worst state, both reasons.
    both = node_health([{"type": "GpuNvlinkWatch", "status": "True", "message": "NVLink replay errors"}],
                       [{"key": "nvidia.com/gpu-error", "value": "true", "effect": "NoSchedule"}], RULES)
    assert (both.state, both.reasons) == (FAILED, ("GpuNvlinkWatch", "taint nvidia.com/gpu-error"))
    sxid = node_health([{"type": "SysLogsSXIDError", "status": "True", "message": "SXID 20034 NVSwitch"}], [], RULES)
    assert (sxid.state, sxid.reasons, sxid.link) == (DEGRADED, ("SXID 20034",), True)
    npd = node_health([{"type": "KernelDeadlock", "status": "True"}], [], RULES)
    assert npd.state == FAILED
    assert hypernode_degraded([{"type": "LinkDegraded", "status": "True", "reason": "CableErrors"}], RULES) == \
        "CableErrors"
    assert hypernode_degraded([{"type": "Ready", "status": "True"}], RULES) == ""


# As NVSentinel's syslog health monitor writes its conditions' messages (its own tests' words), and the kernel's line.
NVSENTINEL_XID_79 = ("ErrorCode:79 PCI:0000:ef:00 GPU_UUID:GPU-b5f21324-f1f9-f1a4-1a37-1166234f6e4f "
                     "MESSAGE=NVRM: Xid (PCI:0000:ef:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus. "
                     "Recommended Action=RESTART_BM;")
NVSENTINEL_XID_48 = ("ErrorCode:48 PCI:0000:17:00 GPU_UUID:GPU-22222222-2222-2222-2222-222222222222 "
                     "kernel: [16450076.435595] NVRM: Xid (PCI:0000:17:00): 48, pid=1582259, name=python, "
                     "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at "
                     "partition 1, subpartition 0. Recommended Action=RESTART_BM;")
NVSENTINEL_XID_13 = ("ErrorCode:13 PCI:0000:19:00 GPU_UUID:GPU-33333333-3333-3333-3333-333333333333 "
                     "kernel: [16450076.435584] NVRM: Xid (PCI:0000:19:00): 13, pid='<unknown>', name=<unknown>, "
                     "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Misaligned Address "
                     "Recommended Action=NONE;")
KERNEL_SXID = "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error"


def test_the_xid_in_nvsentinels_messages_decides_failed_or_degraded() -> None:
    """Issue 42 (5): health read "SysLogsXIDError", not the XID in its message, so a double-bit ECC error (48)
    and an application's illegal address (13) were the same. XIDs 48, 79 and 95 fail a node (the rules' failedXids),
    others degrade it; each is named; a message holding several (compacted) takes the worst."""
    def xid(message: str, kind: str = "SysLogsXIDError") -> NodeHealth:
        return node_health([{"type": kind, "status": "True", "message": message}], [], RULES)

    assert (xid(NVSENTINEL_XID_79).state, xid(NVSENTINEL_XID_79).reasons) == (FAILED, ("XID 79",))
    assert (xid(NVSENTINEL_XID_48).state, xid(NVSENTINEL_XID_48).reasons) == (FAILED, ("XID 48",))
    assert (xid(NVSENTINEL_XID_13).state, xid(NVSENTINEL_XID_13).reasons) == (DEGRADED, ("XID 13",))
    both = xid(f"{NVSENTINEL_XID_13} {NVSENTINEL_XID_48}")
    assert (both.state, both.reasons) == (FAILED, ("XID 48", "XID 13"))
    kernel = xid("NVRM: Xid (PCI:0000:cb:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
    assert (kernel.state, kernel.reasons) == (FAILED, ("XID 79",))
    sxid = xid(KERNEL_SXID, "SysLogsSXIDError")
    assert (sxid.state, sxid.reasons, sxid.link) == (DEGRADED, ("SXID 12028",), True)
    assert summary({"a": xid(NVSENTINEL_XID_79), "b": xid(NVSENTINEL_XID_13)}) == [
        "1 node failed (XID 79)", "1 node degraded (XID 13)"]


def test_rules_are_configuration_and_a_bad_file_names_its_field(tmp_path: Path) -> None:
    good = tmp_path / "health.yaml"
    good.write_text("conditions:\n  degraded: [MyGpuWatch]\nfailureRates:\n  default: 0.5\n  XID 31: 2\n")
    rules = load_rules(good)
    assert rules.degraded_conditions == ("MyGpuWatch",)
    assert rules.failed_conditions == HealthRules().failed_conditions  # what is left out keeps its default
    h = node_health([{"type": "MyGpuWatch", "status": "True", "message": "xid 31"}], [], rules)
    assert (h.state, h.failure_rate) == (DEGRADED, 2.0)
    fatal = node_health([{"type": "MyGpuWatch", "status": "True", "message": "xid 79"}], [], rules)
    assert (fatal.state, fatal.reasons) == (FAILED, ("XID 79",))  # an XID that fails a node
    good.write_text("failedXids: [31]\n")
    assert node_health([{"type": "SysLogsXIDError", "status": "True", "message": "xid 31"}], [],
                       load_rules(good)).state == FAILED
    assert node_health([{"type": "SysLogsXIDError", "status": "True"}], [], rules).state == HEALTHY
    bad = tmp_path / "bad.yaml"
    bad.write_text("conditions:\n  degraded: MyGpuWatch\n")
    with pytest.raises(HealthConfigError, match=r"conditions\.degraded must be a list"):
        load_rules(bad)
    bad.write_text("conditions: [MyGpuWatch]\n")  # a list where a mapping belongs is refused, not ignored
    with pytest.raises(HealthConfigError, match="conditions must be a mapping"):
        load_rules(bad)
    bad.write_text("taint: {}\n")
    with pytest.raises(HealthConfigError, match="unknown field 'taint'"):
        load_rules(bad)


def test_summary_counts_nodes_by_state_and_reason() -> None:
    health = {f"n{i}": NodeHealth(DEGRADED, ("XID 79",)) for i in range(3)}
    health["x"] = NodeHealth(FAILED, ("KernelDeadlock",))
    assert summary(health) == ["1 node failed (KernelDeadlock)", "3 nodes degraded (XID 79)"]


def degrade(state: ClusterState, nodes: list[str], reason: str = "XID 79", links: dict[str, str] | None = None) -> None:
    state.set_health({n: NodeHealth(DEGRADED, (reason,), failure_rate=0.1) for n in nodes}, links or {})


def test_degraded_nodes_are_used_only_when_nothing_healthy_fits() -> None:
    state = cluster([2, 4])  # 2 leaves of 4 nodes with 8 GPUs
    degrade(state, ["n0-0", "n0-1"])
    first = placed(place(state, gang(4, mode="hard", highest_tier=1)))
    assert first.hypernode == "n1"  # the healthy leaf, although n0 would be as full
    for p in first.pods:
        state.allocate(p.node, {GPU: 8})
    second = placed(place(state, gang(3, mode="hard", highest_tier=1)))  # only n0 is left: degraded nodes too
    assert {p.node for p in second.pods} & {"n0-0", "n0-1"}
    avoid = place(state, gang(3, mode="hard", highest_tier=1, avoid_degraded=True))
    assert isinstance(avoid, Rejection)
    assert "avoided: 2 nodes degraded (XID 79)" in avoid.reason
    fits = placed(place(state, gang(2, mode="hard", highest_tier=1, avoid_degraded=True)))
    assert {p.node for p in fits.pods} == {"n0-2", "n0-3"}


def test_a_hard_tier_gang_is_never_given_a_hypernode_with_degraded_links() -> None:
    state = cluster([2, 4])
    degrade(state, [], links={"n1": "LinkDegraded"})
    placed_ = placed(place(state, gang(4, mode="hard", highest_tier=1)))
    assert placed_.hypernode == "n0"
    for p in placed_.pods:
        state.allocate(p.node, {GPU: 8})
    refused = place(state, gang(2, mode="hard", highest_tier=1))
    assert isinstance(refused, Rejection) and "degraded links (n1)" in refused.reason
    soft = placed(place(state, gang(2, mode="soft", highest_tier=1)))  # a soft gang takes it when nothing else fits
    assert soft.hypernode == "n1"


def test_a_link_fault_on_a_node_degrades_its_hypernode_and_the_summary_sees_healthy_room() -> None:
    state = cluster([2, 4])
    state.set_health({"n0-2": NodeHealth(DEGRADED, ("SXID 20034",), link=True)}, {})
    assert state.degraded_links == {"n0": "SXID 20034 on n0-2"}
    assert set(state.behind_links) == {f"n0-{i}" for i in range(4)}
    full, healthy = state.summary(), state.summary(healthy=True)
    tier1 = {t.tier: t for t in full}[1]
    assert tier1.max_free[GPU] == 32 and {t.tier: t for t in healthy}[1].max_free[GPU] == 32  # n1 is whole
    state.allocate("n1-0", {GPU: 8})
    assert {t.tier: t for t in state.summary()}[1].max_free[GPU] == 32  # n0, behind its degraded switch
    assert {t.tier: t for t in state.summary(healthy=True)}[1].max_free[GPU] == 24
    result = place(state, gang(4, mode="hard", highest_tier=1))
    assert isinstance(result, Rejection)
    assert isinstance(place(state, gang(3, mode="hard", highest_tier=1)), Placement)
    state.set_health({}, {})  # repaired: everything counts again
    assert isinstance(place(state, gang(4, mode="hard", highest_tier=1)), Placement)


def test_the_cluster_choice_prefers_healthy_room_and_explain_says_why_it_skipped() -> None:
    from federation.scheduling.choice import ClusterTable
    from federation.scheduling.fit import ClusterState as Fed
    from federation.scheduling.fit import ClusterView, JobView, TierFree, explain

    tiers = [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 32}), TierFree(2, "cluster", {GPU: 64})]
    healthy = [TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 16}), TierFree(2, "cluster", {GPU: 48})]
    # "a" is fuller (the better fit, and first by name) but the gang fits there only on degraded nodes.
    a = ClusterView("a", {}, {GPU: 40}, tiers, healthy_tiers=healthy, health=["2 nodes degraded (XID 79)"])
    b = ClusterView("b", {}, {GPU: 64}, tiers)
    gang = JobView("j", {GPU: 32}, {GPU: 8}, {}, "hard", 1)
    for views in ([a, b], [b, a]):
        table = ClusterTable(views, {GPU: 128})
        assert table.best(gang, {}) == "b"
        assert table._best_slowly(gang, {}) == "b"
        # Issue 42 (5): what a user reads of the choice (the Dispatched event says it).
        assert table.passed_over(gang, "b") == ("on healthy hardware; passed over a: 2 nodes degraded (XID 79) (the "
                                                "gang fits there only on degraded hardware)")
        assert table.passed_over(JobView("s", {GPU: 16}, {GPU: 8}, {}, "hard", 1), "a") == ""
    assert ClusterTable([a], {GPU: 64}).best(gang, {}) == "a"  # nothing healthy anywhere: degraded will do
    small = JobView("s", {GPU: 16}, {GPU: 8}, {}, "hard", 1)
    assert ClusterTable([a, b], {GPU: 128}).best(small, {}) == "a"  # fits a's healthy leaf: no reason to skip it
    rows = dict(explain(gang, [Fed(a, True, False), Fed(b, True, False)]))
    assert rows["b"] is None
    assert rows["a"] == ("skipped: 2 nodes degraded (XID 79) (the gang fits there only on degraded hardware, and "
                         "fits on healthy hardware elsewhere)")
    alone = dict(explain(gang, [Fed(a, True, False)]))
    assert alone["a"] is None
