"""Which member agents are connected, and the bounded queue of orders to each.

A queue that fills up means the agent is not reading: rather than let it stall the sender, the
connection is dropped, and the agent's reconnect brings a full resynchronisation.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from federation.v1 import agent_pb2

log = logging.getLogger(__name__)

QUEUE_LIMIT = 1000


@dataclass(eq=False)
class Connection:
    cluster: str
    queue: asyncio.Queue[agent_pb2.ControlMessage] = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    cursor: int = 0  # orders from job events up to this sequence number have been relayed to it


class Connections:
    def __init__(self) -> None:
        self._by_cluster: dict[str, Connection] = {}

    def open(self, cluster: str, cursor: int) -> Connection:
        """A new stream for `cluster`, relayed orders after `cursor`; an older one is closed (the agent reconnected)."""
        old = self._by_cluster.get(cluster)
        if old is not None:
            old.closed.set()
        conn = self._by_cluster[cluster] = Connection(cluster, cursor=cursor)
        return conn

    def close(self, conn: Connection) -> bool:
        """Forget `conn`; True when it was still the cluster's current connection."""
        conn.closed.set()
        if self._by_cluster.get(conn.cluster) is conn:
            del self._by_cluster[conn.cluster]
            return True
        return False

    def get(self, cluster: str) -> Connection | None:
        """The cluster's live stream to this replica, if it has one."""
        return self._by_cluster.get(cluster)

    def all(self) -> list[Connection]:
        return list(self._by_cluster.values())

    def send(self, conn: Connection, message: agent_pb2.ControlMessage) -> bool:
        if conn.closed.is_set():
            return False
        try:
            conn.queue.put_nowait(message)
        except asyncio.QueueFull:
            log.warning("agent of %s is not reading its orders; dropping its stream to resynchronise", conn.cluster)
            self.close(conn)
            return False
        return True
