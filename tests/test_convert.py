"""`fedctl convert` over the Kueue and Armada files of the ecosystem corpus: what each becomes, what is noted
as lost, and that everything it prints is taken as is by `fedctl submit` and `fedctl apply`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from federation.cli.convert import convert
from federation.cli.manifest import apply_documents, job_from_document
from federation.cli.yamldoc import load_documents
from federation.validation import Violations, check_job_spec, check_queue, normalise_job_spec
from tests.conftest import REPO
from tests.test_volcano_fields import CORPUS

NOT_CONVERTED = "not converted"
EXPECTED: dict[str, list[str]] = {  # the kinds printed, then "not converted" for each document left out
    "armada/example_example-gang-job.yaml": ["Job gang-123 (3 tasks, minAvailable 3)"],
    "armada/example_example-job.yaml": ["Job job-set-1-0 (1 tasks, minAvailable 1)"],
    "armada/example_example-preemptible-job.yaml": ["Job job-set-preemptible-0 (1 tasks, minAvailable 1)"],
    "armada/example_jobs.yaml": ["Job job-set-1-0 (1 tasks, minAvailable 1)"],
    "armada/example_queue.yaml": ["Queue test (weight 1)"],
    # Armada's test-suite case: the job (its batches noted), then the suite's expectations, not a job.
    "armada/testsuite_testcases_gpu_submit_gpu_2x3.yaml": ["Job armada-0 (1 tasks, minAvailable 1)", NOT_CONVERTED],
    # ResourceFlavors, Topologies and MultiKueue's objects have no object here (noted why).
    "kueue/admin_single-clusterqueue-setup.yaml": ["Queue cluster-queue (weight 1)", NOT_CONVERTED],
    "kueue/getting-started_quick-start-job.yaml": ["Job sample-job (1 tasks, minAvailable 3)"],
    "kueue/getting-started_quick-start-setup.yaml": ["Queue cluster-queue (weight 1)", NOT_CONVERTED],
    # The workloads Kueue queues, each one gang: KubeRay's RayJob as head, workers and a submitter pod.
    "kueue/jobs_ray-job-sample.yaml": ["Job rayjob-sample (3 tasks, minAvailable 3)"],
    "kueue/jobs_sample-job.yaml": ["Job sample-job- (1 tasks, minAvailable 3)"],
    "kueue/jobs_sample-jobset-tas-required.yaml": ["Job jobset-tas-required (1 tasks, minAvailable 4)"],
    "kueue/jobs_sample-jobset.yaml": ["Job sleep-job- (2 tasks, minAvailable 2)"],
    "kueue/jobs_sample-mpijob.yaml": ["Job pi (2 tasks, minAvailable 3)"],
    "kueue/jobs_sample-pytorchjob.yaml": ["Job pytorch-simple (2 tasks, minAvailable 2)"],
    "kueue/multikueue_multikueue-setup.yaml": ["Queue cluster-queue (weight 1)", *[NOT_CONVERTED] * 4],
    "kueue/pods-kueue_kueue-pod-group.yaml": ["Job sample-group (2 tasks, minAvailable 2)"],
    "kueue/tas_sample-job-preferred.yaml": ["Job tas-sample-preferred (1 tasks, minAvailable 40)"],
    "kueue/tas_sample-job-required.yaml": ["Job tas-sample-required (1 tasks, minAvailable 10)"],
    "kueue/tas_sample-queues.yaml": ["Queue tas-cluster-queue (weight 1)", NOT_CONVERTED, NOT_CONVERTED],
}


def describe(obj: dict) -> str:
    meta, spec = obj["metadata"], obj["spec"]
    name = meta.get("name") or meta.get("generateName")
    if obj["kind"] == "Job":
        return f"Job {name} ({len(spec['tasks'])} tasks, minAvailable {spec['minAvailable']})"
    return f"Queue {name} (weight {spec.get('weight', 1)})"


def test_every_kueue_and_armada_file_converts_to_what_the_federation_takes() -> None:
    files = sorted(p.relative_to(CORPUS).as_posix() for folder in ("kueue", "armada")
                   for p in (CORPUS / folder).glob("*.yaml"))
    assert files == sorted(EXPECTED)
    got = {}
    for name in files:
        result = convert(load_documents((CORPUS / name).read_text(), name))
        got[name] = [describe(o) for o in result.objects] + [NOT_CONVERTED for n in result.notes if NOT_CONVERTED in n]
        for doc in load_documents(yaml.safe_dump_all(result.objects), "converted.yaml"):  # taken as printed
            v = Violations()
            if doc.data["kind"] == "Job":
                spec = job_from_document(doc).message
                normalise_job_spec(spec)
                check_job_spec(v, "spec", spec)
            else:
                for _, converted in apply_documents(doc):
                    check_queue(v, "queue", converted.message)
            assert not v, (name, v.items)
    assert {n: o for n, o in got.items() if o != EXPECTED[n]} == {}


def test_kueue_quotas_cohorts_and_local_queues_map_field_by_field(tmp_path: Path) -> None:
    setup = """apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata:
  name: research
spec:
  fairSharing:
    weight: "2"
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: team-a
spec:
  cohortName: research
  stopPolicy: Hold
  resourceGroups:
  - coveredResources: ["nvidia.com/gpu"]
    flavors:
    - name: h100
      resources:
      - name: nvidia.com/gpu
        nominalQuota: 16
        borrowingLimit: 8
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata:
  namespace: ml
  name: team-a-local
spec:
  clusterQueue: team-a
"""
    job = (CORPUS / "kueue" / "jobs_sample-job.yaml").read_text().replace("user-queue", "team-a-local").replace(
        "namespace: default", "namespace: ml")
    (tmp_path / "setup.yaml").write_text(setup)
    (tmp_path / "job.yaml").write_text(job)
    result = subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), "convert", "-f", str(tmp_path / "setup.yaml"),
                             "-f", str(tmp_path / "job.yaml")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    research, team, converted_job = yaml.safe_load_all(result.stdout)
    assert research["spec"] == {"tenant": "default", "weight": 2}
    assert team["spec"] == {"tenant": "default", "guarantee": {"nvidia.com/gpu": "16"},
                            "limit": {"nvidia.com/gpu": "24"}, "parent": "research", "state": "Closed"}
    assert converted_job["spec"]["queue"] == "team-a"  # through its LocalQueue
    assert f"{tmp_path / 'setup.yaml'}:" in result.stderr and "Cohort research -> parent queue" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(setup.replace("  stopPolicy: Hold\n", "  stopPolicy: Hold\n  mystery: 1\n"))
    refused = subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), "convert", "-f", str(bad)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and f"{bad}:16: spec.mystery: a ClusterQueue field with no counterpart" in \
        refused.stderr and "Traceback" not in refused.stderr


def test_kueue_workloads_keep_their_gangs_plugins_topology_and_queues() -> None:
    """Issue 28 (5): each Kueue workload kind, field by field."""
    def only(name: str, extra: str = "") -> dict:
        text = (CORPUS / "kueue" / name).read_text() + extra
        (job,) = [o for o in convert(load_documents(text, name)).objects if o["kind"] == "Job"]
        return job

    torch = only("jobs_sample-pytorchjob.yaml")
    assert [(t["name"], t["replicas"]) for t in torch["spec"]["tasks"]] == [("master", 1), ("worker", 1)]
    assert torch["spec"]["plugins"] == {"pytorch": ["--master=master", "--worker=worker"], "svc": []}
    assert torch["spec"]["queue"] == "user-queue"
    local_queue = "\n---\napiVersion: kueue.x-k8s.io/v1beta1\nkind: LocalQueue\nmetadata: {namespace: default, " \
                  "name: user-queue}\nspec: {clusterQueue: team-a}\n"
    assert only("jobs_sample-pytorchjob.yaml", local_queue)["spec"]["queue"] == "team-a"  # resolved
    mpi = only("jobs_sample-mpijob.yaml")
    assert [(t["name"], t["replicas"]) for t in mpi["spec"]["tasks"]] == [("launcher", 1), ("worker", 2)]
    assert mpi["spec"]["plugins"]["mpi"] == ["--master=launcher", "--worker=worker"]
    assert mpi["spec"]["plugins"]["ssh"] == ["--ssh-key-file-path=/home/mpiuser/.ssh"]
    tas = only("jobs_sample-jobset-tas-required.yaml")
    assert tas["spec"]["networkTopology"] == {"mode": "hard", "highestTierName": "topology-rack"}
    assert tas["spec"]["tasks"][0]["replicas"] == 4
    assert only("tas_sample-job-preferred.yaml")["spec"]["networkTopology"] == {
        "mode": "soft", "highestTierName": "topology-block"}
    ray = only("jobs_ray-job-sample.yaml")
    assert [t["name"] for t in ray["spec"]["tasks"]] == ["head", "small-group", "submitter"]
    assert ray["spec"]["plugins"]["ray"] == ["--headContainer=ray-head", "--worker=small-group",
                                             "--workerContainer=ray-worker"]
    submitter = ray["spec"]["tasks"][2]
    assert submitter["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    command = submitter["template"]["spec"]["containers"][0]["command"][-1]
    assert "ray job submit --address http://${VC_HEAD_HOSTS}:8265" in command
    assert command.endswith("-- python /home/ray/samples/sample_code.py") and "--runtime-env-json" in command
    group = only("pods-kueue_kueue-pod-group.yaml")
    assert [t["name"] for t in group["spec"]["tasks"]] == ["sample-leader", "sample-worker"]
    assert group["spec"]["minAvailable"] == 2


def test_convert_exits_non_zero_when_nothing_converts(tmp_path: Path) -> None:
    half = tmp_path / "half-group.yaml"
    leader = [d for d in (CORPUS / "kueue" / "pods-kueue_kueue-pod-group.yaml").read_text().split("---\n") if d.strip()]
    half.write_text(leader[0])
    done = subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), "convert", "-f", str(half)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "pod group sample-group counts 2 pods but the input has 1" in done.stderr
    flavor = tmp_path / "flavor.yaml"
    flavor.write_text("apiVersion: kueue.x-k8s.io/v1beta1\nkind: ResourceFlavor\nmetadata: {name: default}\n")
    done = subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), "convert", "-f", str(flavor)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "nothing converted" in done.stderr and "ResourceFlavor default" in done.stderr
