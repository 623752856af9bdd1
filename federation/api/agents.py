"""AgentService: the stream each member agent keeps open to the server.

The agent opens with Register (its cluster, its process, its last word on every job it knows and
every attempt its cluster holds pods of), then sends Inventory, Heartbeat, JobUpdate and, periodically,
Reconcile; the server sends Assign, Cancel and Preempt through the cluster's connection. Reconciliation
is level-triggered, as MultiKueue's garbage collection and Armada's executor leases are: whatever the
agent reports, the server answers with the attempts that are live there, and the agent deletes the rest;
jobs dispatched to the cluster that the agent does not report are assigned again. So an order lost with
a dropped stream, or a gang left running while its agent was away, is never lost or kept for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import grpc
from sqlalchemy import func, update

from federation import metrics
from federation.api.convert import job_to_proto
from federation.api.status import check_request, servicer
from federation.control.scheduler import HEARTBEAT_TIMEOUT, LOST_GRACE
from federation.errors import AlreadyExists, FailedPrecondition, FederationError, InvalidArgument, PermissionDenied
from federation.kernel.admission import admitted
from federation.kernel.batches import batched, drained
from federation.kernel.versions import agent_refused
from federation.relay.connections import Connection, Connections
from federation.relay.logrelay import LogRelay
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Cluster
from federation.v1 import agent_pb2, agent_pb2_grpc
from federation.validation import (
    Violation,
    Violations,
    check_labels,
    check_name,
    clean_text,
    inventory_problem,
    text_violations,
    update_problem,
)

log = logging.getLogger(__name__)
INBOX = 500  # messages of one agent's stream read ahead while the last ones are written, and handled together
_END = object()  # the agent closed its side of the stream


def inventory_json(inv: agent_pb2.Inventory) -> dict[str, Any]:
    return {
        "capacity": dict(inv.capacity.amounts), "allocatable": dict(inv.allocatable.amounts),
        "used": dict(inv.used.amounts), "managed": dict(inv.managed.amounts), "healthy": inv.healthy,
        "nodes": inv.nodes, "ready_nodes": inv.ready_nodes,
        "topology": [{"tier": t.tier, "tier_name": t.tier_name, "max_free": dict(t.max_free.amounts),
                      "max_capacity": dict(t.max_capacity.amounts)} for t in inv.topology],
        "hypernodes": [{"name": h.name, "tier": h.tier, "parent": h.parent, "free": dict(h.free.amounts),
                        "allocatable": dict(h.allocatable.amounts)} for h in inv.hypernodes],
        "partitionable": [{"tier": t.tier, "tier_name": t.tier_name, "max_free": dict(t.max_free.amounts),
                           "max_capacity": dict(t.max_capacity.amounts)} for t in inv.partitionable],
        "health": {"degraded_nodes": inv.health.degraded_nodes, "failed_nodes": inv.health.failed_nodes,
                   "summary": list(inv.health.summary), "degraded_hypernodes": list(inv.health.degraded_hypernodes),
                   "healthy_topology": [{"tier": t.tier, "tier_name": t.tier_name, "max_free": dict(t.max_free.amounts),
                                         "max_capacity": dict(t.max_capacity.amounts)}
                                        for t in inv.health.healthy_topology]},
        **({"node_labels": sorted(set(inv.node_labels.pairs))} if inv.HasField("node_labels") else {}),
        **({"gpu_free_nodes": list(inv.gpu_free_nodes)} if inv.gpu_free_nodes else {}),
        **({"gpu_device_memory": inv.gpu_device_memory} if inv.gpu_device_memory else {}),
        **({"node_groups": [{"name": g.name, "per_node": dict(g.per_node.amounts), "can_add": g.can_add}
                            for g in inv.node_groups]} if inv.node_groups else {}),
        **({"held": list(inv.held)} if inv.held else {}),
    }


def _batch(messages: Sequence[agent_pb2.ControlMessage]) -> agent_pb2.ControlMessage:
    return agent_pb2.ControlMessage(batch=agent_pb2.ControlMessages(messages=messages))


def _observe(cluster: str, applied: Any) -> None:
    """The metrics of what an update did to its job: how long it waited, how it ended, a cluster's refusals."""
    if applied.event == "Running" and applied.waited is not None:
        metrics.JOB_WAIT_SECONDS.labels(applied.queue).observe(max(applied.waited, 0.0))
    elif applied.event in ("Succeeded", "Failed"):
        metrics.JOBS_FINISHED.labels(applied.event.lower()).inc()
    elif applied.event == "Rejected":
        metrics.REJECTIONS.labels(cluster).inc()


@servicer
class AgentServicer(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, admin: AdminStore, jobs: JobStore, connections: Connections, on_change: Callable[[], None],
                 logs: LogRelay, require_identity: bool = False, heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
                 lost_grace: float = LOST_GRACE) -> None:
        self.require_identity = require_identity  # the client certificate must name the registering cluster
        self.logs = logs  # pod logs users asked for, coming back on this stream
        self.admin = admin
        self.jobs = jobs
        self.connections = connections
        self.heartbeat_timeout = heartbeat_timeout  # a cluster silent this long is taken over by a new agent
        self.lost_grace = lost_grace  # the agent fences its gangs after this long cut off (it is told)
        self.on_change = on_change  # wakes the scheduler and the watchers

    async def _set(self, cluster: str, instance: str | None = None, **values: Any) -> None:
        """Update the cluster's row; with `instance`, only while that agent process still holds it."""
        query = update(Cluster).where(Cluster.name == cluster)
        if instance is not None:
            query = query.where(Cluster.instance == instance)
        async with self.admin.engine.begin() as conn:
            await conn.execute(query.values(**values))

    async def _live(self, cluster: str, running: Any, round_: int = 0) -> agent_pb2.Reconciled:
        """Of the attempts an agent reports its cluster holds, those the federation runs there now."""
        live = await self.jobs.live_attempts(cluster, sorted({a.job_id for a in running}))
        return agent_pb2.Reconciled(round=round_, live=[a for a in running if live.get(a.job_id) == a.attempt])

    async def _apply(self, conn: Connection, updates: Sequence[agent_pb2.JobUpdate],
                     inventory: agent_pb2.Inventory | None = None) -> None:
        """Apply updates the agent sent one after the other, each checked on its own, and the latest of the
        inventories it sent among them (each is the whole cluster: the last supersedes the rest), in one
        transaction: a gang's usage and its binding, or its end and the resources it freed, are seen together or
        not at all, and a burst of bindings (an inventory before each) costs one commit."""
        cluster_values = None
        if inventory is not None:
            problem = inventory_problem(inventory)
            if problem:  # left out of scheduling, with the reason; every other cluster goes on
                log.warning("cluster %s: its agent's inventory is not used: %s", conn.cluster, problem)
                cluster_values = {"problem": f"its agent reported an inventory that cannot be used: {problem}",
                                  "last_heartbeat": func.now()}
            else:
                cluster_values = {"inventory": inventory_json(inventory), "problem": "", "last_heartbeat": func.now()}
        valid = []
        for u in updates:
            u.reason = clean_text(u.reason)  # stored, listed and printed later: bounded, nothing raw
            for pod in u.pod_statuses:
                pod.message = clean_text(pod.message)
            problem = update_problem(u)
            if problem:  # a rogue or broken agent: its update is not applied, nothing else is held up
                log.warning("cluster %s: its agent's update of job %s is not used: %s", conn.cluster,
                            clean_text(u.job_id, 80), problem)
                continue
            valid.append(u)
        if not valid and cluster_values is None:
            return
        for u, applied in zip(valid, await self.jobs.apply_updates(conn.cluster, valid, cluster_values), strict=True):
            _observe(conn.cluster, applied)
            if applied.refused:
                log.warning("cluster %s: its agent's update of job %s is not used: %s", conn.cluster, u.job_id,
                            applied.refused)
            if applied.stop:
                self.connections.send(conn, agent_pb2.ControlMessage(cancel=agent_pb2.Cancel(
                    job_id=u.job_id, attempt=u.attempt, reason=applied.stop)))
            if u.type == agent_pb2.ORPHANS_DELETED:
                metrics.ORPHAN_PODS_DELETED.labels(conn.cluster).inc(u.pods)
                log.warning("cluster %s: its agent deleted %d pod(s) of job %s attempt %d, which no longer runs "
                            "there", conn.cluster, u.pods, u.job_id, u.attempt)
        self.on_change()

    async def _unreported(self, cluster: str, reported: dict[str, int]) -> list[agent_pb2.ControlMessage]:
        """Assign again what this cluster should be running and its agent did not mention: an order
        lost with a stream, or a job the agent forgot when it restarted (it adopts the pods it finds).
        Sent straight on the stream (its own flow control paces them), not through the order queue,
        which however many there are they would overflow."""
        return [agent_pb2.ControlMessage(assign=agent_pb2.Assign(job=job_to_proto(row), attempt=row["attempt"]))
                for row in await self.jobs.active(cluster)
                if reported.get(row["id"], 0) < row["attempt"] and admitted(row)]

    async def _read(self, conn: Connection, request_iterator: Any) -> None:
        """Read the stream while what came before is written, then handle together what arrived meanwhile:
        consecutive job updates in one transaction, so a burst of reports costs a commit per burst, not per
        report (the stream's own flow control holds the agent back while INBOX messages wait)."""
        inbox: asyncio.Queue[Any] = asyncio.Queue(INBOX)

        async def receive() -> None:
            try:
                async for message in request_iterator:
                    if isinstance(message, agent_pb2.AgentMessage) and message.WhichOneof("msg") == "batch":
                        for i, one in enumerate(message.batch.messages):  # each as if it had come alone
                            if one.WhichOneof("msg") == "batch":
                                raise InvalidArgument([Violation(f"batch.messages[{i}]", "a batch holds no batch")])
                            await inbox.put(one)
                        continue
                    await inbox.put(message)
                await inbox.put(_END)
            except Exception as err:  # handed to the reader below, which ends the stream with it
                await inbox.put(err)

        receiving = asyncio.create_task(receive())
        try:
            while True:
                batch = [await inbox.get()]
                while not inbox.empty() and len(batch) < INBOX:
                    batch.append(inbox.get_nowait())
                updates: list[agent_pb2.JobUpdate] = []
                inventory: agent_pb2.Inventory | None = None  # the latest among `updates`
                for message in batch:
                    if message is _END or isinstance(message, Exception):
                        await self._apply(conn, updates, inventory)
                        if isinstance(message, Exception):
                            raise message
                        return
                    try:
                        check_request(message, texts=False)  # its texts: left out or cleaned below, the stream goes on
                    except FederationError:
                        await self._apply(conn, updates, inventory)  # what came before it stands
                        raise
                    kind = message.WhichOneof("msg")
                    if kind == "job_update":
                        updates.append(message.job_update)
                        continue
                    if kind == "inventory":
                        inventory = message.inventory
                        continue
                    await self._apply(conn, updates, inventory)
                    updates, inventory = [], None
                    await self._handle(conn, message)
                await self._apply(conn, updates, inventory)
        finally:
            receiving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await receiving

    async def _handle(self, conn: Connection, message: agent_pb2.AgentMessage) -> None:
        """One message of the stream other than a job update."""
        cluster = conn.cluster
        kind = message.WhichOneof("msg")
        if kind == "heartbeat":
            async with self.admin.engine.begin() as db:
                holds = (await db.execute(update(Cluster).where(Cluster.name == cluster).values(
                    last_heartbeat=func.now(), status="READY").returning(Cluster.holds))).scalar()
            # Recorded: the agent may count the federation as hearing it up to when it sent this. And the room the
            # leader holds there, for the agent to keep nodes for.
            self.connections.send(conn, agent_pb2.ControlMessage(heartbeat_ack=agent_pb2.HeartbeatAck(
                holds=[agent_pb2.Hold(job_id=j, pods=p, gpus_per_pod=g) for j, p, g in holds or []])))
        elif kind == "log_chunk":
            self.logs.deliver(cluster, message.log_chunk)
        elif kind == "node_order_done":
            self.connections.answered(conn, message.node_order_done)
        elif kind == "reconcile":
            if bad := text_violations(message.reconcile):
                log.warning("cluster %s: its agent's reconcile is not used: %s %s", cluster, bad[0].field,
                            bad[0].description)
                return
            self.connections.send(conn, agent_pb2.ControlMessage(reconciled=await self._live(
                cluster, message.reconcile.running, message.reconcile.round)))

    async def Connect(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        first = await anext(aiter(request_iterator), None)
        if first is not None:
            check_request(first)
        if first is None or not first.HasField("register"):
            raise InvalidArgument([Violation("register", "the first message on the stream must be Register")])
        reg = first.register
        v = Violations()
        check_name(v, "register.cluster", reg.cluster)
        check_labels(v, "register.labels", reg.labels)
        if len(reg.agent_version) > 64 or not reg.agent_version.isprintable():
            v.add("register.agent_version", "must be printable and at most 64 characters")
        if len(reg.instance) > 64 or not reg.instance.isprintable():
            v.add("register.instance", "must be printable and at most 64 characters")
        if v:
            raise InvalidArgument(v.items)
        if self.require_identity:
            names = [n.decode() for n in context.auth_context().get("x509_common_name", [])]
            if reg.cluster not in names:
                raise PermissionDenied(f"the client certificate is for {', '.join(names) or 'no name'}, "
                                       f"not for cluster {reg.cluster!r}")
        refused = agent_refused(reg.agent_version)
        if refused is not None:
            metrics.AGENTS_REFUSED.labels(reg.cluster).inc()
            log.warning("refused the agent of cluster %s: %s", reg.cluster, refused)
            raise FailedPrecondition(refused)
        try:
            await self.admin.register_cluster(reg.cluster, dict(reg.labels), reg.agent_version, reg.instance,
                                              self.heartbeat_timeout)
        except AlreadyExists as err:
            metrics.AGENTS_REFUSED.labels(reg.cluster).inc()
            log.warning("refused an agent (instance %s) for cluster %s: %s", reg.instance or "unnamed", reg.cluster,
                        err)
            raise
        # Orders logged from here on are relayed; what came before is resent from the jobs' state.
        conn = self.connections.open(reg.cluster, cursor=await self.jobs.last_event_seq())
        tasks: list[asyncio.Task[Any]] = []
        try:
            await self._apply(conn, list(reg.jobs))
            # After its reports: a job the agent stopped while cut off is not live any more.
            registered = agent_pb2.ControlMessage(registered=agent_pb2.Registered(
                cluster=reg.cluster, reconciled=await self._live(reg.cluster, reg.running),
                fence_seconds=self.lost_grace, batches=True))
            await self.jobs.cluster_back(reg.cluster)
            resent = await self._unreported(reg.cluster, {u.job_id: u.attempt for u in reg.jobs})
            reader = asyncio.create_task(self._read(conn, request_iterator))
            closed = asyncio.create_task(conn.closed.wait())
            tasks += [reader, closed]
            yield registered
            for message in batched(resent, _batch, reg.batches):
                if conn.closed.is_set() or reader.done():
                    break
                yield message
            while True:
                order = asyncio.create_task(conn.queue.get())
                done, _ = await asyncio.wait({order, reader, closed}, return_when=asyncio.FIRST_COMPLETED)
                if order in done:
                    # With the orders queued behind it, as few stream messages as fit, to an agent that reads them.
                    taken = drained(order.result(), conn.queue) if reg.batches else [order.result()]
                    for message in batched(taken, _batch, reg.batches):
                        yield message
                    self.connections.taken(conn)
                    continue
                order.cancel()
                if reader in done:
                    reader.result()  # raises what ended it, if anything did
                return
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            if self.connections.close(conn):
                self.logs.cluster_gone(reg.cluster)
                await self._set(reg.cluster, reg.instance, status="NOT_READY")
            self.on_change()
