"""Which member agents are connected, and the bounded queue of orders to each.

The order relay fills a queue only up to RELAY_LIMIT and waits, its cursor kept, for the agent to read
some (`taken` tells it), however many orders a cycle wrote for one cluster: a burst is flow, not a
fault. The rest of the queue is for the stream's answers (heartbeat acks, reconciles). A queue that
fills up all the same means the agent is not reading: rather than let it stall the sender, the
connection is dropped, and the agent's reconnect brings a full resynchronisation.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from federation.v1 import agent_pb2

log = logging.getLogger(__name__)

QUEUE_LIMIT = 1000
RELAY_LIMIT = 900  # orders relayed from the event log that a queue holds at most
NODE_ORDERS_IN_FLIGHT = 8  # operators' node orders a cluster's agent has not answered yet, at most


@dataclass(eq=False)
class Connection:
    cluster: str
    queue: asyncio.Queue[agent_pb2.ControlMessage] = field(default_factory=lambda: asyncio.Queue(QUEUE_LIMIT))
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    cursor: int = 0  # orders from job events up to this sequence number have been relayed to it
    waiting_for_room: bool = False  # the relay stopped at its cursor for a full queue
    # Operators' node orders sent and not answered, by order id: the answer, or None when the stream ended first.
    node_orders: dict[str, asyncio.Future[agent_pb2.NodeOrderDone | None]] = field(default_factory=dict)

    def has_room(self) -> bool:
        """May the relay queue one more order?"""
        return self.queue.qsize() < RELAY_LIMIT


class Connections:
    def __init__(self) -> None:
        self._by_cluster: dict[str, Connection] = {}
        self.on_room: Callable[[], None] = lambda: None  # the relay's wake: a queue it stopped at has room

    def taken(self, conn: Connection) -> None:
        """The stream sent one of `conn`'s orders: wake the relay once half the queue it waits on is free."""
        if conn.waiting_for_room and conn.queue.qsize() <= RELAY_LIMIT // 2:
            conn.waiting_for_room = False
            self.on_room()

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
        for answer in conn.node_orders.values():
            if not answer.done():
                answer.set_result(None)
        if self._by_cluster.get(conn.cluster) is conn:
            del self._by_cluster[conn.cluster]
            return True
        return False

    def get(self, cluster: str) -> Connection | None:
        """The cluster's live stream to this replica, if it has one."""
        return self._by_cluster.get(cluster)

    def all(self) -> list[Connection]:
        return list(self._by_cluster.values())

    def answered(self, conn: Connection, done: agent_pb2.NodeOrderDone) -> None:
        """The agent's answer to a node order sent on this stream (an unknown id: one whose asker gave up)."""
        answer = conn.node_orders.get(done.order_id)
        if answer is not None and not answer.done():
            answer.set_result(done)

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
