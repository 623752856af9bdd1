"""Issue 46 (4), the scheduling core's half of admission checks and capacity provisioned on demand (pure): which
node group can hold a gang on new nodes, and a cycle that sends a gang of a queue with the `provisioning` check
there when no cluster holds it as it is, and only then; every dispatched job carries the checks its queue and its
cluster's flavor name; the walk over the queue manager decides the same as the from-scratch cycle."""

from __future__ import annotations

from dataclasses import replace

from federation.scheduling.cycle import QueueInfo, RunningJob, TenantInfo, schedule, schedule_backlog
from federation.scheduling.fit import JobView, NodeGroupRoom
from federation.scheduling.flavors import FlavorInfo
from federation.scheduling.provisioning import Provision, nodes_for, provisionable
from federation.scheduling.queues import QueueManager
from tests.test_cycle import GPU, cluster, job, snap

H100 = NodeGroupRoom("h100", {GPU: 8, "cpu": 64_000}, 4)


def grows(name: str, free: int, *groups: NodeGroupRoom, labels: dict | None = None):  # type: ignore[no-untyped-def]
    return replace(cluster(name, free, labels=labels), node_groups=groups)


def test_a_gang_needs_as_many_new_nodes_as_its_pods_pack_into() -> None:
    four = JobView("j", {GPU: 32, "cpu": 16_000}, {GPU: 8, "cpu": 4_000}, pod_gpus=8)
    assert nodes_for(four, H100) == 4
    halves = JobView("j", {GPU: 16}, {GPU: 4}, pod_gpus=4)  # four pods of 4 GPUs: two to a node
    assert nodes_for(halves, H100) == 2
    assert nodes_for(JobView("j", {GPU: 16}, {GPU: 16}, pod_gpus=16), H100) is None  # one pod larger than a node
    assert nodes_for(JobView("j", {"example.com/fpga": 1}, {"example.com/fpga": 1}), H100) is None
    # Cheapest first, then by cluster and group name; a hard tier limit over several new nodes is no promise.
    small = NodeGroupRoom("a-small", {GPU: 4}, 10)
    options = [grows("b", 0, H100), grows("a", 0, small, H100)]
    assert provisionable(four, options, {}, {}) == Provision("a", "h100", 4)
    assert provisionable(four, options, {"a": "refused"}, {}) == Provision("b", "h100", 4)
    assert provisionable(four, options, {}, {("a", "h100"): 1}) == Provision("b", "h100", 4)
    assert provisionable(replace(four, mode="hard", highest_tier=1), options, {}, {}) is None
    assert provisionable(replace(four, cluster_selector={"zone": "x"}), options, {}, {}) is None


def test_a_gang_that_fits_nowhere_is_sent_to_be_provisioned_only_from_a_queue_with_the_check() -> None:
    tenants = [TenantInfo("t")]
    queues = [QueueInfo("grow", "t", admission_checks=("provisioning",)), QueueInfo("plain", "t")]
    clusters = [grows("east", 8, H100), cluster("west", 16)]
    pending = [job("fits", "grow", 8, 1), job("big", "grow", 32, 2), job("bigger", "grow", 40, 3),
               job("plain-big", "plain", 32, 4)]
    d = schedule(snap(tenants, queues, pending, clusters, capacity=24))
    # Room as it is first: the check passes there (no provisioning needed).
    assert d.assign["fits"] in ("east", "west") and "fits" not in d.provisioning
    assert d.checks["fits"] == ("provisioning",)
    # Four nodes of h100 hold the 32-GPU gang; the group cannot add five, and the queue without the check waits.
    assert d.assign["big"] == "east" and d.provisioning["big"] == Provision("east", "h100", 4)
    assert d.notes["big"] == "on 4 new node(s) of node group h100 that cluster east will provision"
    assert "bigger" not in d.assign and "plain-big" not in d.assign
    assert d.waiting["plain-big"].startswith("no ready cluster fits")
    # Nodes promised in this cycle are not promised twice.
    d = schedule(snap(tenants, queues, [job("one", "grow", 24, 1), job("two", "grow", 16, 2)],
                      [grows("east", 0, H100)], capacity=8))
    assert d.provisioning == {"one": Provision("east", "h100", 3)} and "two" not in d.assign
    # A quota still holds: provisioning makes room in a cluster, not in a queue's limit.
    limited = [replace(queues[0], limit={GPU: 16})]
    d = schedule(snap(tenants, limited, [job("over", "grow", 32, 1)], clusters, capacity=24))
    assert d.assign == {} and "limit" in d.waiting["over"]


def test_a_dispatched_job_carries_its_queues_and_its_flavors_checks() -> None:
    flavors = [FlavorInfo("h100", GPU, {"gpu": "h100"}, admission_checks=("capacity-reservation", "provisioning")),
               FlavorInfo("a100", GPU, {"gpu": "a100"})]
    queues = [QueueInfo("q", "t", admission_checks=("provisioning", "approval"))]
    clusters = [cluster("new", 8, labels={"gpu": "h100"}), cluster("old", 8, labels={"gpu": "a100"})]
    s = replace(snap([TenantInfo("t")], queues, [job("a", "q", 8, 1), job("b", "q", 8, 2)], clusters),
                flavors=flavors, labels={c.name: c.labels for c in clusters})
    d = schedule(s)
    assert {d.assign["a"], d.assign["b"]} == {"new", "old"}
    by_cluster = {d.assign[j]: d.checks[j] for j in ("a", "b")}
    assert by_cluster == {"new": ("provisioning", "approval", "capacity-reservation"),
                          "old": ("provisioning", "approval")}


def test_the_walk_decides_as_the_cycle_from_scratch() -> None:
    tenants = [TenantInfo("t"), TenantInfo("u")]
    queues = [QueueInfo("grow", "t", admission_checks=("provisioning",)), QueueInfo("plain", "u")]
    pending = [job(f"g{i}", "grow", 8 * (1 + i % 4), i) for i in range(12)] + \
              [job(f"p{i}", "plain", 8 * (1 + i % 3), 100 + i) for i in range(12)]
    running = [RunningJob("r", "plain", "west", 0, 0, {GPU: 8}, preemptible=True)]
    clusters = [grows("east", 16, H100, NodeGroupRoom("small", {GPU: 8}, 2)), cluster("west", 8)]
    s = snap(tenants, queues, pending, clusters, running, capacity=32)
    manager = QueueManager()
    for p in pending:
        manager.add(p)
    walked, scratch = schedule_backlog(s, manager), schedule(s)
    assert walked.assign == scratch.assign and walked.provisioning == scratch.provisioning
    assert walked.checks == scratch.checks and scratch.provisioning
    assert {j: walked.waiting[j] for j in scratch.waiting} == dict(scratch.waiting)
