"""Admission over real sockets on real PostgreSQL, with a simulated member agent connected: jobs that cannot
run say so and hold nothing up, and gangs are judged by their minimum."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import pytest

from federation.v1 import admin_pb2, common_pb2, jobs_pb2
from member_agent import client
from member_agent.agent import Agent
from member_agent.clusters import tree
from member_agent.simulated import SimulatedBackend, load_cluster
from tests.conftest import Api, make_queue
from tests.test_api_admin import rpc_error

GPU = "nvidia.com/gpu"


@pytest.fixture
async def h100(api: Api) -> AsyncIterator[Agent]:
    """One member cluster: a spine over 2 leaves of 4 nodes of 8 GPUs (a leaf holds 32 GPUs, the cluster 64)."""
    agent = Agent("h100", {"accelerator": "h100"},
                  SimulatedBackend(load_cluster(tree("h", [1, 2, 4], {GPU: "8", "cpu": "64"})), default_duration=3600))
    connected = asyncio.Event()
    task = asyncio.create_task(client.run(api.address, agent, heartbeat=0.5, connected=connected))
    await asyncio.wait_for(connected.wait(), 30)
    await make_queue(api, "train", "ml")
    yield agent
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def gang(name: str, replicas: int, min_available: int = 0, tier: int = 1) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(name=name, queue="train", min_available=min_available,
                              network_topology=common_pb2.NetworkTopology(mode="hard", highest_tier_allowed=tier),
                              tasks=[common_pb2.TaskSpec(name="worker", replicas=replicas, resources={GPU: "8"})])


async def phase_of(api: Api, job_id: str, phase: int, timeout: float = 30) -> common_pb2.Job:
    for _ in range(int(timeout * 10)):
        job = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))
        if job.status.phase == phase:
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"{job_id} is {common_pb2.JobPhase.Name(job.status.phase)}: {job.status.reason}")


async def test_a_gang_that_cannot_run_is_accepted_with_the_reason_and_blocks_nothing(api: Api, h100: Agent) -> None:
    wide = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=gang("leaf-too-small", 8))))
    reason = ("cannot run: needs nvidia.com/gpu=64 within one HyperNode of tier 1; the most any cluster offers is "
              "nvidia.com/gpu=32 (h100)")
    assert wide.inadmissible == reason
    fits = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=gang("fits", 4)))).job
    await phase_of(api, fits.id, common_pb2.RUNNING)  # behind the impossible one in its queue, yet running
    waiting = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=wide.job.id))
    assert waiting.status.phase == common_pb2.PENDING and waiting.status.reason == reason
    before = len((await api.jobs.ListJobs(jobs_pb2.ListJobsRequest())).jobs)
    err = await rpc_error(api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(
        specs=[gang("ok", 1), gang("leaf-too-small", 8)], reject_inadmissible=True)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and err.details() == f"specs[1]: {reason}"
    assert len((await api.jobs.ListJobs(jobs_pb2.ListJobsRequest())).jobs) == before  # nothing stored


async def test_a_gang_that_fits_only_at_its_minimum_runs_at_it_and_counts_what_is_bound(api: Api, h100: Agent) -> None:
    elastic = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=gang("elastic", 8, min_available=4)))).job
    running = await phase_of(api, elastic.id, common_pb2.RUNNING)
    assert len(running.status.placements) == 4  # one leaf: the minimum, as Volcano binds it
    status = await api.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="train"))
    assert dict(status.usage) == {GPU: "32"}  # what is bound, not every replica it lists


async def test_a_resource_no_cluster_has_reported_is_refused_with_the_names_that_exist(api: Api, h100: Agent) -> None:
    for _ in range(100):  # the agent's first inventory is stored
        if any(c.status == admin_pb2.READY for c in (await api.admin.ListClusters(admin_pb2.ListClustersRequest()))
               .clusters):
            break
        await asyncio.sleep(0.1)
    typo = gang("typo", 1)
    del typo.tasks[0].resources[GPU]
    typo.tasks[0].resources["nvidia.com/gpus"] = "8"
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=typo)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.tasks[0].resources['nvidia.com/gpus']" in err.details() and "did you mean nvidia.com/gpu?" in \
        err.details()
    assert not (await api.jobs.ListJobs(jobs_pb2.ListJobsRequest())).jobs  # nothing stored
    allowed = await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=typo, allow_unknown_resources=True))
    assert allowed.job.id
