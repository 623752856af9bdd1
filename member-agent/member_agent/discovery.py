"""Topology discovery: HyperNodes from the node labels each cloud writes, as Volcano HyperNode objects.

Volcano leaves HyperNode discovery to each operator; the clouds already label every GPU node with where it
sits in the network. A preset names those labels from the widest domain to the closest (each becomes a
tier, the closest tier 1); presets combine, widest first (`aws,nvlink`):

- `aws`: EC2 instance topology, as EKS labels nodes: `topology.k8s.aws/network-node-layer-1` (the top of
  the hierarchy) to `-3` (the network node the instance is attached to);
- `gke`: GKE's compact placement topology: `cloud.google.com/gce-topology-block` and `-subblock` (the host
  label is left out: one VM per host makes one-node HyperNodes);
- `gke-placement`: GKE compact placement policy groups (`cloud.google.com/gke-placement-group`);
- `nvlink`: NVIDIA's NVLink clique of GB200/GB300 NVL72 racks (`nvidia.com/gpu.clique`, from GPU Feature
  Discovery), the closest domain of all;
- `plain`: zone, spine and rack labels for clusters labelled by hand (`topology.kubernetes.io/zone`,
  `network.topology.kubernetes.io/spine`, `network.topology.kubernetes.io/rack`).

The agent writes what it discovers as HyperNode objects (labelled as its own), so Volcano-aware tools see
the same tree, and keeps their status current: how many nodes, a Ready condition, and a DegradedMembers
condition naming the degraded nodes' reasons. Pure: manifests and statuses; the backend makes the calls.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from member_agent.topology import HYPERNODE_API, HyperNodeSpec

PRESETS: dict[str, tuple[str, ...]] = {
    "aws": ("topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
            "topology.k8s.aws/network-node-layer-3"),
    "gke": ("cloud.google.com/gce-topology-block", "cloud.google.com/gce-topology-subblock"),
    "gke-placement": ("cloud.google.com/gke-placement-group",),
    "nvlink": ("nvidia.com/gpu.clique",),
    "plain": ("topology.kubernetes.io/zone", "network.topology.kubernetes.io/spine",
              "network.topology.kubernetes.io/rack"),
}
OWNER = "federation.dev/discovered-by"  # label on the HyperNodes an agent wrote: the cluster's name

Obj = dict[str, Any]


def preset_keys(names: str) -> list[str]:
    """The label keys of comma-separated presets, widest first (ValueError names an unknown preset)."""
    keys: list[str] = []
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in PRESETS:
            raise ValueError(f"unknown topology preset {name!r} (known: {', '.join(sorted(PRESETS))})")
        keys += [k for k in PRESETS[name] if k not in keys]
    return keys


def manifest(spec: HyperNodeSpec, cluster: str) -> Obj:
    members = []
    for m in spec.members:
        members.append({"type": m.kind, "selector": {"exactMatch": {"name": m.selector.exact}}})
    return {"apiVersion": HYPERNODE_API, "kind": "HyperNode",
            "metadata": {"name": spec.name, "labels": {OWNER: cluster}},
            "spec": {"tier": spec.tier, "tierName": spec.tier_name, "members": members}}


def status(nodes: Sequence[str], ready: Iterable[str], degraded: Mapping[str, Sequence[str]],
           previous: Mapping[str, Any] | None, now: str) -> Obj:
    """A HyperNode's status: `nodes` under it, those of them `ready`, and `degraded` (node -> reasons).
    Each condition keeps its lastTransitionTime while its status stays the same."""
    ready_count = len(set(ready) & set(nodes))
    bad = {n: r for n, r in degraded.items() if n in set(nodes)}
    reasons = sorted({r for rs in bad.values() for r in rs[:1]})
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}

    def condition(kind: str, on: bool, reason: str, message: str) -> Obj:
        value = "True" if on else "False"
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == value else None
        return {"type": kind, "status": value, "reason": reason, "message": message,
                "lastTransitionTime": since or now}

    return {"nodeCount": len(nodes), "conditions": [
        condition("Ready", ready_count > 0, "NodesReady" if ready_count else "NoNodeReady",
                  f"{ready_count} of {len(nodes)} nodes ready"),
        condition("DegradedMembers", bool(bad), "NodesDegraded" if bad else "AllHealthy",
                  f"{len(bad)} node{'s' if len(bad) != 1 else ''} degraded" + (f" ({', '.join(reasons)})" if bad
                                                                                 else "")),
    ]}


def same_status(a: Mapping[str, Any] | None, b: Mapping[str, Any]) -> bool:
    """Whether two statuses say the same (transition times aside)."""
    def plain(s: Mapping[str, Any] | None) -> Any:
        s = s or {}
        return (s.get("nodeCount"), sorted((c.get("type"), c.get("status"), c.get("reason"), c.get("message"))
                                           for c in s.get("conditions") or []))
    return plain(a) == plain(b)
