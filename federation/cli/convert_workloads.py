"""`fedctl convert`'s workloads (a part of its converter): Kueue's batch Jobs, JobSets, PyTorchJobs, MPIJobs, RayJobs,
LeaderWorkerSets and pod groups, and Armada's job files, each as the Volcano Job the federation takes: its tasks,
gang, topology and queue."""

from __future__ import annotations

import json
import shlex
from typing import Any

import yaml

from federation.cli.manifest import VOLCANO_API
from federation.cli.yamldoc import Document, quoted
from federation.kernel.jobspec import MAX_RUN_TIME

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
SECONDS_MOST = 10 * 366 * 86400  # a run time in seconds: ten years at most


class Workloads:
    """Workload conversions (a part of `convert._Converter`, whose state they share)."""

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
            seconds = count(doc, at, labels.pop(KUEUE_MAX_EXEC), SECONDS_MOST)
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
        size = count(doc, f"{path}.{KUEUE_SLICE_SIZE}", text) if text is not None else default
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
        groups = count(doc, "spec.replicas", spec.get("replicas", 1))
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = count(doc, "spec.leaderWorkerTemplate.size", lwt.get("size", 1))
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
            tasks.append({"name": dns_label(str(rj.get("name", f"job-{i}"))), "replicas": replicas,
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
            name = dns_label(str(group.get("groupName", f"worker-{i}")))
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
                name = dns_label(str(pmeta.get("name") or pmeta.get("generateName") or "pod"))
                tasks.append({"name": name, "replicas": 1, "template": {"spec": pod.get("spec") or {}}})
            data = {"metadata": {**{k: v for k, v in (first.get("metadata") or {}).items()
                                    if k in ("namespace", "labels")}, "name": dns_label(group)}}
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
            seconds = count(doc, "spec.activeDeadlineSeconds", spec["activeDeadlineSeconds"], SECONDS_MOST)
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
                "metadata": {"name": dns_label(gang), "namespace": str(first.get("namespace", "default"))},
                "spec": {"queue": queue, "minAvailable": cardinality, "tasks": tasks}})
            lost = {k for _, job in members for k in job if k not in ("namespace", "podSpec", "annotations")}
            self.note(doc, f"jobs[{members[0][0]}]", f"gang {gang}: {len(members)} Armada job(s) -> one Volcano Job "
                                                     f"of {len(tasks)} task(s), minAvailable {cardinality}"
                      + (f"; not kept: {', '.join(sorted(lost))}" if lost else ""))


def count(doc: Document, path: str, value: Any, most: int = 100_000) -> int:
    """A positive whole number, as written (YAML's 4, or "4" in an annotation)."""
    text = str(value)
    if isinstance(value, bool) or not text.isascii() or not text.isdigit() or not 0 < int(text) <= most:
        raise doc.error(path, f"{quoted(text)} is not a whole number between 1 and {most}")
    return int(text)


SECONDS_MOST = 10 * 366 * 86400  # a run time in seconds: ten years at most


def dns_label(text: str) -> str:
    label = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    return label[:63].rstrip("-") or "job"
