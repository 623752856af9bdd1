"""`fedctl convert`: what users of Kueue, Armada and Volcano already have, as manifests the federation takes.

Kueue `ClusterQueue`/`Cohort` and Armada and Volcano `Queue`s become the federation's Queues (`fedctl apply`);
the workloads Kueue queues (`batch/v1` Jobs, JobSets, Kubeflow PyTorchJobs and MPIJobs, KubeRay RayJobs,
LeaderWorkerSets, plain Pod groups) and Armada job files become Volcano Jobs (`fedctl submit`), each a gang of all
its pods (a LeaderWorkerSet's groups joining as they fit), with Kueue's topology requests as network topology and
its slices, and a LeaderWorkerSet's groups, as partitions each inside one HyperNode. Each field maps to its
counterpart; what is lost on the way is said in a note naming file and line; a field with no counterpart
that would change what is scheduled is refused by name, as `fedctl apply` refuses it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from federation.cli.convert_workloads import (
    ARMADA_API,
    KUEUE_API,
    KUEUE_MULTIKUEUE,
    KUEUE_POD_GROUP,
    KUEUE_PROVISIONING,
    LWS_API,
    Workloads,
)
from federation.cli.manifest import FEDERATION_API, VOLCANO_QUEUE_API, volcano_queue
from federation.cli.yamldoc import Document, ManifestError, quoted
from federation.kernel.admission import PROVISIONING
from federation.kernel.resources import QuantityError, format_amount, parse_amount
from federation.v1 import admin_pb2
from federation.validation import DEFAULT_TENANT


@dataclass
class Conversion:
    objects: list[dict[str, Any]] = field(default_factory=list)  # manifests `fedctl apply` / `submit` take
    notes: list[str] = field(default_factory=list)  # "file:line: what maps to what, or was lost"


class _Converter(Workloads):
    def __init__(self, docs: list[Document]) -> None:
        self.docs = docs
        self.out = Conversion()
        # Kueue: a Job names a LocalQueue (namespace, name); the federation's queue is its ClusterQueue.
        self.local_queues: dict[tuple[str, str], str] = {}
        # Kueue's AdmissionChecks given beside their ClusterQueues: name -> its controller.
        self.check_controllers: dict[str, str] = {}
        for doc in docs:
            data = doc.data if isinstance(doc.data, dict) else {}
            if not str(data.get("apiVersion", "")).startswith(KUEUE_API):
                continue
            meta, spec = data.get("metadata") or {}, data.get("spec") or {}
            if data.get("kind") == "LocalQueue":
                self.local_queues[(str(meta.get("namespace", "default")), str(meta.get("name", "")))] = \
                    str(spec.get("clusterQueue", ""))
            elif data.get("kind") == "AdmissionCheck":
                self.check_controllers[str(meta.get("name", ""))] = str(spec.get("controllerName", ""))

        # Kueue pod groups: group name -> its pods as read, made one job once every document is read.
        self.pod_groups: dict[str, list[tuple[Document, dict[str, Any]]]] = {}

    def note(self, doc: Document, path: str, text: str) -> None:
        self.out.notes.append(f"{doc.file}:{doc.line(path)}: {text}")

    def run(self) -> Conversion:
        for doc in self.docs:
            data = doc.data if isinstance(doc.data, dict) else {}
            api, kind = str(data.get("apiVersion", "")), str(data.get("kind", ""))
            handler = self._handler(api, kind, data)
            if handler is None:
                self.note(doc, "kind", f"{api or '?'}/{kind or '?'} is not converted (fedctl convert takes Kueue "
                                       "ClusterQueue, Cohort, LocalQueue, and the workloads Kueue queues: batch/v1 "
                                       "Jobs, JobSets, PyTorchJobs, MPIJobs, RayJobs, LeaderWorkerSets and Pod "
                                       "groups; Armada queues "
                                       "and job files; Volcano Queues)")
                continue
            handler(doc, data)
        self.pod_groups_done()
        return self.out

    def _handler(self, api: str, kind: str, data: dict[str, Any]) -> Callable[[Document, dict[str, Any]], None] | None:
        if api.startswith(KUEUE_API):
            return {"ClusterQueue": self.cluster_queue, "Cohort": self.cohort, "LocalQueue": self.local_queue,
                    "ResourceFlavor": self.kueue_only, "Topology": self.kueue_only, "AdmissionCheck": self.kueue_only,
                    "MultiKueueConfig": self.kueue_only, "MultiKueueCluster": self.kueue_only}.get(kind)
        if api == "batch/v1" and kind == "Job":
            return self.kueue_job
        if api.startswith("jobset.x-k8s.io/") and kind == "JobSet":
            return self.jobset
        if api.startswith("kubeflow.org/") and kind in ("PyTorchJob", "MPIJob"):
            return self.kubeflow_job
        if api.startswith("ray.io/") and kind == "RayJob":
            return self.ray_job
        if api.startswith(LWS_API) and kind == "LeaderWorkerSet":
            return self.leader_worker_set
        if api == "v1" and kind == "Pod" and KUEUE_POD_GROUP in ((data.get("metadata") or {}).get("labels") or {}):
            return self.pod_group_member
        if api == VOLCANO_QUEUE_API and kind == "Queue":
            return self.volcano_queue
        if api.startswith(ARMADA_API) and kind == "Queue":
            return self.armada_queue
        if not kind and "jobs" in data and "queue" in data:
            return self.armada_jobs
        return None

    # -- queues ------------------------------------------------------------------------------------

    def _queue(self, name: str, tenant: str = DEFAULT_TENANT, **spec: Any) -> None:
        body = {k: v for k, v in spec.items() if v not in (None, {}, [], "")}
        self.out.objects.append({"apiVersion": FEDERATION_API, "kind": "Queue", "metadata": {"name": name},
                                 "spec": {"tenant": tenant, **body}})

    def volcano_queue(self, doc: Document, data: dict[str, Any]) -> None:
        for _, converted in volcano_queue(doc):
            q: admin_pb2.Queue = converted.message  # type: ignore[assignment]
            self._queue(q.name, q.tenant, weight=q.weight or None, priority=q.priority or None,
                        guarantee=dict(q.guarantee), limit=dict(q.limit),
                        reclaimable=q.reclaimable if q.HasField("reclaimable") else None, parent=q.parent)

    def _quotas(self, doc: Document, groups: Any, path: str
                ) -> tuple[dict[str, str], dict[str, str], dict[str, str], list[str]]:
        """Kueue resource groups: nominal quota -> guarantee, nominal + borrowing limit -> limit (when every
        flavor of a resource has one), lending limit -> lending limit. One flavor per group counts as the plain
        resource; several keep their flavor names (`nvidia.com/gpu@h100`), which must then exist as federation
        flavors."""
        guarantee: dict[str, int] = {}
        limit: dict[str, int] = {}
        lending: dict[str, int] = {}
        unlimited: set[str] = set()
        flavors: list[str] = []
        for g, group in enumerate(groups if isinstance(groups, list) else []):
            many = len(group.get("flavors") or []) > 1
            for f, flavor in enumerate(group.get("flavors") or []):
                if many:
                    flavors.append(str(flavor.get("name", "")))
                for r, res in enumerate(flavor.get("resources") or []):
                    rpath = f"{path}[{g}].flavors[{f}].resources[{r}]"
                    name = str(res.get("name", ""))
                    key = f"{name}@{flavor.get('name')}" if many else name
                    try:
                        nominal = parse_amount(name, str(res.get("nominalQuota", 0)))
                        borrow = res.get("borrowingLimit")
                        if borrow is None:
                            unlimited.add(key)
                        else:
                            limit[key] = limit.get(key, 0) + nominal + parse_amount(name, str(borrow))
                    except QuantityError as err:
                        raise doc.error(rpath, str(err)) from None
                    guarantee[key] = guarantee.get(key, 0) + nominal
                    if res.get("lendingLimit") is not None:
                        try:
                            lent = parse_amount(name, str(res["lendingLimit"]))
                        except QuantityError as err:
                            raise doc.error(f"{rpath}.lendingLimit", str(err)) from None
                        if lent > nominal:
                            raise doc.error(f"{rpath}.lendingLimit", f"lendingLimit {res['lendingLimit']} exceeds "
                                                                     f"nominalQuota {res.get('nominalQuota', 0)}")
                        lending[key] = lending.get(key, 0) + lent
        fmt = {k: format_amount(k.partition("@")[0], v) for k, v in guarantee.items()}
        lim = {k: format_amount(k.partition("@")[0], v) for k, v in limit.items() if k not in unlimited}
        lent_out = {k: format_amount(k.partition("@")[0], v) for k, v in lending.items()}
        return fmt, lim, lent_out, flavors

    KUEUE_NOTED = {
        "namespaceSelector": "every namespace may submit to a federation queue (tenants' tokens decide who may)",
        "queueingStrategy": "the federation orders a queue by priority, then submission, never blocking on "
                            "a job that cannot run (BestEffortFIFO)",
        "flavorFungibility": "a queue's flavors are tried in order",
        "preemption": ("reclaim and preemption follow deserved shares and priority classes "
                       "(docs/concepts/scheduling.md)"),
        "admissionScope": "not kept",
    }

    def cluster_queue(self, doc: Document, data: dict[str, Any]) -> None:
        name = str((data.get("metadata") or {}).get("name", ""))
        spec = data.get("spec") or {}
        known = {"resourceGroups", "cohort", "cohortName", "fairSharing", "stopPolicy", "admissionChecks",
                 "admissionChecksStrategy", *self.KUEUE_NOTED}
        for key in spec:
            if key not in known:
                raise ManifestError(doc.file, doc.line(f"spec.{key}"),
                                    f"spec.{key}: a ClusterQueue field with no counterpart in the federation")
            if key in self.KUEUE_NOTED:
                self.note(doc, f"spec.{key}", f"spec.{key}: {self.KUEUE_NOTED[key]}")
        guarantee, limit, lending, flavors = self._quotas(doc, spec.get("resourceGroups"), "spec.resourceGroups")
        stop = spec.get("stopPolicy")
        state = {"Hold": "Closed", "HoldAndDrain": "Closed"}.get(str(stop)) if stop and stop != "None" else None
        cohort = str(spec.get("cohortName") or spec.get("cohort") or "")
        if not cohort:  # nobody to borrow from: Kueue admits up to the nominal quota, never past it
            limit = dict(guarantee)
            self.note(doc, "spec.resourceGroups", f"ClusterQueue {name} has no cohort: capped at its nominal quota "
                                                  "(limit = guarantee), as Kueue admits it no further")
        self._queue(name, weight=_weight(doc, spec), guarantee=guarantee, limit=limit, lendingLimit=lending,
                    flavors=flavors, parent=cohort, state=state, admissionChecks=self._checks(doc, spec))
        self.note(doc, "metadata.name", f"ClusterQueue {name} -> queue {name} of tenant {DEFAULT_TENANT} (nominal "
                                        "quota -> guarantee, nominal + borrowing limit -> limit, lending limit -> "
                                        "lending limit, fair sharing weight -> weight, cohort -> parent queue)")

    def _checks(self, doc: Document, spec: dict[str, Any]) -> list[str]:
        """A ClusterQueue's admission checks, by their AdmissionChecks' controllers: the provisioning request
        controller's become the agents' `provisioning`; MultiKueue's is what the federation does itself; any other is
        an external check of the same name, which its controller sets through the admin API."""
        named = [(f"spec.admissionChecks[{i}]", str(n)) for i, n in enumerate(spec.get("admissionChecks") or [])]
        strategy = (spec.get("admissionChecksStrategy") or {}).get("admissionChecks") or []
        for i, rule in enumerate(strategy):
            path = f"spec.admissionChecksStrategy.admissionChecks[{i}]"
            named.append((path, str((rule or {}).get("name", ""))))
            if (rule or {}).get("onFlavors"):
                self.note(doc, f"{path}.onFlavors", f"{path}.onFlavors: the check is kept for the whole queue; to "
                                                    "hold it to a flavor, give that flavor the check "
                                                    "(fedctl flavor update F --admission-check NAME)")
        out: list[str] = []
        for path, name in named:
            controller = self.check_controllers.get(name)
            if controller is None:
                self.note(doc, path, f"{path}: AdmissionCheck {name} is not in the input: not kept (convert it "
                                     "with its AdmissionCheck to keep it)")
            elif controller == KUEUE_MULTIKUEUE:
                self.note(doc, path, f"{path}: {name} is MultiKueue's: the federation dispatches to member clusters "
                                     "itself")
            elif controller == KUEUE_PROVISIONING:
                out.append(PROVISIONING)
                self.note(doc, path, f"{path}: {name} (ProvisioningRequest) -> the provisioning check: the chosen "
                                     "cluster's agent asks its autoscaler for the nodes (agent --node-groups)")
            else:
                out.append(name)
                self.note(doc, path, f"{path}: {name} ({controller}) -> an external check: its controller says how "
                                     "it stands with SetAdmissionCheck (fedctl admission-check)")
        return list(dict.fromkeys(out))

    def cohort(self, doc: Document, data: dict[str, Any]) -> None:
        name = str((data.get("metadata") or {}).get("name", ""))
        spec = data.get("spec") or {}
        for key in spec:
            if key not in {"parentName", "resourceGroups", "fairSharing"}:
                raise ManifestError(doc.file, doc.line(f"spec.{key}"),
                                    f"spec.{key}: a Cohort field with no counterpart in the federation")
        guarantee, limit, lending, _ = self._quotas(doc, spec.get("resourceGroups"), "spec.resourceGroups")
        self._queue(name, weight=_weight(doc, spec), guarantee=guarantee, limit=limit, lendingLimit=lending,
                    parent=str(spec.get("parentName") or ""))
        self.note(doc, "metadata.name", f"Cohort {name} -> parent queue {name}: its ClusterQueues share what it "
                                        "deserves, as Kueue's hierarchical cohorts; jobs go to its leaf queues")

    def local_queue(self, doc: Document, data: dict[str, Any]) -> None:
        meta = data.get("metadata") or {}
        self.note(doc, "metadata.name", f"LocalQueue {meta.get('name')} is not an object here: jobs naming it go "
                                        f"to queue {(data.get('spec') or {}).get('clusterQueue')}")

    def kueue_only(self, doc: Document, data: dict[str, Any]) -> None:
        kind = data.get("kind")
        why = {"ResourceFlavor": "a flavor here is a resource on clusters picked by their labels: "
                                 "fedctl flavor create NAME --resource R --selector K=V",
               "Topology": "topology comes from each cluster's HyperNodes (or its agent's --topology-label)",
               "AdmissionCheck": "its ClusterQueues name it, and keep it as the admission check it maps to",
               "MultiKueueConfig": "member clusters join by running an agent",
               "MultiKueueCluster": "member clusters join by running an agent"}[str(kind)]
        self.note(doc, "kind", f"{kind} {(data.get('metadata') or {}).get('name')} is not converted: {why}")

    def armada_queue(self, doc: Document, data: dict[str, Any]) -> None:
        name = str(data.get("name") or (data.get("metadata") or {}).get("name", ""))
        factor = float(data.get("priorityFactor") or 1.0)
        weight = max(1, round(1 / factor)) if factor > 0 else 1
        self._queue(name, weight=weight)
        self.note(doc, "priorityFactor", f"priorityFactor {factor:g} -> weight {weight} (Armada's factor divides "
                                         "a share, a weight multiplies it)")
        for key in ("permissions", "resourceLimits", "resourceLimitsByPriorityClassName", "cordoned"):
            if key in data:
                self.note(doc, key, f"{key} is not kept (tenants' tokens decide who may submit; limits are "
                                    "amounts, not fractions of the federation)")


def _weight(doc: Document, spec: dict[str, Any]) -> int | None:
    weight = (spec.get("fairSharing") or {}).get("weight")
    if weight is None:
        return None
    try:
        return max(1, round(float(str(weight))))  # weights here are whole numbers, at least 1
    except ValueError:
        raise doc.error("spec.fairSharing.weight", f"{quoted(weight)} is not a number") from None


def convert(docs: list[Document]) -> Conversion:
    return _Converter(docs).run()
