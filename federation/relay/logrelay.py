"""Pod logs through the member agents' connections, so a user needs no member cluster's kubeconfig.

A GetJobLogs call becomes a LogsRequest on the stream of the agent of the job's cluster, under a random
stream id; the agent's LogChunks for that id come back on the same stream and are handed to the waiting call.
Only chunks from that cluster's agent are taken for it. What waits for a reader is bounded in bytes, as a
watch's queue is: READER_BYTES per call and TENANT_BYTES over one tenant's calls, each chunk at most
MAX_CHUNK (an agent sending more ends that call, not its stream). A reader too slow for a followed log is
ended with RESOURCE_EXHAUSTED rather than let memory grow, and a tenant holds at most
MAX_STREAMS_PER_TENANT live calls on a replica. Only the replica holding the agent's stream can relay;
another says so (UNAVAILABLE), and fedctl's retry of the call on another replica reaches it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from federation.errors import FailedPrecondition, ResourceExhausted, Unavailable
from federation.relay.connections import Connection, Connections
from federation.security.auth import TenantSlots
from federation.v1 import agent_pb2
from federation.validation import clean_text

MAX_CHUNK = 64 * 1024  # bytes of log in one LogChunk (the agent cuts its reads to this)
CHUNK_COST = 256  # bytes a chunk counts for beyond its data: an endless run of empty chunks is bounded too
READER_BYTES = 4 * 1024 * 1024  # waiting for one call's reader
TENANT_BYTES = 16 * 1024 * 1024  # waiting for the readers of one tenant's calls on this replica
MAX_STREAMS_PER_TENANT = 16  # live GetJobLogs of one tenant on one replica (admins are not capped)
FIRST_WORD = 30.0  # seconds an agent has to start answering (an older agent never does)


@dataclass
class _Stream:
    cluster: str
    tenant: str | None  # whose bytes these are; None: an admin's call
    chunks: asyncio.Queue[agent_pb2.LogChunk] = field(default_factory=asyncio.Queue)
    held: int = 0  # bytes of the chunks waiting in `chunks`
    problem: str = ""  # why the call ends early (set with the end chunk)


class LogRelay:
    def __init__(self, connections: Connections) -> None:
        self.connections = connections
        self._streams: dict[str, _Stream] = {}
        self._held: Counter[str] = Counter()  # tenant -> bytes waiting for its readers
        self._live = TenantSlots(MAX_STREAMS_PER_TENANT, f"at most {MAX_STREAMS_PER_TENANT} logs read at once per "
                                 "tenant on this replica; end one (each fedctl logs -f holds one)")

    async def stream(self, cluster: str, request: agent_pb2.LogsRequest,
                     tenant: str | None = None) -> AsyncIterator[bytes]:
        """The log `request` asks for, from `cluster`'s agent; `tenant` is the caller's (None for an admin)."""
        conn = self.connections.get(cluster)
        if conn is None:
            raise Unavailable(f"the agent of cluster {cluster} is not connected to this server replica; try again "
                              "(another replica may hold its stream)")
        with self._live.slot(tenant):
            async for data in self._relay(conn, cluster, request, tenant):
                yield data

    async def _relay(self, conn: Connection, cluster: str, request: agent_pb2.LogsRequest,
                     tenant: str | None) -> AsyncIterator[bytes]:
        request.stream_id = secrets.token_hex(16)
        stream = self._streams[request.stream_id] = _Stream(cluster, tenant)
        try:
            if not self.connections.send(conn, agent_pb2.ControlMessage(logs=request)):
                raise Unavailable(f"the agent of cluster {cluster} went away")
            wait: float | None = FIRST_WORD
            while True:
                try:
                    async with asyncio.timeout(wait):
                        chunk = await stream.chunks.get()
                except TimeoutError:
                    raise Unavailable(f"the agent of cluster {cluster} did not answer for {FIRST_WORD:g}s "
                                      "(an agent older than pod logs?)") from None
                wait = None
                self._release(stream, chunk)
                if stream.problem:
                    raise ResourceExhausted(stream.problem)
                if chunk.data:
                    yield chunk.data
                if chunk.end:
                    if chunk.error:
                        raise FailedPrecondition(f"cluster {cluster}: {clean_text(chunk.error)}")
                    return
        finally:
            del self._streams[request.stream_id]
            while not stream.chunks.empty():
                self._release(stream, stream.chunks.get_nowait())
            if not conn.closed.is_set():
                self.connections.send(conn, agent_pb2.ControlMessage(
                    logs_cancel=agent_pb2.LogsCancel(stream_id=request.stream_id)))

    def deliver(self, cluster: str, chunk: agent_pb2.LogChunk) -> None:
        """A chunk from `cluster`'s agent: to its call, if that call is still reading and targets that cluster,
        and there is room for it; otherwise the call ends, saying why."""
        stream = self._streams.get(chunk.stream_id)
        if stream is None or stream.cluster != cluster or stream.problem:
            return
        cost = len(chunk.data) + CHUNK_COST
        if len(chunk.data) > MAX_CHUNK:
            stream.problem = (f"cluster {cluster}'s agent sent a log chunk of {len(chunk.data)} bytes, more than "
                              f"{MAX_CHUNK // 1024} KiB; the log was cut there")
        elif stream.held + cost > READER_BYTES:
            stream.problem = "the log came faster than it was read; read it again (--tail)"
        elif stream.tenant is not None and self._held[stream.tenant] + cost > TENANT_BYTES:
            stream.problem = (f"the logs read by tenant {stream.tenant} came faster than they were read "
                              f"({TENANT_BYTES // 2**20} MiB waiting); read them again (--tail)")
        if stream.problem:  # the reader acts on the end chunk; the chunks before it are dropped
            while not stream.chunks.empty():
                self._release(stream, stream.chunks.get_nowait())
            conn = self.connections.get(cluster)  # and the agent stops reading the log now, not when the
            if conn is not None:  # reader comes back for the end (a reader stuck in a send may never)
                self.connections.send(conn, agent_pb2.ControlMessage(
                    logs_cancel=agent_pb2.LogsCancel(stream_id=chunk.stream_id)))
            chunk = agent_pb2.LogChunk(stream_id=chunk.stream_id, end=True)
            cost = CHUNK_COST
        stream.held += cost
        if stream.tenant is not None:
            self._held[stream.tenant] += cost
        stream.chunks.put_nowait(chunk)

    def _release(self, stream: _Stream, chunk: agent_pb2.LogChunk) -> None:
        cost = len(chunk.data) + CHUNK_COST
        stream.held -= cost
        if stream.tenant is not None:
            self._held[stream.tenant] -= cost
            if not self._held[stream.tenant]:
                del self._held[stream.tenant]

    def held(self, tenant: str) -> int:
        """Bytes waiting for the readers of `tenant`'s calls on this replica."""
        return self._held[tenant]

    def cluster_gone(self, cluster: str) -> None:
        """The agent's stream ended: every call reading from it ends too."""
        for stream_id, stream in list(self._streams.items()):
            if stream.cluster == cluster:
                self.deliver(cluster, agent_pb2.LogChunk(stream_id=stream_id, end=True,
                                                         error="its agent disconnected"))
