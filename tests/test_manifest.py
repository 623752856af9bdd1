"""Volcano Job manifests become JobSpecs; mistakes are reported at their file and line."""

from pathlib import Path

import pytest

from federation.cli.manifest import Converted, admin_from_document, job_from_document
from federation.cli.yamldoc import ManifestError, load_documents
from federation.v1 import admin_pb2

REPO = Path(__file__).resolve().parents[1]

JOB = """\
apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: train
  namespace: nlp-jobs
  labels: {team: nlp}
  annotations:
    federation.dev/cluster-selector: "accelerator=h100, region=eu"
    federation.dev/request-id: req-1
    federation.dev/sim-duration: 5s
spec:
  queue: research
  priorityClassName: high
  minAvailable: 3
  maxRetry: 2
  schedulerName: volcano
  plugins:
    svc: ["--disable-network-policy"]
    env: []
  policies:
    - event: PodEvicted
      action: RestartJob
  networkTopology:
    mode: hard
    highestTierAllowed: 2
  tasks:
    - name: worker
      replicas: 4
      policies:
        - events: [PodFailed, Unknown]
          action: RestartTask
          timeout: 1m30s
      partitionPolicy:
        totalPartitions: 2
        partitionSize: 2
        networkTopology: {mode: hard, highestTierAllowed: 1}
      template:
        spec:
          nodeSelector: {pool: a}
          tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
          initContainers:
            - name: fetch
              resources: {requests: {cpu: "8"}}
          containers:
            - name: main
              resources:
                requests: {cpu: "2", memory: 8Gi}
                limits: {nvidia.com/gpu: "8", cpu: "4"}
            - name: sidecar
              resources: {requests: {cpu: 500m}}
"""


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of `text` containing `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def convert(text: str) -> Converted:
    (doc,) = load_documents(text, "job.yaml")
    return job_from_document(doc)


def test_volcano_job_fields() -> None:
    c = convert(JOB)
    spec = c.message
    assert (spec.name, spec.queue, spec.priority_class_name, spec.min_available, spec.max_retry) == \
        ("train", "research", "high", 3, 2)
    assert dict(spec.cluster_selector) == {"accelerator": "h100", "region": "eu"}
    assert spec.request_id == "req-1"
    assert dict(spec.annotations) == {"federation.dev/sim-duration": "5s"}
    assert dict(spec.labels) == {"team": "nlp"}
    assert spec.namespace == "nlp-jobs"
    assert {name: list(p.args) for name, p in spec.plugins.items()} == {"svc": ["--disable-network-policy"], "env": []}
    assert (spec.network_topology.mode, spec.network_topology.highest_tier_allowed) == ("hard", 2)
    assert list(spec.policies[0].events) == ["PodEvicted"]
    task = spec.tasks[0]
    assert (task.name, task.replicas) == ("worker", 4)
    assert list(task.policies[0].events) == ["PodFailed", "Unknown"]
    assert task.policies[0].timeout.seconds == 90
    assert (task.partition_policy.total_partitions, task.partition_policy.partition_size) == (2, 2)
    assert task.partition_policy.network_topology.highest_tier_allowed == 1
    # requests win over limits; a limit alone is the request; init containers count at their max
    assert dict(task.resources) == {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "8"}
    assert dict(task.node_selector) == {"pool": "a"}
    assert task.tolerations[0].key == "gpu"
    assert '"nodeSelector"' in task.pod_template_json
    assert c.warnings == []  # schedulerName: volcano is what the federation stands in for
    other = job_from_document(load_documents(JOB.replace("schedulerName: volcano", "schedulerName: kai\n  "
                                                         "ttlSecondsAfterFinished: 60"), "job.yaml")[0])
    assert other.warnings == [  # one warning, naming each Volcano field not acted on, with its line
        f"job.yaml:1: Volcano fields the federation does not act on, ignored: spec.ttlSecondsAfterFinished (line "
        f"{line_of(JOB, 'schedulerName') + 1}), spec.schedulerName (line {line_of(JOB, 'schedulerName')}: 'kai'; "
        "the federation schedules it, as Volcano would)"]


def test_field_paths_map_back_to_lines() -> None:
    c = convert(JOB)
    assert c.line_of("tasks[0].replicas") == line_of(JOB, "replicas: 4")
    assert c.line_of("tasks[0].resources['nvidia.com/gpu']") == line_of(JOB, "limits: {nvidia.com/gpu")
    assert c.line_of("tasks[0].resources['memory']") == line_of(JOB, "memory: 8Gi")
    assert c.line_of("tasks[0].partition_policy.total_partitions") == line_of(JOB, "totalPartitions")
    assert c.line_of("queue") == line_of(JOB, "queue: research")
    assert c.line_of("cluster_selector['region']") == line_of(JOB, "cluster-selector")
    assert c.line_of("tasks[0].no_such_field") == line_of(JOB, "- name: worker")


@pytest.mark.parametrize(("old", "new", "message"), [
    ("replicas: 4", "replicas: four", "spec.tasks[0].replicas: must be an integer"),
    ("timeout: 1m30s", "timeout: soon", "is not a duration"),
    ("cpu: 500m", "cpu: lots", "containers[1].resources.requests.cpu: 'lots' is not a valid quantity"),
    ("  queue: research", "  queue: [a, b]", "spec.queue: must be a string"),
    ("kind: Job", "kind: Deployment", "expected a Volcano Job"),
    ("    highestTierAllowed: 2", "   bad: [unclosed", "invalid YAML"),
    ('"accelerator=h100, region=eu"', "accelerator", "is not key=value"),
])
def test_mistakes_name_line_and_field(old: str, new: str, message: str) -> None:
    text = JOB.replace(old, new, 1)
    line = line_of(text, new)
    with pytest.raises(ManifestError) as err:
        convert(text)
    assert err.value.line == line, str(err.value)
    assert message in str(err.value)
    assert str(err.value).startswith(f"job.yaml:{line}: ")


def test_multi_document_files_and_examples() -> None:
    docs = load_documents(JOB + "---\n" + JOB.replace("name: train", "name: train-2"), "two.yaml")
    assert [job_from_document(d).message.name for d in docs] == ["train", "train-2"]
    assert docs[1].start_line == len(JOB.splitlines()) + 2
    for path in sorted((REPO / "examples" / "jobs").glob("*.yaml")):
        for doc in load_documents(path.read_text(), str(path)):
            c = job_from_document(doc)
            assert c.message.tasks and not c.warnings, path


def test_admin_manifests() -> None:
    docs = load_documents((REPO / "examples" / "admin" / "federation.yaml").read_text(), "federation.yaml")
    kinds = [admin_from_document(d) for d in docs]
    assert [k for k, _ in kinds].count("Queue") == 3
    tenant = next(c.message for k, c in kinds if k == "Tenant" and c.message.name == "research")
    assert isinstance(tenant, admin_pb2.Tenant)
    assert (tenant.weight, dict(tenant.guarantee)) == (3, {"nvidia.com/gpu": "64"})
    (doc,) = load_documents("apiVersion: federation.dev/v1\nkind: Queue\nmetadata: {name: q}\n"
                            "spec:\n  tenant: t\n  state: sleeping\n", "q.yaml")
    with pytest.raises(ManifestError, match=r"q.yaml:6: spec.state: 'sleeping' is not one of"):
        admin_from_document(doc)


def test_each_command_points_to_the_other_for_what_it_does_not_take() -> None:
    """Issue 42 (8): `fedctl apply -f job.yaml`, a kubectl habit, says jobs go to `submit` (and the reverse)."""
    (job,) = load_documents((REPO / "examples" / "jobs" / "cpu-batch.yaml").read_text(), "cpu-batch.yaml")
    with pytest.raises(ManifestError, match=r"cpu-batch.yaml:\d+: kind: .*; jobs go to 'fedctl submit -f'"):
        admin_from_document(job)
    (tenant,) = load_documents("apiVersion: federation.dev/v1\nkind: Tenant\nmetadata: {name: t}\n", "t.yaml")
    with pytest.raises(ManifestError, match=r"admin objects go to 'fedctl apply -f'"):
        job_from_document(tenant)
