"""Issue 27 (4): what a member cluster's agent says reaches users only bounded and never as raw control
sequences: its names are checked at the edge, its free text stored escaped and cut, and fedctl writes out any
control character it is given."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from federation.cli import output
from federation.kernel.jobspec import MAX_REASON
from federation.v1 import admin_pb2, agent_pb2, agent_pb2_grpc, common_pb2, jobs_pb2
from federation.validation import clean_text, inventory_problem, update_problem
from tests.conftest import Api, make_queue

GPU = "nvidia.com/gpu"
TITLE = "\x1b]0;owned\x07\x1b[2J"  # set the terminal's title, clear the screen


def test_names_with_control_characters_are_refused_and_free_text_is_escaped_and_bounded() -> None:
    inv = agent_pb2.Inventory(topology=[agent_pb2.TierFree(tier=1, tier_name=f"leaf{TITLE}")])
    assert inventory_problem(inv) == "topology[0].tier_name must be printable: no control or format characters"
    inv = agent_pb2.Inventory(hypernodes=[agent_pb2.HyperNodeFree(name="s0", tier=1, parent=f"root{TITLE}")])
    assert inventory_problem(inv) == "hypernodes[0].parent must be printable: no control or format characters"
    update = agent_pb2.JobUpdate(job_id="j", placements=[common_pb2.PodPlacement(task="w", node=f"n{TITLE}")])
    assert update_problem(update) == "job_update.placements[0].node must be printable: no control or format characters"
    assert update_problem(agent_pb2.JobUpdate(job_id="j", hypernode="x" * 254)).startswith("job_update.hypernode is")
    assert clean_text(f"oops{TITLE}") == "oops\\x1b]0;owned\\x07\\x1b[2J"
    long = clean_text("x" * 10_000_000)
    assert len(long) == MAX_REASON and long.endswith("…")
    assert clean_text("fine: 403 Forbidden") == "fine: 403 Forbidden"
    table = output.render_table(("NAME", "REASON"), [["a", f"b{TITLE}"]])
    assert "\x1b" not in table and "\\x1b]0;owned" in table


async def test_a_rogue_agents_reason_is_stored_escaped_and_bounded_and_lists_stay_whole(api: Api) -> None:
    await make_queue(api)
    orders: asyncio.Queue[agent_pb2.ControlMessage] = asyncio.Queue()
    rogue_reason = TITLE + "y" * 5_000_000

    async def messages() -> AsyncIterator[agent_pb2.AgentMessage]:
        yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="rogue", instance="r"))
        yield agent_pb2.AgentMessage(inventory=agent_pb2.Inventory(
            allocatable=agent_pb2.ResourceAmounts(amounts={GPU: 64}), healthy=True, nodes=8, ready_nodes=8))
        while orders.empty():
            yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
            await asyncio.sleep(0.2)
        order = orders.get_nowait()
        yield agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
            job_id=order.assign.job.id, attempt=order.assign.attempt, type=agent_pb2.REJECTED, reason=rogue_reason))
        while True:  # connected until the test ends
            yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
            await asyncio.sleep(0.2)

    call = agent_pb2_grpc.AgentServiceStub(api.channel).Connect(messages())

    async def relay() -> None:
        async for order in call:
            if order.HasField("assign"):
                await orders.put(order)

    relaying = asyncio.create_task(relay())
    try:
        spec = common_pb2.JobSpec(name="j", queue="train",
                                  tasks=[common_pb2.TaskSpec(name="w", replicas=1, resources={GPU: "8"})])
        job = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec))).job
        deadline = time.monotonic() + 60
        while "rejected it" not in (reason := (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job.id))).status.reason):
            assert time.monotonic() < deadline, (reason, await api.admin.ListClusters(admin_pb2.ListClustersRequest()))
            await asyncio.sleep(0.1)
        # "cluster rogue rejected it: …", or the next cycle's "… rogue: rejected it recently: …": escaped, bounded
        assert "rejected it" in reason and "\\x1b]0;owned\\x07\\x1b[2Jyyy" in reason and reason.isprintable()
        assert len(reason) < 2 * MAX_REASON
        listed = await api.jobs.ListJobs(jobs_pb2.ListJobsRequest())  # whole, well under any message limit
        assert [j.id for j in listed.jobs] == [job.id]
        clusters = await api.admin.ListClusters(admin_pb2.ListClustersRequest())
        assert [c.name for c in clusters.clusters] == ["rogue"]
    finally:
        relaying.cancel()
        call.cancel()

