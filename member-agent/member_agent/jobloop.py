"""The job loop (a part of `agent.Agent`): orders in, each job's desired attempt against what runs of it, one
job's work at a time; placing and binding a gang, adopting one found running, releasing one no longer wanted."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Coroutine, Sequence
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from federation.kernel.dra import class_resource
from federation.kernel.gangs import minimum_pods
from federation.v1 import agent_pb2, common_pb2
from member_agent.booking import Booking
from member_agent.errors import BindError
from member_agent.gang import gang_request, narrowed_requests
from member_agent.holds import kept
from member_agent.lifecycle import Event, respond
from member_agent.metrics import BIND_SECONDS, PLACEMENTS, PODS_BOUND, TRANSIENT_RETRIES
from member_agent.model import (
    ENDED_PODS,
    AgentJob,
    Desired,
    Narrowed,
    Preparing,
    gang_size,
    placements_of,
    task_requests,
)
from member_agent.placement import GangRequest, Placement, PodPlacement, Rejection, place
from member_agent.pods import pod_name
from member_agent.provisioning import Ask

log = logging.getLogger(__name__)
T = TypeVar("T")


NODE_ORDERS = "node orders"  # their own line of _serially (no job id has a space)
BIND_TRIES = 4  # a transient refusal is tried again this many times in all, within the same assignment
BIND_BACKOFF = wait_exponential(multiplier=0.5, max=4)  # 0.5 s, 1 s, 2 s between them


class JobLoop:
    """Orders, and each job reconciled (a part of `agent.Agent`)."""

    def dispatch(self, message: agent_pb2.ControlMessage) -> None:
        """Carry out an order in the background: one job's orders in the order they came, different jobs'
        side by side (at most MAX_IN_FLIGHT), so binding one gang does not hold up the next. Placement is
        still one gang at a time: it never awaits, and books what it chose before binding starts."""
        order = getattr(message, message.WhichOneof("msg") or "assign", None)
        job_id = order.job.id if isinstance(order, agent_pb2.Assign) else getattr(order, "job_id", "")
        if isinstance(order, agent_pb2.NodeOrder):
            job_id = NODE_ORDERS  # one after another, beside the gangs' orders rather than before them
        self._serially(job_id, self.handle(message))

    def _serially(self, job_id: str, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run `work` after whatever is under way or waiting for the same job (at most MAX_IN_FLIGHT at once)."""
        lock, pending = self._orders.get(job_id, (asyncio.Lock(), 0))
        self._orders[job_id] = (lock, pending + 1)

        async def carry_out() -> T:
            try:
                async with lock, self._in_flight:
                    return await work
            finally:
                lock_now, left = self._orders[job_id]
                if left == 1:
                    del self._orders[job_id]
                else:
                    self._orders[job_id] = (lock_now, left - 1)

        return self._spawn(carry_out())

    async def handle(self, message: agent_pb2.ControlMessage) -> None:
        kind = message.WhichOneof("msg")
        if kind == "assign":
            await self.assign(message.assign.job, message.assign.attempt)
        elif kind in ("cancel", "preempt"):
            order = getattr(message, kind)
            await self.remove(order.job_id, order.attempt, order.reason)
        elif kind == "logs":
            self.open_logs(message.logs)
        elif kind == "logs_cancel":
            self.close_logs(message.logs_cancel.stream_id)
        elif kind == "node_order":
            done = await self.order_node(message.node_order)
            log.info("operator order: %s", done.message)
            self._send(agent_pb2.AgentMessage(node_order_done=done))

    async def assign(self, job: common_pb2.Job, attempt: int) -> None:
        """The federation runs this attempt here: record it as desired and reconcile the job. A repeat, or an
        older attempt, is answered with what was already done."""
        held, report = self.jobs.get(job.id), self.reports.get(job.id)
        room = self._rooms.get(job.id)
        if held is None and room is not None and room.attempt == attempt:
            if not self.holds_only(job):  # its HyperJob committed: bind it where its room is held
                self.desired[job.id] = Desired(job, attempt)
                await self.reconcile_job(job.id)
            elif report is not None:
                self._send(agent_pb2.AgentMessage(job_update=report))
            return
        if held is not None and attempt <= held.attempt:
            if attempt == held.attempt and report is not None:
                self._send(agent_pb2.AgentMessage(job_update=report))
            return
        if held is None and report is not None and report.attempt >= attempt:
            self._send(agent_pb2.AgentMessage(job_update=report))
            return
        self.desired[job.id] = Desired(job, attempt)
        await self.reconcile_job(job.id)

    async def reconcile_job(self, job_id: str, stale: Collection[int] = ()) -> int:
        """Make what runs of the job in this cluster what the federation wants, from desired state (the attempt
        it last assigned here, if any) and actual state (the attempt this agent holds, and the attempts whose
        pods the cluster holds): an attempt held and not wanted is released; pods of an older attempt, or of
        one the server said is not live (`stale`), are deleted; the wanted attempt, when not held, is adopted
        from the pods it already has, or placed and bound. Idempotent, as controller-runtime's Reconcile: every
        order, reconciliation answer and restart comes here; the held attempt's own pods are made what its desired
        state says (`podset`). The one caller, through them, of bind and delete. Returns how many pods of `stale`
        were deleted."""
        want, held = self.desired.get(job_id), self.jobs.get(job_id)
        deleted, released = 0, None
        prep = self._preparing.get(job_id)
        if prep is not None and (want is None or want.attempt != prep.attempt):
            self._stop_preparing(job_id)
        ask = self._asks.get(job_id)
        if ask is not None and (want is None or want.attempt != ask.attempt):
            await self.drop_ask(job_id)
        room = self._rooms.get(job_id)
        if room is not None and (want is None or want.attempt != room.attempt):
            self.drop_room(job_id)
        if held is not None and (want is None or want.attempt != held.attempt):
            deleted += len(held.pods) if held.attempt in stale else 0
            released = held.attempt
            await self._release(held)
            self.capacity_changed()  # one inventory for a burst of releases (a fence, a drain): not one each
        found = self.backend.attempts(job_id)
        for attempt in sorted(found):
            if attempt != released and (attempt in stale or (want is not None and attempt < want.attempt)):
                last = want is None and job_id not in self.jobs and set(found) <= {attempt, *stale}
                deleted += await self.backend.delete_attempt(job_id, attempt, anchor=last)
        if want is not None and job_id not in self.jobs:
            if job_id in self._rooms and self.holds_only(want.job):
                return deleted  # its room is held: the commit binds it
            if await self._adopt(want.job, want.attempt):
                PLACEMENTS.labels("adopted").inc()
                return deleted
            succeeded, failed = self.backend.ended(job_id, want.attempt)
            if succeeded or failed:  # its pods ended while no agent watched
                whole = not failed and succeeded >= sum(minimum_pods(want.job.spec).values())
                await self.backend.delete_attempt(job_id, want.attempt, anchor=whole, keep_ended=whole)
                if whole:  # at least the gang's minimum completed, none failed: it is done
                    del self.desired[job_id]
                    self._report(agent_pb2.JobUpdate(
                        job_id=job_id, attempt=want.attempt, type=agent_pb2.JOB_SUCCEEDED,
                        reason=f"all {succeeded} pods had completed when the agent found them after a restart"))
                    return deleted
            await self._place(want.job, want.attempt)  # a remnant lost unwatched is not the job's fault: whole again
        elif want is not None and self.jobs[job_id].attempt == want.attempt:
            await self._converge(self.jobs[job_id], want)
        return deleted

    async def _narrowed(self, spec: common_pb2.JobSpec) -> Narrowed:
        """Where the job's DRA claims have CEL selectors of their own, only some of their classes' devices can be
        its pods': those classes, and per node how many of their devices the pods could be given (counted off the
        event loop); None where there are none, or the cluster has no DRA."""
        requests = narrowed_requests(spec)
        work = self.backend.narrowing(requests) if requests else None
        if work is None:
            return None
        counts, never = await asyncio.to_thread(work)
        return {class_resource(r.device_class) for r in requests}, counts, never

    def _fit(self, gang: GangRequest, narrowed: Narrowed, placing: str | None = None) -> Placement | Rejection:
        """Where the gang fits now, its narrowed DRA classes counted as its pods could be given them. `placing`:
        the job whose new pods these are, kept off the nodes kept for the gangs the federation holds room for
        (`holds`); None for pods a running gang gets back (restarts and moves keep what it had)."""
        held = kept(self.state, self.holds, placing) if placing is not None and self.holds else {}
        with self.state.lowered(held):
            if narrowed is None:
                return place(self.state, gang)
            with self.state.narrowed(narrowed[0], narrowed[1]):
                return place(self.state, gang)

    async def _place(self, job: common_pb2.Job, attempt: int) -> None:
        """Place the gang and bind all its pods or none; report the outcome."""
        started = time.monotonic()
        hold = self.holds_only(job)
        room = None if hold else self.take_room(job.id, attempt)
        placement = room.placement if room is not None else await self._placement(job, attempt)
        if placement is None:
            return
        if hold:  # a HyperJob's sub-job: booked, not bound, until its HyperJob commits
            self.hold_room(job, attempt, placement, Booking(self.state, task_requests(job.spec), gang_size(job.spec))
                           .book(placement.pods))
            return
        prep = self._stop_preparing(job.id)
        ask = self._asks.get(job.id)
        requests = task_requests(job.spec)
        # Restarts count over the job's whole life (the server's count so far), not per attempt.
        bound = AgentJob(job, attempt, list(placement.pods), requests, placement.hypernode, placement.tier,
                         retries=job.status.retries, accepted=self._knowingly(placement),
                         consumes=ask.name if ask is not None else "")
        booking = room.booking if room is not None else Booking(self.state, requests, gang_size(job.spec)).book(
            bound.pods)
        await self._bind_gang(job, attempt, bound, booking, started, prep, ask)

    async def _placement(self, job: common_pb2.Job, attempt: int) -> Placement | None:
        """Where the gang fits now; None when it does not (reported, or waiting here for slices or nodes)."""
        request = gang_request(job.spec, self.state.topology)
        narrowed = await self._narrowed(job.spec)
        if narrowed is not None and narrowed[2]:  # whatever is free: never offered this cluster again
            PLACEMENTS.labels("rejected").inc()
            self.desired.pop(job.id, None)
            self._report(agent_pb2.JobUpdate(job_id=job.id, attempt=attempt, type=agent_pb2.REJECTED,
                                             reason="; ".join(narrowed[2]), permanent=True))
            return None
        placement = self._fit(request, narrowed, job.id)
        if isinstance(placement, Rejection) and self.holds and isinstance(self._fit(request, narrowed), Placement):
            # (whose gangs is not said: another tenant's, maybe)
            placement = Rejection(f"{placement.reason}; the nodes it would fit are kept for a gang the federation "
                                  "holds room for here")
        if isinstance(placement, Rejection):
            if self.holds_only(job):  # a sub-job's room is had now or not at all: its HyperJob waits elsewhere
                why: str | None = placement.reason
            elif self.wants_nodes(job):
                why = await self.ask_for_nodes(job, attempt, placement.reason, task_requests(job.spec))
            else:
                why = await self._repartition(job, attempt, placement.reason, request)
            if why is None:  # waits here for its slices or its nodes
                return None
            PLACEMENTS.labels("rejected").inc()
            self.desired.pop(job.id, None)  # the server takes it back
            self._report(agent_pb2.JobUpdate(job_id=job.id, attempt=attempt, type=agent_pb2.REJECTED, reason=why))
            return None
        return placement

    async def _bind_gang(self, job: common_pb2.Job, attempt: int, bound: AgentJob, booking: Booking, started: float,
                         prep: Preparing | None, ask: Ask | None) -> None:
        """Bind all the gang's pods where they were placed and booked, or none; report the outcome."""
        self._binding[job.id] = early = []
        try:
            err = await self._bind(bound, bound.pods, BIND_TRIES)
        finally:
            del self._binding[job.id]
        if err is not None:
            booking.discard()
            PLACEMENTS.labels("rejected").inc()
            self.desired.pop(job.id, None)
            tries = "" if err.permanent else f" (after {BIND_TRIES} tries)"
            self._report(agent_pb2.JobUpdate(job_id=job.id, attempt=attempt, type=agent_pb2.REJECTED,
                                             reason=f"{err}{tries}", permanent=err.permanent))
            return
        booking.commit()
        PLACEMENTS.labels("bound").inc()
        PODS_BOUND.inc(len(bound.pods))
        BIND_SECONDS.observe(time.monotonic() - started)
        self.jobs[job.id] = bound
        self._count_held(bound, 1)
        self._limit_run(bound)
        self._await_ready(bound)
        self._queue_inventory(coalesce=True)  # before the update, so the server never sees the job without its usage
        said = f"placed after NVIDIA's MIG manager repartitioned {prep.said}" if prep else \
            f"placed once the autoscaler provisioned {ask.said}" if ask else ""
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.BOUND, hypernode=bound.hypernode,
            tier=bound.tier, placements=placements_of(bound.pods), reason=said))
        if ask is not None:  # its pods hold the nodes now: the request has done its part
            self._spawn(self.drop_ask(job.id))
        self._watch_pending(bound, bound.pods)
        for phase in early:  # what the pods did while the gang was being bound
            self.pod_phase(job.id, attempt, *phase)

    async def _adopt(self, job: common_pb2.Job, attempt: int) -> bool:
        """Take over the pods this attempt already has, as a restarted agent must, instead of making more.

        A gang found whole is the job's again, counted by its tasks' requests. A gang found in pieces
        raises JobUnknown: a policy may keep the survivors and restart the missing pods, or end the
        job; with none, the pieces are deleted and the gang placed afresh, since pods lost while no
        agent watched are not the job's fault and a whole gang is the safe start.
        """
        found = await self.backend.adopt(job.id, attempt)
        if not found:
            return False
        requests = task_requests(job.spec)
        booking = Booking(self.state, requests, gang_size(job.spec)).book(found)
        hypernode = self.state.topology.lowest_common_domain(p.node for p in found)
        adopted = AgentJob(job, attempt, found, requests, hypernode, self.state.topology.domains[hypernode].tier,
                           retries=job.status.retries)
        have = {(p.task, p.index) for p in found}
        statuses = self.backend.pod_statuses(adopted)  # the cluster's word on them is taken from here on
        adopted.live = {(s.task, s.index): (s.name, s.phase) for s in statuses if (s.task, s.index) in have
                        and s.phase not in (*ENDED_PODS, "Terminating")}
        missing = tuple((t.name, i) for t in job.spec.tasks for i in range(t.replicas) if (t.name, i) not in have)
        unknown = Event("JobUnknown", "", missing,
                        f"the agent restarted and found {len(found)} of the gang's {len(found) + len(missing)} pods")
        if missing and respond(job.spec, unknown, adopted.retries) is None:
            await self._delete(adopted)
            booking.discard()
            return False
        booking.commit()
        self.jobs[job.id] = adopted
        self._count_held(adopted, 1)
        self._limit_run(adopted)
        self._await_ready(adopted, {(p.task, p.index) for p in statuses if p.phase in ("Running", "Succeeded")})
        self._queue_inventory()
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.BOUND, hypernode=hypernode, tier=adopted.tier,
            reason=f"adopted {len(found)} running pods after the agent restarted",
            placements=placements_of(found)))
        log.info("adopted %d pods of job %s attempt %d", len(found), job.id, attempt)
        if missing:
            self._raise(adopted, unknown)
        return True

    async def remove(self, job_id: str, attempt: int, reason: str) -> None:
        """The federation no longer runs this attempt here (cancelled, preempted, moved): reconcile the job."""
        want = self.desired.get(job_id)
        if want is not None and want.attempt == attempt:
            del self.desired[job_id]
        room = self._rooms.get(job_id)
        if room is not None and room.attempt == attempt:
            self.drop_room(job_id)
        prep = self._preparing.get(job_id)
        if prep is not None and prep.attempt == attempt:
            self._stop_preparing(job_id)
        ask = self._asks.get(job_id)
        if ask is not None and ask.attempt == attempt:
            await self.drop_ask(job_id)
        current = self.jobs.get(job_id)
        if current is None or current.attempt != attempt:
            return
        await self.reconcile_job(job_id)
        log.info("removed job %s attempt %d: %s", job_id, attempt, reason)

    async def _release(self, job: AgentJob) -> None:
        await self._delete(job)
        self._forget(job)

    async def _bind(self, job: AgentJob, pods: Sequence[PodPlacement], tries: int = 1) -> BindError | None:
        """Create and bind these pods of the job, trying a transient refusal again up to `tries` times in all;
        what refused them, if anything did. The one place the agent binds pods. Their phases are followed from
        before they are made: a pod may start before its gang's last binding returns."""
        made = {(p.task, p.index): (pod_name(job, p.task, p.index), "Pending") for p in pods}
        job.live.update(made)
        try:
            async for trying in AsyncRetrying(retry=retry_if_exception(_transient), wait=BIND_BACKOFF,
                                              stop=stop_after_attempt(tries), reraise=True,
                                              before_sleep=_retrying(job.job.id)):
                with trying:
                    await self.backend.bind(job, pods)
        except BindError as err:
            job.unfollow(made)  # the backend deleted what it made of them
            return err
        return None

    async def _delete(self, job: AgentJob, pods: Sequence[PodPlacement] | None = None) -> None:
        """Delete these pods of the job (None: all of them). The one place the agent deletes a job's pods; gone
        by its hand, their deletion is not an eviction."""
        job.unfollow(None if pods is None else [(p.task, p.index) for p in pods])
        await self.backend.delete(job, pods)

    def _forget(self, job: AgentJob) -> None:
        """Release the job's resources, once: a cancel and a policy's ending may both be under way."""
        if self.jobs.get(job.job.id) is not job:
            return
        self._catch_up_inventory()  # what it frees must not show in an inventory ahead of its end's update
        self._queued_inventory = None
        if job.overrun is not None:
            job.overrun.cancel()
        if job.unready is not None:
            job.unready.cancel()
        Booking(self.state, job.requests).free(job.pods).commit()
        for key in list(job.waiting):
            self._stand_down(job, key)
        self._move_wanted.pop(job.job.id, None)
        self._count_held(job, -1)
        del self.jobs[job.job.id]


def _transient(err: BaseException) -> bool:
    return isinstance(err, BindError) and not err.permanent


def _retrying(job_id: str) -> Callable[[RetryCallState], None]:
    def note(state: RetryCallState) -> None:
        TRANSIENT_RETRIES.inc()
        log.info("job %s: the cluster refused for now (%s); trying again", job_id,
                 state.outcome.exception() if state.outcome else "")
    return note
