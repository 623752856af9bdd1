"""The agent's asks for nodes (a part of `agent.Agent`): a gang the federation sent here to be provisioned that does
not fit as the cluster is waits while the autoscaler adds the nodes it needs (`provisioning`), and goes back to
the federation with the reason when they do not come in time.

Level-triggered as the rest of the agent: every look at the ask (a node joining, its poll, its deadline) is a
reconciliation of the job, which places the gang once it fits and else comes back here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

from federation.kernel.admission import PROVISIONING
from federation.kernel.gangs import minimum_pods
from federation.kernel.resources import Resources
from federation.v1 import agent_pb2, common_pb2
from member_agent import provisioning
from member_agent.errors import BindError
from member_agent.provisioning import Ask, NodeGroup
from member_agent.state import ClusterState

log = logging.getLogger(__name__)


class NodeAsks:
    """Asks for nodes (a mixin of `agent.Agent`, whose state it shares)."""

    backend: Any
    state: ClusterState
    node_groups: list[NodeGroup]
    provision_timeout: float
    _asks: dict[str, Ask]
    _report: Callable[[agent_pb2.JobUpdate], None]
    _serially: Callable[[str, Coroutine[Any, Any, Any]], Any]
    reconcile_job: Callable[..., Coroutine[Any, Any, int]]

    def wants_nodes(self, job: common_pb2.Job) -> bool:
        """Whether the federation sent the gang here to be provisioned (its `provisioning` check is pending)."""
        return bool(self.node_groups) and any(c.name == PROVISIONING and c.state == "PENDING"
                                              for c in job.status.admission_checks)

    def room(self) -> dict[str, int]:
        """Per node group, how many more nodes it can add now."""
        if not self.node_groups:  # every inventory asks: no walk over the nodes of a cluster that grows none
            return {}
        asked: dict[str, int] = {}
        for ask in self._asks.values():
            asked[ask.group] = asked.get(ask.group, 0) + ask.nodes
        return provisioning.can_add(self.node_groups, (n.labels for n in self.state.topology.nodes.values()), asked)

    def node_group_messages(self) -> list[agent_pb2.NodeGroup]:
        room = self.room()
        return [agent_pb2.NodeGroup(name=g.name, per_node=agent_pb2.ResourceAmounts(amounts=g.capacity),
                                    can_add=room[g.name]) for g in self.node_groups]

    async def ask_for_nodes(self, job: common_pb2.Job, attempt: int, rejected: str,
                            requests: Mapping[str, Resources]) -> str | None:
        """Ask for the gang's nodes, or look again at what was asked: None while it waits for them, else why it
        goes back to the federation. `requests`: one pod's per task."""
        ask = self._asks.get(job.id)
        if ask is not None and ask.attempt == attempt:
            state, message = await self.backend.provisioned(ask.name)
            if state == "Failed":
                await self.drop_ask(job.id)
                return f"{rejected}; the autoscaler could not provision {ask.said}: {message or 'it failed'}"
            if ask.expired or time.monotonic() >= ask.deadline:
                await self.drop_ask(job.id)
                joined = " (provisioned, but they had not joined)" if state == "Provisioned" else ""
                return f"{rejected}; {ask.said} did not come within {self.provision_timeout:g} s{joined}"
            return None
        counts = minimum_pods(job.spec)
        pods = [requests[t.name] for t in job.spec.tasks for _ in range(counts.get(t.name, 0))]
        chosen = provisioning.choose(pods, self.node_groups, self.room())
        if chosen is None:
            return f"{rejected}; no node group here can add the nodes it needs now"
        group, nodes = chosen
        tasks = [(t.name, counts[t.name], dict(t.resources)) for t in job.spec.tasks if counts.get(t.name)]
        ask = Ask(attempt, provisioning.request_name(job.id, attempt), group.name, nodes,
                  time.monotonic() + self.provision_timeout, tuple(t for t, _, _ in tasks))
        try:
            await self.backend.provision(ask, tasks, group.labels)
        except BindError as err:
            return f"{rejected}; asking for {ask.said} failed: {err}"
        self._asks[job.id] = ask
        self._look_again(job.id, ask)
        log.info("job %s: asked for %s", job.id, ask.said)
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.PREPARING,
            reason=f"asked the autoscaler for {ask.said}; it is placed when they join"))
        return None

    def _look_again(self, job_id: str, ask: Ask) -> None:
        """Reconcile the job every POLL seconds while it waits, and once its time is up."""
        left = ask.deadline - time.monotonic()

        def look() -> None:
            if self._asks.get(job_id) is not ask:
                return
            ask.expired = time.monotonic() >= ask.deadline
            self._serially(job_id, self.reconcile_job(job_id))
            if not ask.expired:
                self._look_again(job_id, ask)

        ask.timer = asyncio.get_running_loop().call_later(max(min(provisioning.POLL, left), 0), look)

    async def drop_ask(self, job_id: str) -> Ask | None:
        """The gang no longer waits for its nodes (placed, gone, or given up): its request is withdrawn."""
        ask = self._asks.pop(job_id, None)
        if ask is not None:
            if ask.timer is not None:
                ask.timer.cancel()
            await self.backend.unprovision(ask.name, ask.tasks)
        return ask
