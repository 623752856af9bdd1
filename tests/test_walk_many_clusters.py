"""Differential property at the scale the issue names: on 1,000 member clusters, the queue manager's walk over the
running gangs kept across cycles (`Running`, changed only by gangs starting, ending and being preempted) decides
exactly as the cycle from scratch over the same jobs and gangs as plain lists, cycle after cycle under churn, with
reclaim between tenants: dispatches, preemptions, reservations, usage and every waiting job's reason."""

from __future__ import annotations

import random

import pytest

from federation.scheduling.cycle import (
    PendingJob,
    QueueInfo,
    RunningJob,
    Snapshot,
    TenantInfo,
    schedule,
    schedule_backlog,
)
from federation.scheduling.fit import JobView
from federation.scheduling.queues import QueueManager
from federation.scheduling.running import Running
from tests.test_queue_manager_property import GPU, NODE, cluster, same

CLUSTERS = 1_000


@pytest.mark.parametrize("seed", [5, 23])
def test_a_thousand_clusters_under_churn_decide_as_the_cycle_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    tenants = [TenantInfo(f"t{t}", rng.choice([1, 2, 4])) for t in range(12)]
    queues = [QueueInfo(f"t{t}-q{q}", f"t{t}", rng.choice([1, 2]), priority=rng.choice([0, 0, 1]), reclaimable=True)
              for t in range(12) for q in range(4)]
    free = {f"c{i:04d}": rng.choice([0, 2, 4, 8]) for i in range(CLUSTERS)}  # free 8-GPU nodes of 8 per cluster
    pending: dict[str, PendingJob] = {}
    running: dict[str, RunningJob] = {}
    kept, manager = Running(), QueueManager()
    seq = 0
    preempted = placed = 0

    def submit(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            seq += 1
            gpus = rng.choice([1, 8, 8, 16, 32, 64])
            # Most of the tenants' jobs go to the first tenants' queues: the rest are short of their shares and reclaim
            queue = queues[min(int(rng.expovariate(0.4)), len(queues) - 1)].name
            job = PendingJob(JobView(f"j{seq}", {GPU: gpus}, {GPU: min(gpus, NODE)}), queue, rng.choice([0, 5]), seq)
            pending[job.id] = job
            manager.add(job)

    def end(gang_id: str) -> None:
        gang = running.pop(gang_id)
        kept.discard(gang_id)
        free[gang.cluster] += gang.request[GPU] // NODE or 1

    submit(6_000)
    for step in range(10):
        clusters = [cluster(name, "a", max(n, 0)) for name, n in free.items()]
        capacity = {GPU: sum(c.capacity[GPU] for c in clusters)}
        oracle = schedule(Snapshot(tenants, queues, list(pending.values()), list(running.values()), clusters, capacity,
                                   now=1_000.0 * step))
        walked = schedule_backlog(Snapshot(tenants, queues, [], kept, clusters, capacity, now=1_000.0 * step), manager)
        same(oracle, walked)
        for job_id, name in oracle.assign.items():
            job = pending.pop(job_id)
            manager.remove(job_id)
            gang = running[job_id] = RunningJob(job_id, job.queue, name, job.priority, job.seq, job.view.request,
                                                preemptible=job.seq % 5 != 0, started=1_000.0 * step)
            kept.add(gang)
            free[name] -= job.view.request[GPU] // NODE or 1
        for job_id, why in oracle.preempt.items():
            gang = running[job_id]
            end(job_id)
            job = PendingJob(JobView(job_id, dict(gang.request), {GPU: min(gang.request[GPU], NODE)}), gang.queue,
                             gang.priority, gang.seq, cause=f"preempted: {why}")
            pending[job_id] = job
            manager.add(job)
        placed += len(oracle.assign)
        preempted += len(oracle.preempt)
        for gang_id in rng.sample(sorted(running), len(running) // 20):
            end(gang_id)
        submit(rng.randrange(200, 800))
    assert placed and preempted  # the walk was compared where it places and where it reclaims
