"""Job manifests as `fedctl submit` reads a stream of them: Volcano Jobs and HyperJobs, each with the
ResourceClaimTemplates its pods' claims name from earlier documents of the stream."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping

from federation.cli.hyperjob import hyperjob_from_document, is_hyperjob
from federation.cli.manifest import Converted, job_from_document
from federation.cli.yamldoc import Document
from federation.kernel import dra
from federation.v1 import common_pb2


def jobs_from_documents(docs: Iterable[Document]) -> Iterator[Converted]:
    """Volcano Jobs from a stream of documents, each carrying the ResourceClaimTemplates (resource.k8s.io/v1) its
    pods' claims name, from earlier documents of the stream in the job's namespace (as `kubectl apply` would need
    them there first)."""
    templates: dict[tuple[str, str], str] = {}  # (namespace, name) -> the template, as JSON
    for doc in docs:
        data = doc.data if isinstance(doc.data, dict) else {}
        if data.get("kind") != "ResourceClaimTemplate":
            if is_hyperjob(doc):
                yield from (_with_claim_templates(c, templates) for c in hyperjob_from_document(doc))
            else:
                yield _with_claim_templates(job_from_document(doc), templates)
            continue
        if data.get("apiVersion") != dra.API:
            raise doc.error("apiVersion", f"expected {dra.API} for a ResourceClaimTemplate")
        meta = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
        if not isinstance(meta.get("name"), str) or not meta["name"]:
            raise doc.error("metadata.name", "required")
        try:
            dra.claim_spec((data.get("spec") or {}).get("spec") if isinstance(data.get("spec"), dict) else None,
                           "spec.spec")
        except dra.ClaimError as err:
            raise doc.error(err.field, err.message) from None
        templates[(str(meta.get("namespace", "")), meta["name"])] = json.dumps(data, sort_keys=True, default=str)


def _with_claim_templates(out: Converted, templates: Mapping[tuple[str, str], str]) -> Converted:
    spec: common_pb2.JobSpec = out.message  # type: ignore[assignment]
    wanted: dict[str, str] = {}
    for i, task in enumerate(spec.tasks):
        for j, (_, name) in enumerate(_claims_of(out, task, i)):
            found = templates.get((spec.namespace, name))
            if found is None:
                where = f"namespace {spec.namespace}" if spec.namespace else "the agent's default namespace"
                raise out.doc.error(f"spec.tasks[{i}].template.spec.resourceClaims[{j}].resourceClaimTemplateName",
                                    f"no ResourceClaimTemplate {name} in {where} earlier in the manifest")
            wanted[name] = found
    spec.resource_claim_templates_json.extend(wanted[n] for n in sorted(wanted))
    return out


def _claims_of(out: Converted, task: common_pb2.TaskSpec, i: int) -> list[tuple[str, str]]:
    try:
        return dra.pod_claims(task.pod_template_json)
    except dra.ClaimError as err:
        field = err.field.replace("pod_template_json.", "template.", 1)
        raise out.doc.error(f"spec.tasks[{i}].{field}", err.message) from None
