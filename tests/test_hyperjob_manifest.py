"""Volcano Global's HyperJob manifests as `fedctl` reads them: every file of the corpus's HyperJob folder with its
outcome, a HyperJob's sub-jobs and what they carry, and bad input refused at its line and field."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from federation.cli.jobdocs import jobs_from_documents
from federation.cli.yamldoc import ManifestError, load_documents
from federation.v1 import common_pb2
from tests.processes import BIN

CORPUS = Path(__file__).parent / "corpus" / "ecosystem" / "volcano-hyperjob-subgroups"
GPU = "nvidia.com/gpu"
# Each file's outcome under `fedctl validate`: the sub-jobs made, or the start of its refusal.
EXPECTED = {
    "volcano_hyperjob-multi-cluster-job-splitting_0.yaml": ["llm-training-trainer-0", "llm-training-trainer-1"],
    "volcano_hyperjob-multi-cluster-job-splitting_1.yaml": ["ascend-heterogeneous-training-trainer-910b-0",
                                                            "ascend-heterogeneous-training-trainer-910c-0"],
    # Volcano Global's CRD and the PropagationPolicy its controller writes: not jobs.
    "volcano-global_crd_training.volcano.sh_hyperjobs.yaml": "kind: expected apiVersion federation.dev/v1",
    "volcano-global_hyperjob-controller-design_0.yaml": "kind: expected apiVersion federation.dev/v1",
    # A Volcano Job's spec alone (no apiVersion or kind), with its design doc's `replica` typo.
    "volcano_how_to_use_network_topology_aware_scheduling_2.yaml": "kind: expected apiVersion federation.dev/v1",
    # Prose from the design documents, cut at code fences: not YAML.
    **{f"volcano_hyperjob-multi-cluster-job-splitting_{i}.yaml": "invalid YAML" for i in (2, 3, 4, 5)},
    **{f"volcano_Network-Topology-Aware-Scheduling_{i}.yaml": "invalid YAML" for i in (2, 10, 13)},
}


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "fedctl"), "--server", "127.0.0.1:1", "validate", "-f", str(path)],
                          capture_output=True, text=True, timeout=60)


def test_every_file_of_the_corpus_folder_has_its_outcome() -> None:
    assert sorted(p.name for p in CORPUS.glob("*.yaml")) == sorted(EXPECTED)
    for name, expected in EXPECTED.items():
        done = validate(CORPUS / name)
        if isinstance(expected, list):
            assert done.returncode == 0, (name, done.stderr)
            assert done.stdout.splitlines() == [f"job/{job} valid" for job in expected]
        else:
            assert done.returncode == 1 and f"{CORPUS / name}:" in done.stderr and expected in done.stderr, name
            assert "Traceback" not in done.stderr


def test_sub_jobs_carry_their_hyperjob() -> None:
    path = CORPUS / "volcano_hyperjob-multi-cluster-job-splitting_1.yaml"
    converted = list(jobs_from_documents(load_documents(path.read_text(), str(path))))
    specs: list[common_pb2.JobSpec] = [c.message for c in converted]  # type: ignore[misc]
    group = specs[0].hyperjob.id
    prefix = "ascend-heterogeneous-training-"
    assert group.startswith(prefix) and len(group) == len(prefix) + 5  # the name and 5 random characters
    assert [(s.hyperjob.id, s.hyperjob.index, s.hyperjob.parts, s.hyperjob.min_available, s.hyperjob.replicated_job,
             list(s.hyperjob.cluster_names)) for s in specs] == [
        (group, 0, 2, 2, "trainer-910b", ["cluster-ascend-910b-1", "cluster-ascend-910b-2"]),
        (group, 1, 2, 2, "trainer-910c", ["cluster-ascend-910c-1"])]
    assert [(s.tasks[0].name, s.tasks[0].replicas, dict(s.tasks[0].resources)) for s in specs] == [
        ("worker", 64, {"ascend910c": "1"})] * 2
    assert "Ascend910B" in specs[0].tasks[0].pod_template_json and "Ascend910C" in specs[1].tasks[0].pod_template_json
    # The template's own path for what it says wrong, the HyperJob's for what is the HyperJob's.
    assert converted[1].doc.line(converted[1].origin["tasks"]) == 38  # its second replicated job's tasks
    assert converted[0].origin["hyperjob.cluster_names"] == "spec.replicatedJobs[0].clusterNames"


@pytest.mark.parametrize(("text", "message"), [
    ("spec:\n  replicatedJobs:\n  - name: t\n    replica: 2\n    templateSpec: {tasks: []}\n",
     "7: spec.replicatedJobs[0].replica: unknown field 'replica': Volcano Global's HyperJob has no such field; did "
     "you mean replicas?"),
    ("spec:\n  replicatedJobs:\n  - name: t\n    templateSpec:\n      tasks:\n      - name: w\n        replics: 1\n",
     "10: spec.replicatedJobs[0].templateSpec.tasks[0].replics: unknown field 'replics'"),
    ("spec:\n  replicatedJobs:\n  - name: t\n    replicas: 0\n    templateSpec: {tasks: []}\n",
     "7: spec.replicatedJobs[0].replicas: must be at least 1, got 0"),
    ("spec:\n  replicatedJobs:\n  - name: t\n", "6: spec.replicatedJobs[0].templateSpec: is required"),
    ("spec: {}\n", "4: spec.replicatedJobs: is required"),
])
def test_bad_input_is_refused_at_its_line_and_field(text: str, message: str) -> None:
    head = "apiVersion: training.volcano.sh/v1alpha1\nkind: HyperJob\nmetadata: {name: hj}\n"
    with pytest.raises(ManifestError) as refused:
        list(jobs_from_documents(load_documents(head + text, "hj.yaml")))
    assert f"hj.yaml:{message}" in str(refused.value)
