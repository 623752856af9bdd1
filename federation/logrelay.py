"""Pod logs through the member agents' connections, so a user needs no member cluster's kubeconfig.

A GetJobLogs call becomes a LogsRequest on the stream of the agent of the job's cluster, under a random
stream id; the agent's LogChunks for that id come back on the same stream and are handed to the waiting call.
Only chunks from that cluster's agent are taken for it. Each call holds at most QUEUE chunks (64 KiB each):
a reader too slow for a followed log is ended with RESOURCE_EXHAUSTED rather than let memory grow. Only the
replica holding the agent's stream can relay; another says so (UNAVAILABLE), and fedctl's retry of the call
on another replica reaches it.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from federation.connections import Connections
from federation.errors import FailedPrecondition, ResourceExhausted, Unavailable
from federation.v1 import agent_pb2
from federation.validation import clean_text

QUEUE = 256  # chunks waiting for a reader
FIRST_WORD = 30.0  # seconds an agent has to start answering (an older agent never does)


@dataclass
class _Stream:
    cluster: str
    chunks: asyncio.Queue[agent_pb2.LogChunk] = field(default_factory=lambda: asyncio.Queue(QUEUE))
    overflowed: bool = False


class LogRelay:
    def __init__(self, connections: Connections) -> None:
        self.connections = connections
        self._streams: dict[str, _Stream] = {}

    async def stream(self, cluster: str, request: agent_pb2.LogsRequest) -> AsyncIterator[bytes]:
        conn = self.connections.get(cluster)
        if conn is None:
            raise Unavailable(f"the agent of cluster {cluster} is not connected to this server replica; try again "
                              "(another replica may hold its stream)")
        request.stream_id = secrets.token_hex(16)
        stream = self._streams[request.stream_id] = _Stream(cluster)
        try:
            if not self.connections.send(conn, agent_pb2.ControlMessage(logs=request)):
                raise Unavailable(f"the agent of cluster {cluster} went away")
            wait: float | None = FIRST_WORD
            while True:
                try:
                    chunk = await asyncio.wait_for(stream.chunks.get(), wait)
                except TimeoutError:
                    raise Unavailable(f"the agent of cluster {cluster} did not answer for {FIRST_WORD:g}s "
                                      "(an agent older than pod logs?)") from None
                wait = None
                if stream.overflowed:
                    raise ResourceExhausted("the log came faster than it was read; read it again (--tail)")
                if chunk.data:
                    yield chunk.data
                if chunk.end:
                    if chunk.error:
                        raise FailedPrecondition(f"cluster {cluster}: {clean_text(chunk.error)}")
                    return
        finally:
            del self._streams[request.stream_id]
            if not conn.closed.is_set():
                self.connections.send(conn, agent_pb2.ControlMessage(
                    logs_cancel=agent_pb2.LogsCancel(stream_id=request.stream_id)))

    def deliver(self, cluster: str, chunk: agent_pb2.LogChunk) -> None:
        """A chunk from `cluster`'s agent: to its call, if that call is still reading and targets that cluster."""
        stream = self._streams.get(chunk.stream_id)
        if stream is None or stream.cluster != cluster:
            return
        try:
            stream.chunks.put_nowait(chunk)
        except asyncio.QueueFull:
            stream.overflowed = True
            stream.chunks.get_nowait()  # room for the end, which the reader acts on
            stream.chunks.put_nowait(agent_pb2.LogChunk(stream_id=chunk.stream_id, end=True))

    def cluster_gone(self, cluster: str) -> None:
        """The agent's stream ended: every call reading from it ends too."""
        for stream_id, stream in list(self._streams.items()):
            if stream.cluster == cluster:
                self.deliver(cluster, agent_pb2.LogChunk(stream_id=stream_id, end=True,
                                                         error="its agent disconnected"))
