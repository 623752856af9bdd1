"""The benchmark harness: the openb trace read as its SOURCE.md describes it, and the combined report."""

import json
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
