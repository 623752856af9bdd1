"""Issue 41 (4): what waits for a log's reader is bounded in bytes, per call and per tenant; a chunk is at most
64 KiB; a tenant reads a bounded number of logs at once; the dashboard's page keeps only what it shows."""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator

import pytest

from federation.errors import ResourceExhausted
from federation.relay.connections import Connections
from federation.relay.logrelay import (
    CHUNK_COST,
    MAX_CHUNK,
    MAX_STREAMS_PER_TENANT,
    READER_BYTES,
    TENANT_BYTES,
    LogRelay,
)
from federation.ui.server import last_lines
from federation.v1 import agent_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue

GPU = "nvidia.com/gpu"


def relay_with_agent() -> tuple[LogRelay, Connections]:
    connections = Connections()
    connections.open("c", cursor=0)
    return LogRelay(connections), connections


async def read_all(call: AsyncIterator[bytes]) -> bytes:
    return b"".join([data async for data in call])


async def test_a_reader_that_never_reads_holds_a_bounded_number_of_bytes() -> None:
    relay, connections = relay_with_agent()
    call = relay.stream("c", agent_pb2.LogsRequest(job_id="j", attempt=1), tenant="t")
    reading = asyncio.ensure_future(read_all(call))
    conn = connections.get("c")
    assert conn is not None
    stream_id = (await asyncio.wait_for(conn.queue.get(), 10)).logs.stream_id
    chunk = agent_pb2.LogChunk(stream_id=stream_id, data=b"x" * MAX_CHUNK)
    for _ in range(4 * READER_BYTES // MAX_CHUNK):  # 16 MiB for a reader that takes nothing yet
        relay.deliver("c", chunk)
        assert relay.held("t") <= READER_BYTES
    with pytest.raises(ResourceExhausted, match="came faster than it was read"):
        await asyncio.wait_for(reading, 10)
    assert relay.held("t") == 0  # all given back once the call ended


async def test_a_chunk_over_64_kib_ends_the_call_saying_so() -> None:
    relay, connections = relay_with_agent()
    reading = asyncio.ensure_future(read_all(relay.stream("c", agent_pb2.LogsRequest(job_id="j", attempt=1))))
    conn = connections.get("c")
    assert conn is not None
    stream_id = (await asyncio.wait_for(conn.queue.get(), 10)).logs.stream_id
    relay.deliver("c", agent_pb2.LogChunk(stream_id=stream_id, data=b"ok\n"))
    relay.deliver("c", agent_pb2.LogChunk(stream_id=stream_id, data=b"x" * (MAX_CHUNK + 1)))
    with pytest.raises(ResourceExhausted, match=f"log chunk of {MAX_CHUNK + 1} bytes, more than 64 KiB"):
        await asyncio.wait_for(reading, 10)


async def test_a_tenants_logs_are_bounded_in_number_and_in_bytes_over_all_its_calls() -> None:
    relay, connections = relay_with_agent()
    conn = connections.get("c")
    assert conn is not None
    calls = [relay.stream("c", agent_pb2.LogsRequest(job_id="j", attempt=1), tenant="t")
             for _ in range(MAX_STREAMS_PER_TENANT + 1)]
    readers = [asyncio.ensure_future(read_all(call)) for call in calls]
    ids = [(await asyncio.wait_for(conn.queue.get(), 10)).logs.stream_id for _ in range(MAX_STREAMS_PER_TENANT)]
    with pytest.raises(ResourceExhausted, match=f"at most {MAX_STREAMS_PER_TENANT} logs read at once per tenant"):
        await asyncio.wait_for(readers[-1], 10)
    admin = asyncio.ensure_future(read_all(relay.stream("c", agent_pb2.LogsRequest(job_id="j", attempt=1))))
    admin_id = (await asyncio.wait_for(conn.queue.get(), 10)).logs.stream_id  # an admin's call: not the tenant's

    per_call = READER_BYTES - MAX_CHUNK - CHUNK_COST  # each call stays within its own bound
    chunk = b"x" * (MAX_CHUNK - CHUNK_COST)
    for stream_id in ids:
        for _ in range(per_call // MAX_CHUNK):
            relay.deliver("c", agent_pb2.LogChunk(stream_id=stream_id, data=chunk))
            assert relay.held("t") <= TENANT_BYTES
    for stream_id in [*ids, admin_id]:
        relay.deliver("c", agent_pb2.LogChunk(stream_id=stream_id, end=True))
    results = await asyncio.gather(*readers[:-1], admin, return_exceptions=True)
    ended = [r for r in results if isinstance(r, ResourceExhausted)]
    assert ended and all("tenant t came faster" in str(r) for r in ended)
    assert len(ended) < len(ids) and results[-1] == b""  # the calls that fitted read their whole log
    assert relay.held("t") == 0


async def test_the_dashboard_keeps_the_last_lines_within_its_bound_and_stops_reading() -> None:
    class Stream:
        def __init__(self, chunks: list[bytes]) -> None:
            self.chunks, self.read, self.cancelled = chunks, 0, False

        def __aiter__(self) -> Stream:
            return self

        async def __anext__(self) -> agent_pb2.LogChunk:
            if self.read == len(self.chunks):
                raise StopAsyncIteration
            self.read += 1
            return agent_pb2.LogChunk(data=self.chunks[self.read - 1])

        def cancel(self) -> None:
            self.cancelled = True

    short = Stream([b"a\nb\n", b"c\nd\n"])
    assert await last_lines(short, 3, 1024, 10_000) == (b"b\nc\nd\n", False)
    endless = Stream([b"".join(b"line %d\n" % (i * 100 + j) for j in range(100)) for i in range(10_000)])
    text, cut = await last_lines(endless, 5, 4096, 64 * 1024)
    assert cut and endless.cancelled and endless.read < 100  # stopped at the read bound, not at the log's end
    assert text.splitlines() == [b"line %d" % n for n in range(endless.read * 100 - 5, endless.read * 100)]
    one_long_line = Stream([b"x" * 10_000])
    text, cut = await last_lines(one_long_line, 5, 4096, 64 * 1024)
    assert cut and len(text) <= 4096


async def test_a_log_reader_that_goes_away_leaves_no_traceback(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    """A `fedctl logs -f` ended with Ctrl-C: the agent is told to stop, and the server logs no error."""
    await make_queue(api)
    out: asyncio.Queue[agent_pb2.AgentMessage] = asyncio.Queue()
    orders: asyncio.Queue[agent_pb2.ControlMessage] = asyncio.Queue()

    async def messages() -> AsyncIterator[agent_pb2.AgentMessage]:
        yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="c", instance="i"))
        yield agent_pb2.AgentMessage(inventory=agent_pb2.Inventory(
            allocatable=agent_pb2.ResourceAmounts(amounts={GPU: 16}), healthy=True, nodes=2, ready_nodes=2))
        while True:
            try:
                yield await asyncio.wait_for(out.get(), 0.2)
            except TimeoutError:
                yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())

    async def relay() -> None:
        async for order in agent:
            await orders.put(order)

    async def next_order(kind: str) -> agent_pb2.ControlMessage:
        while not (order := await asyncio.wait_for(orders.get(), 60)).HasField(kind):
            pass
        return order

    agent = api.agents.Connect(messages())
    relaying = asyncio.create_task(relay())
    try:
        spec = common_pb2.JobSpec(name="j", queue="train",
                                  tasks=[common_pb2.TaskSpec(name="w", replicas=1, resources={GPU: "1"})])
        job_id = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec))).job.id
        attempt = (await next_order("assign")).assign.attempt
        out.put_nowait(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
            job_id=job_id, attempt=attempt, type=agent_pb2.BOUND, hypernode="s0", tier=1,
            placements=[common_pb2.PodPlacement(task="w", index=0, node="n0")])))
        while (await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))).status.phase != common_pb2.RUNNING:
            await asyncio.sleep(0.1)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            call = api.jobs.GetJobLogs(jobs_pb2.GetJobLogsRequest(id=job_id, follow=True))
            stream_id = (await next_order("logs")).logs.stream_id
            out.put_nowait(agent_pb2.AgentMessage(log_chunk=agent_pb2.LogChunk(stream_id=stream_id, data=b"step 1\n")))
            assert (await call.read()).data == b"step 1\n"
            call.cancel()  # the reader goes
            assert (await next_order("logs_cancel")).logs_cancel.stream_id == stream_id
            out.put_nowait(agent_pb2.AgentMessage(log_chunk=agent_pb2.LogChunk(stream_id=stream_id, end=True)))
            early = api.jobs.GetJobLogs(jobs_pb2.GetJobLogsRequest(id=job_id, follow=True))
            stream_id = (await next_order("logs")).logs.stream_id
            early.cancel()  # before the agent said anything
            assert (await next_order("logs_cancel")).logs_cancel.stream_id == stream_id
            await asyncio.sleep(0.5)
            gc.collect()  # an unfinished generator left behind would say so when collected
            await asyncio.sleep(0.1)
            # A reader that reads nothing: once more waits for it than it may have, the agent is told to stop;
            # then it goes, with the server stuck sending it an answer (gRPC's core raced that and logged it).
            unread = api.jobs.GetJobLogs(jobs_pb2.GetJobLogsRequest(id=job_id, follow=True))
            stream_id = (await next_order("logs")).logs.stream_id
            for _ in range(2 * READER_BYTES // MAX_CHUNK):
                out.put_nowait(agent_pb2.AgentMessage(log_chunk=agent_pb2.LogChunk(stream_id=stream_id,
                                                                                  data=b"x" * MAX_CHUNK)))
            assert (await next_order("logs_cancel")).logs_cancel.stream_id == stream_id
            unread.cancel()
            await asyncio.sleep(0.5)
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info] == []
    finally:
        relaying.cancel()
        agent.cancel()
