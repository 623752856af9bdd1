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

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from federation.cli.manifest import FEDERATION_API, VOLCANO_API, VOLCANO_QUEUE_API, volcano_queue
from federation.cli.yamldoc import Document, ManifestError, quoted
from federation.kernel.admission import PROVISIONING
from federation.kernel.jobspec import MAX_RUN_TIME
from federation.kernel.resources import QuantityError, format_amount, parse_amount
from federation.v1 import admin_pb2
from federation.validation import DEFAULT_TENANT

KUEUE_API = "kueue.x-k8s.io/"
ARMADA_API = "armadaproject.io/"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_POD_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_MAX_EXEC = "kueue.x-k8s.io/max-exec-time-seconds"  # the workload's maximumExecutionTimeSeconds
KUEUE_POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_TOPOLOGY = {"kueue.x-k8s.io/podset-required-topology": "hard",
                  "kueue.x-k8s.io/podset-preferred-topology": "soft"}
# Kueue's two-level topology: slices of a pod set, each inside one domain of the level
KUEUE_SLICE_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
KUEUE_PROVISIONING = "kueue.x-k8s.io/provisioning-request"
LWS_API = "leaderworkerset.x-k8s.io/"
LWS_EXCLUSIVE = "leaderworkerset.sigs.k8s.io/exclusive-topology"  # each group alone in one domain of that level
ARMADA_GANG_ID = "armadaproject.io/gangId"
ARMADA_GANG_CARDINALITY = "armadaproject.io/gangCardinality"


@dataclass
class Conversion:
    objects: list[dict[str, Any]] = field(default_factory=list)  # manifests `fedctl apply` / `submit` take
    notes: list[str] = field(default_factory=list)  # "file:line: what maps to what, or was lost"


class _Converter:
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

    # -- jobs --------------------------------------------------------------------------------------

    def _kueue_meta(self, doc: Document, data: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """A Kueue workload's metadata as a Volcano Job's, and its queue: the ClusterQueue of the LocalQueue it
        names (given in the same input), else a queue of the LocalQueue's name (noted)."""
        meta = dict(data.get("metadata") or {})
        labels = dict(meta.get("labels") or {})
        local = labels.pop(KUEUE_QUEUE_LABEL, None)
        namespace = str(meta.get("namespace", "default"))
        queue = None
        if local:
            queue = self.local_queues.get((namespace, str(local)))
            if queue is None:
                queue = str(local)
                self.note(doc, f"metadata.labels.{KUEUE_QUEUE_LABEL}", f"LocalQueue {namespace}/{local} is not in "
                          f"the input: queue {local} (give the LocalQueue manifests too, to resolve it to its "
                          "ClusterQueue)")
        kept = {k: meta[k] for k in ("name", "generateName", "namespace", "annotations") if k in meta}
        if KUEUE_MAX_EXEC in labels:
            at = f"metadata.labels.{KUEUE_MAX_EXEC}"
            seconds = _count(doc, at, labels.pop(KUEUE_MAX_EXEC), SECONDS_MOST)
            kept["annotations"] = {**(kept.get("annotations") or {}), MAX_RUN_TIME: f"{seconds}s"}
            self.note(doc, at, f"{KUEUE_MAX_EXEC}: {seconds} -> annotation {MAX_RUN_TIME}: {seconds}s (its agent "
                               "stops it then)")
        return {**kept, **({"labels": labels} if labels else {})}, queue

    def _topology(self, doc: Document, template: Any, path: str, job: dict[str, Any],
                  slice_size: int | None = None) -> None:
        """Kueue's topology request on a pod template -> the job's networkTopology (the tier named as the agent
        names a tier it discovers from that node label: the label's name part); a slice request -> its task's
        partitions (`slice_size`: the size Kueue takes when the template names none, a JobSet's parallelism)."""
        annotations = ((template or {}).get("metadata") or {}).get("annotations") or {}
        if KUEUE_SLICE_TOPOLOGY in annotations:
            task = next(t for t in job["spec"]["tasks"] if t.get("template") is template)
            self._slices(doc, annotations, f"{path}.metadata.annotations", task, slice_size)
        for key, mode in KUEUE_TOPOLOGY.items():
            if key in annotations:
                level = str(annotations[key])
                tier = level.rsplit("/", 1)[-1]
                wanted = {"mode": mode, "highestTierName": tier}
                had = job["spec"].setdefault("networkTopology", wanted)
                if had != wanted and had.get("mode") == "soft" and mode == "hard":
                    job["spec"]["networkTopology"] = wanted  # the strictest request of the gang's pod sets
                self.note(doc, f"{path}.metadata.annotations", f"{key}: {level} -> networkTopology mode {mode}, "
                                                               f"highestTierName {tier} (a cluster's tier of that "
                                                               "node label: its --topology-label or HyperNodes)")

    def _slices(self, doc: Document, annotations: dict[str, Any], path: str, task: dict[str, Any],
                default: int | None) -> None:
        """Kueue's slices of a pod set -> the task's partitions, each under a HyperNode of the level's tier, all of
        them needed (Kueue admits the pod set whole)."""
        level = str(annotations[KUEUE_SLICE_TOPOLOGY])
        text = annotations.get(KUEUE_SLICE_SIZE)
        if text is None and default is None:
            raise doc.error(f"{path}.{KUEUE_SLICE_SIZE}", f"required with {KUEUE_SLICE_TOPOLOGY}")
        size = _count(doc, f"{path}.{KUEUE_SLICE_SIZE}", text) if text is not None else default
        assert size is not None
        replicas = int(task["replicas"])
        if replicas % size:
            raise doc.error(f"{path}.{KUEUE_SLICE_SIZE}", f"{size} does not divide the pod set's {replicas} pods")
        tier = level.rsplit("/", 1)[-1]
        task["partitionPolicy"] = {"totalPartitions": replicas // size, "partitionSize": size,
                                   "networkTopology": {"mode": "hard", "highestTierName": tier}}
        self.note(doc, path, f"{KUEUE_SLICE_TOPOLOGY}: {level}, slices of {size} -> task {task['name']}: "
                             f"{replicas // size} partitions of {size}, each within one HyperNode of tier {tier}")

    def leader_worker_set(self, doc: Document, data: dict[str, Any]) -> None:
        """A LeaderWorkerSet: its groups (a leader and size-1 workers each) as partitions of one gang, each group
        under one domain of its exclusive topology; the set starts with its first group, the others join as they
        fit (Kueue admits each group on its own)."""
        spec = data.get("spec") or {}
        groups = _count(doc, "spec.replicas", spec.get("replicas", 1))
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = _count(doc, "spec.leaderWorkerTemplate.size", lwt.get("size", 1))
        worker = lwt.get("workerTemplate")
        if not isinstance(worker, dict):
            raise doc.error("spec.leaderWorkerTemplate.workerTemplate", "required")
        level = ((data.get("metadata") or {}).get("annotations") or {}).get(LWS_EXCLUSIVE)
        topology = {"mode": "hard", "highestTierName": str(level).rsplit("/", 1)[-1]} if level else None
        restart = str(lwt.get("restartPolicy", "RecreateGroupOnPodRestart"))
        leader = lwt.get("leaderTemplate")
        if isinstance(leader, dict) and leader != worker and size > 1:
            tasks = [{"name": "leader", "replicas": groups, "template": leader},
                     {"name": "worker", "replicas": groups * (size - 1), "template": worker}]
            parted, group_size = tasks[1], size - 1
            self.note(doc, "spec.leaderWorkerTemplate.leaderTemplate",
                      "a leader template of its own: leaders are a task of their own, and a group's domain holds "
                      "its workers, not its leader (a partition is of one task)")
        else:
            tasks = [{"name": "worker", "replicas": groups * size, "template": worker}]
            parted, group_size = tasks[0], size
        parted["partitionPolicy"] = {"totalPartitions": groups, "partitionSize": group_size, "minPartitions": 1,
                                     **({"networkTopology": topology} if topology else {})}
        if restart == "RecreateGroupOnPodRestart":
            parted["policies"] = [{"events": ["PodFailed", "PodEvicted"], "action": "RestartPartition"}]
        elif restart != "None":
            raise doc.error("spec.leaderWorkerTemplate.restartPolicy",
                            f"{quoted(restart)} is not one of RecreateGroupOnPodRestart, None")
        self._job(doc, data, tasks, f"LeaderWorkerSet ({groups} group(s) of {size})", {"svc": []},
                  first=size if len(tasks) == 1 else 1 + group_size)
        self.note(doc, "spec.replicas", f"{groups} group(s) of {size} pods -> {groups} partition(s) of task "
                                        f"{parted['name']}" + (f", each within one HyperNode of tier "
                                                               f"{topology['highestTierName']}" if topology else "")
                  + "; the set starts once one group fits, the others join as they fit")
        for key in ("rolloutStrategy", "startupPolicy", "networkConfig"):
            if key in spec:
                self.note(doc, f"spec.{key}", f"spec.{key} is not kept")
        if "subGroupPolicy" in lwt:
            self.note(doc, "spec.leaderWorkerTemplate.subGroupPolicy", "subGroupPolicy is not kept: a group is one "
                                                                        "partition")

    def _job(self, doc: Document, data: dict[str, Any], tasks: list[dict[str, Any]], what: str,
             plugins: dict[str, list[str]] | None = None, first: int | None = None) -> dict[str, Any]:
        """One Volcano Job, all its pods started together, or the `first` of them (the rest joining as they fit)."""
        meta, queue = self._kueue_meta(doc, data)
        total = sum(int(t["replicas"]) for t in tasks)
        job: dict[str, Any] = {"apiVersion": VOLCANO_API, "kind": "Job", "metadata": meta,
                               "spec": {"minAvailable": first or total, "tasks": tasks}}
        if queue:
            job["spec"]["queue"] = queue
        if plugins:
            job["spec"]["plugins"] = plugins
        self.out.objects.append(job)
        started = (f"{total} pods started together (minAvailable {total}, as Kueue admits a workload whole)"
                   if first is None else f"{total} pods, the first {first} started together (minAvailable {first})")
        self.note(doc, "kind", f"{what} -> one Volcano Job of {len(tasks)} task(s), {started}; queue "
                               f"{queue or 'default'}")
        return job

    def jobset(self, doc: Document, data: dict[str, Any]) -> None:
        spec = data.get("spec") or {}
        tasks, templates = [], []
        for i, rj in enumerate(spec.get("replicatedJobs") or []):
            path = f"spec.replicatedJobs[{i}]"
            job_spec = ((rj.get("template") or {}).get("spec") or {})
            parallelism = int(job_spec.get("parallelism", 1))
            replicas = int(rj.get("replicas", 1)) * parallelism
            template = job_spec.get("template") or {}
            tasks.append({"name": _dns_label(str(rj.get("name", f"job-{i}"))), "replicas": replicas,
                          "template": template})
            templates.append((f"{path}.template.spec.template", template, parallelism))
            if int(job_spec.get("completions", parallelism)) != parallelism:
                self.note(doc, f"{path}.template.spec.completions", "completions other than parallelism: each pod "
                                                                    "runs once")
        for key in ("network", "successPolicy", "failurePolicy", "startupPolicy", "suspend", "coordinator"):
            if key in spec:
                self.note(doc, f"spec.{key}", f"spec.{key} is not kept (the job's pods are one gang; the svc plugin "
                                              "names them)" if key == "network" else f"spec.{key} is not kept")
        job = self._job(doc, data, tasks, f"JobSet ({len(tasks)} replicated job(s))", {"svc": []})
        for path, template, parallelism in templates:
            self._topology(doc, template, path, job, slice_size=parallelism)  # a slice: one Job's pods, by default

    KUBEFLOW_ROLES = {"PyTorchJob": ("pytorchReplicaSpecs", {"Master": "master", "Worker": "worker"}),
                      "MPIJob": ("mpiReplicaSpecs", {"Launcher": "launcher", "Worker": "worker"})}

    def kubeflow_job(self, doc: Document, data: dict[str, Any]) -> None:
        kind = str(data["kind"])
        field_name, roles = self.KUBEFLOW_ROLES[kind]
        spec = data.get("spec") or {}
        replica_specs = spec.get(field_name) or {}
        tasks, templates = [], []
        for role, replica in replica_specs.items():
            path = f"spec.{field_name}.{role}"
            if role not in roles:
                raise doc.error(path, f"{kind} role {role!r} has no counterpart (roles: {', '.join(roles)})")
            template = (replica or {}).get("template") or {}
            tasks.append({"name": roles[role], "replicas": int((replica or {}).get("replicas", 1)),
                          "template": template})
            templates.append((f"{path}.template", template))
            if "restartPolicy" in (replica or {}):
                self.note(doc, f"{path}.restartPolicy", "restartPolicy is not kept: a failed pod restarts by the "
                                                        "job's policies (Volcano's RestartPod on PodFailed to keep it)")
        if kind == "PyTorchJob":
            plugins = {"pytorch": [f"--master={roles['Master']}", f"--worker={roles['Worker']}"], "svc": []}
        else:
            ssh = [f"--ssh-key-file-path={spec['sshAuthMountPath']}"] if spec.get("sshAuthMountPath") else []
            plugins = {"mpi": [f"--master={roles['Launcher']}", f"--worker={roles['Worker']}"], "svc": [], "ssh": ssh}
            if "slotsPerWorker" in spec:
                self.note(doc, "spec.slotsPerWorker", "slotsPerWorker is not written into the hostfile: the MPI "
                                                      "launcher's -n says how many processes run")
        for key in ("runPolicy", "elasticPolicy", "nprocPerNode", "launcherCreationPolicy", "mpiImplementation"):
            if key in spec:
                self.note(doc, f"spec.{key}", f"spec.{key} is not kept")
        job = self._job(doc, data, tasks, f"{kind} ({', '.join(replica_specs)})", plugins)
        for path, template in templates:
            self._topology(doc, template, path, job)

    def ray_job(self, doc: Document, data: dict[str, Any]) -> None:
        """KubeRay's RayJob in its K8sJobMode: the Ray cluster (the ray plugin starts head and workers) and a
        submitter pod running `ray job submit` against the head, whose completion completes the job."""
        spec = data.get("spec") or {}
        cluster = spec.get("rayClusterSpec") or {}
        head = cluster.get("headGroupSpec") or {}
        head_template = head.get("template") or {}
        head_container = ((head_template.get("spec") or {}).get("containers") or [{}])[0]
        if not spec.get("entrypoint"):
            raise doc.error("spec.entrypoint", "a RayJob without an entrypoint runs nothing: submit a Volcano Job "
                                               "with the ray plugin for a standing Ray cluster")
        if "clusterSelector" in spec:
            raise doc.error("spec.clusterSelector", "a RayJob on an existing Ray cluster has no counterpart: the "
                                                    "federation starts the job's own cluster")
        tasks = [{"name": "head", "replicas": 1, "template": head_template}]
        workers = []
        for i, group in enumerate(cluster.get("workerGroupSpecs") or []):
            template = group.get("template") or {}
            name = _dns_label(str(group.get("groupName", f"worker-{i}")))
            replicas = int(group.get("replicas", group.get("minReplicas", 1)))
            tasks.append({"name": name, "replicas": replicas, "template": template})
            workers.append(name)
            if "maxReplicas" in group:
                self.note(doc, f"spec.rayClusterSpec.workerGroupSpecs[{i}].maxReplicas",
                          f"group {name} runs its {replicas} replicas (no autoscaling to maxReplicas)")
        if len(workers) > 1:
            raise doc.error("spec.rayClusterSpec.workerGroupSpecs", "the ray plugin joins one worker task to the "
                                                                  "head; split the groups into one RayJob each")
        runtime = ""
        if spec.get("runtimeEnvYAML"):
            runtime = " --runtime-env-json " + shlex.quote(json.dumps(yaml.safe_load(str(spec["runtimeEnvYAML"]))))
        submit = (f"ray job submit --address http://${{VC_HEAD_HOSTS}}:8265{runtime} -- {spec['entrypoint']}")
        tasks.append({"name": "submitter", "replicas": 1,
                      "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                      "template": {"spec": {"restartPolicy": "Never", "containers": [{
                          "name": "submitter", "image": head_container.get("image", "rayproject/ray"),
                          "command": ["sh", "-c", f"until ray status --address ${{VC_HEAD_HOSTS}}:6379 >/dev/null "
                                                  f"2>&1; do sleep 2; done; {submit}"]}]}}})
        plugins = {"ray": [f"--headContainer={head_container.get('name', 'head')}"], "svc": []}
        if workers:
            worker_container = ((tasks[1]["template"].get("spec") or {}).get("containers") or [{}])[0]
            plugins["ray"] += [f"--worker={workers[0]}", f"--workerContainer={worker_container.get('name', 'worker')}"]
        for key in ("shutdownAfterJobFinishes", "ttlSecondsAfterFinished", "activeDeadlineSeconds",
                    "submissionMode", "suspend"):
            if key in spec:
                self.note(doc, f"spec.{key}", f"spec.{key} is not kept (the job ends when its submitter does, "
                                              "and its pods with it)")
        self._job(doc, data, tasks, "RayJob (head, workers and a ray job submit pod, as KubeRay's K8sJobMode)",
                  plugins)

    def pod_group_member(self, doc: Document, data: dict[str, Any]) -> None:
        """A Pod of a Kueue pod group: the group becomes one job when its last listed pod is read."""
        meta = data.get("metadata") or {}
        group = str((meta.get("labels") or {})[KUEUE_POD_GROUP])
        self.pod_groups.setdefault(group, []).append((doc, data))

    def pod_groups_done(self) -> None:
        for group, members in self.pod_groups.items():
            doc, first = members[0]
            count = (first.get("metadata") or {}).get("annotations", {}).get(KUEUE_POD_GROUP_COUNT)
            if count is not None and int(count) != len(members):
                raise doc.error(f"metadata.annotations.{KUEUE_POD_GROUP_COUNT}",
                                f"pod group {group} counts {count} pods but the input has {len(members)} of them: "
                                "give every pod of the group")
            tasks = []
            for _, pod in members:
                pmeta = pod.get("metadata") or {}
                name = _dns_label(str(pmeta.get("name") or pmeta.get("generateName") or "pod"))
                tasks.append({"name": name, "replicas": 1, "template": {"spec": pod.get("spec") or {}}})
            data = {"metadata": {**{k: v for k, v in (first.get("metadata") or {}).items()
                                    if k in ("namespace", "labels")}, "name": _dns_label(group)}}
            self._job(doc, data, tasks, f"Pod group {group} ({len(tasks)} pods)")

    def kueue_job(self, doc: Document, data: dict[str, Any]) -> None:
        meta, queue = self._kueue_meta(doc, data)
        spec = data.get("spec") or {}
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        if completions is not None and int(completions) != parallelism:
            self.note(doc, "spec.completions", f"completions {completions} with parallelism {parallelism}: the job "
                                               f"runs {parallelism} pods once")
        if "activeDeadlineSeconds" in spec:
            seconds = _count(doc, "spec.activeDeadlineSeconds", spec["activeDeadlineSeconds"], SECONDS_MOST)
            meta["annotations"] = {**(meta.get("annotations") or {}), MAX_RUN_TIME: f"{seconds}s"}
            self.note(doc, "spec.activeDeadlineSeconds", f"activeDeadlineSeconds {seconds} -> annotation "
                                                         f"{MAX_RUN_TIME}: {seconds}s (counted from the gang's start)")
        for key in ("backoffLimit", "ttlSecondsAfterFinished", "completionMode", "podFailurePolicy", "suspend"):
            if key in spec:
                self.note(doc, f"spec.{key}", f"spec.{key} is not kept")
        job = {"apiVersion": VOLCANO_API, "kind": "Job", "metadata": meta,
               "spec": {"minAvailable": parallelism, "tasks": [
                   {"name": "main", "replicas": parallelism, "template": spec.get("template") or {}}]}}
        if queue:
            job["spec"]["queue"] = queue
        self.out.objects.append(job)
        self._topology(doc, spec.get("template"), "spec.template", job)
        self.note(doc, "spec.parallelism", f"parallelism {parallelism} -> one task of {parallelism} replicas, "
                                           f"started together (minAvailable {parallelism}, as Kueue admits them); "
                                           f"queue {queue or 'default'}")

    def armada_jobs(self, doc: Document, data: dict[str, Any]) -> None:
        queue, job_set = str(data["queue"]), str(data.get("jobSetId", "armada"))
        for key in sorted(set(data) - {"queue", "jobSetId", "jobs"}):
            self.note(doc, key, f"{key} is not kept (each job is converted once)")
        gangs: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i, job in enumerate(data.get("jobs") or []):
            gang = str((job.get("annotations") or {}).get(ARMADA_GANG_ID, f"{job_set}-{i}"))
            gangs.setdefault(gang, []).append((i, job))
        for gang, members in gangs.items():
            first = members[0][1]
            cardinality = int((first.get("annotations") or {}).get(ARMADA_GANG_CARDINALITY, len(members)))
            tasks = [{"name": f"job-{i}", "replicas": 1, "template": {"spec": job.get("podSpec") or {}}}
                     for i, job in members]
            self.out.objects.append({
                "apiVersion": VOLCANO_API, "kind": "Job",
                "metadata": {"name": _dns_label(gang), "namespace": str(first.get("namespace", "default"))},
                "spec": {"queue": queue, "minAvailable": cardinality, "tasks": tasks}})
            lost = {k for _, job in members for k in job if k not in ("namespace", "podSpec", "annotations")}
            self.note(doc, f"jobs[{members[0][0]}]", f"gang {gang}: {len(members)} Armada job(s) -> one Volcano Job "
                                                     f"of {len(tasks)} task(s), minAvailable {cardinality}"
                      + (f"; not kept: {', '.join(sorted(lost))}" if lost else ""))


def _count(doc: Document, path: str, value: Any, most: int = 100_000) -> int:
    """A positive whole number, as written (YAML's 4, or "4" in an annotation)."""
    text = str(value)
    if isinstance(value, bool) or not text.isascii() or not text.isdigit() or not 0 < int(text) <= most:
        raise doc.error(path, f"{quoted(text)} is not a whole number between 1 and {most}")
    return int(text)


SECONDS_MOST = 10 * 366 * 86400  # a run time in seconds: ten years at most


def _weight(doc: Document, spec: dict[str, Any]) -> int | None:
    weight = (spec.get("fairSharing") or {}).get("weight")
    if weight is None:
        return None
    try:
        return max(1, round(float(str(weight))))  # weights here are whole numbers, at least 1
    except ValueError:
        raise doc.error("spec.fairSharing.weight", f"{quoted(weight)} is not a number") from None


def _dns_label(text: str) -> str:
    label = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    return label[:63].rstrip("-") or "job"


def convert(docs: list[Document]) -> Conversion:
    return _Converter(docs).run()
