"""Nodes on demand: the node groups this cluster's autoscaler can grow, and the asks for a gang's nodes.

The federation sends a gang of a queue with the `provisioning` admission check to a cluster whose node groups can
hold it when no cluster can as it is. Here the agent asks the autoscaler for the whole gang's nodes as Kueue's
provisioning admission check does: a PodTemplate per task and one ProvisioningRequest
(`autoscaling.x-k8s.io/v1`, class `best-effort-atomic-scale-up`: all the nodes or none), and places the gang when
they join; past its timeout, or when the request fails, the gang goes back to the federation with the reason.

The agent is told its node groups (`--node-groups`, a YAML list), as cluster-autoscaler is told its own; a node of
a group carries `federation.dev/node-group: <group>`, so what a group can still add is its maximum less the nodes
it has and those asked for. Pure but for reading that file.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from federation.kernel.resources import QuantityError, Resources, parse_resources

API = "/apis/autoscaling.x-k8s.io/v1"
CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
GROUP_LABEL = "federation.dev/node-group"
# What cluster-autoscaler reads on a pod placed on the capacity a request booked (Kueue writes the same).
CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
# What the request says of its nodes besides its pod sets (`spec.parameters`): the group and how many, for an
# autoscaler that takes them (and for the test bed's stand-in).
GROUP_PARAMETER, NODES_PARAMETER = "federation.dev/node-group", "federation.dev/nodes"
POLL = 2.0  # seconds between two looks at a request while the gang waits


class NodeGroupError(ValueError):
    """A node group file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class NodeGroup:
    name: str
    max_nodes: int
    capacity: Resources  # one node's allocatable, canonical units
    labels: Mapping[str, str] = field(default_factory=dict)  # its nodes' (GROUP_LABEL is added)


def load(path: Path) -> list[NodeGroup]:
    """The node groups a file lists:

        - name: h100
          maxNodes: 8
          capacity: {nvidia.com/gpu: 8, cpu: 96, memory: 1Ti}
          labels: {nvidia.com/gpu.product: H100}
    """
    try:
        listed = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise NodeGroupError(f"{path}: {err}") from None
    if not isinstance(listed, list):
        raise NodeGroupError(f"{path}: must be a list of node groups")
    groups = []
    for i, item in enumerate(listed):
        where = f"{path}: [{i}]"
        if not isinstance(item, dict) or set(item) - {"name", "maxNodes", "capacity", "labels"}:
            raise NodeGroupError(f"{where}: a node group has name, maxNodes, capacity and labels only")
        name, most, capacity, labels = item.get("name"), item.get("maxNodes"), item.get("capacity"), item.get("labels")
        if not isinstance(name, str) or not name:
            raise NodeGroupError(f"{where}.name: is required")
        if not isinstance(most, int) or isinstance(most, bool) or most < 0:
            raise NodeGroupError(f"{where}.maxNodes: must be a whole number, 0 or more")
        if not isinstance(capacity, dict) or not capacity:
            raise NodeGroupError(f"{where}.capacity: is required (one node's allocatable)")
        try:
            parsed = parse_resources({str(k): str(v) for k, v in capacity.items()})
        except QuantityError as err:
            raise NodeGroupError(f"{where}.capacity: {err}") from None
        if labels is not None and not isinstance(labels, dict):
            raise NodeGroupError(f"{where}.labels: must be a map")
        groups.append(NodeGroup(name, most, parsed, {str(k): str(v) for k, v in (labels or {}).items()}))
    if len({g.name for g in groups}) != len(groups):
        raise NodeGroupError(f"{path}: names a node group twice")
    return groups


def nodes_needed(pods: Sequence[Resources], per_node: Resources) -> int | None:
    """How many new nodes of `per_node` hold these pods, packed first-fit from the largest; None when one fits no
    node."""
    free: list[dict[str, int]] = []
    for pod in sorted(pods, key=lambda p: sorted(p.items()), reverse=True):
        if any(a > per_node.get(r, 0) for r, a in pod.items() if a):
            return None
        room = next((f for f in free if all(f.get(r, 0) >= a for r, a in pod.items())), None)
        if room is None:
            room = dict(per_node)
            free.append(room)
        for r, a in pod.items():
            room[r] = room.get(r, 0) - a
    return len(free)


def can_add(groups: Iterable[NodeGroup], node_labels: Iterable[Mapping[str, str]],
            asked: Mapping[str, int]) -> dict[str, int]:
    """Per group, how many more nodes it can add: its maximum less its nodes and the nodes asked of it."""
    have: dict[str, int] = {}
    for labels in node_labels:
        if (g := labels.get(GROUP_LABEL)) is not None:
            have[g] = have.get(g, 0) + 1
    return {g.name: max(g.max_nodes - have.get(g.name, 0) - asked.get(g.name, 0), 0) for g in groups}


def choose(pods: Sequence[Resources], groups: Iterable[NodeGroup], room: Mapping[str, int]
           ) -> tuple[NodeGroup, int] | None:
    """The group that holds the pods on the fewest new nodes (then by name), within what each can add."""
    best: tuple[int, str, NodeGroup] | None = None
    for group in groups:
        nodes = nodes_needed(pods, group.capacity)
        if nodes is not None and nodes <= room.get(group.name, 0) and (best is None or (nodes, group.name) <
                                                                        best[:2]):
            best = (nodes, group.name, group)
    return (best[2], best[0]) if best else None


@dataclass
class Ask:
    """A gang's request for nodes, while it waits for them."""

    attempt: int
    name: str  # of its ProvisioningRequest (and the prefix of its PodTemplates)
    group: str
    nodes: int
    deadline: float  # monotonic
    tasks: tuple[str, ...] = ()  # its PodTemplates' tasks
    timer: asyncio.TimerHandle | None = None
    expired: bool = False

    @property
    def said(self) -> str:
        return f"{self.nodes} node(s) of node group {self.group} (ProvisioningRequest {self.name})"


def request_name(job_id: str, attempt: int) -> str:
    return f"fed-{job_id}-{attempt}"[:200]


def template_name(request: str, task: str) -> str:
    return f"{request}-{task}"[:253]


def provisioning_request(name: str, namespace: str, ask: Ask, templates: Sequence[tuple[str, int]]) -> dict:
    """The ProvisioningRequest for an ask: a pod set per task (`templates`: its PodTemplate's name, how many)."""
    return {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
            "metadata": {"name": name, "namespace": namespace, "labels": {GROUP_LABEL: ask.group}},
            "spec": {"provisioningClassName": CLASS,
                     "parameters": {GROUP_PARAMETER: ask.group, NODES_PARAMETER: str(ask.nodes)},
                     "podSets": [{"podTemplateRef": {"name": t}, "count": n} for t, n in templates]}}


def outcome(request: Mapping[str, object]) -> tuple[str, str]:
    """("Provisioned" | "Failed" | "", its message) from a ProvisioningRequest's conditions, as cluster-autoscaler
    sets them."""
    status = request.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    for kind in ("Failed", "Provisioned"):
        for c in conditions if isinstance(conditions, list) else ():
            if isinstance(c, dict) and c.get("type") == kind and c.get("status") == "True":
                return kind, str(c.get("message") or c.get("reason") or "")
    return "", ""
