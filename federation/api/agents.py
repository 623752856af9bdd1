"""AgentService: the stream each member agent keeps open to the server.

This side records who is connected and what they report. A cluster is Ready while its agent's
stream is open and NotReady once it closes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
from sqlalchemy import func, update

from federation.api.status import servicer
from federation.errors import InvalidArgument
from federation.store.admin import AdminStore
from federation.store.models import Cluster
from federation.v1 import agent_pb2, agent_pb2_grpc
from federation.validation import Violation, Violations, check_labels, check_name


def inventory_json(inv: agent_pb2.Inventory) -> dict[str, Any]:
    return {
        "capacity": dict(inv.capacity.amounts), "allocatable": dict(inv.allocatable.amounts),
        "used": dict(inv.used.amounts), "healthy": inv.healthy, "nodes": inv.nodes, "ready_nodes": inv.ready_nodes,
        "topology": [{"tier": t.tier, "tier_name": t.tier_name, "max_free": dict(t.max_free.amounts)}
                     for t in inv.topology],
    }


@servicer
class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, admin: AdminStore) -> None:
        self.admin = admin

    async def _set(self, cluster: str, **values: Any) -> None:
        async with self.admin.engine.begin() as conn:
            await conn.execute(update(Cluster).where(Cluster.name == cluster).values(**values))

    async def Connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        first = await anext(aiter(request_iterator), None)
        if first is None or not first.HasField("register"):
            raise InvalidArgument([Violation("register", "the first message on the stream must be Register")])
        reg = first.register
        v = Violations()
        check_name(v, "register.cluster", reg.cluster)
        check_labels(v, "register.labels", reg.labels)
        if v:
            raise InvalidArgument(v.items)
        await self.admin.register_cluster(reg.cluster, dict(reg.labels), reg.agent_version)
        try:
            async for message in request_iterator:
                kind = message.WhichOneof("msg")
                if kind == "inventory":
                    await self._set(reg.cluster, inventory=inventory_json(message.inventory),
                                    last_heartbeat=func.now())
                elif kind == "heartbeat":
                    await self._set(reg.cluster, last_heartbeat=func.now(), status="READY")
        finally:
            await self._set(reg.cluster, status="NOT_READY")
        return
        yield  # an async generator: the control direction carries nothing until dispatch exists
