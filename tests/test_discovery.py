"""Topology discovery presets: the HyperNode trees each provider's node labels describe (labels as each provider
documents them), and the HyperNodes the agent writes to a real API server and keeps current."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client

from federation.testbed.cluster import Testbed
from federation.testbed.faults import apply
from member_agent.discovery import preset_keys
from member_agent.faults import Fault
from member_agent.kube import KubernetesBackend
from member_agent.kubeapi import Kube
from member_agent.topology import ROOT, Node, Topology, build, label_hypernodes
from tests.kubehelp import JOBS, NODE, eventually

GPU = "nvidia.com/gpu"


def nodes(labels: dict[str, dict[str, str]]) -> list[Node]:
    return [Node(name, labels, {GPU: 8}) for name, labels in labels.items()]


def tree(topology: Topology) -> dict[str, tuple[int, str, str, list[str]]]:
    """HyperNode -> (tier, tierName, parent, nodes directly under it)."""
    return {d.name: (d.tier, d.tier_name, d.parent or "", d.nodes) for d in topology.domains.values()
            if d.name != ROOT}


def discovered(preset: str, labels: dict[str, dict[str, str]]) -> Topology:
    found = nodes(labels)
    return build(found, label_hypernodes(found, preset_keys(preset)))


def test_aws_network_node_layers_become_three_tiers() -> None:
    # EKS labels each instance with the network nodes above it, layer 1 the top (EC2 instance topology).
    def aws(l1: str, l2: str, l3: str) -> dict[str, str]:
        return {"topology.k8s.aws/network-node-layer-1": l1, "topology.k8s.aws/network-node-layer-2": l2,
                "topology.k8s.aws/network-node-layer-3": l3, "node.kubernetes.io/instance-type": "p5.48xlarge"}

    topology = discovered("aws", {
        "ip-10-0-1-1": aws("nn-1111111111", "nn-2222222222", "nn-3333333331"),
        "ip-10-0-1-2": aws("nn-1111111111", "nn-2222222222", "nn-3333333331"),
        "ip-10-0-1-3": aws("nn-1111111111", "nn-2222222222", "nn-3333333332"),
        "ip-10-0-1-4": aws("nn-1111111111", "nn-2222222229", "nn-3333333339"),
    })
    assert tree(topology) == {
        "network-node-layer-1-nn-1111111111": (3, "network-node-layer-1", ROOT, []),
        "network-node-layer-2-nn-2222222222": (2, "network-node-layer-2", "network-node-layer-1-nn-1111111111", []),
        "network-node-layer-2-nn-2222222229": (2, "network-node-layer-2", "network-node-layer-1-nn-1111111111", []),
        "network-node-layer-3-nn-3333333331": (1, "network-node-layer-3", "network-node-layer-2-nn-2222222222",
                                               ["ip-10-0-1-1", "ip-10-0-1-2"]),
        "network-node-layer-3-nn-3333333332": (1, "network-node-layer-3", "network-node-layer-2-nn-2222222222",
                                               ["ip-10-0-1-3"]),
        "network-node-layer-3-nn-3333333339": (1, "network-node-layer-3", "network-node-layer-2-nn-2222222229",
                                               ["ip-10-0-1-4"]),
    }


def test_gke_blocks_and_sub_blocks_with_nvlink_cliques_below() -> None:
    # GKE's compact placement topology labels, and GPU Feature Discovery's NVLink clique (<cluster uuid>.<clique id>).
    def gke(block: str, sub: str, clique: str) -> dict[str, str]:
        return {"cloud.google.com/gce-topology-block": block, "cloud.google.com/gce-topology-subblock": sub,
                "cloud.google.com/gce-topology-host": f"host-{clique}", "nvidia.com/gpu.clique": clique}

    topology = discovered("gke,nvlink", {
        "gke-a4x-0": gke("b7a3c1", "s91f02", "f3e8a1d2-6b7c-4c1e-9f0a-2b3c4d5e6f70.1"),
        "gke-a4x-1": gke("b7a3c1", "s91f02", "f3e8a1d2-6b7c-4c1e-9f0a-2b3c4d5e6f70.1"),
        "gke-a4x-2": gke("b7a3c1", "s91f02", "f3e8a1d2-6b7c-4c1e-9f0a-2b3c4d5e6f70.2"),
        "gke-a4x-3": gke("b7a3c1", "s40aa7", "f3e8a1d2-6b7c-4c1e-9f0a-2b3c4d5e6f70.3"),
    })
    clique = "gpu-clique-f3e8a1d2-6b7c-4c1e-9f0a-2b3c4d5e6f70-"
    assert tree(topology) == {
        "gce-topology-block-b7a3c1": (3, "gce-topology-block", ROOT, []),
        "gce-topology-subblock-s91f02": (2, "gce-topology-subblock", "gce-topology-block-b7a3c1", []),
        "gce-topology-subblock-s40aa7": (2, "gce-topology-subblock", "gce-topology-block-b7a3c1", []),
        f"{clique}1": (1, "gpu.clique", "gce-topology-subblock-s91f02", ["gke-a4x-0", "gke-a4x-1"]),
        f"{clique}2": (1, "gpu.clique", "gce-topology-subblock-s91f02", ["gke-a4x-2"]),
        f"{clique}3": (1, "gpu.clique", "gce-topology-subblock-s40aa7", ["gke-a4x-3"]),
    }
    assert topology.tier_names == {"gce-topology-block": 3, "gce-topology-subblock": 2, "gpu.clique": 1}


def test_gke_compact_placement_groups_and_plain_rack_labels() -> None:
    placement = discovered("gke-placement", {
        "a": {"cloud.google.com/gke-placement-group": "training-pool"},
        "b": {"cloud.google.com/gke-placement-group": "training-pool"},
        "c": {},  # a node outside every group hangs off the cluster
    })
    assert tree(placement) == {"gke-placement-group-training-pool": (1, "gke-placement-group", ROOT, ["a", "b"])}
    assert placement.node_parent["c"] == ROOT
    plain = discovered("plain", {
        "r1-a": {"topology.kubernetes.io/zone": "us-east-1a", "network.topology.kubernetes.io/spine": "sp1",
                 "network.topology.kubernetes.io/rack": "r1"},
        "r2-a": {"topology.kubernetes.io/zone": "us-east-1a", "network.topology.kubernetes.io/spine": "sp1",
                 "network.topology.kubernetes.io/rack": "r2"},
    })
    assert tree(plain)["rack-r1"] == (1, "rack", "spine-sp1", ["r1-a"])
    assert tree(plain)["spine-sp1"] == (2, "spine", "zone-us-east-1a", [])
    with pytest.raises(ValueError, match="unknown topology preset 'azure'"):
        preset_keys("aws,azure")


async def test_discovered_hypernodes_appear_in_the_api_server_and_their_status_follows_health(
        kube: Testbed, tmp_path: Path) -> None:
    def labels(l1: str, l3: str) -> dict[str, str]:
        return {"topology.k8s.aws/network-node-layer-1": l1, "topology.k8s.aws/network-node-layer-2": "nn-spine",
                "topology.k8s.aws/network-node-layer-3": l3}

    layout = {"aws-0": labels("nn-top", "nn-leaf-a"), "aws-1": labels("nn-top", "nn-leaf-a"),
              "aws-2": labels("nn-top", "nn-leaf-b")}
    kube.apply([{"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": node_labels},
                 "status": {"allocatable": NODE, "capacity": NODE}} for name, node_labels in layout.items()])
    config = kube.agent_kubeconfig(tmp_path / "agent.kubeconfig")
    b = KubernetesBackend(await Kube.connect(str(config)), "east", JOBS, "federation-agent", preset_keys("aws"),
                          write_hypernodes=True)  # as the agent's ServiceAccount: its role must allow the writes
    await b.check_access()
    await b.start()
    custom = client.CustomObjectsApi(kube.admin())

    def written() -> dict[str, dict]:
        items = custom.list_cluster_custom_object("topology.volcano.sh", "v1alpha1", "hypernodes")["items"]
        return {h["metadata"]["name"]: h for h in items}

    try:
        leaf = "network-node-layer-3-nn-leaf-a"
        hypernodes = await eventually(lambda: len(written()) == 4 and written(), what="4 HyperNodes written")
        assert hypernodes[leaf]["spec"] == {"tier": 1, "tierName": "network-node-layer-3", "members": [
            {"type": "Node", "selector": {"exactMatch": {"name": "aws-0"}}},
            {"type": "Node", "selector": {"exactMatch": {"name": "aws-1"}}}]}
        assert hypernodes[leaf]["metadata"]["labels"] == {"federation.dev/discovered-by": "east"}
        assert hypernodes["network-node-layer-1-nn-top"]["spec"]["tier"] == 3
        await eventually(lambda: (written()[leaf].get("status") or {}).get("nodeCount") == 2, what="nodeCount")
        assert b.state.topology.domains[leaf].nodes == ["aws-0", "aws-1"]
        apply(kube.admin(), Fault(0, "node", "aws-1", "degraded", "XID 63"))

        def degraded_members() -> dict:
            found = {c["type"]: c for c in (written()[leaf].get("status") or {}).get("conditions") or []}
            member = found.get("DegradedMembers", {})
            return member if member.get("status") == "True" else {}

        condition = await eventually(degraded_members, what="DegradedMembers on the leaf")
        assert condition["message"] == "1 node degraded (XID 63)"
        # A node relabelled to another leaf: the tree written follows it, the emptied HyperNode goes.
        client.CoreV1Api(kube.admin()).patch_node("aws-2", {"metadata": {"labels": {
            "topology.k8s.aws/network-node-layer-3": "nn-leaf-a"}}})
        await eventually(lambda: "network-node-layer-3-nn-leaf-b" not in written() and len(
            written()[leaf]["spec"]["members"]) == 3, what="the tree rewritten")
    finally:
        await b.stop()
