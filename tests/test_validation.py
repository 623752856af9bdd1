"""Every static rule of docs/architecture.md (Bad input) rejects with the field at fault; a valid spec passes whole."""

from collections.abc import Callable

import pytest

from federation.kernel.resources import SHARE
from federation.v1 import admin_pb2, common_pb2
from federation.validation import (
    Violations,
    check_job_spec,
    check_priority_class,
    check_queue,
    check_tenant,
    normalise_job_spec,
)


def valid_spec() -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name="train", queue="q", min_available=4,
        network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=2),
        policies=[common_pb2.LifecyclePolicy(events=["PodFailed"], action="RestartTask")],
        tasks=[common_pb2.TaskSpec(name="worker", replicas=4, resources={"nvidia.com/gpu": "8", "cpu": "500m"},
                                   partition_policy=common_pb2.PartitionPolicy(total_partitions=2, partition_size=2))],
        cluster_selector={"accelerator": "h100"}, request_id="abc")


def test_valid_spec_passes_and_totals_the_gang() -> None:
    v = Violations()
    checked = check_job_spec(v, "spec", valid_spec())
    assert not v.items
    assert checked is not None
    assert checked.minimum == checked.whole == {"nvidia.com/gpu": 32, SHARE: 32_000, "cpu": 2000}
    assert checked.replicas == 4


def _task(spec: common_pb2.JobSpec) -> common_pb2.TaskSpec:
    return spec.tasks[0]


MUTATIONS: list[tuple[str, Callable[[common_pb2.JobSpec], object], str]] = [
    ("bad name", lambda s: setattr(s, "name", "Train_1"), "spec.name"),
    ("missing name", lambda s: setattr(s, "name", ""), "spec.name"),
    ("long name", lambda s: setattr(s, "name", "a" * 64), "spec.name"),
    ("bad queue name", lambda s: setattr(s, "queue", "Bad_Queue"), "spec.queue"),  # none: the default queue
    ("bad class", lambda s: setattr(s, "priority_class_name", "HIGH"), "spec.priority_class_name"),
    ("no tasks", lambda s: s.ClearField("tasks"), "spec.tasks"),
    ("negative replicas", lambda s: setattr(_task(s), "replicas", -1), "spec.tasks[0].replicas"),
    ("zero replicas", lambda s: setattr(_task(s), "replicas", 0), "spec.tasks[0].replicas"),
    ("too many replicas", lambda s: setattr(_task(s), "replicas", 10_001), "spec.tasks[0].replicas"),
    ("min_available over replicas", lambda s: setattr(s, "min_available", 5), "spec.min_available"),
    ("task min_available over replicas", lambda s: setattr(_task(s), "min_available", 9),
     "spec.tasks[0].min_available"),
    ("bad quantity", lambda s: _task(s).resources.update({"cpu": "lots"}), "spec.tasks[0].resources['cpu']"),
    # below one GPU a fraction is one device's share (tests/test_gpu_share_quotas.py); above, no device holds it
    ("fractional gpu", lambda s: _task(s).resources.update({"nvidia.com/gpu": "1.5"}),
     "spec.tasks[0].resources['nvidia.com/gpu']"),
    ("bad resource name", lambda s: _task(s).resources.update({"bad name!": "1"}),
     "spec.tasks[0].resources['bad name!']"),
    ("bad mode", lambda s: setattr(s.network_topology, "mode", "strict"), "spec.network_topology.mode"),
    ("tier too high", lambda s: setattr(s.network_topology, "highest_tier_allowed", 17),
     "spec.network_topology.highest_tier_allowed"),
    ("tier without mode", lambda s: setattr(s.network_topology, "mode", ""), "spec.network_topology.mode"),
    ("both tier forms", lambda s: setattr(s.network_topology, "highest_tier_name", "spine"),
     "spec.network_topology.highest_tier_name"),
    ("partition arithmetic", lambda s: setattr(_task(s).partition_policy, "partition_size", 3),
     "spec.tasks[0].partition_policy"),
    ("zero partitions", lambda s: setattr(_task(s).partition_policy, "total_partitions", 0),
     "spec.tasks[0].partition_policy.total_partitions"),
    ("min partitions", lambda s: setattr(_task(s).partition_policy, "min_partitions", 3),
     "spec.tasks[0].partition_policy.min_partitions"),
    ("bad event", lambda s: s.policies[0].events.append("PodExploded"), "spec.policies[0].events"),
    ("bad action", lambda s: setattr(s.policies[0], "action", "Reboot"), "spec.policies[0].action"),
    ("task JobUnknown", lambda s: _task(s).policies.add(events=["JobUnknown"], action="RestartJob"),
     "spec.tasks[0].policies[0].events"),
    ("negative timeout", lambda s: setattr(s.policies[0].timeout, "seconds", -5), "spec.policies[0].timeout"),
    ("timeout of 10^12 s", lambda s: setattr(s.policies[0].timeout, "seconds", 10**12), "spec.policies[0].timeout"),
    ("timeout nanos 2e9", lambda s: setattr(s.policies[0].timeout, "nanos", 2_000_000_000),
     "spec.policies[0].timeout"),
    ("on-cluster-lost", lambda s: s.annotations.update({"federation.dev/on-cluster-lost": "later"}),
     "spec.annotations['federation.dev/on-cluster-lost']"),
    ("max_retry", lambda s: setattr(s, "max_retry", -1), "spec.max_retry"),
    ("duplicate task", lambda s: s.tasks.append(common_pb2.TaskSpec(name="worker", replicas=1)), "spec.tasks[1].name"),
    ("selector value", lambda s: s.cluster_selector.update({"zone": "a b"}), "spec.cluster_selector['zone']"),
    ("too many labels", lambda s: s.labels.update({f"k{i}": "v" for i in range(65)}), "spec.labels"),
    ("huge annotation", lambda s: s.annotations.update({"a": "x" * 70_000}), "spec.annotations"),
    ("request id", lambda s: setattr(s, "request_id", "x" * 129), "spec.request_id"),
    ("template json", lambda s: setattr(_task(s), "pod_template_json", "{not json"),
     "spec.tasks[0].pod_template_json"),
    ("gpu fraction", lambda s: setattr(_task(s), "pod_template_json",
                                       '{"metadata": {"annotations": {"gpu-fraction": "1.5"}}}'),
     "spec.tasks[0].pod_template_json.metadata.annotations"),
    ("gpu fraction with whole gpus", lambda s: (_task(s).resources.update({"nvidia.com/gpu": "1"}), setattr(
        _task(s), "pod_template_json", '{"metadata": {"annotations": {"gpu-memory": "4096"}}}')),
     "spec.tasks[0].pod_template_json.metadata.annotations"),
    ("toleration", lambda s: _task(s).tolerations.append(common_pb2.Toleration(operator="Maybe")),
     "spec.tasks[0].tolerations[0].operator"),
    ("unknown plugin", lambda s: s.plugins["tensorflow"].SetInParent(), "spec.plugins['tensorflow']"),
    ("unknown plugin flag", lambda s: s.plugins["svc"].args.append("--publish-not-ready"), "spec.plugins['svc']"),
    ("plugin port", lambda s: s.plugins["pytorch"].args.append("--port=http"), "spec.plugins['pytorch']"),
    ("namespace", lambda s: setattr(s, "namespace", "Jobs_1"), "spec.namespace"),
]


@pytest.mark.parametrize(("mutate", "field"), [(m, f) for _, m, f in MUTATIONS], ids=[n for n, _, _ in MUTATIONS])
def test_rule_rejects_with_field(mutate: Callable[[common_pb2.JobSpec], object], field: str) -> None:
    spec = valid_spec()
    mutate(spec)
    v = Violations()
    assert check_job_spec(v, "spec", spec) is None
    assert field in [x.field for x in v.items], v.items


def test_hard_mode_defaults_to_tier_one_and_retry_to_three() -> None:
    spec = common_pb2.JobSpec(network_topology=common_pb2.NetworkTopology(mode="hard"))
    normalise_job_spec(spec)
    assert spec.network_topology.highest_tier_allowed == 1
    assert spec.max_retry == 3
    kept = common_pb2.JobSpec(max_retry=0)
    normalise_job_spec(kept)
    assert kept.max_retry == 0


def test_plugins_take_volcanos_flags_and_mpi_brings_svc_and_ssh() -> None:
    spec = valid_spec()
    spec.plugins["mpi"].args.extend(["--master=launcher", "--port=2222"])
    spec.plugins["env"].SetInParent()
    v = Violations()
    assert check_job_spec(v, "spec", spec) is not None and not v.items
    normalise_job_spec(spec)
    assert sorted(spec.plugins) == ["env", "mpi", "ssh", "svc"]  # as Volcano's admission adds them
    assert list(spec.plugins["mpi"].args) == ["--master=launcher", "--port=2222"]


def test_admin_objects() -> None:
    v = Violations()
    check_tenant(v, "tenant", admin_pb2.Tenant(name="ml", guarantee={"nvidia.com/gpu": "16"},
                                               limit={"nvidia.com/gpu": "8"}))
    assert [x.field for x in v.items] == ["tenant.guarantee['nvidia.com/gpu']"]
    v = Violations()
    check_queue(v, "queue", admin_pb2.Queue(name="q", tenant="", weight=-1, state=9))
    assert {x.field for x in v.items} == {"queue.tenant", "queue.weight", "queue.state"}
    v = Violations()
    check_priority_class(v, "pc", admin_pb2.PriorityClass(name="p", value=2_000_000_000))
    assert [x.field for x in v.items] == ["pc.value"]
