"""The server's pure per-cluster fit check."""

from federation.scheduling.fit import ClusterView, JobView, TierFree, check

GPU = "nvidia.com/gpu"
H100 = ClusterView("h100", {"accelerator": "h100"}, {GPU: 64}, [
    TierFree(0, "node", {GPU: 8}), TierFree(1, "leaf", {GPU: 32}), TierFree(2, "spine", {GPU: 64})])
SMALL_NODES = ClusterView("gb300", {"accelerator": "gb300"}, {GPU: 64}, [
    TierFree(0, "node", {GPU: 4}), TierFree(1, "nvl72", {GPU: 64})])


def test_check_explains_each_reason() -> None:
    assert check(JobView("j", {GPU: 32}, {GPU: 8}, mode="hard", highest_tier=1), H100) is None
    assert check(JobView("j", {GPU: 64}, {GPU: 8}, mode="hard", highest_tier=1), H100) == \
        "no HyperNode of tier 1 or below has enough free: nvidia.com/gpu 32/64 free"
    assert check(JobView("j", {GPU: 64}, {GPU: 8}, mode="hard", highest_tier_name="spine"), H100) is None
    # a tier name the cluster does not have is no limit there, as Volcano resolves it
    assert check(JobView("j", {GPU: 64}, {GPU: 8}, mode="hard", highest_tier_name="rack"), H100) is None
    assert check(JobView("j", {GPU: 8}, {GPU: 8}, {"accelerator": "gb300"}), H100) == "lacks label accelerator=gb300"
    assert check(JobView("j", {GPU: 128}, {GPU: 8}), H100) == "not enough free: nvidia.com/gpu 64/128 free"
    assert check(JobView("j", {GPU: 32}, {GPU: 8}, mode="soft", highest_tier=1), SMALL_NODES) == \
        "no node can hold its largest pod: nvidia.com/gpu 4/8 free"


def test_a_cluster_too_small_for_the_gang_says_so_whatever_runs_there() -> None:
    """Its reason names what it has in all, not what is free: a gang starting or ending there does not change it."""
    gang = JobView("j", {GPU: 16}, {GPU: 8})
    for free in (0, 3, 8):
        small = ClusterView("small", {}, {GPU: free}, capacity={GPU: 8})
        assert check(gang, small) == "too small: nvidia.com/gpu 8/16 in all"
    big_enough = ClusterView("big", {}, {GPU: 3}, capacity={GPU: 32})
    assert check(gang, big_enough) == "not enough free: nvidia.com/gpu 3/16 free"
    unknown = ClusterView("unknown", {}, {GPU: 3})  # an agent that reports no capacity: what is free is all it says
    assert check(gang, unknown) == "not enough free: nvidia.com/gpu 3/16 free"


def test_explain_gives_each_cluster_its_verdict() -> None:
    from federation.scheduling.fit import ClusterState, explain

    job = JobView("j", {GPU: 16}, {GPU: 8}, mode="hard", highest_tier=1)
    states = [ClusterState(H100, ready=True, cordoned=False), ClusterState(SMALL_NODES, ready=True, cordoned=False),
              ClusterState(ClusterView("away", {}, {GPU: 64}), ready=False, cordoned=False),
              ClusterState(ClusterView("shut", {}, {GPU: 64}), ready=True, cordoned=True)]
    assert explain(job, states, {"h100": "rejected it recently: stale"}) == [
        ("away", "not Ready (its agent is not connected or has gone silent)"),
        ("gb300", "no node can hold its largest pod: nvidia.com/gpu 4/8 free"),
        ("h100", "rejected it recently: stale"),
        ("shut", "cordoned")]
    assert explain(job, states[:1]) == [("h100", None)]


def test_explain_never_says_fits_now_where_the_room_is_reserved_for_another() -> None:
    from federation.scheduling.fit import ClusterState, explain

    job = JobView("small", {GPU: 16}, {GPU: 8})
    state = [ClusterState(H100, ready=True, cordoned=False)]  # 64 free
    assert explain(job, state) == [("h100", None)]
    assert explain(job, state, held={"h100": ({GPU: 56}, "wide-3")}) == [
        ("h100", "the room it needs is reserved for wide-3")]
    assert explain(job, state, held={"h100": ({GPU: 48}, "wide-3")}) == [("h100", None)]  # room enough beside it


def test_a_gang_goes_only_where_some_node_has_each_label_its_pods_select() -> None:
    """Volcano's own task-start-dependency example selects `kubernetes.io/os: linux`: a cluster whose agent reports
    no node with a label a pod selects is never sent the gang (its agent would refuse it every time); one that
    does not report its nodes' labels is left to its agent."""
    from dataclasses import replace

    from federation.scheduling.fit import cannot_run, could_hold

    job = JobView("j", {GPU: 8}, {GPU: 8}, node_selector=("disktype=ssd", "kubernetes.io/os=linux"))
    linux = replace(H100, node_labels=frozenset({"kubernetes.io/os=linux", "accelerator=h100"}))
    assert check(job, linux) == "no node has label disktype=ssd (its pods' nodeSelector)"
    assert not could_hold(job, linux)
    assert cannot_run(job, [linux]) == ("cannot run: no member cluster matches its selector (it needs nodes "
                                        "labelled disktype=ssd,kubernetes.io/os=linux, as its pods' nodeSelector "
                                        "asks)")
    ssd = replace(linux, node_labels=linux.node_labels | {"disktype=ssd"})
    assert check(job, ssd) is None and could_hold(job, ssd) and cannot_run(job, [linux, ssd]) is None
    assert check(job, H100) is None  # labels not reported: the agent's placement decides


def racks(name: str, tier_name: str, total: int, per_domain: int) -> ClusterView:
    """A cluster of 4-GPU nodes whose tier-1 HyperNodes hold `per_domain` GPUs each, as its agent reports them."""
    from federation.kernel.resources import with_share

    node, domain = with_share({GPU: 4}), with_share({GPU: per_domain})
    return ClusterView(name, {}, with_share({GPU: total}),
                       [TierFree(0, "node", node, node), TierFree(1, tier_name, domain, domain)],
                       capacity=with_share({GPU: total}))


def test_a_gang_of_partitions_needs_a_hypernode_holding_one_partition() -> None:
    """Issue 45 (2): the cluster choice knows whether a cluster's HyperNodes can hold a group whole (a necessary
    condition: the largest partition, under its tier), whatever the whole gang's totals."""
    from federation.control.jobcache import job_view
    from federation.scheduling.fit import cannot_run

    cliques = racks("racks", "gpu.clique", 36, 12)
    spec = {"tasks": [{"name": "worker", "replicas": 12, "resources": {GPU: "4"},
                       "partition_policy": {"total_partitions": 3, "partition_size": 4, "min_partitions": 1,
                                            "network_topology": {"mode": "hard", "highest_tier_name": "gpu.clique"}}}]}
    view = job_view({"id": "vllm", "request": {GPU: 16}, "spec": spec})
    assert view.partition == ((GPU, 16),) and view.partition_tier_name == "gpu.clique"
    assert check(view, cliques) == \
        "no HyperNode of tier 1 or below has room for one of its partitions: nvidia.com/gpu 12/16 free"
    assert cannot_run(view, [cliques]) == ("cannot run: needs nvidia.com/gpu=16 for one partition within one "
                                           "HyperNode of tier 1; the most any cluster offers is nvidia.com/gpu=12 "
                                           "(racks)")
    roomy = racks("nvl72", "gpu.clique", 72, 72)
    assert check(view, roomy) is None and cannot_run(view, [cliques, roomy]) is None
    # Without the partitions' topology, or a tier name the cluster lacks, the totals decide.
    assert check(view, racks("plain", "leaf", 36, 12)) is None
    del spec["tasks"][0]["partition_policy"]["network_topology"]
    assert check(job_view({"id": "vllm", "request": {GPU: 16}, "spec": spec}), cliques) is None


def test_a_gpu_memory_ask_is_fitted_as_its_share_of_the_clusters_largest_devices() -> None:
    """Issue 42 (6): a pod asking 20 GiB (KAI's gpu-memory) counted in quotas as a whole GPU, but fitted as the
    quarter of an 80 GiB device it takes where the cluster says its devices' memory; as a whole one where not."""
    import json

    from federation.control.jobcache import job_view
    from federation.kernel.resources import SHARE
    from federation.scheduling.choice import ClusterTable

    template = json.dumps({"metadata": {"annotations": {"gpu-memory": "20480"}}})
    spec = {"min_available": 2, "tasks": [{"name": "server", "replicas": 3, "resources": {"cpu": "1"},
                                           "pod_template_json": template}]}
    view = job_view({"id": "j", "request": {"cpu": 2000, SHARE: 2000}, "spec": spec})
    assert view.memory_asks == ((2, 1, 20480),) and SHARE not in view.largest_pod  # its gang's minimum of 2
    half_free = {"cpu": 16_000, SHARE: 600}
    nodes = [TierFree(0, "node", half_free)]
    known = ClusterView("known", {}, half_free, nodes, gpu_memory=81920)
    unknown = ClusterView("unknown", {}, half_free, nodes)
    assert check(view, known) is None  # 2 x 250 of 600
    assert check(view, unknown) == "not enough free: nvidia.com/gpu 0.6/2 free"
    table = ClusterTable([known, unknown], {"cpu": 32_000, SHARE: 2000})
    assert table.best(view, {}) == "known"
    table.reserve(view, "known")
    assert table.free_of("known", SHARE) == 100  # its two quarters taken, not two whole GPUs
    # A pod asking more memory than the largest device has never fits there.
    big = job_view({"id": "k", "request": {"cpu": 1000, SHARE: 1000}, "spec": {"tasks": [{
        "name": "s", "replicas": 1, "resources": {"cpu": "1"},
        "pod_template_json": json.dumps({"metadata": {"annotations": {"gpu-memory": "90000"}}})}]}})
    roomy = ClusterView("roomy", {}, {"cpu": 16_000, SHARE: 8000}, [TierFree(0, "node", {"cpu": 16_000, SHARE: 1000})],
                        gpu_memory=81920)
    assert check(big, roomy) == "no node can hold its largest pod: nvidia.com/gpu 1/1.099 free"  # 90,000 of 81,920 MiB
