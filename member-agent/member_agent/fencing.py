"""The agent and the server in step (a part of `agent.Agent`): what it runs, reconciled with what the federation
runs here on every connection and periodically; and its fence, which stops its gangs once it has been cut off from
every server long enough for the federation to run them elsewhere."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any

from federation.kernel.jobspec import ON_CLUSTER_LOST
from federation.v1 import agent_pb2
from member_agent.holds import holds_from
from member_agent.metrics import FENCED_GANGS, ORPHAN_PODS_DELETED
from member_agent.model import DEFAULT_FENCE

log = logging.getLogger(__name__)


class Fencing:
    """Reconciliation with the server, and the fence (a part of `agent.Agent`)."""

    def running(self) -> list[agent_pb2.Attempt]:
        """Every attempt the cluster holds pods of that this agent manages, whether a job of this run holds it
        or not; gangs being bound are left out until they are (their outcome is reported then)."""
        found = dict(self.backend.managed())
        for job in self.jobs.values():
            found.setdefault((job.job.id, job.attempt), len(job.pods))
        return [agent_pb2.Attempt(job_id=job_id, attempt=attempt, pods=pods)
                for (job_id, attempt), pods in sorted(found.items()) if job_id not in self._binding]

    def reconcile_request(self) -> agent_pb2.AgentMessage:
        """A periodic account of what runs here, for the server to answer with what is live."""
        self._round += 1
        self._rounds[self._round] = running = self.running()
        for old in [r for r in self._rounds if r < self._round - 8]:  # answers lost with a stream never come
            del self._rounds[old]
        return agent_pb2.AgentMessage(reconcile=agent_pb2.Reconcile(round=self._round, running=running))

    async def reconcile(self, answer: agent_pb2.Reconciled) -> int:
        """Desired state (the attempts the federation runs here) against actual (what this agent reported the
        cluster holds in that round): delete every reported attempt that is not live, the whole gang, each
        in its job's turn with its orders. Returns when done, with how many pods were deleted."""
        reported = self._rounds.pop(answer.round, [])
        live = {(a.job_id, a.attempt) for a in answer.live}
        stale = [a for a in reported if (a.job_id, a.attempt) not in live]
        deleted = await asyncio.gather(*(self._serially(a.job_id, self._delete_stale(a)) for a in stale))
        return sum(deleted)

    def spawn_reconcile(self, answer: agent_pb2.Reconciled) -> None:
        self._spawn(self.reconcile(answer))

    async def _delete_stale(self, stale: agent_pb2.Attempt) -> int:
        want = self.desired.get(stale.job_id)
        if want is not None and want.attempt == stale.attempt:  # the federation has moved on from it
            del self.desired[stale.job_id]
        pods = await self.reconcile_job(stale.job_id, {stale.attempt})
        report = self.reports.get(stale.job_id)
        if report is not None and report.attempt <= stale.attempt:
            del self.reports[stale.job_id]  # settled: not worth resending on every connection
        if pods:
            ORPHAN_PODS_DELETED.inc(pods)
            log.warning("deleted %d pod(s) of job %s attempt %d: the federation no longer runs it here", pods,
                        stale.job_id, stale.attempt)
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=stale.job_id, attempt=stale.attempt, type=agent_pb2.ORPHANS_DELETED, pods=pods,
                reason="the federation no longer runs this attempt here (found by reconciliation)")))
        return pods

    # -- fencing ------------------------------------------------------------------------------

    def fence_seconds(self) -> float:
        return self.fence_after if self.fence_after is not None else self.server_fence or DEFAULT_FENCE

    def heartbeat_sent(self) -> None:
        self._beats.append(time.monotonic())

    def unheard_for(self) -> float:
        """Seconds since the oldest heartbeat on this stream that the server has not acknowledged (0: none)."""
        return time.monotonic() - self._beats[0] if self._beats else 0.0

    def heartbeat_acknowledged(self, holds: Iterable[Any] = ()) -> None:
        """The server recorded our oldest unacknowledged heartbeat: the federation heard us when it was sent. With
        it come the gangs the federation holds room for here, the whole set (`holds`): when they changed, the
        inventory says so (a job sent back for nodes kept for them is offered again)."""
        holds = holds_from(holds)
        if holds != self.holds:
            self.holds = holds
            self._queue_inventory()
        if self._beats:
            self.last_contact = max(self.last_contact, self._beats.popleft())
            self.fenced = False

    async def check_fence(self) -> int:
        """Stop every gang once cut off from every server for the fence time: the server runs them elsewhere
        a heartbeat timeout later, and a job must never run twice while its agent lives. Each stopped job is
        reported FENCED on the next connection. How many gangs were stopped."""
        if self.fenced or time.monotonic() - self.last_contact <= self.fence_seconds():
            return 0
        self.fenced = True
        # A job that waits for its cluster when it is lost is never run elsewhere: nothing to fence.
        attempts = [a for a in self.running() if not self._waits_when_lost(a.job_id)]
        if not attempts:
            return 0
        log.error("cut off from the federation for over %.0f s: stopping the %d gang(s) this cluster runs",
                  self.fence_seconds(), len(attempts))
        await asyncio.gather(*(self._serially(a.job_id, self._fence(a)) for a in attempts))
        FENCED_GANGS.inc(len(attempts))
        return len(attempts)

    def _waits_when_lost(self, job_id: str) -> bool:
        held = self.jobs.get(job_id)
        if held is not None:
            return held.job.spec.annotations.get(ON_CLUSTER_LOST) == "wait"
        return self.backend.waits_when_lost(job_id)

    async def _fence(self, attempt: agent_pb2.Attempt) -> None:
        why = f"cut off from the federation for over {self.fence_seconds():g} s, the agent stopped the gang"
        want = self.desired.get(attempt.job_id)
        if want is not None and want.attempt == attempt.attempt:
            del self.desired[attempt.job_id]
        await self.reconcile_job(attempt.job_id, {attempt.attempt})
        self._report(agent_pb2.JobUpdate(job_id=attempt.job_id, attempt=attempt.attempt, type=agent_pb2.FENCED,
                                         reason=why))
