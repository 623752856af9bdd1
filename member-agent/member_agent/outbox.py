"""What the agent says to the federation (a part of `agent.Agent`): its reports, kept so a reconnect resends
the latest of each; the cluster's inventory, sent once per burst of changes; pods' logs; the outbox they wait in."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from federation.kernel.gpuask import MAX_MEMORY_MIB
from federation.kernel.jobspec import MAX_REASON, MAX_REPORTED_HYPERNODES
from federation.kernel.tiers import TierFree
from federation.v1 import agent_pb2
from member_agent import mig
from member_agent.holds import MAX_HOLDS
from member_agent.model import INVENTORY_DELAY, LOG_CHUNK, OUTBOX_LIMIT, AgentJob, runs_short
from member_agent.nodehealth import summary
from member_agent.topology import ROOT


class Outgoing(asyncio.Queue[agent_pb2.AgentMessage]):
    """The agent's messages out, each shown to `taking` as it is taken, whoever takes it (the stream, a test): an
    inventory is made as late as that."""

    taking: Callable[[agent_pb2.AgentMessage], None] | None = None

    def _get(self) -> agent_pb2.AgentMessage:
        message = super()._get()
        if self.taking is not None:
            self.taking(message)
        return message


class Outbox:
    """Messages out (a part of `agent.Agent`, whose state it shares)."""

    def _send(self, message: agent_pb2.AgentMessage) -> None:
        try:
            self.outbox.put_nowait(message)
            self._puts += 1
        except asyncio.QueueFull:
            self.overflowed = True

    def _queue_inventory(self, coalesce: bool = False) -> None:
        """Queue the cluster's inventory. `coalesce` (a gang just bound): when the last inventory queued still
        waits, bring it up to date instead: it is ahead of every update queued since, and showing more in use than
        when it was queued is what those updates need (a job reported bound is never seen without its usage). So
        a burst of bindings sends an inventory per stream write rather than one per gang, and does not overflow
        the outbox. Not after resources were freed (`_forget`): an inventory ahead of the update ending a job must
        not show what the job held as free."""
        queued = self._queued_inventory
        if coalesce and queued is not None and self._puts - self.outbox.qsize() < queued[0]:
            self._inventory_behind = True  # made again when taken (`_taking`), or before a job's end frees anything
            return
        self._catch_up_inventory()
        message = self.inventory()
        self._send(message)
        self._queued_inventory = (self._puts, message)

    def _taking(self, message: agent_pb2.AgentMessage) -> None:
        queued = self._queued_inventory
        if queued is not None and message is queued[1]:
            self._catch_up_inventory()

    def _catch_up_inventory(self) -> None:
        """Bring the inventory waiting in the outbox up to the bindings since it was made: at the latest when it is
        taken, and before a job's end frees what it held (then it must show the bindings, not the freeing). An
        inventory per stream write, however many gangs bind meanwhile, not one each."""
        if self._inventory_behind and self._queued_inventory is not None:
            self._queued_inventory[1].CopyFrom(self.inventory())
        self._inventory_behind = False

    def report_pod_statuses(self) -> int:
        """Send the pods of each gang whose statuses changed since last said (level-triggered, every few
        seconds: what users see of their pods, not what the federation decides on); how many were sent."""
        sent = 0
        for job_id, job in list(self.jobs.items()):
            statuses = self.backend.pod_statuses(job)
            said = [s.SerializeToString(deterministic=True) for s in statuses]
            if self._pods_said.get(job_id) == (job.attempt, said):
                continue
            self._pods_said[job_id] = (job.attempt, said)
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=job_id, attempt=job.attempt, type=agent_pb2.POD_STATUS, pod_statuses=statuses)))
            sent += 1
        for gone in self._pods_said.keys() - self.jobs.keys():
            del self._pods_said[gone]
        return sent

    def open_logs(self, request: agent_pb2.LogsRequest) -> None:
        """Stream a pod's log back as LogChunks until it ends, fails, or the server cancels it."""
        task = self._spawn(self._stream_logs(request))
        self._log_streams[request.stream_id] = task
        task.add_done_callback(lambda _: self._log_streams.pop(request.stream_id, None))

    def close_logs(self, stream_id: str) -> None:
        task = self._log_streams.pop(stream_id, None)
        if task is not None:
            task.cancel()

    async def _stream_logs(self, request: agent_pb2.LogsRequest) -> None:
        def chunk(**fields: Any) -> agent_pb2.AgentMessage:
            return agent_pb2.AgentMessage(log_chunk=agent_pb2.LogChunk(stream_id=request.stream_id, **fields))

        error = ""
        try:
            async for data in self.backend.logs(request.job_id, request.attempt, request.task, request.index,
                                                request.follow, request.previous, request.tail_lines):
                for start in range(0, len(data), LOG_CHUNK):
                    # A log read faster than the stream drains waits here, rather than overflow the outbox
                    # (which would cost this cluster's stream a resynchronisation).
                    while self.outbox.qsize() > OUTBOX_LIMIT // 2:
                        await asyncio.sleep(0.05)
                    self._send(chunk(data=data[start:start + LOG_CHUNK]))
        except LookupError as err:
            error = str(err)
        except asyncio.CancelledError:
            return  # the server stopped asking
        except Exception as err:  # the member cluster could not serve it: the user hears why
            error = f"reading the log failed: {err}"
        self._send(chunk(end=True, error=error))

    def _report(self, update: agent_pb2.JobUpdate) -> None:
        self.reports[update.job_id] = update
        self._send(agent_pb2.AgentMessage(job_update=update))

    def register(self) -> agent_pb2.AgentMessage:
        """The first message of every connection: who we are, the last word on every job, and every attempt
        the cluster holds pods of (reconcile round 0, answered in Registered)."""
        self._rounds = {0: self.running()}
        return agent_pb2.AgentMessage(register=agent_pb2.Register(
            cluster=self.cluster, labels=self.labels, agent_version=self.version, jobs=list(self.reports.values()),
            instance=self.instance, running=self._rounds[0], batches=True))

    def capacity_changed(self) -> None:
        """The cluster changed under us: send a fresh inventory soon, once for a burst of changes; and see
        whether replicas beyond a gang's minimum fit now."""
        if self._inventory_due is None:
            self._inventory_due = asyncio.get_running_loop().call_later(INVENTORY_DELAY, self._send_inventory)

    def _send_inventory(self) -> None:
        self._inventory_due = None
        if (id(self.state), self.state.health_version) != self._health_seen:
            self.health_changed()
        self._queue_inventory()
        # Room may have come for replicas a gang started without, or repartitioned or new nodes for a gang waiting.
        for job_id in [*(j for j, job in self.jobs.items() if runs_short(job)), *self._preparing, *self._asks]:
            self._serially(job_id, self.reconcile_job(job_id))

    def _count_held(self, job: AgentJob, sign: int) -> None:
        """Add (1) or take off (-1) what the gang's pods hold now to the gangs' total, around a change of them."""
        for resource, amount in job.held().items():
            self._held_total[resource] = self._held_total.get(resource, 0) + sign * amount

    def inventory(self) -> agent_pb2.AgentMessage:
        self._inventory_sent = time.monotonic()
        capacity, allocatable, used = self.state.totals()
        topology = _tier_messages(self.state.summary())
        hypernodes = self._hypernode_messages()
        managed = dict(self.backend.unadopted())
        for resource, amount in self._held_total.items():
            if amount:
                managed[resource] = managed.get(resource, 0) + amount
        state = self.state
        health = agent_pb2.ClusterHealth(
            degraded_nodes=len(state.degraded), failed_nodes=len(state.failed),
            summary=[line[:MAX_REASON] for line in summary({**state.failed, **state.degraded})],
            degraded_hypernodes=sorted(state.degraded_links)[:MAX_REPORTED_HYPERNODES])
        if state.degraded or state.degraded_links:
            health.healthy_topology.extend(_tier_messages(state.summary(healthy=True)))
        pairs = state.node_label_pairs
        return agent_pb2.AgentMessage(inventory=agent_pb2.Inventory(
            node_labels=agent_pb2.NodeLabels(pairs=pairs) if pairs is not None else None,
            gpu_free_nodes=state.gpu_free_nodes(),
            gpu_device_memory=min(max(state.device_memory.values(), default=0), MAX_MEMORY_MIB),
            health=health, managed=agent_pb2.ResourceAmounts(amounts=managed),
            capacity=agent_pb2.ResourceAmounts(amounts=capacity),
            allocatable=agent_pb2.ResourceAmounts(amounts=allocatable),
            used=agent_pb2.ResourceAmounts(amounts=used), healthy=bool(self.state.ready),
            nodes=len(self.state.free), ready_nodes=len(self.state.ready), topology=topology, hypernodes=hypernodes,
            partitionable=_tier_messages(mig.partitionable(self.state)), node_groups=self.node_group_messages(),
            held=[hold.job_id for hold in self.holds[:MAX_HOLDS]]))

    def _hypernode_messages(self) -> list[agent_pb2.HyperNodeFree]:
        """Each HyperNode's free and allocatable, highest tier first; a HyperNode's message made again only when
        what is free under it may have changed (a binding changes one node's few HyperNodes, not hundreds)."""
        state = self.state
        if self._hypernodes_of is not state:  # a state built afresh: every HyperNode afresh
            domains = [d for d in state.topology.domains.values() if d.name != ROOT]
            if len(domains) > MAX_REPORTED_HYPERNODES:  # too many to send every time: only the tiers' summary
                domains = []
            self._hypernodes_of, self._hypernodes_changed = state, state.watch_domains()
            self._hypernodes = {d.name: None for d in sorted(domains, key=lambda d: (-d.tier, d.name))}
        for name in self._hypernodes_changed:
            if name in self._hypernodes:
                self._hypernodes[name] = None
        self._hypernodes_changed.clear()
        out = []
        for name, message in self._hypernodes.items():
            if message is None:
                d = state.topology.domains[name]
                message = self._hypernodes[name] = agent_pb2.HyperNodeFree(
                    name=name, tier=d.tier, parent=d.parent if d.parent and d.parent != ROOT else "",
                    free=agent_pb2.ResourceAmounts(amounts=state.domain_free[name]),
                    allocatable=agent_pb2.ResourceAmounts(amounts=state.domain_allocatable[name]))
            out.append(message)
        return out

    def drain_outbox(self) -> None:
        """A new connection starts from full state, so nothing queued for the old one matters."""
        while not self.outbox.empty():
            self.outbox.get_nowait()
        self._queued_inventory = None
        self._inventory_behind = False
        self.overflowed = False
        self.server_batches = False  # until this stream's server says it reads batches
        self._beats.clear()  # acknowledgements of the old stream's heartbeats never come
        self._pods_said.clear()  # said again on the new stream (the server may have missed the last)
        for stream_id in list(self._log_streams):  # their readers were on the old stream
            self.close_logs(stream_id)


def _tier_messages(tiers: Sequence[TierFree]) -> list[agent_pb2.TierFree]:
    return [agent_pb2.TierFree(tier=t.tier, tier_name=t.tier_name,
                               max_free=agent_pb2.ResourceAmounts(amounts=t.max_free),
                               max_capacity=agent_pb2.ResourceAmounts(amounts=t.max_capacity)) for t in tiers]
