"""Volcano Global's HyperJob manifests (`training.volcano.sh/v1alpha1`, kind HyperJob) as the sub-jobs the
federation runs: each of `replicatedJobs[]` `replicas` times, its `templateSpec` a Volcano Job spec read as `fedctl
submit` reads a Job's, named `<hyperjob>-<replicatedJob>-<k>` as Volcano Global names them. They are submitted in one
batch, all or nothing, carrying what makes them one (`JobSpec.hyperjob`): the HyperJob's id, `minAvailable`,
`maxDomains`, each one's `clusterNames`, and the cluster label its sub-jobs must share a value of
(`federation.dev/cluster-topology`, an annotation: the tier above clusters, which HyperJob has no field for)."""

from __future__ import annotations

import secrets
from typing import Any

from federation.cli import volcano_fields
from federation.cli.manifest import (
    CLUSTER_SELECTOR_ANNOTATION,
    GENERATED_SUFFIX,
    HYPERJOB_API,
    JOB_ID_ANNOTATION,
    REQUEST_ID_ANNOTATION,
    Converted,
    _Reader,
    _selector,
    _volcano_annotations,
    job_spec,
)
from federation.cli.yamldoc import Document
from federation.v1 import common_pb2

CLUSTER_TOPOLOGY_ANNOTATION = "federation.dev/cluster-topology"
RESTART_ANNOTATION = "federation.dev/hyperjob-restart"  # sub-job (default) or whole
OWNER = "Volcano Global's HyperJob"


def is_hyperjob(doc: Document) -> bool:
    data = doc.data if isinstance(doc.data, dict) else {}
    return (data.get("apiVersion"), data.get("kind")) == (HYPERJOB_API, "HyperJob")


def hyperjob_from_document(doc: Document) -> list[Converted]:
    """A HyperJob manifest as its sub-jobs' specs, in order (the first carries the document's warnings)."""
    first = Converted(doc, common_pb2.JobSpec())
    r = _Reader(doc, first)
    data = r.map(doc.data, "")
    r.fields(data, volcano_fields.JOB, "", OWNER)
    meta = r.map(data.get("metadata"), "metadata")
    r.fields(meta, volcano_fields.METADATA, "metadata", OWNER)
    body = r.map(data.get("spec"), "spec")
    r.fields(body, volcano_fields.HYPERJOB_SPEC, "spec", OWNER)
    if "name" not in meta and "generateName" in meta:
        name = r.str(meta["generateName"], "metadata.generateName") + _suffix()
    else:
        name = r.str(meta.get("name", ""), "metadata.name")
    if not name:
        raise doc.error("metadata.name", "is required")
    annotations = r.str_map(meta.get("annotations"), "metadata.annotations")
    _volcano_annotations(r, annotations, "metadata.annotations")
    topology = annotations.pop(CLUSTER_TOPOLOGY_ANNOTATION, "")
    restart = annotations.pop(RESTART_ANNOTATION, "")
    selector = annotations.pop(CLUSTER_SELECTOR_ANNOTATION, None)
    request_id = annotations.pop(REQUEST_ID_ANNOTATION, "")
    annotations.pop(JOB_ID_ANNOTATION, None)
    labels = r.str_map(meta.get("labels"), "metadata.labels")
    min_available = r.int(body.get("minAvailable", 0), "spec.minAvailable")
    max_domains = r.int(body.get("maxDomains", 0), "spec.maxDomains")
    replicated = r.list(body.get("replicatedJobs"), "spec.replicatedJobs")
    if not replicated:
        raise doc.error("spec.replicatedJobs", "is required: at least one replicated job")
    group = f"{name[:57]}-{_suffix()}"  # this submission's: the name again later is another HyperJob
    out: list[Converted] = []
    parts = sum(_replicas(r, rj, f"spec.replicatedJobs[{i}]") for i, rj in enumerate(replicated))
    for i, rj in enumerate(replicated):
        at = f"spec.replicatedJobs[{i}]"
        rj = r.map(rj, at)
        r.fields(rj, volcano_fields.REPLICATED_JOB, at, OWNER)
        rj_name = r.str(rj.get("name", ""), f"{at}.name")
        if not rj_name:
            raise doc.error(f"{at}.name", "is required")
        if "templateSpec" not in rj:
            raise doc.error(f"{at}.templateSpec", "is required: the Volcano Job spec its sub-jobs run")
        clusters = [r.str(c, f"{at}.clusterNames[{j}]") for j, c in enumerate(r.list(rj.get("clusterNames"),
                                                                                      f"{at}.clusterNames"))]
        for k in range(_replicas(r, rj, at)):
            c = first if not out else Converted(doc, common_pb2.JobSpec())
            sub_reader = _Reader(doc, c)
            spec: common_pb2.JobSpec = c.message  # type: ignore[assignment]
            job_spec(sub_reader, r.map(rj["templateSpec"], f"{at}.templateSpec"), f"{at}.templateSpec", spec)
            spec.name = f"{name}-{rj_name}-{k}"
            spec.labels.update(labels)
            spec.annotations.update(annotations)
            if selector is not None:
                apath = f"metadata.annotations.{CLUSTER_SELECTOR_ANNOTATION}"
                spec.cluster_selector.update(_selector(sub_reader, selector, apath))
                c.origin["cluster_selector"] = apath
            if request_id:
                spec.request_id = f"{request_id}-{len(out)}"
            if "namespace" in meta:
                spec.namespace = r.str(meta["namespace"], "metadata.namespace")
            spec.hyperjob.CopyFrom(common_pb2.HyperJobPart(
                id=group, name=name, replicated_job=rj_name, index=len(out), parts=parts,
                min_available=min_available, max_domains=max_domains, cluster_names=clusters,
                cluster_topology=topology, restart=restart))
            c.origin.update({"name": "metadata.name", "labels": "metadata.labels",
                             "annotations": "metadata.annotations", "hyperjob": at,
                             "hyperjob.min_available": "spec.minAvailable", "hyperjob.max_domains": "spec.maxDomains",
                             "hyperjob.cluster_names": f"{at}.clusterNames",
                             "hyperjob.cluster_topology": f"metadata.annotations.{CLUSTER_TOPOLOGY_ANNOTATION}",
                             "hyperjob.restart": f"metadata.annotations.{RESTART_ANNOTATION}"})
            if c is not first:
                first.ignored.extend(x for x in c.ignored if x not in first.ignored)
            out.append(c)
    if first.ignored:
        first.warnings.append(f"{doc.file}:{doc.start_line}: fields the federation does not act on, ignored: "
                              + ", ".join(first.ignored))
    return out


def _replicas(r: _Reader, rj: Any, at: str) -> int:
    replicas = r.int(r.map(rj, at).get("replicas", 1), f"{at}.replicas")
    if replicas < 1:
        raise r.doc.error(f"{at}.replicas", f"must be at least 1, got {replicas}")
    return replicas


def _suffix() -> str:
    return "".join(secrets.choice(GENERATED_SUFFIX) for _ in range(5))
