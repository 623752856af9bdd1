"""HyperJobs in the pure cycle: sub-jobs placed across clusters all or nothing (up to minAvailable), counted as one
job against quotas, maxDomains, clusterNames and the cluster topology honoured; the same decisions from scratch and
from the queue manager kept across cycles."""

from __future__ import annotations

from federation.kernel.hyperjob import HOLD_CHECK, Part
from federation.scheduling.cycle import PendingJob, QueueInfo, RunningJob, TenantInfo, schedule, schedule_backlog
from federation.scheduling.fit import JobView
from federation.scheduling.model import Decisions, Snapshot
from federation.scheduling.queues import QueueManager
from tests.test_cycle import cluster, job, snap

GPU = "nvidia.com/gpu"
T, Q = [TenantInfo("t")], [QueueInfo("q", "t")]


def parts(name: str, gpus: list[int], seq: int = 100, *, need: int = 0, max_domains: int = 0,
          clusters: dict[int, tuple[str, ...]] | None = None, topology: str = "") -> list[PendingJob]:
    """A HyperJob's sub-jobs, each a gang of 8-GPU pods."""
    return [PendingJob(JobView(f"{name}-{i}", {GPU: g}, {GPU: min(g, 8)}, pod_gpus=8,
                               group=Part(name, name, i, len(gpus), need, max_domains, (clusters or {}).get(i, ()),
                                          topology)), "q", 0, seq + i)
            for i, g in enumerate(gpus)]


def both(s: Snapshot) -> Decisions:
    """The cycle from scratch and over the queue manager agree; the first's decisions."""
    scratch, walked = schedule(s), schedule_backlog(s, QueueManager(s.pending))
    assert scratch.assign == walked.assign
    assert {j: scratch.waiting[j] for j in scratch.waiting} == {j: walked.waiting[j] for j in scratch.waiting}
    return scratch


def test_a_hyperjob_larger_than_any_cluster_is_split_across_two_with_holds() -> None:
    d = both(snap(T, Q, parts("llm", [128, 128]), [cluster("a", 128), cluster("b", 128)]))
    assert sorted(d.assign.items()) == [("llm-0", "a"), ("llm-1", "b")]
    assert d.checks == {"llm-0": (HOLD_CHECK,), "llm-1": (HOLD_CHECK,)}
    assert d.notes["llm-1"] == ("sub-job 1 of HyperJob llm: sub-jobs 0 to a, 1 to b, each cluster holding its room "
                                "until all have it")
    assert d.usage["q"][GPU] == 256


def test_one_cluster_short_sends_none_and_says_where() -> None:
    d = both(snap(T, Q, [*parts("llm", [128, 128]), job("small", "q", 8, 500)], [cluster("a", 128), cluster("b", 120)]))
    assert "llm-0" not in d.assign and "llm-1" not in d.assign
    said = d.waiting["llm-0"]
    assert said == ("HyperJob llm waits, holding nothing: 1 of the 2 sub-job(s) it needs together have room; "
                    "sub-job 1: no cluster it may use fits beside sub-job(s) 0, placed first: a: not enough free: "
                    "nvidia.com/gpu 0/128 free; b: not enough free: nvidia.com/gpu 120/128 free")
    assert d.waiting["llm-1"] == said
    assert d.assign["small"] in ("a", "b")  # nothing was kept for it: the room it tried is given back whole


def test_min_available_starts_what_fits_and_the_rest_follows() -> None:
    d = both(snap(T, Q, parts("hj", [64, 64, 64], need=2), [cluster("a", 64), cluster("b", 64)]))
    assert sorted(d.assign) == ["hj-0", "hj-1"]
    assert d.waiting["hj-2"].startswith("HyperJob hj started 2 sub-job(s) without it: no cluster it may use fits")
    # Next cycle, two run: the third alone is placed once room comes.
    running = [RunningJob(f"hj-{i}", "q", c, 0, 100 + i, {GPU: 64}, True, group="hj") for i, c in ((0, "a"), (1, "b"))]
    d = both(snap(T, Q, parts("hj", [64, 64, 64], need=2)[2:], [cluster("a", 0), cluster("b", 0), cluster("c", 64)],
                  running))
    assert d.assign == {"hj-2": "c"}


def test_max_domains_and_cluster_names_bound_the_spread() -> None:
    clusters = [cluster("a", 64), cluster("b", 64), cluster("c", 64)]
    d = both(snap(T, Q, parts("hj", [64, 64, 64], max_domains=2), clusters))
    assert not set(d.assign) & {"hj-0", "hj-1", "hj-2"}
    assert "its HyperJob spans maxDomains 2 cluster(s) already" in d.waiting["hj-2"]
    d = both(snap(T, Q, parts("hj", [32, 32], max_domains=1), clusters))
    assert len({d.assign["hj-0"], d.assign["hj-1"]}) == 1
    d = both(snap(T, Q, parts("hj", [32, 32], clusters={0: ("c",), 1: ("b", "c")}), clusters))
    assert d.assign["hj-0"] == "c" and d.assign["hj-1"] in ("b", "c")


def test_sub_jobs_share_one_value_of_the_cluster_topology() -> None:
    region = "topology.kubernetes.io/region"
    clusters = [cluster("a", 64, labels={region: "east"}), cluster("b", 32, labels={region: "east"}),
                cluster("c", 64, labels={region: "west"}), cluster("d", 64, labels={region: "west"})]
    d = both(snap(T, Q, parts("hj", [64, 64], topology=region), clusters))
    assert sorted(d.assign.values()) == ["c", "d"]  # east cannot hold both; west can
    running = [RunningJob("hj-0", "q", "a", 0, 100, {GPU: 64}, True, group="hj")]
    d = both(snap(T, Q, parts("hj", [64, 32], topology=region)[1:], clusters, running))
    assert d.assign == {"hj-1": "b"}  # with its running sibling in east


def test_quotas_count_the_hyperjob_as_one_job() -> None:
    queues = [QueueInfo("q", "t", limit={GPU: 192})]
    d = both(snap(T, queues, parts("llm", [128, 128]), [cluster("a", 128), cluster("b", 128)]))
    assert not d.assign
    assert "queue at limit nvidia.com/gpu=192" in d.waiting["llm-0"]


def test_the_sub_job_with_fewest_clusters_left_is_placed_first() -> None:
    s = snap(T, Q, parts("hj", [64, 64]), [cluster("a", 64), cluster("b", 64)])
    d = both(Snapshot(**{**s.__dict__, "refused": {"hj-1": {"a": "a: it refused the gang for now"}}}))
    # b is the one cluster left to sub-job 1: it is placed first, though sub-job 0 comes first and a first by name
    assert d.assign == {"hj-0": "a", "hj-1": "b"}
