"""Gangs moved off degraded or drained hardware inside the cluster (a part of `agent.Agent`), and nodes' readiness."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace

from federation.kernel.durations import parse_duration
from federation.kernel.jobspec import CHECKPOINT_INTERVAL
from federation.v1 import agent_pb2
from member_agent.booking import Booking
from member_agent.drain import drain_timing
from member_agent.gang import gang_request
from member_agent.model import AgentJob, Ending, Narrowed, Renewal
from member_agent.nodehealth import DEFAULT_FAILURE_RATE
from member_agent.placement import Placement

log = logging.getLogger(__name__)


class Moves:
    """Health drains and moves (a part of `agent.Agent`)."""

    def node_ready(self, node: str, ready: bool, why: str = "") -> bool:
        """A lost (or failed) node offers nothing and its pods fail (event Unknown); back, its pods recover."""
        if node not in self.state.free:
            return False
        self.state.set_ready(node, ready)
        for job in list(self.jobs.values()):
            for pod in job.pods:
                if pod.node != node or (pod.task, pod.index) in job.done:
                    continue
                if ready:
                    self.pod_recovered(job.job.id, pod.task, pod.index)
                else:
                    self.pod_failed(job.job.id, pod.task, pod.index, why or f"node {node} lost", kind="Unknown")
        self._queue_inventory()
        return True

    def _knowingly(self, placement: Placement) -> frozenset[str]:
        """The unsound nodes a placement used: nothing healthy fitted, so its gang is not moved off them."""
        return frozenset(p.node for p in placement.pods if p.node in self.state.degraded
                         or p.node in self.state.behind_links)

    def _unsound(self) -> dict[str, tuple[float, str]]:
        """Nodes gangs should leave -> (their failure rate per hour, why)."""
        state = self.state
        out = {n: (DEFAULT_FAILURE_RATE, f"HyperNode {d} links degraded ({state.degraded_links[d]})")
               for n, d in state.behind_links.items()}
        out |= {n: (h.failure_rate, f"node {n} degraded ({', '.join(h.reasons)})") for n, h in state.degraded.items()}
        out |= {n: (0.0, f"node {n} drained by an operator") for n in self.draining}
        return out

    def health_changed(self) -> None:
        """Plan, for every gang on hardware that turned degraded or is being drained, when it moves (at its next
        checkpoint, or at once when waiting risks more work: `drain.drain_timing`); call off the move of a gang
        whose hardware recovered. Level-triggered: the whole plan from the state as it is now."""
        self._health_seen = (id(self.state), self.state.health_version)
        unsound, now = self._unsound(), time.monotonic()
        for job_id in [j for j in self._drains if j not in self.jobs]:
            self._drains.pop(job_id)[0].cancel()
        for job in list(self.jobs.values()):
            on = frozenset(p.node for p in job.pods if (p.task, p.index) not in job.done and p.node in unsound
                           and (p.node not in job.accepted or p.node in self.draining))
            planned = self._drains.get(job.job.id)
            if planned is not None and planned[1] == on:
                continue
            if planned is not None:
                planned[0].cancel()
                del self._drains[job.job.id]
            if not on:
                self._call_off_move(job)
                continue
            timing = drain_timing(now - job.started, _checkpoint(job), max(unsound[n][0] for n in on))
            delay = timing.delay
            deadlines = [d for n in on if (d := self.draining.get(n)) is not None]
            if deadlines and min(deadlines) - now < delay:
                delay = max(0.0, min(deadlines) - now)
            why = "; ".join(sorted({unsound[n][1] for n in on}))
            timer = asyncio.get_running_loop().call_later(delay, self._start_drain, job)
            self._drains[job.job.id] = (timer, on)
            log.info("job %s: %s: %s", job.job.id, why, timing.why)
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=job.job.id, attempt=job.attempt, type=agent_pb2.DRAIN_PLANNED,
                reason=f"{why}; {timing.why if delay == timing.delay else f'moving in {delay:.0f}s (drain grace)'}")))

    def _start_drain(self, job: AgentJob) -> None:
        self._serially(job.job.id, self._drain(job))

    def _fits_without(self, job: AgentJob, keys: set[tuple[str, int]], narrowed: Narrowed) -> bool:
        """Whether these pods of the job could be placed again on healthy hardware, the rest staying."""
        old = [p for p in job.pods if (p.task, p.index) in keys]
        with Booking(self.state, job.requests, job.gang).free(old):  # a trial: undone on leaving
            rest = [p for p in job.pods if p not in old]
            gang = replace(gang_request(job.job.spec, self.state.topology, running=rest), avoid_degraded=True)
            return isinstance(self._fit(gang, narrowed), Placement)

    async def _drain(self, job: AgentJob) -> None:
        """Move the gang off unsound hardware now: its pods there alone when healthy room under its HyperNode
        takes them, else the whole gang elsewhere in this cluster, else back to the federation (EVACUATED). Decided
        here, carried out by reconciling the job's changed desired state."""
        async with self._action_lock:
            planned = self._drains.pop(job.job.id, None)
            if self.jobs.get(job.job.id) is not job or planned is None:
                return
            unsound = self._unsound()
            live = {(p.task, p.index) for p in job.pods if (p.task, p.index) not in job.done}
            moving = {(p.task, p.index) for p in job.pods if (p.task, p.index) in live and p.node in planned[1]
                      and p.node in unsound}
            if not moving:
                return
            why = "; ".join(sorted({unsound[p.node][1] for p in job.pods if (p.task, p.index) in moving}))
            narrowed = await self._narrowed(job.job.spec)
            keys = moving if self._fits_without(job, moving, narrowed) else \
                live if self._fits_without(job, live, narrowed) else None
            drained = any(p.node in self.draining for p in job.pods if (p.task, p.index) in moving)
            if keys is None and not drained:
                # Degraded, not drained: moved only to better hardware, which the federation alone can find
                # (`federation.scheduling.moves`); meanwhile it runs on here.
                want = f"{why}; no healthy room in this cluster"
                if self._move_wanted.get(job.job.id) != want:
                    self._move_wanted[job.job.id] = want
                    log.info("job %s: %s: asking the federation for healthier hardware", job.job.id, want)
                    self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                        job_id=job.job.id, attempt=job.attempt, type=agent_pb2.MOVE_WANTED, reason=want)))
                return
            self._call_off_move(job)
            if keys is None:
                await self._change(job, ending=Ending(agent_pb2.EVACUATED, f"{why}; no healthy room in this cluster: "
                                                      "run it elsewhere"))
            else:
                await self._change(job, renewal=Renewal(frozenset(keys), why, move=True))

    def _call_off_move(self, job: AgentJob) -> None:
        """The gang no longer needs another cluster (its hardware recovered, or room here took it): said once."""
        if self._move_wanted.pop(job.job.id, None) is not None:
            self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
                job_id=job.job.id, attempt=job.attempt, type=agent_pb2.MOVE_WANTED)))


def _checkpoint(job: AgentJob) -> float | None:
    try:
        return parse_duration(job.job.spec.annotations.get(CHECKPOINT_INTERVAL, "")) or None
    except ValueError:
        return None
