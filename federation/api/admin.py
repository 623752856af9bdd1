"""AdminService: tenants, queues, priority classes, member clusters, tokens and the audit log.

Only admins change anything; every change is audited by the store in the same transaction. A
tenant's token reads its own tenant and queues (another tenant's are NOT_FOUND, so their existence
does not leak), and the priority classes and clusters everyone submits against.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import grpc
from google.protobuf import empty_pb2, field_mask_pb2
from google.protobuf.message import Message

from federation.api import convert
from federation.api.status import servicer
from federation.api.usage import PastUsageView, fill
from federation.control.leaderview import LeaderView
from federation.errors import FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, Unavailable
from federation.kernel.jobspec import MAX_REASON
from federation.relay.connections import NODE_ORDERS_IN_FLIGHT, Connections
from federation.security.auth import current, require_admin, require_sees
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Base, Cluster, Flavor, PriorityClass, Queue, Tenant
from federation.store.tokens import TokenStore
from federation.v1 import admin_pb2, admin_pb2_grpc, agent_pb2
from federation.validation import (
    ADMISSION_CHECK_STATES,
    MAX_PROTECTED_RUN_SECONDS,
    Violation,
    Violations,
    check_flavor,
    check_name,
    check_object_name,
    check_priority_class,
    check_queue,
    check_tenant,
    check_text,
    clean_text,
)

NODE_ACTIONS = ("cordon", "drain", "uncordon")
NODE_ORDER_ANSWER_SECONDS = 30.0  # an agent answers at once unless its cluster's API server is slow to cordon


class _Kind:
    """How one admin kind maps between its message, its validation and its table."""

    def __init__(self, model: type[Base], field: str, message: type[Message], check: Callable[..., None],
                 to_proto: Callable[[Any], Message], values: Callable[[Any], dict[str, Any]],
                 mutable: tuple[str, ...]) -> None:
        self.model, self.field, self.message, self.check = model, field, message, check
        self.to_proto, self.values, self.mutable = to_proto, values, mutable


TENANT = _Kind(Tenant, "tenant", admin_pb2.Tenant, check_tenant, convert.tenant_to_proto, convert.tenant_values,
               ("weight", "guarantee", "limit", "disabled", "max_run_time", "lending_limit"))
QUEUE = _Kind(Queue, "queue", admin_pb2.Queue, check_queue, convert.queue_to_proto, convert.queue_values,
              ("weight", "priority", "guarantee", "limit", "reclaimable", "state", "flavors", "parent",
               "max_run_time", "lending_limit", "admission_checks"))
FLAVOR = _Kind(Flavor, "flavor", admin_pb2.Flavor, check_flavor, convert.flavor_to_proto, convert.flavor_values,
               ("resource", "cluster_selector", "admission_checks"))
PRIORITY_CLASS = _Kind(PriorityClass, "priority_class", admin_pb2.PriorityClass, check_priority_class,
                       convert.priority_class_to_proto, convert.priority_class_values,
                       ("value", "preemptible", "global_default", "description", "protected_run_seconds"))


def _checked(kind: _Kind, obj: Message) -> dict[str, Any]:
    v = Violations()
    kind.check(v, kind.field, obj)
    if v:
        raise InvalidArgument(v.items)
    return kind.values(obj)


MAX_AUDIT_EVENTS = 1000
MAX_TOKEN_TTL = timedelta(days=3650)


@servicer
class AdminServicer(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, store: AdminStore, leader: LeaderView, tokens: TokenStore,
                 forget_token: Callable[[str], None], connections: Connections | None = None,
                 past: PastUsageView | None = None, jobs: JobStore | None = None,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.jobs = jobs  # admission checks' states are set on jobs
        self.on_change = on_change  # an admitted, retried or rejected job is an order its agent must hear of
        self.connections = connections or Connections()  # agents' streams on this replica: node orders go there
        self.past = past or PastUsageView(None, None)  # tenants' and queues' usage histories, as the leader wrote
        self.store = store
        self.leader = leader  # what only the scheduling leader knows: a queue's status as a cycle computes it
        self.tokens = tokens
        self.forget_token = forget_token  # a revoked token stops working on this replica at once

    async def _create(self, kind: _Kind, obj: Message) -> Message:
        actor = require_admin().name
        return kind.to_proto(await self.store.create(kind.model, _checked(kind, obj), kind.field, actor))

    async def _update(self, kind: _Kind, obj: Message, mask: field_mask_pb2.FieldMask) -> Message:
        """Apply the masked fields onto the stored object and validate the result as a whole."""
        actor = require_admin().name
        paths = list(mask.paths) or list(kind.mutable)
        unknown = [p for p in paths if p not in kind.mutable]
        if unknown:
            raise InvalidArgument([Violation("update_mask", f"cannot update {', '.join(unknown)}; "
                                                            f"updatable: {', '.join(kind.mutable)}")])
        merged = kind.to_proto(await self.store.get(kind.model, obj.name))
        field_mask_pb2.FieldMask(paths=paths).MergeMessage(obj, merged, replace_message_field=True,
                                                          replace_repeated_field=True)
        values = _checked(kind, merged)
        return kind.to_proto(await self.store.update(kind.model, merged.name, {p: values[p] for p in paths},
                                                     kind.field, actor))

    async def _delete(self, kind: _Kind, name: str) -> empty_pb2.Empty:
        await self.store.delete(kind.model, name, require_admin().name)
        return empty_pb2.Empty()

    async def _queue(self, name: str) -> Any:
        row = await self.store.get(Queue, name)
        require_sees(row["tenant"], f"queue {name!r}")
        return row

    async def CreateTenant(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._create(TENANT, request.tenant)

    async def UpdateTenant(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._update(TENANT, request.tenant, request.update_mask)

    async def GetTenant(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        require_sees(request.name, f"tenant {request.name!r}")
        return (await self._with_past("tenant", [TENANT.to_proto(await self.store.get(Tenant, request.name))]))[0]

    async def ListTenants(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rows = [r for r in await self.store.list(Tenant) if current().sees(r["name"])]
        return admin_pb2.ListTenantsResponse(tenants=await self._with_past("tenant", [TENANT.to_proto(r)
                                                                                      for r in rows]))

    async def _with_past(self, kind: str, messages: list[Any]) -> list[Any]:
        """The messages with their usage histories filled in (output only)."""
        if messages:
            fill({m.name: m for m in messages}, kind, await self.past.shown())
        return messages

    async def DeleteTenant(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._delete(TENANT, request.name)

    async def CreateQueue(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._create(QUEUE, request.queue)

    async def UpdateQueue(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._update(QUEUE, request.queue, request.update_mask)

    async def GetQueue(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return (await self._with_past("queue", [QUEUE.to_proto(await self._queue(request.name))]))[0]

    async def ListQueues(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rows = [r for r in await self.store.list(Queue, tenant=request.tenant) if current().sees(r["tenant"])]
        return admin_pb2.ListQueuesResponse(queues=await self._with_past("queue", [QUEUE.to_proto(r) for r in rows]))

    async def DeleteQueue(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._delete(QUEUE, request.name)

    async def GetQueueStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self.leader.queue_status(await self._queue(request.name))

    async def CreatePriorityClass(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._create(PRIORITY_CLASS, request.priority_class)

    async def UpdatePriorityClass(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._update(PRIORITY_CLASS, request.priority_class, request.update_mask)

    async def GetPriorityClass(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return PRIORITY_CLASS.to_proto(await self.store.get(PriorityClass, request.name))

    async def ListPriorityClasses(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rows = await self.store.list(PriorityClass)
        return admin_pb2.ListPriorityClassesResponse(priority_classes=[PRIORITY_CLASS.to_proto(r) for r in rows])

    async def DeletePriorityClass(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._delete(PRIORITY_CLASS, request.name)

    async def CreateFlavor(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._create(FLAVOR, request.flavor)

    async def UpdateFlavor(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._update(FLAVOR, request.flavor, request.update_mask)

    async def GetFlavor(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return FLAVOR.to_proto(await self.store.get(Flavor, request.name))

    async def ListFlavors(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return admin_pb2.ListFlavorsResponse(flavors=[FLAVOR.to_proto(r) for r in await self.store.list(Flavor)])

    async def DeleteFlavor(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await self._delete(FLAVOR, request.name)

    async def ListClusters(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        rows = await self.store.every_cluster()

        def answer() -> Any:  # up to 1,000 HyperNodes a cluster: converted off the loop
            return admin_pb2.ListClustersResponse(clusters=[convert.cluster_to_proto(r) for r in rows])

        return await asyncio.to_thread(answer)

    async def GetCluster(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return convert.cluster_to_proto(await self.store.get(Cluster, request.name))

    async def CordonCluster(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return convert.cluster_to_proto(await self.store.set_cordoned(request.name, True, require_admin().name))

    async def UncordonCluster(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return convert.cluster_to_proto(await self.store.set_cordoned(request.name, False, require_admin().name))

    async def OrderNode(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Audited, then sent to the cluster's agent; the answer is what the agent did (a node it does not
        have changes nothing and is NOT_FOUND). A few orders at a time per cluster: an agent works through
        them beside its gangs, and a flood would only queue behind its own assignments."""
        actor = require_admin().name
        v = Violations()
        if request.action not in NODE_ACTIONS:
            v.add("action", f"must be one of {', '.join(NODE_ACTIONS)}")
        if request.kind not in ("node", "hypernode"):
            v.add("kind", "must be node or hypernode")
        check_name(v, "cluster", request.cluster)
        check_object_name(v, "name", request.name)
        grace = 0.0
        if request.HasField("grace"):
            grace = request.grace.seconds + request.grace.nanos / 1e9
            if request.action != "drain" or not 0 < grace <= MAX_PROTECTED_RUN_SECONDS or \
                    not 0 <= request.grace.nanos < 10**9:
                v.add("grace", f"is for a drain, more than zero and at most {MAX_PROTECTED_RUN_SECONDS // 86_400} days")
        if v:
            raise InvalidArgument(v.items)
        row = await self.store.get(Cluster, request.cluster)
        listed = [h["name"] for h in (row["inventory"] or {}).get("hypernodes", [])]
        if request.kind == "hypernode" and listed and request.name not in listed:
            raise InvalidArgument([Violation("name", f"cluster {request.cluster} has no HyperNode {request.name!r}")])
        conn = self.connections.get(request.cluster)
        if conn is None:
            raise FailedPrecondition(f"cluster {request.cluster}'s agent is not connected to this server replica; "
                                     "try again (or through the replica it is connected to)")
        if len(conn.node_orders) >= NODE_ORDERS_IN_FLIGHT:
            raise ResourceExhausted(f"cluster {request.cluster}'s agent has {len(conn.node_orders)} node orders "
                                    "not yet answered; try again when they are")
        order_id = uuid.uuid4().hex
        answer = conn.node_orders[order_id] = asyncio.get_running_loop().create_future()
        try:
            await self.store.record_order(actor, request.cluster, request.action, request.kind, request.name, grace)
            order = agent_pb2.NodeOrder(action=request.action, kind=request.kind, name=request.name,
                                        grace_seconds=grace, order_id=order_id)
            if not self.connections.send(conn, agent_pb2.ControlMessage(node_order=order)):
                raise Unavailable(f"cluster {request.cluster}'s agent is not reading its orders; try again")
            try:
                async with asyncio.timeout(NODE_ORDER_ANSWER_SECONDS):
                    done = await answer
            except TimeoutError:
                done = None
        finally:
            conn.node_orders.pop(order_id, None)
        what = f"{request.kind}/{request.name} in cluster {request.cluster}"
        if done is None:
            raise Unavailable(f"{what}: the order was sent but its agent did not answer within "
                              f"{NODE_ORDER_ANSWER_SECONDS:g}s (it may still carry it out); try again")
        if not done.done:
            raise NotFound(f"{what}: {clean_text(done.message, MAX_REASON)}")
        if request.action == "drain":
            return admin_pb2.OrderNodeResponse(message=(
                f"{what}: cordoned; each gang on it moves at its next checkpoint"
                + (f" (at most {grace:g}s from now)" if grace else "") + " (`fedctl describe job` says when)"))
        return admin_pb2.OrderNodeResponse(message=f"{what}: {request.action}ed")

    async def CreateToken(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        actor = require_admin().name
        v = Violations()
        if request.admin == bool(request.tenant):
            v.add("tenant", "a token is either for one tenant (tenant) or an admin token (admin), not both or neither")
        if request.name:
            check_name(v, "name", request.name)
        ttl = None
        if request.HasField("ttl"):
            if not 0 < request.ttl.seconds <= MAX_TOKEN_TTL.total_seconds() or not 0 <= request.ttl.nanos < 10**9:
                v.add("ttl", f"must be positive and at most {MAX_TOKEN_TTL.days} days")
            else:
                ttl = request.ttl.ToTimedelta()
        if v:
            raise InvalidArgument(v.items)
        row, bearer = await self.tokens.create(actor, request.name, request.tenant or None, request.admin, ttl)
        return admin_pb2.CreateTokenResponse(token=convert.token_to_proto(row), bearer_token=bearer)

    async def ListTokens(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        require_admin()
        return admin_pb2.ListTokensResponse(tokens=[convert.token_to_proto(r)
                                                    for r in await self.tokens.list(request.tenant)])

    async def RevokeToken(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        row = await self.tokens.revoke(require_admin().name, request.id)
        self.forget_token(request.id)
        return convert.token_to_proto(row)

    async def SetAdmissionCheck(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        require_admin()
        v = Violations()
        if not request.job_id:
            v.add("job_id", "is required")
        check_text(v, "job_id", request.job_id, 253)
        check_name(v, "name", request.name)
        if request.state not in ADMISSION_CHECK_STATES:
            v.add("state", f"must be one of {', '.join(ADMISSION_CHECK_STATES)}")
        check_text(v, "message", request.message)
        if v:
            raise InvalidArgument(v.items)
        assert self.jobs is not None
        row = await self.jobs.set_check(request.job_id, request.name, request.state, request.message)
        self.on_change()
        return admin_pb2.SetAdmissionCheckResponse(status=convert.job_to_proto(row).status)

    async def ListAuditEvents(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        require_admin()
        if not 0 <= request.limit <= MAX_AUDIT_EVENTS:
            raise InvalidArgument([Violation("limit", f"must be between 0 and {MAX_AUDIT_EVENTS}")])
        rows = await self.tokens.audit_events(request.kind, request.limit or 100)
        return admin_pb2.ListAuditEventsResponse(events=[convert.audit_event_to_proto(r) for r in rows])
