"""The benchmark harness: the openb trace read as its SOURCE.md describes it, and the combined report."""

import json
import subprocess
from pathlib import Path

import pytest

from bench import bench_openb, run_all
from bench.bench_openb import GPU, arrivals, load_cluster, load_pods
from member_agent.topology import ROOT

needs_openb = pytest.mark.skipif(not bench_openb.openb().is_dir(), reason="the openb trace is not here "
                                 "(../shared/traces beside the checkout, or $FEDERATION_TRACES)")


@needs_openb
def test_openb_cluster_and_pods_are_read_as_the_trace_describes_them() -> None:
    pods = load_pods("gpuspec33")
    state = load_cluster(pods)
    # SOURCE.md: 1,523 nodes, 6,212 GPUs; 8,152 pods, 7,064 asking for GPUs, 2,388 of them with a model constraint.
    assert len(state.topology.nodes) == 1_523
    assert state.domain_allocatable[ROOT][GPU] == 6_212 * 1000
    assert len(pods) == 8_152
    gpu_pods = [p for p in pods if GPU in p.request]
    assert len(gpu_pods) == 7_064
    assert sum(bool(p.models) for p in gpu_pods) == 2_388
    # a constrained pod's selector matches exactly the nodes of its allowed models
    pod = next(p for p in gpu_pods if p.models)
    label = bench_openb._spec_label(pod.models)
    matching = {n for n, node in state.topology.nodes.items() if node.labels.get(label) == "true"}
    assert matching == {n for n, node in state.topology.nodes.items() if node.labels["gpu-model"] in pod.models}


@needs_openb
def test_arrivals_repeat_the_trace_until_the_gpu_budget_is_reached() -> None:
    pods = load_pods("default")
    budget = 2 * sum(p.request.get(GPU, 0) for p in pods)
    stream = list(arrivals(pods, budget))
    asked = sum(p.request.get(GPU, 0) for p in stream)
    assert asked >= budget > asked - max(p.request.get(GPU, 0) for p in stream)
    assert len(stream) > len(pods) and stream[len(pods)] == pods[0]


def test_report_gathers_headlines_and_sections_and_names_failures(tmp_path: Path) -> None:
    (tmp_path / "agent.json").write_text(json.dumps({"headline": [["placement, median", "30 ms"]]}))
    (tmp_path / "agent.md").write_text("# Member agent\n\n## Detail\n\ntext\n")
    text = run_all.report(tmp_path, ["agent", "api"], ["api"], quick=True, seconds={"agent": 3.0})
    assert "| agent | placement, median | 30 ms |" in text
    assert "| api | **failed** (see its output) | |" in text
    assert "\n## Member agent\n" in text and "\n### Detail\n" in text


def test_running_one_benchmark_keeps_the_others_in_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make bench-NAME` once left a report of that benchmark alone: every other section and headline was dropped."""
    for name, day in (("agent", "2026-11-23"), ("backlog", "2026-11-29")):
        (tmp_path / f"{name}.json").write_text(json.dumps({"date": day, "headline": [[f"{name} figure", "1"]]}))
        (tmp_path / f"{name}.md").write_text(f"# {name} report\n")

    def ran(command: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        fresh = {"date": "2026-12-02", "headline": [["backlog figure", "2"]]}
        (tmp_path / "backlog.json").write_text(json.dumps(fresh))
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(run_all.subprocess, "run", ran)
    assert run_all.main(["--only", "backlog", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "README.md").read_text()
    assert "| agent | agent figure | 1 |" in text and "| backlog | backlog figure | 2 |" in text
    assert "agent on 2026-11-23; backlog on 2026-12-02" in text and "\n## agent report\n" in text


def test_the_failure_model_draws_the_llama3_rate_and_both_policies_meet_the_same_failures() -> None:
    from bench.replay.failures import LLAMA3_GPU_FAILURE_RATE, FailureModel, draw_failures, replay
    from bench.replay.trace import TraceJob

    model = FailureModel(repair=0.0)
    nodes = [f"n{i}" for i in range(2_000)]
    drawn = draw_failures(nodes, 365 * 86_400, model, seed=7)
    expected = LLAMA3_GPU_FAILURE_RATE * 8 * len(nodes) * 365 * 24
    assert abs(len(drawn) - expected) < 4 * expected ** 0.5  # a Poisson count: within four deviations
    warned = [f for f in drawn if f.warned_at is not None]
    assert abs(len(warned) / len(drawn) - model.warned) < 0.05
    assert all(f.warned_at is not None and f.warned_at <= f.at for f in warned)
    assert draw_failures(nodes[:10], 86_400, model, 3) == draw_failures(nodes[:10], 86_400, model, 3)

    # One 64-GPU gang on 9 nodes (one spare); a node it runs on warns at 1h10, then fails at 4h10.
    from bench.replay.capacity import Shape, build
    from bench.replay.failures import Failure, gang_of
    from member_agent.placement import Placement, place

    shape = Shape(1, 1, 1, 9)
    job = TraceJob("g", "t", 0.0, 10 * 3600.0, 64)
    first = place(next(iter(build(shape).values())), gang_of(job, 8, shape.leaf_gpus))
    assert isinstance(first, Placement)
    failures = [Failure(4 * 3600.0 + 600, first.pods[0].node, 1 * 3600.0 + 600)]
    crash = replay([job], shape, failures, FailureModel(lead=3 * 3600.0), "restart-after-crash")
    drain = replay([job], shape, failures, FailureModel(lead=3 * 3600.0), "proactive-drain")
    assert (crash.crashes, crash.moves) == (1, 0)
    assert (drain.crashes, drain.moves, drain.moved_at_checkpoint) == (0, 1, 1)  # off it at its next checkpoint
    assert crash.useful_gpu_h == drain.useful_gpu_h == 640
    # The crash loses the 10 minutes since its checkpoint, 2 to notice and 5 to restart; the move only the restart.
    assert crash.lost_gpu_h == pytest.approx(64 * (10 + 2 + 5) / 60)
    assert drain.lost_gpu_h == pytest.approx(64 * 5 / 60)


def test_the_profile_splits_a_cycle_into_phases_that_add_up_and_leaves_the_core_as_it_was() -> None:
    from bench.bench_profile import PHASES, phases, point
    originals = {(owner, name): getattr(owner, name) for methods in PHASES.values() for owner, name in methods}
    measured = point(600, 4, seed=3, warm=2)
    for side in ("walk", "from_scratch"):
        spent = measured[side]["phases"]
        assert set(spent) == {*PHASES, "other"} and all(s >= 0 for s in spent.values())
        assert spent["setup"] > 0 and spent["cluster choice"] > 0  # every cycle builds its tables and places heads
        assert abs(sum(spent.values()) - measured[side]["wrapped_seconds"]) < 1e-6  # net of what each calls
    assert measured["walk"]["dispatched"] == measured["from_scratch"]["dispatched"] > 0
    with phases():
        assert all(getattr(owner, name) is not method for (owner, name), method in originals.items())
    assert all(getattr(owner, name) is method for (owner, name), method in originals.items())
