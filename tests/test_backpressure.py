"""Bounded queues: an agent that stops reading loses its stream, never blocks the sender or the others."""

import asyncio

from federation.relay.connections import QUEUE_LIMIT, Connections
from federation.v1 import agent_pb2
from tests.test_agent_recovery import make_agent


async def test_an_agent_not_reading_its_orders_is_dropped_alone() -> None:
    connections = Connections()
    stuck, healthy = connections.open("stuck", cursor=0), connections.open("healthy", cursor=0)
    order = agent_pb2.ControlMessage(cancel=agent_pb2.Cancel(job_id="j-1", attempt=1))
    assert all(connections.send(stuck, order) for _ in range(QUEUE_LIMIT))  # full, never waited on
    assert not connections.send(stuck, order)  # one more: dropped, to resynchronise on reconnect
    assert stuck.closed.is_set() and connections.all() == [healthy]
    assert connections.send(healthy, order) and healthy.queue.qsize() == 1


async def test_an_agent_whose_server_does_not_read_resyncs_instead_of_blocking() -> None:
    agent = make_agent()
    agent.outbox = asyncio.Queue(3)
    for _ in range(5):
        agent._send(agent.inventory())  # never blocks, whatever the queue holds
    assert agent.overflowed and agent.outbox.qsize() == 3
    agent.drain_outbox()  # the next connection starts from a full Register instead
    assert not agent.overflowed and agent.outbox.empty()
