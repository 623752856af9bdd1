"""Pods' events and the job's lifecycle policies carried out (a part of `agent.Agent`): failures, evictions and
completions answered as the job's policies say (`lifecycle`), restarts, its maximum run time and ready timeout."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Coroutine, Sequence
from typing import Any, TypeVar

from federation.kernel.durations import seconds_or_none
from federation.kernel.gangs import minimum_pods
from federation.kernel.jobspec import MAX_RUN_TIME, ON_MAX_RUN_TIME, READY_TIMEOUT
from federation.v1 import agent_pb2, common_pb2
from member_agent.lifecycle import ENDINGS, POD_EVENTS, Event, answers, respond
from member_agent.model import AgentJob, Ending, Renewal, placements_of
from member_agent.placement import PodPlacement

log = logging.getLogger(__name__)
T = TypeVar("T")


PHASE_EVENTS = {"Failed": "PodFailed", "Evicted": "PodEvicted", "Unknown": "Unknown"}


class Policies:
    """Pod events and policies (a part of `agent.Agent`)."""

    def pod_phase(self, job_id: str, attempt: int, task: str, index: int, phase: str, reason: str,
                  name: str = "") -> None:
        """The backend saw a pod of ours change, now in this phase (a Kubernetes phase, or Evicted). `name`: the
        pod's, where the cluster names pods (its events may be of a pod the agent already replaced or deleted);
        "": the backend reports only the pods live in the gang. Each pod's phase is taken once."""
        job = self.jobs.get(job_id)
        if job is None and job_id in self._binding:
            self._binding[job_id].append((task, index, phase, reason, name))
        if job is None or job.attempt != attempt:
            return
        live = job.live.get((task, index))
        if live is None or (name and live[0] != name) or live[1] == phase:
            return
        if phase in ("Evicted", "Failed"):
            del job.live[(task, index)]  # whatever happens to it next, its policy has been told
        else:
            job.live[(task, index)] = (live[0], phase)
        if phase in ("Running", "Succeeded") and job.unready is not None:
            job.ran.add((task, index))
            if _ready(job):
                job.unready.cancel()
                job.unready, job.ran = None, set()
        if phase == "Running":
            self.pod_recovered(job_id, task, index)
        elif phase == "Succeeded":
            self._pod_succeeded(job, task, index)
        elif phase in PHASE_EVENTS:
            self.pod_failed(job_id, task, index, reason, PHASE_EVENTS[phase])

    def pod_failed(self, job_id: str, task: str, index: int, reason: str, kind: str = "PodFailed") -> bool:
        """Report a pod's failure, eviction or loss, and answer it with the job's lifecycle policy."""
        job = self.jobs.get(job_id)
        pod = _live(job, task, index) if job else None
        if job is None or pod is None:
            return False
        job.failed[(task, index)] = f"{kind}: {reason}"
        self._send(agent_pb2.AgentMessage(job_update=agent_pb2.JobUpdate(
            job_id=job_id, attempt=job.attempt, type=agent_pb2.POD_FAILED, reason=f"{kind}: {reason}",
            placements=placements_of([pod]))))
        waiting = job.waiting.get((task, index))
        if waiting is None or waiting[0].kind != kind:  # else already waiting to act on this pod
            self._raise(job, Event.of_pod(kind, task, index, reason))
        return True

    def pod_recovered(self, job_id: str, task: str, index: int) -> bool:
        """The pod runs (it started, its container restarted, its node came back): a waiting policy stands down."""
        job = self.jobs.get(job_id)
        if job is None or not self._stand_down(job, (task, index)):
            return False
        job.failed.pop((task, index), None)
        log.info("job %s: %s[%d] runs before its policy acted", job_id, task, index)
        return True

    def _pod_succeeded(self, job: AgentJob, task: str, index: int) -> None:
        """A pod completed. Its share stays the job's until the job ends, as the server counts it."""
        if _live(job, task, index) is None:
            return
        self._stand_down(job, (task, index))
        job.done.add((task, index))
        if len(job.done) == len(job.pods):  # the job is done: what it left in the cluster goes
            self._serially(job.job.id, self._change(job, ending=Ending(agent_pb2.JOB_SUCCEEDED, "all pods completed")))
        elif all((p.task, p.index) in job.done for p in job.pods if p.task == task):
            self._raise(job, Event("TaskCompleted", task, tuple(sorted(k for k in job.done if k[0] == task)),
                                   "all its pods succeeded"))

    def _watch_pending(self, job: AgentJob, pods: Sequence[PodPlacement]) -> None:
        """New pods are Pending until their backend says they run; a PodPending policy waits for that."""
        if not answers(job.job.spec, "PodPending"):
            return  # the common case: nothing to watch, no work per pod
        for pod in pods:
            self._raise(job, Event.of_pod("PodPending", pod.task, pod.index, "created, not running"))

    def _raise(self, job: AgentJob, event: Event) -> None:
        """Answer an event with the job's policy: at once, or when its timeout passes unless it stood down."""
        response = respond(job.job.spec, event, job.retries)
        if response is None:
            return
        key = _key(event)
        self._stand_down(job, key)
        timer = None
        if response.timeout > 0:
            timer = asyncio.get_running_loop().call_later(response.timeout, self._start_acting, job, key)
        job.waiting[key] = (event, timer)
        if timer is None:
            self._start_acting(job, key)

    @staticmethod
    def _stand_down(job: AgentJob, key: tuple[str, int]) -> bool:
        waiting = job.waiting.pop(key, None)
        if waiting is not None and waiting[1] is not None:
            waiting[1].cancel()
        return waiting is not None

    def _start_acting(self, job: AgentJob, key: tuple[str, int]) -> None:
        self._serially(job.job.id, self._act(job, key))

    def _spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.get_running_loop().create_task(work)
        self._acting.add(task)
        task.add_done_callback(self._acting.discard)
        return task

    async def _act(self, job: AgentJob, key: tuple[str, int]) -> None:
        """One action at a time, in the job's turn, decided when it is taken: a node's loss fails several pods
        at once, and each restart must see the retries and the placement the one before left. An event that
        stood down meanwhile (the pod recovered, or a restart replaced it) is no longer there. The policy's
        answer changes the job's desired state; reconciling it carries the answer out."""
        async with self._action_lock:
            waiting = job.waiting.pop(key, None) if self.jobs.get(job.job.id) is job else None
            response = respond(job.job.spec, waiting[0], job.retries) if waiting else None
            if response is None:
                return
            if response.action in ENDINGS or response.action == "FailJob":
                kind = agent_pb2.JOB_SUCCEEDED if ENDINGS.get(response.action, False) else agent_pb2.JOB_FAILED
                await self._change(job, ending=Ending(kind, response.reason))
            else:
                await self._change(job, renewal=Renewal(frozenset(response.pods), response.reason))

    def _limit_run(self, job: AgentJob) -> None:
        """Stop the job when its maximum run time runs out, counted from when this attempt started: the server's
        start time when the job is assigned again while it runs (an agent reconnected or restarted: it adopts the
        pods), else now (a new attempt, whatever an earlier one ran). The job fails, as Kueue's
        maximumExecutionTimeSeconds deactivates a workload."""
        limit = seconds_or_none(job.job.spec.annotations.get(MAX_RUN_TIME))
        if limit is None or limit <= 0:
            return
        status = job.job.status
        running = status.phase in (common_pb2.RUNNING, common_pb2.RESTARTING) and status.HasField("start_time")
        started = status.start_time.ToMicroseconds() / 1e6 if running else time.time()
        left = max(started + limit - time.time(), 0.0)
        text = job.job.spec.annotations[MAX_RUN_TIME]

        def overran() -> None:
            if self.jobs.get(job.job.id) is not job:
                return
            log.info("job %s attempt %d ran past its maximum run time of %s", job.job.id, job.attempt, text)
            why = f"stopped: it ran past its maximum run time of {text} ({MAX_RUN_TIME})"
            requeue = job.job.spec.annotations.get(ON_MAX_RUN_TIME) == "requeue"
            self._serially(job.job.id, self._change(job, ending=Ending(
                agent_pb2.RUN_TIME_EXCEEDED if requeue else agent_pb2.JOB_FAILED, why)))

        job.overrun = asyncio.get_running_loop().call_later(left, overran)

    def _await_ready(self, job: AgentJob, ran: Collection[tuple[str, int]] = ()) -> None:
        """Give the gang back to the federation when its pods are not all running within its ready timeout, counted
        from when this attempt was sent here (Kueue's waitForPodsReady): a gang that cannot start here (an image
        that never arrives, a node that never takes its pods) holds its GPUs for nothing, and the federation may
        have a cluster where it starts. Only the first start is watched: a pod that fails later is its lifecycle
        policy's."""
        limit = seconds_or_none(job.job.spec.annotations.get(READY_TIMEOUT))
        if limit is None or limit <= 0:
            return
        job.ran = set(ran)
        if _ready(job):
            return
        status = job.job.status
        sent = status.dispatch_time.ToMicroseconds() / 1e6 if status.HasField("dispatch_time") else time.time()
        left = max(sent + limit - time.time(), 0.0)
        job.unready = asyncio.get_running_loop().call_later(left, self._start_giving_back, job)

    def _start_giving_back(self, job: AgentJob) -> None:
        if self.jobs.get(job.job.id) is job and job.unready is not None:
            self._serially(job.job.id, self._give_back_unready(job))

    async def _give_back_unready(self, job: AgentJob) -> None:
        """The gang did not start in time: the federation is told (PODS_NOT_READY) to requeue it."""
        if self.jobs.get(job.job.id) is not job or job.unready is None or _ready(job):
            return
        need = minimum_pods(job.job.spec)
        short = ", ".join(f"{task} {min(sum(1 for t, _ in job.ran if t == task), n)} of {n}"
                          for task, n in need.items() if n)
        text = job.job.spec.annotations[READY_TIMEOUT]
        why = f"its pods were not all running {text} after it was sent here ({short} running; {READY_TIMEOUT})"
        log.info("job %s attempt %d: %s", job.job.id, job.attempt, why)
        await self._change(job, ending=Ending(agent_pb2.PODS_NOT_READY, why))


def _ready(job: AgentJob) -> bool:
    """Whether as many of each task's pods have run as its gang's minimum needs (Kueue's PodsReady)."""
    ran: dict[str, int] = {}
    for task, _ in job.ran:
        ran[task] = ran.get(task, 0) + 1
    return all(ran.get(task, 0) >= n for task, n in minimum_pods(job.job.spec).items())


def _live(job: AgentJob, task: str, index: int) -> PodPlacement | None:
    """The job's pod (task, index) when it is there and has not completed."""
    if (task, index) in job.done:
        return None
    return next((p for p in job.pods if p.task == task and p.index == index), None)


def _key(event: Event) -> tuple[str, int]:
    """What a waiting event is filed under: its pod, or its task (-1) for the events of a task or gang."""
    return event.pods[0] if event.kind in POD_EVENTS else (event.task, -1)
