"""Issue 42 (9): the dashboard's node-level view. "7 of 8 free" read as green while no 8-GPU pod fitted: the
clusters page says how many nodes have each number of GPUs free, the most one node has, and which pods no node
can take (the page itself, from a real agent: tests/test_e2e_agents.py)."""

from __future__ import annotations

from federation.ui.server import _nodes_by_free_gpus
from federation.v1 import admin_pb2


def _cluster(counts: list[int], node_gpus: str = "8") -> admin_pb2.Cluster:
    return admin_pb2.Cluster(name="east", gpu_free_nodes=counts, topology=[
        admin_pb2.TierSummary(tier=0, max_capacity={"nvidia.com/gpu": node_gpus})])


def test_nodes_by_free_gpus_say_which_pods_fit_nowhere() -> None:
    # 137 GPUs free over 32 nodes, none with 8: the busy day of issue 42 (3).
    counts = [0, 2, 2, 5, 8, 8, 5, 2]
    assert (sum(f * n for f, n in enumerate(counts)), sum(counts)) == (137, 32)
    view = _nodes_by_free_gpus(_cluster(counts))
    assert view["largest_free"] == 7 and view["node_gpus"] == 8  # a pod of 8 fits nowhere
    assert [(r["free"], r["nodes"]) for r in view["free_nodes"]] == [(7, 2), (6, 5), (5, 8), (4, 8), (3, 5),
                                                                     (2, 2), (1, 2)]
    assert abs(sum(r["ratio"] for r in view["free_nodes"]) - 1) < 1e-9


def test_a_cluster_without_gpus_has_no_node_view() -> None:
    assert _nodes_by_free_gpus(admin_pb2.Cluster(name="cpu"))["free_nodes"] == []
