"""The agent's stream to a real server: whatever ended the last connection, it connects again."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from federation.v1 import admin_pb2, agent_pb2, agent_pb2_grpc
from member_agent import client
from tests.conftest import Api
from tests.test_agent_recovery import make_agent


async def test_the_agent_reconnects_whatever_ended_its_last_connection(api: Api,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A write that races the end of the stream raises InvalidStateError, not an RPC error; once, that
    # ended the agent's connection loop for good and its cluster looked lost while it ran its jobs.
    endings: list[BaseException] = [asyncio.InvalidStateError("RPC already finished."), RuntimeError("a bug")]
    real = client._connection

    async def ends_badly_twice(*args: object) -> None:
        if endings:
            raise endings.pop(0)
        await real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "_connection", ends_badly_twice)
    connected = asyncio.Event()
    task = asyncio.create_task(client.run(api.address, make_agent(), heartbeat=0.5, connected=connected))
    try:
        await asyncio.wait_for(connected.wait(), timeout=30)
        assert not endings
        clusters = (await api.admin.ListClusters(admin_pb2.ListClustersRequest())).clusters
        assert [(c.name, c.status) for c in clusters] == [("h100", admin_pb2.READY)]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class _Chatty(agent_pb2_grpc.AgentServiceServicer):
    """A replica that talks but no longer hears: it registers the agent, then keeps sending (answers to
    reconciliations no one asked for) and never acknowledges a heartbeat, as one whose writes to PostgreSQL hang
    while something it holds in memory still reaches the stream."""

    async def Connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        first = await anext(aiter(request_iterator))
        yield agent_pb2.ControlMessage(registered=agent_pb2.Registered(cluster=first.register.cluster))
        while True:
            await asyncio.sleep(0.1)
            yield agent_pb2.ControlMessage(reconciled=agent_pb2.Reconciled(round=10_000))


async def test_a_replica_that_keeps_sending_but_acknowledges_no_heartbeat_is_left() -> None:
    """The agent judges a stream by its heartbeats' acknowledgements, not by whether anything arrives: once, it
    looked for the stall only when nothing had come for a heartbeat, and stayed for good on such a replica."""
    server = grpc.aio.server()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(_Chatty(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    agent = make_agent()
    try:
        with pytest.raises(client.StreamStalled):
            # Well past the limit (5 s): the stall is seen within a heartbeat of it, however loaded the machine.
            await asyncio.wait_for(client._connection(f"127.0.0.1:{port}", agent, 0.2, asyncio.Event(), None, 30.0),
                                   timeout=120)
        assert agent.unheard_for() > client.unheard_limit(0.2)
    finally:
        await server.stop(None)


class _Acking(agent_pb2_grpc.AgentServiceServicer):
    """A healthy replica: registers the agent, sends it one message (which the test makes slow to handle) and
    acknowledges every heartbeat as it comes."""

    async def Connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        first = await anext(aiter(request_iterator))
        yield agent_pb2.ControlMessage(registered=agent_pb2.Registered(cluster=first.register.cluster))
        yield agent_pb2.ControlMessage(reconciled=agent_pb2.Reconciled(round=SLOW_ROUND))
        async for message in request_iterator:
            if message.WhichOneof("msg") == "heartbeat":
                yield agent_pb2.ControlMessage(heartbeat_ack=agent_pb2.HeartbeatAck())


SLOW_ROUND = 10_001


async def test_acknowledgements_that_queued_while_the_agent_was_busy_keep_the_stream(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A message the agent takes longer than the limit to handle (a reconciliation deleting many pods, say) leaves
    the server's acknowledgements queued behind it: they are read before the stream is judged, so a healthy
    replica is not left for it."""
    real = client._handle
    handled = asyncio.Event()

    async def slow(message: agent_pb2.ControlMessage, *args: Any) -> None:
        if message.WhichOneof("msg") == "reconciled" and message.reconciled.round == SLOW_ROUND:
            await asyncio.sleep(client.unheard_limit(0.2) + 2)  # the server acknowledges meanwhile, unread
            handled.set()
            return
        await real(message, *args)

    monkeypatch.setattr(client, "_handle", slow)
    server = grpc.aio.server()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(_Acking(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    agent = make_agent()
    connection = asyncio.create_task(client._connection(f"127.0.0.1:{port}", agent, 0.2, asyncio.Event(), None, 30.0))
    try:
        await asyncio.wait_for(asyncio.shield(handled.wait()), timeout=120)
        # Beyond the slow message: the queued acknowledgements are read, and new ones keep coming.
        for _ in range(20):
            await asyncio.sleep(0.2)
            assert not connection.done(), connection.exception()
        assert agent.unheard_for() < client.unheard_limit(0.2)
    finally:
        connection.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await connection
        await server.stop(None)


class _Ending(agent_pb2_grpc.AgentServiceServicer):
    """A replica going away: it registers the agent, then ends the stream (as one restarted in a rolling upgrade)."""

    def __init__(self) -> None:
        self.connections = 0

    async def Connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        self.connections += 1
        first = await anext(aiter(request_iterator))
        yield agent_pb2.ControlMessage(registered=agent_pb2.Registered(cluster=first.register.cluster))


async def test_an_agent_told_to_stop_while_a_stream_ends_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGTERM cancels the agent's connection loop; a cancel that landed while an ended stream's writer wound down
    was once swallowed with the writer's own, the loop connected again, and the agent never stopped."""
    real = client._writer
    winding_down = asyncio.Event()

    async def slow_to_stop(*args: Any) -> None:
        try:
            await real(*args)
        except asyncio.CancelledError:
            winding_down.set()
            await asyncio.sleep(5)  # a write still in flight, say: the stop arrives meanwhile
            raise

    monkeypatch.setattr(client, "_writer", slow_to_stop)
    servicer = _Ending()
    server = grpc.aio.server()
    agent_pb2_grpc.add_AgentServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    task = asyncio.create_task(client.run(f"127.0.0.1:{port}", make_agent(), heartbeat=0.2))
    try:
        await asyncio.wait_for(winding_down.wait(), timeout=120)
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=120)  # it stops once the writer has wound down
        assert done, f"the agent did not stop; it connected {servicer.connections} times"
        assert task.cancelled()
        assert servicer.connections == 1
    finally:
        task.cancel()
        await asyncio.wait({task}, timeout=30)  # bounded: where the bug is back, the task never ends
        await server.stop(None)
