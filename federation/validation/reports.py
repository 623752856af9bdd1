"""What an agent reports, bounded: a job update, its pods, an inventory. A cluster whose agent reports what no
cluster could is left out with the reason; the rest of the federation goes on."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from federation.kernel.gpuask import GPU, MAX_MEMORY_MIB
from federation.kernel.jobspec import (
    MAX_GPUS_PER_NODE,
    MAX_REASON,
    MAX_REPORTED_HYPERNODES,
    MAX_REPORTED_NODE_LABELS,
)
from federation.kernel.resources import (
    FLAVOR,
    MAX_AMOUNT,
    MIG_PROFILE,
    base,
)
from federation.validation.core import (
    MAX_TIER,
    Violations,
    check_labels,
    check_qualified_key,
    name_problem,
    text_violations,
)


def update_problem(u: Any) -> str:
    """Why an agent's JobUpdate cannot be used ("" when it can): a HyperNode, task or node name that is too
    long or holds control characters. (Its reason is stored through `clean_text` instead.)"""
    checks = [("job_update.hypernode", u.hypernode)]
    checks += [(f"job_update.placements[{i}].{k}", getattr(p, k)) for i, p in enumerate(u.placements)
               for k in ("task", "node")]
    found = next((why for where, value in checks if (why := name_problem(where, value))), "")
    bad = text_violations(u, "job_update")  # and every other text of it, by the rule for every text
    return found or (f"{bad[0].field} {bad[0].description}" if bad else "")


def pods_problem(spec: Mapping[str, Any], u: Any) -> str:
    """Why an agent's placements or pod statuses cannot be of this job (its stored spec; "" when they can): each
    names one of its tasks and an index below that task's replicas; a placement names each pod once, a status at
    most twice (a pod being replaced, the old one still terminating). A cluster holds no more of a job than it was
    given, and the job's row, its events and every page that shows them stay as large as the job."""
    replicas = {t.get("name", ""): int(t.get("replicas", 0)) for t in spec.get("tasks", [])}
    pods = sum(replicas.values())
    for name, items, most in (("placements", u.placements, 1), ("pod_statuses", u.pod_statuses, 2)):
        if len(items) > most * pods:
            return f"job_update.{name} names {len(items)} pods, the job has {pods}"
        seen: Counter[tuple[str, int]] = Counter()
        for i, pod in enumerate(items):
            if pod.task not in replicas:
                return f"job_update.{name}[{i}].task: the job has no task {pod.task!r}"
            if not 0 <= pod.index < replicas[pod.task]:
                return f"job_update.{name}[{i}].index: {pod.index} is not below task {pod.task}'s " \
                       f"{replicas[pod.task]} replicas"
            seen[pod.task, pod.index] += 1
            if seen[pod.task, pod.index] > most:
                return f"job_update.{name}[{i}] names {pod.task}[{pod.index}] again"
    return ""


MAX_INVENTORY_RESOURCES = 64
# What a real member cluster can have: the largest run some 100,000 GPUs on tens of thousands of nodes.
MAX_CLUSTER_GPUS = 1_000_000  # devices (MIG slices included) of one resource
MAX_CLUSTER_NODES = 100_000
MAX_HELD = 1_000  # gangs an agent keeps nodes for (the federation holds at most one per queue there)
MAX_JOB_ID = 80  # as the jobs table keeps them
MAX_NODE_GROUPS = 100  # cluster-autoscaler setups with more node groups than this are not known to us
MAX_HEALTH_SUMMARY = 8  # lines of a cluster's health summary ("3 nodes degraded (XID 79)"), each a reason long


def inventory_problem(inv: Any) -> str:
    """Why an agent's inventory cannot be used ("" when it can): a tier out of range, a resource name or an
    amount no cluster could report. A cluster whose agent reports such a thing is left out of scheduling
    with that reason, and every other cluster goes on."""
    amounts = [("capacity", inv.capacity.amounts), ("allocatable", inv.allocatable.amounts),
               ("used", inv.used.amounts), ("managed", inv.managed.amounts)]
    for listed, tiers in (("topology", inv.topology), ("partitionable", inv.partitionable),
                          ("health.healthy_topology", inv.health.healthy_topology)):
        if len(tiers) > MAX_TIER + 2:
            return f"{len(tiers)} {listed} tiers reported, at most {MAX_TIER + 2} are possible"
        for i, tier in enumerate(tiers):
            if not 0 <= tier.tier <= MAX_TIER + 1:
                return f"{listed}[{i}].tier {tier.tier} is out of range (0-{MAX_TIER + 1})"
            if why := name_problem(f"{listed}[{i}].tier_name", tier.tier_name, 63):
                return why
            amounts += [(f"{listed}[{i}].max_free", tier.max_free.amounts),
                        (f"{listed}[{i}].max_capacity", tier.max_capacity.amounts)]
    for i, tier in enumerate(inv.partitionable):  # only MIG slices are made by repartitioning
        if any(not r.startswith(MIG_PROFILE) for r in [*tier.max_free.amounts, *tier.max_capacity.amounts]):
            return f"partitionable[{i}] names a resource that is not a MIG profile ({MIG_PROFILE}<profile>)"
    if len(inv.hypernodes) > MAX_REPORTED_HYPERNODES:
        return f"{len(inv.hypernodes)} HyperNodes reported, at most {MAX_REPORTED_HYPERNODES}"
    for i, h in enumerate(inv.hypernodes):
        if not 1 <= h.tier <= MAX_TIER or len(h.name) > 253 or len(h.parent) > 253:
            return f"hypernodes[{i}] has a tier out of range or a name too long"
        if why := name_problem(f"hypernodes[{i}].name", h.name) or name_problem(f"hypernodes[{i}].parent", h.parent):
            return why
        amounts += [(f"hypernodes[{i}].free", h.free.amounts), (f"hypernodes[{i}].allocatable", h.allocatable.amounts)]
    if len(inv.held) > MAX_HELD:
        return f"{len(inv.held)} held gangs reported, at most {MAX_HELD}"
    if any(len(job_id) > MAX_JOB_ID for job_id in inv.held):
        return f"held names a job id longer than {MAX_JOB_ID} characters"
    if len(inv.node_groups) > MAX_NODE_GROUPS:
        return f"{len(inv.node_groups)} node groups reported, at most {MAX_NODE_GROUPS}"
    for i, g in enumerate(inv.node_groups):
        if why := name_problem(f"node_groups[{i}].name", g.name):
            return why
        if not 0 <= g.can_add <= MAX_CLUSTER_NODES:
            return f"node_groups[{i}].can_add {g.can_add} is out of range (0-{MAX_CLUSTER_NODES:,})"
        amounts.append((f"node_groups[{i}].per_node", g.per_node.amounts))
    for where, values in amounts:
        if len(values) > MAX_INVENTORY_RESOURCES:
            return f"{where} lists {len(values)} resources, at most {MAX_INVENTORY_RESOURCES}"
        for name, amount in values.items():
            v = Violations()
            check_qualified_key(v, where, name)
            if v or FLAVOR in name:
                return f"{where} names an invalid resource {name[:64]!r}"
            most = MAX_CLUSTER_GPUS if base(name) == GPU or name.startswith(MIG_PROFILE) else MAX_AMOUNT
            if not 0 <= amount <= most:
                return f"{where}[{name!r}] = {amount} is out of range (0-{most:,})"
    counts = (inv.nodes, inv.ready_nodes, inv.health.degraded_nodes, inv.health.failed_nodes)
    if min(counts) < 0:
        return "negative node counts"
    if max(counts) > MAX_CLUSTER_NODES:
        return f"{max(counts):,} nodes reported, at most {MAX_CLUSTER_NODES:,}"
    if len(inv.gpu_free_nodes) > MAX_GPUS_PER_NODE + 1:
        return f"gpu_free_nodes has {len(inv.gpu_free_nodes)} entries, at most {MAX_GPUS_PER_NODE + 1}"
    if any(not 0 <= n <= MAX_CLUSTER_NODES for n in inv.gpu_free_nodes):
        return f"gpu_free_nodes counts nodes out of range (0-{MAX_CLUSTER_NODES:,})"
    if not 0 <= inv.gpu_device_memory <= MAX_MEMORY_MIB:
        return f"gpu_device_memory is out of range (0-{MAX_MEMORY_MIB:,} MiB)"
    if len(inv.node_labels.pairs) > MAX_REPORTED_NODE_LABELS:
        return f"{len(inv.node_labels.pairs)} node labels reported, at most {MAX_REPORTED_NODE_LABELS}"
    for i, pair in enumerate(inv.node_labels.pairs):
        key, equals, value = pair.partition("=")
        v = Violations()
        if equals:
            check_labels(v, f"node_labels.pairs[{i}]", {key: value})
        if v or not equals:
            return f"node_labels.pairs[{i}] is not a label pair (key=value)"
    if len(inv.health.summary) > MAX_HEALTH_SUMMARY:
        return f"health.summary has {len(inv.health.summary)} lines, at most {MAX_HEALTH_SUMMARY}"
    for i, line in enumerate(inv.health.summary):
        if why := name_problem(f"health.summary[{i}]", line, MAX_REASON):
            return why
    if len(inv.health.degraded_hypernodes) > MAX_REPORTED_HYPERNODES:
        return f"{len(inv.health.degraded_hypernodes)} degraded HyperNodes reported, at most {MAX_REPORTED_HYPERNODES}"
    for i, name in enumerate(inv.health.degraded_hypernodes):
        if why := name_problem(f"health.degraded_hypernodes[{i}]", name):
            return why
    bad = text_violations(inv)  # every other text of it, by the rule for every text
    return f"{bad[0].field} {bad[0].description}" if bad else ""
