"""From the federation's Job message to the placement core's GangRequest, for this cluster.

Tier names only mean something inside a cluster (its HyperNodes' tierName), so they are
resolved here; a name this cluster does not have is no limit here, as in Volcano.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from federation.kernel.dra import ClaimSpec, DeviceRequest, narrowed
from federation.kernel.gangs import claim_templates, claimed
from federation.kernel.gpuask import GPU, AskError, GpuAsk, ask_of, template_annotations
from federation.kernel.jobspec import AVOID_DEGRADED
from federation.kernel.resources import SHARE, Resources, parse_resources
from federation.v1 import common_pb2
from member_agent.placement import GangRequest, PodPlacement, TaskRequest
from member_agent.topology import Toleration, Topology


def _tier(topo: common_pb2.NetworkTopology, topology: Topology) -> int | None:
    """The tier limit here; a tier name this cluster does not have is no limit, as Volcano resolves it."""
    if topo.highest_tier_name:
        return topology.tier_names.get(topo.highest_tier_name)
    return topo.highest_tier_allowed or None


def gang_request(spec: common_pb2.JobSpec, topology: Topology,
                 running: Sequence[PodPlacement] = ()) -> GangRequest:
    tasks = []
    claims = claim_templates(spec.resource_claim_templates_json)
    for task in spec.tasks:
        partition_tier: int | None = None
        pp = task.partition_policy
        if pp.partition_size and pp.network_topology.mode == "hard":
            partition_tier = _tier(pp.network_topology, topology)
            if partition_tier is None and not pp.network_topology.highest_tier_name:
                partition_tier = 1  # Volcano's default for hard mode
        request, gpu = task_request(task, claims)
        tasks.append(TaskRequest(
            name=task.name, replicas=task.replicas, request=request, gpu=gpu,
            node_selector=dict(task.node_selector),
            tolerations=tuple(Toleration(t.key, t.operator, t.value, t.effect) for t in task.tolerations),
            min_available=task.min_available if task.HasField("min_available") else None,
            partition_size=pp.partition_size, min_partitions=pp.min_partitions, partition_tier=partition_tier))
    tier = _tier(spec.network_topology, topology)
    mode = spec.network_topology.mode if tier is not None or spec.network_topology.mode != "hard" else "soft"
    return GangRequest(tasks=tuple(tasks), min_available=spec.min_available, mode=mode, highest_tier=tier,
                       running=tuple(running), avoid_degraded=spec.annotations.get(AVOID_DEGRADED) == "true")


def task_request(task: common_pb2.TaskSpec, claims: Mapping[str, ClaimSpec] | None = None
                 ) -> tuple[Resources, GpuAsk | None]:
    """What one replica requests, and its GPU fraction if it asks for one (KAI's annotations on its pod template;
    the server checked them). A fraction also asks for its share of `SHARE`, so that places are ordered and
    roughly checked by it as by any device (a memory ask: at least one thousandth, its share depending on the
    node). The devices its ResourceClaims ask for (`claims`: the job's templates) count under their classes, which
    nodes offer as their drivers publish them."""
    request = parse_resources(task.resources)
    request.update(claimed(task.pod_template_json, claims))
    try:
        ask = ask_of(template_annotations(task.pod_template_json), request.get(GPU, 0))
    except AskError:  # refused by the server at submission: a job from before that check asks for its requests
        return request, None
    if ask is None or ask.whole:
        return request, None
    request[SHARE] = (ask.share if not ask.memory else 1) * ask.devices
    return request, ask


def narrowed_requests(spec: common_pb2.JobSpec) -> tuple[DeviceRequest, ...]:
    """The DRA requests of the job's pods that have CEL selectors of their own (`dra.narrowed`), each once."""
    if not spec.resource_claim_templates_json:
        return ()
    claims = claim_templates(spec.resource_claim_templates_json)
    return tuple(dict.fromkeys(r for task in spec.tasks for r in narrowed(task.pod_template_json, claims)))
