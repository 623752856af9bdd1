"""Sub-groups on the real API server with KWOK nodes (issue 45, 2): a LeaderWorkerSet converted by `fedctl convert`,
its groups placed on NVLink cliques (`nvidia.com/gpu.clique`, as GPU Feature Discovery labels NVL72 racks): each group
inside one clique, never split across two: where no clique can hold a group, the set waits rather than split it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from federation.cli.convert import convert
from federation.cli.manifest import job_from_document
from federation.cli.yamldoc import load_documents
from federation.testbed.cluster import Testbed
from federation.v1 import agent_pb2, common_pb2
from federation.validation import normalise_job_spec
from member_agent import clusters
from member_agent.agent import Agent
from member_agent.pods import INDEX, TASK
from tests.kubehelp import GPU, backend, next_update, pods, ready_nodes
from tests.test_convert import LWS

CLIQUE = "nvidia.com/gpu.clique"


def converted_lws() -> common_pb2.JobSpec:
    (converted,) = convert(load_documents(LWS, "lws.yaml")).objects
    (doc,) = load_documents(yaml.safe_dump(converted), "converted.yaml")
    spec: Any = job_from_document(doc).message
    normalise_job_spec(spec)
    spec.annotations["federation.dev/sim-duration"] = "600s"
    return spec


def racks(kube: Testbed, nodes: dict[str, int], gpus: int) -> dict[str, str]:
    """Nodes of `gpus` GPUs in NVLink cliques (rack -> its nodes); node -> its clique."""
    labels = {f"{rack}-{n}": f"clique-{rack}" for rack, count in nodes.items() for n in range(count)}
    kube.apply([clusters.node(name, {"cpu": "64", "memory": "512Gi", "pods": "110", GPU: str(gpus)}, {CLIQUE: clique})
                for name, clique in labels.items()])
    return labels


async def test_a_leader_worker_sets_groups_each_land_in_one_nvlink_clique(kube: Testbed, tmp_path: Path) -> None:
    # Cliques of five, two and two 8-GPU nodes (40, 16, 16 GPUs); a group is 4 pods of 4 GPUs (16).
    labels = racks(kube, {"rack0": 5, "rack1": 2, "rack2": 2}, 8)
    b = await backend(kube, tmp_path, topology_labels=(CLIQUE,))
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, len(labels))
        await agent.assign(common_pb2.Job(id="vllm-1", spec=converted_lws()), attempt=1)
        await next_update(agent, agent_pb2.BOUND, [], timeout=120)
        cliques: dict[int, set[str]] = defaultdict(set)
        made = pods(kube)
        assert len(made) == 12
        for pod in made.values():
            assert pod.metadata.labels[TASK] == "worker"
            cliques[int(pod.metadata.labels[INDEX]) // 4].add(labels[pod.spec.node_name])
        assert sorted(cliques) == [0, 1, 2]
        assert all(len(c) == 1 for c in cliques.values()), cliques  # every group whole in one clique
    finally:
        await b.stop()


async def test_a_group_no_clique_can_hold_waits_rather_than_split(kube: Testbed, tmp_path: Path) -> None:
    # Cliques of three 4-GPU nodes (12 GPUs): a group of 16 fits the cluster's 36 GPUs only split.
    labels = racks(kube, {"rack0": 3, "rack1": 3, "rack2": 3}, 4)
    b = await backend(kube, tmp_path, topology_labels=(CLIQUE,))
    agent = Agent("east", {}, b)
    try:
        await ready_nodes(b, len(labels))
        await agent.assign(common_pb2.Job(id="vllm-1", spec=converted_lws()), attempt=1)
        rejected = await next_update(agent, agent_pb2.REJECTED, [], timeout=120)
        assert "each partition of task worker (4 pods) under one HyperNode of tier 1 (gpu.clique)" in rejected.reason, \
            rejected.reason
        assert not pods(kube)
    finally:
        await b.stop()
