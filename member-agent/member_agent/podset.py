"""A running gang's pods made what its desired state says (a part of `agent.Agent`, called by `reconcile_job` alone):
pods a policy or a drain renews, replicas it started without, its end. Whoever decides such a change (a policy, a
drain, a timer, new room) only records it in `Desired` and reconciles the job, in the job's turn with its orders."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace

from federation.v1 import agent_pb2
from member_agent.booking import Booking
from member_agent.gang import gang_request
from member_agent.metrics import PODS_BOUND
from member_agent.model import ENDED_PODS, AgentJob, Desired, Ending, Renewal, placements_of, runs_short
from member_agent.placement import Rejection

log = logging.getLogger(__name__)


class PodSet:
    """The running attempt's pods against desired state (a part of `agent.Agent`)."""

    async def _change(self, job: AgentJob, renewal: Renewal | None = None, ending: Ending | None = None) -> None:
        """Record what should become of the gang's running attempt, and reconcile the job: the one way its pods
        change once bound. Called in the job's turn (`_serially`); a gang no longer held, or no longer wanted
        here, is left to what removes it."""
        want = self.desired.get(job.job.id)
        if self.jobs.get(job.job.id) is not job or want is None or want.attempt != job.attempt:
            return
        self.desired[job.job.id] = replace(want, renewal=renewal, ending=ending)
        await self.reconcile_job(job.job.id)

    async def _converge(self, job: AgentJob, want: Desired) -> None:
        """The held attempt is the wanted one: end it, renew its pods, or add the replicas it runs without."""
        if want.ending is not None:
            await self._stop(job, want.ending)
        elif want.renewal is not None:
            self.desired[job.job.id] = replace(want, renewal=None)  # carried out once, whatever comes of it
            await self._renewed(job, want.renewal, await self._renew(job, want.renewal))
        elif runs_short(job) and not job.waiting and not job.done:
            await self._grow(job)

    async def _renewed(self, job: AgentJob, renewal: Renewal, failure: str) -> None:
        """Report a renewal: done, or the job's end (a restart that failed fails it; a move with no room gives it
        back to the federation)."""
        if failure == GONE:
            return
        if failure:
            await self._change(job, ending=Ending(agent_pb2.EVACUATED, f"{renewal.reason}; {failure}: run it "
                                                  "elsewhere") if renewal.move else
                               Ending(agent_pb2.JOB_FAILED, f"{renewal.reason}; the restart failed: {failure}"))
            return
        if renewal.move:
            job.started = time.monotonic()  # restarted from its checkpoint
            job.accepted = frozenset()
        self._queue_inventory()
        self._report(agent_pb2.JobUpdate(
            job_id=job.job.id, attempt=job.attempt, type=agent_pb2.DRAINED if renewal.move else agent_pb2.POD_RESTARTED,
            reason=f"moved {len(renewal.pods)} pod(s) off: {renewal.reason}" if renewal.move else renewal.reason,
            hypernode=job.hypernode, tier=job.tier, retries=job.retries, placements=placements_of(job.pods)))

    async def _renew(self, job: AgentJob, renewal: Renewal) -> str:
        """Recreate these pods of the job, back under the HyperNode holding the rest; why not, if it fails.
        A restart by policy counts as a retry; a move off degraded hardware does not, and avoids it."""
        keys = set(renewal.pods)
        job.retries += not renewal.move
        if renewal.move:
            job.moved = uuid.uuid4().hex[:5]
        old = [p for p in job.pods if (p.task, p.index) in keys]
        await self._delete(job, old)
        narrowed = await self._narrowed(job.job.spec)
        if self.jobs.get(job.job.id) is not job:
            return GONE
        Booking(self.state, job.requests).free(old).commit()
        for pod in old:
            self._stand_down(job, (pod.task, pod.index))
        job.done -= keys
        for key in keys:
            job.failed.pop(key, None)
        self._count_held(job, -1)
        job.pods = [p for p in job.pods if p not in old]
        self._count_held(job, 1)
        gang = gang_request(job.job.spec, self.state.topology, running=job.pods)
        placement = self._fit(replace(gang, avoid_degraded=True) if renewal.move else gang, narrowed)
        if isinstance(placement, Rejection):
            return placement.reason
        # Kept whether or not the binding succeeds: what failed is the job's policy's to answer, with its pods.
        Booking(self.state, job.requests, job.gang).book(placement.pods).commit()
        job.accepted |= self._knowingly(placement)
        self._count_held(job, -1)
        job.pods += placement.pods
        self._count_held(job, 1)
        job.hypernode, job.tier = placement.hypernode, placement.tier
        self._watch_pending(job, placement.pods)  # before binding: they may start before it returns
        err = await self._bind(job, placement.pods)
        if err is not None:
            return f"binding failed: {err}"
        PODS_BOUND.inc(len(placement.pods))
        return ""

    async def _grow(self, job: AgentJob) -> None:
        """Place the replicas a running gang was started without (it started at its minimum), where they
        fit under the HyperNode holding the rest, as Volcano binds them when room comes."""
        narrowed = await self._narrowed(job.job.spec)
        if self.jobs.get(job.job.id) is not job:
            return
        placement = self._fit(gang_request(job.job.spec, self.state.topology, running=job.pods), narrowed, job.job.id)
        if isinstance(placement, Rejection) or not placement.pods:
            return
        booking = Booking(self.state, job.requests, job.gang).book(placement.pods)
        err = await self._bind(job, placement.pods)
        if err is not None:
            booking.discard()
            log.info("job %s: %d more replicas could not be bound: %s", job.job.id, len(placement.pods), err)
            return
        booking.commit()
        PODS_BOUND.inc(len(placement.pods))
        self._count_held(job, -1)
        job.pods += placement.pods
        self._count_held(job, 1)
        job.hypernode, job.tier = placement.hypernode, placement.tier
        self._queue_inventory()
        self._report(agent_pb2.JobUpdate(
            job_id=job.job.id, attempt=job.attempt, type=agent_pb2.PODS_ADDED,
            reason=f"{len(placement.pods)} more replicas joined ({len(job.pods)} running)",
            hypernode=job.hypernode, tier=job.tier, retries=job.retries, placements=placements_of(job.pods)))

    async def _stop(self, job: AgentJob, ending: Ending) -> None:
        """End the attempt here: the job's end (its pods stopped, those that ended kept, as Kubernetes keeps a
        Job's), or the job given back to the federation to run again (its pods deleted)."""
        if ending.ends_the_job:
            job.unfollow()  # its pods still running are stopped: not evicted
            await self.backend.end(job)
            self._finish(job, ending.kind == agent_pb2.JOB_SUCCEEDED, ending.reason)
            return
        await self._delete(job)
        self._ended(job, ending)

    def _finish(self, job: AgentJob, succeeded: bool, reason: str) -> None:
        if self.jobs.get(job.job.id) is not job:
            return
        # Its pods as they ended (a user reads them after the job too, and the cluster keeps them for a while),
        # then the end itself. Pods it stopped are going, and not listed.
        self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
            job_id=job.job.id, attempt=job.attempt, type=agent_pb2.POD_STATUS,
            pod_statuses=[p for p in self.backend.pod_statuses(job) if p.phase in ENDED_PODS])))
        self._ended(job, Ending(agent_pb2.JOB_SUCCEEDED if succeeded else agent_pb2.JOB_FAILED, reason))

    def _ended(self, job: AgentJob, ending: Ending) -> None:
        """The attempt's pods are stopped or gone: it holds nothing here and is no longer wanted here; say so."""
        if self.jobs.get(job.job.id) is not job:
            return
        self._forget(job)
        want = self.desired.get(job.job.id)
        if want is not None and want.attempt == job.attempt:
            del self.desired[job.job.id]
        # The update before the inventory, so the server never sees the freed resources while it still
        # counts them as the job's: that would hand them to whoever is next, not to the queue they are owed to.
        self._report(agent_pb2.JobUpdate(job_id=job.job.id, attempt=job.attempt, type=ending.kind,
                                         reason=ending.reason))
        self._send_inventory()


GONE = "the job was removed meanwhile"
