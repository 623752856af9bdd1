"""`fedctl convert` over the Kueue and Armada files of the ecosystem corpus: what each becomes, what is noted
as lost, and that everything it prints is taken as is by `fedctl submit` and `fedctl apply`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from federation.cli.convert import convert
from federation.cli.manifest import apply_documents, job_from_document
from federation.cli.yamldoc import ManifestError, load_documents
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
        lendingLimit: 4
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
                            "limit": {"nvidia.com/gpu": "24"}, "lendingLimit": {"nvidia.com/gpu": "4"},
                            "parent": "research", "state": "Closed"}
    assert converted_job["spec"]["queue"] == "team-a"  # through its LocalQueue
    assert f"{tmp_path / 'setup.yaml'}:" in result.stderr and "Cohort research -> parent queue" in result.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(setup.replace("  stopPolicy: Hold\n", "  stopPolicy: Hold\n  mystery: 1\n"))
    refused = subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), "convert", "-f", str(bad)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and f"{bad}:16: spec.mystery: a ClusterQueue field with no counterpart" in \
        refused.stderr and "Traceback" not in refused.stderr
    bad.write_text(setup.replace("lendingLimit: 4", "lendingLimit: 20"))  # more than its nominal quota
    refused = subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), "convert", "-f", str(bad)],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert f"{bad}:24: spec.resourceGroups[0].flavors[0].resources[0].lendingLimit: lendingLimit 20 exceeds " \
           "nominalQuota 16" in refused.stderr, refused.stderr


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


def taken(objects: list[dict]) -> list:
    """The converted Jobs as `fedctl submit` takes them, validated."""
    specs = []
    for doc in load_documents(yaml.safe_dump_all(objects), "converted.yaml"):
        spec = job_from_document(doc).message
        normalise_job_spec(spec)
        v = Violations()
        check_job_spec(v, "spec", spec)
        assert not v, v.items
        specs.append(spec)
    return specs


SLICED_JOB = """\
apiVersion: batch/v1
kind: Job
metadata: {name: sliced, labels: {kueue.x-k8s.io/queue-name: user-queue}}
spec:
  parallelism: 8
  completions: 8
  template:
    metadata:
      annotations:
        kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-block
        kueue.x-k8s.io/podset-slice-required-topology: cloud.provider.com/topology-rack
        kueue.x-k8s.io/podset-slice-size: "4"
    spec:
      containers: [{name: c, image: x, resources: {requests: {nvidia.com/gpu: "8"}}}]
"""


def test_kueue_slices_become_partitions_each_inside_one_hypernode() -> None:
    """Issue 45 (2): Kueue's two-level topology: the pod set under one block, each slice of 4 under one rack."""
    (job,) = convert(load_documents(SLICED_JOB, "sliced.yaml")).objects
    assert job["spec"]["networkTopology"] == {"mode": "hard", "highestTierName": "topology-block"}
    (task,) = job["spec"]["tasks"]
    assert task["partitionPolicy"] == {"totalPartitions": 2, "partitionSize": 4,
                                       "networkTopology": {"mode": "hard", "highestTierName": "topology-rack"}}
    (spec,) = taken([job])
    assert spec.tasks[0].partition_policy.partition_size == 4 and spec.min_available == 8
    # A JobSet's slice is one Job's pods unless the template says otherwise.
    jobset = """\
apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata: {name: js}
spec:
  replicatedJobs:
    - name: workers
      replicas: 3
      template:
        spec:
          parallelism: 2
          template:
            metadata: {annotations: {kueue.x-k8s.io/podset-slice-required-topology: nvidia.com/gpu.clique}}
            spec: {containers: [{name: c, image: x}]}
"""
    (js,) = convert(load_documents(jobset, "js.yaml")).objects
    assert js["spec"]["tasks"][0]["partitionPolicy"]["totalPartitions"] == 3
    assert js["spec"]["tasks"][0]["partitionPolicy"]["networkTopology"]["highestTierName"] == "gpu.clique"
    taken([js])


@pytest.mark.parametrize(("change", "field", "message"), [
    ('        kueue.x-k8s.io/podset-slice-size: "4"\n', "podset-slice-size", "required"),
    ('kueue.x-k8s.io/podset-slice-size: "4"', "podset-slice-size", "does not divide"),
    ('kueue.x-k8s.io/podset-slice-size: "4"', "podset-slice-size", "not a whole number"),
])
def test_a_bad_slice_is_refused_naming_file_line_and_field(change: str, field: str, message: str) -> None:
    text = {"required": SLICED_JOB.replace(change, ""),
            "does not divide": SLICED_JOB.replace(change, 'kueue.x-k8s.io/podset-slice-size: "3"'),
            "not a whole number": SLICED_JOB.replace(change, 'kueue.x-k8s.io/podset-slice-size: "four"')}[message]
    with pytest.raises(ManifestError) as err:
        convert(load_documents(text, "sliced.yaml"))
    assert str(err.value).startswith("sliced.yaml:") and field in str(err.value) and message in str(err.value)


LWS = """\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: vllm
  labels: {kueue.x-k8s.io/queue-name: inference}
  annotations: {leaderworkerset.sigs.k8s.io/exclusive-topology: nvidia.com/gpu.clique}
spec:
  replicas: 3
  leaderWorkerTemplate:
    size: 4
    workerTemplate:
      spec:
        containers: [{name: vllm, image: vllm/vllm-openai, resources: {limits: {nvidia.com/gpu: "4"}}}]
"""


def test_a_leader_worker_set_is_a_gang_of_groups_each_inside_one_domain() -> None:
    """Issue 45 (2): LeaderWorkerSet's groups as partitions, each within one HyperNode of its exclusive topology,
    restarted as a group (RecreateGroupOnPodRestart); the set starts with one group, the others join."""
    result = convert(load_documents(LWS, "lws.yaml"))
    (job,) = result.objects
    assert job["spec"]["queue"] == "inference" and job["spec"]["minAvailable"] == 4
    (task,) = job["spec"]["tasks"]
    assert task["replicas"] == 12
    assert task["partitionPolicy"] == {"totalPartitions": 3, "partitionSize": 4, "minPartitions": 1,
                                       "networkTopology": {"mode": "hard", "highestTierName": "gpu.clique"}}
    assert task["policies"] == [{"events": ["PodFailed", "PodEvicted"], "action": "RestartPartition"}]
    assert any("3 partition(s) of task worker" in n for n in result.notes)
    (spec,) = taken([job])
    assert spec.tasks[0].partition_policy.min_partitions == 1
    # A leader template of its own: leaders are a task, the groups' workers the partitions.
    leader = LWS.replace("    workerTemplate:", "    leaderTemplate:\n      spec: {containers: [{name: lead, image: "
                                                  "x}]}\n    workerTemplate:")
    result = convert(load_documents(leader, "lws.yaml"))
    (job,) = result.objects
    assert [(t["name"], t["replicas"]) for t in job["spec"]["tasks"]] == [("leader", 3), ("worker", 9)]
    assert job["spec"]["tasks"][1]["partitionPolicy"]["partitionSize"] == 3
    assert any("its workers, not its leader" in n for n in result.notes)
    taken([job])
    with pytest.raises(ManifestError, match="restartPolicy"):
        convert(load_documents(LWS.replace("    size: 4", "    size: 4\n    restartPolicy: Always"), "lws.yaml"))


def test_kueue_and_job_run_time_limits_become_the_maximum_run_time() -> None:
    """Issue 46 (3): Kueue's max-exec-time-seconds label and a Job's activeDeadlineSeconds -> max-run-time."""
    labelled = SLICED_JOB.replace("labels: {kueue.x-k8s.io/queue-name: user-queue}",
                                  "labels: {kueue.x-k8s.io/queue-name: user-queue, "
                                  "kueue.x-k8s.io/max-exec-time-seconds: \"7200\"}")
    (job,) = convert(load_documents(labelled, "j.yaml")).objects
    assert job["metadata"]["annotations"] == {"federation.dev/max-run-time": "7200s"}
    assert "kueue.x-k8s.io/max-exec-time-seconds" not in job["metadata"].get("labels", {})
    (spec,) = taken([job])
    assert spec.annotations["federation.dev/max-run-time"] == "7200s"
    deadline = SLICED_JOB.replace("  completions: 8\n", "  completions: 8\n  activeDeadlineSeconds: 600\n")
    (job,) = convert(load_documents(deadline, "j.yaml")).objects
    assert job["metadata"]["annotations"] == {"federation.dev/max-run-time": "600s"}
    with pytest.raises(ManifestError, match="activeDeadlineSeconds"):
        convert(load_documents(deadline.replace("600", "-5"), "j.yaml"))


def test_kueue_admission_checks_map_by_their_controllers() -> None:
    """Issue 46 (4): a ClusterQueue's checks by what their AdmissionChecks' controllers are."""
    text = """apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata:
  name: gpus
spec:
  cohortName: all
  admissionChecks: [dws, budget]
  admissionChecksStrategy:
    admissionChecks:
    - name: mk
    - name: elsewhere
      onFlavors: [h100]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: dws}
spec: {controllerName: kueue.x-k8s.io/provisioning-request}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: budget}
spec: {controllerName: example.com/budget-controller}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: AdmissionCheck
metadata: {name: mk}
spec: {controllerName: kueue.x-k8s.io/multikueue}
"""
    result = convert(load_documents(text, "checks.yaml"))
    (queue,) = [o for o in result.objects if o["kind"] == "Queue"]
    assert queue["spec"]["admissionChecks"] == ["provisioning", "budget"]
    notes = "\n".join(result.notes)
    assert "checks.yaml:7: spec.admissionChecks[0]: dws (ProvisioningRequest) -> the provisioning check" in notes
    assert "spec.admissionChecks[1]: budget (example.com/budget-controller) -> an external check" in notes
    assert "spec.admissionChecksStrategy.admissionChecks[0]: mk is MultiKueue's" in notes
    assert "spec.admissionChecksStrategy.admissionChecks[1]: AdmissionCheck elsewhere is not in the input" in notes
    assert "checks.yaml:12: spec.admissionChecksStrategy.admissionChecks[1].onFlavors" in notes
    # What the conversion makes is what `fedctl apply` takes.
    (doc,) = load_documents(yaml.safe_dump(queue), "queue.yaml")
    (_, converted), = apply_documents(doc)
    assert list(converted.message.admission_checks) == ["provisioning", "budget"]
