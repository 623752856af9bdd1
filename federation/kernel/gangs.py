"""How much of a gang must start together, as Volcano counts it: the server judges fit, chooses a cluster,
reserves and shares by this minimum, exactly as the agent's placement core places it.

Pure. A task with a partition policy needs `minPartitions` whole partitions (all of them when unset); a
task without one needs its `minAvailable` pods (none of its own when unset); then pods are added task by
task, in order, until the job's `minAvailable` (every replica when unset) is reached. The rest of the
replicas join when they fit, and what a running job holds is what is bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from federation.kernel import dra
from federation.kernel.gpuask import pod_share
from federation.kernel.resources import GPU, SHARE, Resources, parse_resources
from federation.v1 import common_pb2


def minimum_pods(spec: common_pb2.JobSpec) -> dict[str, int]:
    """Per task, how many of its pods the gang cannot start without."""
    need: dict[str, int] = {}
    units: dict[str, int] = {}  # pods per unit: a partition's size, or 1
    for task in spec.tasks:
        size = task.partition_policy.partition_size
        if size:
            partitions = -(-task.replicas // size)
            need[task.name] = min(task.partition_policy.min_partitions or partitions, partitions) * size
            units[task.name] = size
        else:
            need[task.name] = min(task.min_available if task.HasField("min_available") else 0, task.replicas)
            units[task.name] = 1
    wanted = spec.min_available or sum(t.replicas for t in spec.tasks)
    have = sum(need.values())
    for task in spec.tasks:  # top up, task by task and a unit at a time, to the job's minimum
        room = task.replicas - need[task.name]
        if have >= wanted or room <= 0:
            continue
        unit = units[task.name]
        added = min(-(-(wanted - have) // unit) * unit, room)
        need[task.name] += added
        have += added
    return need


def claim_templates(templates_json: Iterable[str]) -> dict[str, dra.ClaimSpec]:
    """A job's ResourceClaimTemplates by name ({} for a job from before the server checked them)."""
    try:
        return dra.templates(templates_json)
    except dra.ClaimError:
        return {}


def pod_request(task: common_pb2.TaskSpec, parsed: Resources | None = None,
                claims: Mapping[str, dra.ClaimSpec] | None = None) -> Resources:
    """What one pod of the task counts for: its requests (`parsed`, when already parsed) and `counted` of them."""
    request = dict(parse_resources(task.resources) if parsed is None else parsed)
    request.update(counted(task.pod_template_json, request.get(GPU, 0), claims))
    return request


def counted(pod_template_json: str, gpus: int, claims: Mapping[str, dra.ClaimSpec] | None) -> Resources:
    """What a pod counts for beyond its requests: when it asks for GPUs, their `SHARE` (a fraction's thousandths,
    from KAI's annotations on its pod template); and the devices its ResourceClaims ask for, under their classes
    (`claims`: the job's templates; a job from before the server checked them asks for none)."""
    out = claimed(pod_template_json, claims)
    share = pod_share(pod_template_json, gpus)
    if share:
        out[SHARE] = share
    return out


def claimed(pod_template_json: str, claims: Mapping[str, dra.ClaimSpec] | None) -> Resources:
    """The devices a pod's ResourceClaims ask for, under their classes ({} for a job from before the server checked
    its claims)."""
    if not claims:
        return {}
    try:
        return dra.pod_demand(pod_template_json, claims)
    except dra.ClaimError:
        return {}


class _Pods:
    """Each task's pod request (`pod_request`), worked out when first needed and kept: a gang's minimum and its
    whole are summed over the same pods (its template's annotations and claims read once, not once per sum)."""

    def __init__(self, spec: common_pb2.JobSpec, requests: Sequence[Resources] | None) -> None:
        self.spec = spec
        self.requests = requests
        self.claims = claim_templates(spec.resource_claim_templates_json) if spec.resource_claim_templates_json \
            else None
        self.known: dict[int, Resources] = {}

    def total(self, pods: Mapping[str, int]) -> Resources:
        out: Resources = {}
        for i, task in enumerate(self.spec.tasks):
            count = pods.get(task.name, 0)
            if not count:
                continue
            request = self.known.get(i)
            if request is None:
                request = self.known[i] = pod_request(task, None if self.requests is None else self.requests[i],
                                                      self.claims)
            for resource, amount in request.items():
                out[resource] = out.get(resource, 0) + amount * count
        return {r: a for r, a in out.items() if a}


def minimum(spec: common_pb2.JobSpec, requests: Sequence[Resources] | None = None) -> Resources:
    """What the gang needs to start: its minimum pods' requests (`requests`: each task's pod's, when already
    parsed)."""
    return _Pods(spec, requests).total(minimum_pods(spec))


def whole(spec: common_pb2.JobSpec, requests: Sequence[Resources] | None = None) -> Resources:
    """Every replica's requests."""
    return _Pods(spec, requests).total({t.name: t.replicas for t in spec.tasks})


def minimum_and_whole(spec: common_pb2.JobSpec, requests: Sequence[Resources] | None = None
                      ) -> tuple[Resources, Resources]:
    """`minimum` and `whole` at once, each task's pod read once: what a submission stores and checks."""
    pods = _Pods(spec, requests)
    return pods.total(minimum_pods(spec)), pods.total({t.name: t.replicas for t in spec.tasks})


def bound(spec: common_pb2.JobSpec, placements: Iterable[Mapping[str, Any]]) -> Resources:
    """What the pods placed (`{"task": ..., ...}` each) hold."""
    pods: dict[str, int] = {}
    for p in placements:
        pods[p["task"]] = pods.get(p["task"], 0) + 1
    return _Pods(spec, None).total(pods)
