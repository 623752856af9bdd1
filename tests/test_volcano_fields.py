"""Volcano users' manifests read as Volcano reads them: the field table against Volcano's CRDs, and every
file of the ecosystem corpus (tests/corpus/ecosystem, real files, unchanged; see its SOURCE.md) with the
outcome it must have."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from federation.cli import volcano_fields
from federation.cli.manifest import job_from_document
from federation.cli.yamldoc import ManifestError, load_documents
from federation.testbed.build import Tools
from federation.validation import Violations, check_job_spec, normalise_job_spec

CORPUS = Path(__file__).parent / "corpus" / "ecosystem"


def _props(schema: dict[str, Any], *path: str) -> set[str]:
    for step in path:
        schema = schema["items"] if step == "[]" else schema["properties"][step]
    return set(schema["properties"])


def test_the_field_table_is_volcanos_crd(testbed_tools: Tools) -> None:
    """Generated from volcano.sh/apis by the test bed's build: a field Volcano adds or drops fails here."""
    crd = yaml.safe_load(testbed_tools.crd("batch.volcano.sh", "jobs").read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    newer = {(level, name) for level, name in volcano_fields.NEWER_THAN_CRDS}
    for level, fields, path in (("JOB", volcano_fields.JOB, ()), ("JOB_SPEC", volcano_fields.JOB_SPEC, ("spec",)),
                                ("JOB_TASK", volcano_fields.TASK, ("spec", "tasks", "[]")),
                                ("POLICY", volcano_fields.POLICY, ("spec", "policies", "[]")),
                                ("NETWORK_TOPOLOGY", volcano_fields.NETWORK_TOPOLOGY, ("spec", "networkTopology"))):
        extra = {name for lvl, name in newer if lvl == level}
        assert fields.known == _props(root, *path) | extra, level
    assert _props(root, "spec", "tasks", "[]", "policies", "[]") == volcano_fields.POLICY.known
    queue = yaml.safe_load(testbed_tools.crd("scheduling.volcano.sh", "queues").read_text())
    spec = queue["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert set(spec["properties"]) == volcano_fields.QUEUE_SPEC.known | set(volcano_fields.QUEUE_SPEC_REFUSED)


def outcome(path: Path) -> list[str]:
    """What fedctl makes of each document of a file: accepted (with the warning's ignored fields), refused
    by the manifest reader (the error) or by Volcano's rules (the fields at fault), or not a Volcano Job."""
    try:
        docs = load_documents(path.read_text(), path.name)
    except ManifestError as err:
        return [f"invalid YAML at line {err.line}"]
    out = []
    for doc in docs:
        if not (isinstance(doc.data, dict) and doc.data.get("kind") == "Job"
                and str(doc.data.get("apiVersion", "")).startswith("batch.volcano.sh/")):
            out.append(f"not a Volcano Job: {doc.data.get('kind') if isinstance(doc.data, dict) else repr(doc.data)}")
            continue
        try:
            converted = job_from_document(doc)
        except ManifestError as err:
            out.append(f"refused at line {err.line}: {err.message}")
            continue
        v = Violations()
        normalise_job_spec(converted.message)
        check_job_spec(v, "spec", converted.message)
        if v:
            out.append("refused: " + ", ".join(item.field for item in v.items))
        else:
            out.append("accepted" + (f", ignoring {', '.join(f.split(' (')[0] for f in converted.ignored)}"
                                     if converted.ignored else ""))
    return out


OK = ["accepted"]
NUMA = ["accepted, ignoring spec.tasks[0].topologyPolicy"]
EXPECTED: dict[str, list[str]] = {
    # Documentation snippets: a fragment ("..." for the rest) and a string where Volcano's CRD has a list
    # are refused as Volcano's API server refuses them.
    "volcano-doc-jobs/docs_user-guide_how_to_use_cdp_plugin__1.yaml": ["accepted, ignoring spec.volumes"],
    "volcano-doc-jobs/docs_user-guide_how_to_use_cdp_plugin__2.yaml": ["refused at line 8: spec: must be a mapping"],
    # Volcano scheduler annotations stay on the pods but are said to be ignored, never dropped silently.
    "volcano-doc-jobs/docs_user-guide_how_to_use_cdp_plugin__3.yaml": [
        "accepted, ignoring spec.volumes, spec.tasks[0].template.metadata.annotations['volcano.sh/preemptable'], "
        "spec.tasks[0].template.metadata.annotations['volcano.sh/cooldown-time']"],
    "volcano-doc-jobs/docs_user-guide_how_to_use_env_plugin__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_job_policy__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_job_policy__2.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_job_policy__3.yaml": [
        "refused at line 16: spec.tasks[0].policies[0].events: must be a list"],
    "volcano-doc-jobs/docs_user-guide_how_to_use_job_ttl__1.yaml": ["accepted, ignoring spec.ttlSecondsAfterFinished"],
    "volcano-doc-jobs/docs_user-guide_how_to_use_mpi_plugin__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_network_topology_aware_scheduling__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_network_topology_aware_scheduling__2.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_network_topology_aware_scheduling__3.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_nodegroup_plugin__2.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_numa_aware__1.yaml": NUMA,
    "volcano-doc-jobs/docs_user-guide_how_to_use_numa_aware__2.yaml": NUMA,
    # Every plugin and flag of Volcano's examples is carried out (pytorch's wait-for-master, ray, svc's
    # --inject-hosts-env); one the agent does not know would be refused, not silently dropped.
    "volcano-doc-jobs/docs_user-guide_how_to_use_pytorch_plugin__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_ray_plugin__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_resource_strategy_fit_plugin__1.yaml": [
        "accepted, ignoring spec.tasks[0].template.metadata.annotations['volcano.sh/resource-strategy-scoring-type'],"
        " spec.tasks[0].template.metadata.annotations['volcano.sh/resource-strategy-weight']"],
    "volcano-doc-jobs/docs_user-guide_how_to_use_resource_strategy_fit_plugin__2.yaml": [
        "accepted, ignoring " + ", ".join(
            f"spec.tasks[{i}].template.metadata.annotations['volcano.sh/resource-strategy-{kind}']"
            for i in (0, 1) for kind in ("scoring-type", "weight"))],
    "volcano-doc-jobs/docs_user-guide_how_to_use_ssh_plugin__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_svc_plugin__1.yaml": OK,
    "volcano-doc-jobs/docs_user-guide_how_to_use_vnpu__1.yaml": OK,
    # A Go template, not YAML until rendered.
    "volcano-jobs/benchmark_testcases_gang_cases_vcjob-template.yaml": ["invalid YAML at line 13"],
    "volcano-jobs/example_MindSpore-example_mindspore_cpu_mindspore-cpu.yaml": OK,
    "volcano-jobs/example_MindSpore-example_mindspore_gpu_mindspore-gpu.yaml": OK,  # its trailing --- is nothing
    "volcano-jobs/example_cronjob_cronjob.yaml": ["not a Volcano Job: CronJob"],
    "volcano-jobs/example_hierarchical-jobs_jobs.yaml": OK * 4,
    "volcano-jobs/example_integrations_argo_10-job-step.yaml": ["not a Volcano Job: Workflow"],
    "volcano-jobs/example_integrations_argo_20-job-DAG.yaml": ["not a Volcano Job: Workflow"],
    "volcano-jobs/example_integrations_argo_mpi_hello-world.yaml": ["not a Volcano Job: WorkflowTemplate"],
    "volcano-jobs/example_integrations_argo_mpi_rbac.yaml": [
        "not a Volcano Job: Role", "not a Volcano Job: RoleBinding"],
    "volcano-jobs/example_integrations_mpi_mpi-example.yaml": OK,
    "volcano-jobs/example_integrations_mxnet_train_train-mnist-cpu.yaml": OK,
    "volcano-jobs/example_integrations_paddlepaddle_ctr-paddlepaddle-on-volcano.yaml": OK,
    "volcano-jobs/example_integrations_ray_ray-example.yaml": OK,
    "volcano-jobs/example_integrations_tensorflow_benchmark_tf-example.yaml": OK,
    "volcano-jobs/example_integrations_tensorflow_dist-mnist_tf-dist-mnist-example.yaml": OK,
    # What Volcano's admission webhook denies, denied here with the field at fault.
    "volcano-jobs/example_invalid_jobs_duplicatedPolicyEvent-webhook-deny.yaml": ["refused: spec.policies[1].events"],
    "volcano-jobs/example_invalid_jobs_duplicatedTaskName-webhook-deny.yaml": ["refused: spec.tasks[1].name"],
    "volcano-jobs/example_invalid_jobs_minAvailable-webhook-deny.yaml": ["refused: spec.min_available"],
    "volcano-jobs/example_job-plugin.yaml": OK,
    "volcano-jobs/example_job.yaml": OK,
    "volcano-jobs/example_kubecon-2019-china_gang_mpi-example.yaml": OK,
    "volcano-jobs/example_kubecon-2019-china_horovod-sample_lm-horovod-tf-mnist-v0.5.yaml": OK,
    "volcano-jobs/example_kubecon-2019-china_mpi-sample_mpi-example.yaml": OK,
    "volcano-jobs/example_kubecon-2019-china_task-priority_elastic-job.yaml": OK,
    "volcano-jobs/example_kubecon-2019-china_tf-sample_tf-example.yaml": OK,
    "volcano-jobs/example_task-start-dependency_job.yaml": [
        "accepted, ignoring spec.tasks[1].dependsOn, spec.tasks[2].dependsOn"],
    "volcano-jobs/example_task-start-dependency_mpi.yaml": ["accepted, ignoring spec.tasks[0].dependsOn"],
    "volcano-jobs/staging_src_volcano.sh_apis_artifacts_vcjob.yaml": OK,
}


def test_every_volcano_job_file_of_the_corpus_has_its_outcome() -> None:
    files = sorted(p.relative_to(CORPUS).as_posix() for folder in ("volcano-jobs", "volcano-doc-jobs")
                   for p in (CORPUS / folder).glob("*.yaml"))
    assert files == sorted(EXPECTED)  # a file added to the corpus needs its outcome written here
    got = {name: outcome(CORPUS / name) for name in files}
    assert {n: o for n, o in got.items() if o != EXPECTED[n]} == {}


@pytest.mark.parametrize(("text", "message"), [
    ("replica: 2", "9: spec.tasks[0].replica: unknown field 'replica': Volcano's Job has no such field; did you "
                   "mean replicas?"),
    ("minAvailble: 1", "9: spec.tasks[0].minAvailble: unknown field 'minAvailble'"),
])
def test_a_typo_is_an_error_at_its_line_not_a_field_skipped(text: str, message: str) -> None:
    manifest = f"""apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  generateName: train-
  namespace: research
spec:
  tasks:
  - name: worker
    {text}
    template: {{}}
"""
    (doc,) = load_documents(manifest, "job.yaml")
    with pytest.raises(ManifestError) as err:
        job_from_document(doc)
    assert str(err.value).startswith(f"job.yaml:{message}")
    (doc,) = load_documents(manifest.replace(text, "replicas: 2"), "job.yaml")
    spec = job_from_document(doc).message
    assert spec.name.startswith("train-") and len(spec.name) == len("train-") + 5 and spec.namespace == "research"


def test_tier_names_as_volcanos_label_discoverer_writes_them() -> None:
    """highestTierName: volcano.sh/hypernode (a qualified name, what the discoverer puts in tierName)."""
    manifest = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: train
spec:
  networkTopology:
    mode: hard
    highestTierName: volcano.sh/hypernode
  tasks:
  - name: worker
    replicas: 2
"""
    spec = job_from_document(load_documents(manifest, "job.yaml")[0]).message
    v = Violations()
    normalise_job_spec(spec)
    assert check_job_spec(v, "spec", spec) is not None and not v
    spec.network_topology.highest_tier_name = "not a name/"
    check_job_spec(v, "spec", spec)
    assert [item.field for item in v.items] == ["spec.network_topology.highest_tier_name"]


TOPOLOGY_EXPECTED: dict[str, str] = {
    # Complete sets: nodes, HyperNodes, tier names.
    "hypernode-sets/A_website_s0-s6.yaml": "8 nodes, 7 HyperNodes",
    "hypernode-sets/C_blog_s0_regex.yaml": "3 nodes, 1 HyperNodes",
    "hypernode-sets/D2_blog_s6_with_website.yaml": "8 nodes, 7 HyperNodes",
    # s6 alone names HyperNodes s4 and s5 that are not there: as in Volcano, s6 stands without them.
    "hypernode-sets/D_blog_s6_alone.yaml": "8 nodes, 1 HyperNodes, 2 notes",
    "hypernode-sets/E_benchmark_readme_rack0.yaml": "4 nodes, 1 HyperNodes, tiers rack=1",
    "hypernode-sets/F_benchmark_script_4racks_2spines.yaml": "16 nodes, 6 HyperNodes, tiers rack=1 spine=2",
    # Design-doc sketches without metadata are not objects Volcano's API server would take.
    "hypernode-sets/G1_design_doc_s0-s6.yaml": "refused: a HyperNode has no metadata.name",
    "hypernode-sets/G2_design_doc_nvlink_roce.yaml": "refused: a HyperNode has no metadata.name",
    # Two topology types' trees over the same nodes (Volcano keeps both): the larger is kept, the other
    # (volcano.sh/tor, 4 HyperNodes) left out with a note, as one tree per cluster is placed on here.
    "hypernode-sets/H2_label_discoverer_two_types.yaml":
        "16 nodes, 10 HyperNodes, tiers volcano.sh/hypercluster=2 volcano.sh/hypernode=1, 1 notes",
    "hypernode-sets/H_label_discoverer_output.yaml":
        "16 nodes, 6 HyperNodes, tiers volcano.sh/hypercluster=2 volcano.sh/hypernode=1",
    "hypernode-sets/I_ufm_discoverer_output.yaml": "12 nodes, 4 HyperNodes",
    "hypernode-sets/J_kubectl_get_List.yaml": "8 nodes, 7 HyperNodes",  # kubectl get -o yaml: a List
    "volcano-doc-hypernodes/benchmark_README__1.yaml": "invalid YAML",  # a Markdown quote, not a manifest
    "volcano-doc-hypernodes/blog_Volcano-1.11.0-release__1.yaml": "0 nodes, 1 HyperNodes, 2 notes",
    "volcano-doc-hypernodes/blog_Volcano-1.11.0-release__2.yaml": "0 nodes, 1 HyperNodes, 2 notes",
    "volcano-doc-hypernodes/docs_KeyFeatures_NetworkTopologyAware__1.yaml": "0 nodes, 4 HyperNodes, 8 notes",
    "volcano-doc-hypernodes/docs_KeyFeatures_NetworkTopologyAware__2.yaml": "0 nodes, 3 HyperNodes, 4 notes",
    "volcano-doc-hypernodes/docs_design_Network_Topology_Aware_Scheduling__1.yaml":
        "refused: a HyperNode has no metadata.name",
    "volcano-doc-hypernodes/docs_design_Network_Topology_Aware_Scheduling__2.yaml":
        "refused: a HyperNode has no metadata.name",
    "volcano-doc-hypernodes/versioned_docs_version-v1.12.0_KeyFeatures_NetworkTopologyAware__1.yaml":
        "0 nodes, 4 HyperNodes, 8 notes",
    "volcano-doc-hypernodes/versioned_docs_version-v1.12.0_KeyFeatures_NetworkTopologyAware__2.yaml":
        "0 nodes, 3 HyperNodes, 4 notes",
}


def topology_outcome(path: Path) -> str:
    from member_agent.topology import TopologyError, build, load_objects

    try:
        nodes, hypernodes, _ = load_objects(list(yaml.safe_load_all(path.read_text())))
        topology = build(nodes, hypernodes)
    except yaml.YAMLError:
        return "invalid YAML"
    except TopologyError as err:
        return f"refused: {str(err).split(';')[0]}"
    out = f"{len(nodes)} nodes, {len(hypernodes)} HyperNodes"
    if topology.tier_names:
        out += ", tiers " + " ".join(f"{name}={tier}" for name, tier in sorted(topology.tier_names.items()))
    return out + (f", {len(topology.notes)} notes" if topology.notes else "")


def test_every_hypernode_file_of_the_corpus_loads_as_volcano_would_take_it() -> None:
    files = sorted(p.relative_to(CORPUS).as_posix() for folder in ("hypernode-sets", "volcano-doc-hypernodes")
                   for p in (CORPUS / folder).glob("*.yaml"))
    assert files == sorted(TOPOLOGY_EXPECTED)
    got = {name: topology_outcome(CORPUS / name) for name in files}
    assert {n: o for n, o in got.items() if o != TOPOLOGY_EXPECTED[n]} == {}


def test_fedctl_validate_checks_jobs_queues_and_topologies_without_a_server(tmp_path: Path) -> None:
    """Issue 28 (6): `fedctl validate -f` reads HyperNode sets as the agent builds them, jobs as submit reads them."""
    import subprocess

    from tests.processes import BIN

    def validate(*paths: Path) -> subprocess.CompletedProcess[str]:
        args = [a for p in paths for a in ("-f", str(p))]
        return subprocess.run([str(BIN / "fedctl"), "--server", "127.0.0.1:1", "validate", *args],
                              capture_output=True, text=True, timeout=60)

    good = validate(CORPUS / "hypernode-sets" / "F_benchmark_script_4racks_2spines.yaml",
                    Path(__file__).parent.parent / "examples" / "jobs" / "train-64gpu-hard.yaml")
    assert good.returncode == 0, good.stderr
    assert "topology valid: 16 nodes, 6 HyperNodes, tiers rack=1 spine=2" in good.stdout
    assert "job/llama-pretrain valid" in good.stdout
    sketch = validate(CORPUS / "hypernode-sets" / "G1_design_doc_s0-s6.yaml")
    assert sketch.returncode == 1 and "topology refused: a HyperNode has no metadata.name" in sketch.stderr
    broken = tmp_path / "job.yaml"
    broken.write_text("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n  tasks:\n"
                      "  - name: w\n    replicas: -1\n")
    bad = validate(broken)
    assert bad.returncode == 1 and f"{broken}:7: spec.tasks[0].replicas" in bad.stderr
