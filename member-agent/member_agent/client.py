"""The agent's side of `AgentService.Connect`: one stream, kept open, resynchronised on reconnect."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import grpc

from federation.kernel.batches import batched, drained
from federation.v1 import agent_pb2, agent_pb2_grpc
from member_agent.agent import Agent

log = logging.getLogger(__name__)


class ResyncNeeded(Exception):
    """The outbox overflowed while connected; reconnect and send full state."""


POD_STATUS_EVERY = 2.0  # seconds between looks at what changed of the gangs' pods
MIN_UNHEARD = 5.0  # seconds a heartbeat may go unacknowledged before the stream counts as stalled (at least)


class StreamStalled(Exception):
    """The server stopped acknowledging heartbeats on an open stream: a frozen replica, or one cut off from
    PostgreSQL (it acknowledges a heartbeat once recorded). TCP may stay open for good: move on."""


def unheard_limit(heartbeat: float) -> float:
    return max(MIN_UNHEARD, 4 * heartbeat)

async def _writer(call: grpc.aio.StreamStreamCall, agent: Agent, heartbeat: float, reconcile_every: float) -> None:
    """Everything the agent queues, a heartbeat whenever one is due (however busy the stream: the server
    judges the cluster alive by them, and the agent judges itself heard by their acknowledgements), and a
    reconciliation request every `reconcile_every` seconds; the pods' statuses, when changed, every
    POD_STATUS_EVERY seconds."""
    loop = asyncio.get_running_loop()
    next_beat = loop.time() + heartbeat
    next_reconcile = loop.time() + reconcile_every
    next_pods = loop.time()
    while True:
        if agent.overflowed:
            raise ResyncNeeded
        now = loop.time()
        if now >= next_pods:  # the pods users see: whatever changed since last said, queued
            agent.report_pod_statuses()
            next_pods = now + POD_STATUS_EVERY
            continue
        if now >= next_beat:
            message = agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
            message.heartbeat.time.GetCurrentTime()
            next_beat = now + heartbeat
            agent.heartbeat_sent()
        elif now >= next_reconcile:
            message = agent.reconcile_request()
            next_reconcile = now + reconcile_every
        else:
            try:  # not wait_for: on 3.11 it swallows a cancel that lands as the get completes, and the writer
                # then outlived the stream it was told to stop writing to
                async with asyncio.timeout(min(next_beat, next_reconcile, next_pods) - now):
                    message = await agent.outbox.get()
            except TimeoutError:
                continue
            if agent.server_batches:  # with whatever is queued behind it, as few stream messages as fit
                for one in batched(drained(message, agent.outbox), _batch):
                    await call.write(one)
                continue
        await call.write(message)


def _batch(messages: list[agent_pb2.AgentMessage]) -> agent_pb2.AgentMessage:
    return agent_pb2.AgentMessage(batch=agent_pb2.AgentMessages(messages=messages))


def _channel(server: str, credentials: grpc.ChannelCredentials | None) -> grpc.aio.Channel:
    if credentials is None:
        return grpc.aio.insecure_channel(server)
    return grpc.aio.secure_channel(server, credentials)


async def _connection(server: str, agent: Agent, heartbeat: float, connected: asyncio.Event,
                      credentials: grpc.ChannelCredentials | None, reconcile_every: float) -> None:
    async with _channel(server, credentials) as channel:
        call = agent_pb2_grpc.AgentServiceStub(channel).Connect()
        agent.drain_outbox()
        await call.write(agent.register())
        await call.write(agent.inventory())
        writer = asyncio.create_task(_writer(call, agent, heartbeat, reconcile_every))
        limit = unheard_limit(heartbeat)
        loop = asyncio.get_running_loop()
        read: asyncio.Future[Any] | None = None
        # Seconds spent waiting on the server since its acknowledgements fell more than `limit` behind. Judged by
        # the acknowledgements, whether or not anything else arrives (a replica whose writes hang may still send
        # what it holds in memory), but only by time spent waiting: messages that queued up while a slow one was
        # handled (a reconciliation deleting pods) are read first, as the acknowledgements may be among them.
        waited = 0.0
        try:
            while True:
                read = read or asyncio.ensure_future(call.read())
                began = loop.time()
                # Woken at least every heartbeat: a writer stuck on a stream the server stopped reading
                # must not keep us from seeing that nothing is acknowledged.
                done, _ = await asyncio.wait({read, writer}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED)
                if writer in done:
                    writer.result()  # raises what ended it
                # A wait that timed out counts whole (the loop may wake a hair before its timer).
                took = loop.time() - began if read in done or writer in done else heartbeat
                waited = waited + took if agent.unheard_for() > limit else 0.0
                if read in done:
                    message, read = read.result(), None
                    if message is grpc.aio.EOF:
                        return
                    for one in message.batch.messages if message.WhichOneof("msg") == "batch" else (message,):
                        await _handle(one, agent, server, connected)
                if waited >= heartbeat and agent.unheard_for() > limit:
                    raise StreamStalled
        finally:
            if read is not None:  # however the connection ends, a read under way is not left behind
                read.cancel()
            writer.cancel()
            try:
                with contextlib.suppress(Exception):  # what ended the writer was raised above, or matters no more
                    await writer
            except asyncio.CancelledError:
                if _told_to_stop():  # the agent stopping as the stream wound down: not the writer's to swallow
                    raise
            finally:
                call.cancel()


def _told_to_stop() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _handle(message: agent_pb2.ControlMessage, agent: Agent, server: str, connected: asyncio.Event) -> None:
    """One message from the server (alone, or one of a batch's in turn)."""
    kind = message.WhichOneof("msg")
    if kind == "heartbeat_ack":
        agent.heartbeat_acknowledged(message.heartbeat_ack.holds)
    elif kind == "registered":  # recorded: once what no longer runs here is gone, we are Ready
        agent.server_fence = message.registered.fence_seconds or None
        agent.server_batches = message.registered.batches
        deleted = await agent.reconcile(message.registered.reconciled)
        connected.set()
        log.info("connected to %s as cluster %s%s", server, agent.cluster,
                 f"; deleted {deleted} pod(s) the federation no longer runs here" if deleted else "")
    elif kind == "reconciled":
        agent.spawn_reconcile(message.reconciled)
    elif kind == "batch":  # never sent inside a batch
        log.warning("the server sent a batch inside a batch; its %d message(s) are ignored",
                    len(message.batch.messages))
    else:
        agent.dispatch(message)


def rotated(target: str) -> str:
    """An address list (`ipv4:a,b,c`) with its first address last: a replica that stalls keeps accepting TCP,
    so pick_first would take it again; the next try starts with the next replica (a stall of that one moves
    on again). Any other target is kept (a Service's address: a new connection may reach another pod)."""
    scheme, colon, addresses = target.partition(":")
    listed = addresses.split(",")
    if scheme not in ("ipv4", "ipv6") or not colon or len(listed) < 2:
        return target
    return f"{scheme}:{','.join(listed[1:] + listed[:1])}"


async def _fence_watch(agent: Agent) -> None:
    """Stop the gangs once cut off for the fence time, whether or not a stream looks open."""
    while True:
        await asyncio.sleep(min(1.0, agent.fence_seconds() / 10))
        try:
            await agent.check_fence()
        except Exception:
            log.exception("stopping the gangs after losing the federation failed; trying again")
            agent.fenced = False


async def run(server: str, agent: Agent, heartbeat: float = 2.0, connected: asyncio.Event | None = None,
              credentials: grpc.ChannelCredentials | None = None, reconcile_every: float = 30.0) -> None:
    """Stay connected forever, backing off (0.5 s doubling to 10 s) while the server is away.

    Whatever ends a connection, the next is tried: a cluster whose agent stopped trying would look
    lost to the federation while it still runs its jobs. The backoff starts again from 0.5 s after
    each connection that got as far as registering, so a server restarted many times is found
    again as fast as the first time.

    With `credentials` (mTLS: the CA, and this cluster's certificate and key) to the server's agent listener."""
    connected = connected or asyncio.Event()
    fence = asyncio.create_task(_fence_watch(agent))
    try:
        await _stay_connected(server, agent, heartbeat, connected, credentials, reconcile_every)
    finally:
        fence.cancel()


async def _stay_connected(server: str, agent: Agent, heartbeat: float, connected: asyncio.Event,
                          credentials: grpc.ChannelCredentials | None, reconcile_every: float) -> None:
    backoff = 0.5
    target = server
    while True:
        try:
            await _connection(target, agent, heartbeat, connected, credentials, reconcile_every)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.FAILED_PRECONDITION:  # refused, as this release (too old or too new)
                log.error("the federation server refused this agent: %s; trying again in %.1fs", err.details(),
                          backoff)
            else:
                log.warning("stream to %s ended (%s); reconnecting in %.1fs", server, err.details(), backoff)
        except ResyncNeeded:
            log.warning("outbox overflowed; reconnecting to %s in %.1fs to resend the whole state", server, backoff)
        except StreamStalled:
            log.warning("%s has not acknowledged a heartbeat for %.1fs; reconnecting (to another replica, if one "
                        "answers) in %.1fs", target, agent.unheard_for(), backoff)
            target = rotated(target)
        except asyncio.InvalidStateError:  # a write raced the end of the stream
            log.warning("stream to %s ended; reconnecting in %.1fs", server, backoff)
        except Exception:
            log.exception("stream to %s failed; reconnecting in %.1fs", server, backoff)
        if _told_to_stop():  # whatever the connection's end hid, a stop asked for is never followed by a reconnect
            raise asyncio.CancelledError
        if connected.is_set():
            connected.clear()
            backoff = 0.5
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 10.0)
