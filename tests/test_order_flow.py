"""Orders that flow: a burst of assignments larger than an agent's order queue reaches it on the same stream,
paced by the stream rather than dropped, and a reconnect resends however many assignments its agent did not
report; an agent and a server that read batches send each other bursts as few stream messages. The relay's
pacing alone, and the server on real PostgreSQL with an agent stream over gRPC."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from federation.control.scheduler import HEARTBEAT_TIMEOUT
from federation.relay.connections import QUEUE_LIMIT, RELAY_LIMIT, Connections
from federation.relay.orders import OrderRelay
from federation.store.admin import AdminStore
from federation.v1 import agent_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue
from tests.test_api_jobs import spec

GPU = "nvidia.com/gpu"
BURST = QUEUE_LIMIT * 2 - 100  # more than a queue holds; less than a token's submit burst


async def test_the_relay_waits_for_room_and_sends_every_order_once_in_order() -> None:
    connections = Connections()
    events = [{"seq": seq, "type": "Cancelled", "job_id": f"j{seq}", "attempt": 1, "cluster": "east",
               "message": "cancelled"} for seq in range(1, 2 * QUEUE_LIMIT + 501)]

    async def load(after: int, upto: int, clusters: object) -> list[dict[str, object]]:
        return [e for e in events if after < e["seq"] <= upto]

    async def current() -> int:
        return len(events)

    async def rows(ids: object) -> dict[str, object]:
        return {}

    relay = OrderRelay(connections, load, current, rows, period=30)  # only a wake moves it before 30 s
    conn = connections.open("east", cursor=0)
    relay.start()
    relay.wake()
    received: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while len(received) < len(events):
            assert time.monotonic() < deadline, f"{len(received)} of {len(events)} orders"
            order = await asyncio.wait_for(conn.queue.get(), 30)
            assert conn.queue.qsize() <= RELAY_LIMIT  # never filled past the relay's share
            received.append(order.cancel.job_id)
            connections.taken(conn)
    finally:
        await relay.stop()
    assert received == [e["job_id"] for e in events]  # each once, in the log's order
    assert not conn.closed.is_set() and connections.get("east") is conn


def _inventory(gpus: int) -> agent_pb2.AgentMessage:
    node = agent_pb2.ResourceAmounts(amounts={GPU: 8, "cpu": 64_000})
    return agent_pb2.AgentMessage(inventory=agent_pb2.Inventory(
        allocatable=agent_pb2.ResourceAmounts(amounts={GPU: gpus, "cpu": gpus * 8000}),
        used=agent_pb2.ResourceAmounts(amounts={}), healthy=True, nodes=gpus // 8, ready_nodes=gpus // 8,
        topology=[agent_pb2.TierFree(tier=0, tier_name="node", max_free=node, max_capacity=node)]))


async def _assigned(api: Api, instance: str, expected: int, batches: bool = False) -> list[str]:
    """Connect as the agent of `east` reporting nothing it runs, and read until `expected` assignments came: the
    jobs assigned, in the order they came. `batches`: the agent says it reads batches, and every stream message
    after Registered carries several orders (a burst is sent as few messages as fit)."""
    stop = asyncio.Event()

    async def messages() -> AsyncIterator[agent_pb2.AgentMessage]:
        yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="east", instance=instance, batches=batches))
        while not stop.is_set():
            yield _inventory(4 * BURST)
            yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
            await asyncio.sleep(0.5)

    call = api.agents.Connect(messages())
    assigned: list[str] = []
    conn = None
    stream_messages = 0
    try:
        async with asyncio.timeout(240):
            async for message in call:
                if message.WhichOneof("msg") == "registered":
                    assert message.registered.batches  # this server reads an agent's batches
                    continue
                stream_messages += 1
                batch = message.batch.messages if message.WhichOneof("msg") == "batch" else [message]
                assert batches or len(batch) == 1  # an agent that did not say it reads batches gets none
                assert all(one.WhichOneof("msg") != "batch" for one in batch)
                assigned += [one.assign.job.id for one in batch if one.WhichOneof("msg") == "assign"]
                conn = conn or api.server.connections.get("east")
                if len(assigned) >= expected:
                    break
        assert conn is not None and api.server.connections.get("east") is conn  # one stream all along
        if batches:
            assert stream_messages < expected // 2, f"{expected} orders in {stream_messages} stream messages"
        return assigned
    finally:
        stop.set()
        call.cancel()


async def test_a_burst_larger_than_the_order_queue_reaches_the_agent_and_a_reconnect_resends_it(api: Api) -> None:
    await make_queue(api)
    # Every job waits (no cluster yet), so the first cycle with the cluster dispatches them all at once.
    ids: set[str] = set()
    for start in range(0, BURST, 500):
        submitted = await api.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(
            specs=[spec(name=f"one-{i}", gpus="1", replicas=1) for i in range(start, min(start + 500, BURST))]))
        ids |= {r.job_id for r in submitted.results}
    assert len(ids) == BURST
    first = await _assigned(api, "first", BURST)
    assert sorted(first) == sorted(ids)  # each once
    await _closed(api)
    # The agent comes back having forgotten them all: every one is assigned again on the new stream.
    again = await _assigned(api, "second", BURST)
    assert sorted(again) == sorted(ids)
    await _closed(api)
    # And an agent that reads batches gets them in batches, each once, in the order an agent reading them one by
    # one got them.
    batched = await _assigned(api, "third", BURST, batches=True)
    assert batched == again


async def _closed(api: Api) -> None:
    """A new agent process is refused while the old one holds the cluster: wait until the server dropped its stream
    and recorded the cluster no longer Ready, which is what a registration reads (one after the other, the record
    last: a reconnect between the two was refused)."""
    admin = AdminStore(api.server.engine)
    async with asyncio.timeout(60):
        while api.server.connections.get("east") is not None or any(
                row["name"] == "east" and row["live"] for row in (await admin.clusters(HEARTBEAT_TIMEOUT))[0]):
            await asyncio.sleep(0.05)


async def test_reports_sent_in_a_batch_are_applied_in_order_and_a_batch_in_a_batch_ends_the_stream(api: Api) -> None:
    await make_queue(api)
    ids = [(await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec(name=f"b{i}", gpus="1", replicas=1)))).job.id
           for i in range(3)]
    sent: asyncio.Queue[agent_pb2.AgentMessage | None] = asyncio.Queue()

    async def messages() -> AsyncIterator[agent_pb2.AgentMessage]:
        yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="east", instance="one", batches=True))
        yield _inventory(64)
        yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
        while (message := await sent.get()) is not None:
            yield message

    def bound(order: agent_pb2.Assign) -> agent_pb2.AgentMessage:
        return agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
            job_id=order.job.id, attempt=order.attempt, type=agent_pb2.BOUND, hypernode="n0", tier=0,
            placements=[common_pb2.PodPlacement(task="worker", index=0, node="n0")]))

    async def phase(job_id: str) -> int:
        return (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))).status.phase

    call = api.agents.Connect(messages())
    orders: dict[str, agent_pb2.Assign] = {}
    try:
        async with asyncio.timeout(120):
            async for message in call:
                batch = message.batch.messages if message.WhichOneof("msg") == "batch" else [message]
                orders |= {one.assign.job.id: one.assign for one in batch if one.WhichOneof("msg") == "assign"}
                if len(orders) == len(ids):
                    break
            # Two jobs bound, in one batch with a heartbeat between them: both applied.
            sent.put_nowait(agent_pb2.AgentMessage(batch=agent_pb2.AgentMessages(messages=[
                bound(orders[ids[0]]), agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat()),
                bound(orders[ids[1]])])))
            while [await phase(j) for j in ids[:2]] != [common_pb2.RUNNING] * 2:
                await asyncio.sleep(0.1)
            # A batch holding a batch: what came before it in the batch stands, the stream ends naming the field.
            sent.put_nowait(agent_pb2.AgentMessage(batch=agent_pb2.AgentMessages(messages=[
                bound(orders[ids[2]]), agent_pb2.AgentMessage(batch=agent_pb2.AgentMessages())])))
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in call:
                    pass
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "batch.messages[1]" in refused.value.details()
        assert await phase(ids[2]) == common_pb2.RUNNING
    finally:
        sent.put_nowait(None)
        call.cancel()
