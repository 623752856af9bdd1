"""Orders to member agents, relayed from the job event log by whichever replica holds each agent's stream.

The scheduling leader and the API write decisions to Postgres; they never talk to agents
directly, because the agent of a cluster may be connected to another replica. Each decision
already appends an event in the same transaction (Dispatched, Preempted, Cancelled, and Requeued
or Lost when work is taken back from a silent cluster, each naming the cluster and attempt), and
event numbers commit in order, so the event log is the outbox: every replica reads it past each
local stream's cursor and turns the events for that stream's cluster into Assign, Preempt and
Cancel orders. A stream starts its cursor where the log stood
when it opened; what the agent missed before that is covered by the reconnect's resynchronisation.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from federation.api.convert import job_to_proto
from federation.control.loop import WakeLoop
from federation.kernel.admission import admitted
from federation.relay.connections import Connection, Connections
from federation.v1 import agent_pb2

Loader = Callable[[int, int, Sequence[str]], Awaitable[list[Any]]]  # (after, upto, clusters) -> order events
Current = Callable[[], Awaitable[int]]
Jobs = Callable[[Sequence[str]], Awaitable[dict[str, Any]]]  # ids -> job rows


def order_for(event: Any, job: Any | None) -> agent_pb2.ControlMessage | None:
    """The order an event means for its cluster's agent now, if it still means one.

    An assignment the job has since moved past (bound, rejected, preempted, cancelled) is not
    sent: the agent already knows it, or must not act on it. Nor is one whose admission checks have not all
    passed: its Admitted event, once they have, is the order.
    """
    if event["type"] in ("Dispatched", "Admitted"):
        if (job is None or job["phase"] != "DISPATCHED" or job["attempt"] != event["attempt"]
                or job["cluster"] != event["cluster"] or not admitted(job)):
            return None
        return agent_pb2.ControlMessage(assign=agent_pb2.Assign(job=job_to_proto(job), attempt=job["attempt"]))
    if event["type"] == "Preempted":
        return agent_pb2.ControlMessage(preempt=agent_pb2.Preempt(
            job_id=event["job_id"], attempt=event["attempt"], reason=event["message"]))
    # Cancelled, Requeued, Lost: whatever the agent runs of that attempt must stop (a silent agent
    # reads it when it wakes; one that reconnects instead is told on its resync).
    return agent_pb2.ControlMessage(cancel=agent_pb2.Cancel(
        job_id=event["job_id"], attempt=event["attempt"], reason=event["message"]))


class OrderRelay:
    def __init__(self, connections: Connections, load: Loader, current: Current, jobs: Jobs,
                 period: float = 0.5) -> None:
        self.connections = connections
        self._load, self._current, self._jobs = load, current, jobs
        self._loop = WakeLoop("order-relay", period, self._relay)
        self.wake, self.start, self.stop = self._loop.wake, self._loop.start, self._loop.stop
        connections.on_room = self.wake

    async def _relay(self) -> None:
        conns = self.connections.all()
        if not conns:
            return
        upto = await self._current()
        lowest = min(c.cursor for c in conns)
        if lowest >= upto:
            return
        events = await self._load(lowest, upto, sorted({c.cluster for c in conns}))
        dispatched = [e["job_id"] for e in events if e["type"] in ("Dispatched", "Admitted")]
        jobs = await self._jobs(dispatched) if dispatched else {}
        by_cluster = {c.cluster: c for c in conns}
        full: set[Connection] = set()
        for event in events:
            conn = by_cluster.get(event["cluster"])
            if conn is None or conn in full or event["seq"] <= conn.cursor:
                continue
            order = order_for(event, jobs.get(event["job_id"]))
            if order is None:
                continue
            if not conn.has_room():  # this order and the rest once the agent has read some (flow, not a fault)
                full.add(conn)
                conn.cursor, conn.waiting_for_room = event["seq"] - 1, True
            elif not self.connections.send(conn, order):
                conn.cursor = upto  # closed: its reconnect resynchronises it
        for conn in conns:
            if conn not in full:
                conn.cursor = max(conn.cursor, upto)
