"""The trace replayed under a hardware failure model: restart-after-crash against proactive drain.

Failure model (Meta's Llama 3 405B run: 419 unexpected interruptions in 54 days on 16,384 H100s, so a GPU is
interrupted about once every 50,700 GPU-hours): each node fails as a Poisson process at 8 GPUs times that rate;
a share `warned` of failures is preceded by a degradation warning (a health monitor's XID/ECC/NVLink condition)
an exponentially distributed lead time before the failure (mean `lead`); a failed node is repaired after
`repair` and healthy again. Every draw comes from one seed, so both policies meet the very same failures.

Jobs are the trace's gangs (8 GPUs and more), each pod a whole node, checkpointing every `checkpoint` of
progress. A gang whose node fails loses the work since its last checkpoint, the time to notice the crash
(`member_agent.drain.CRASH_DETECTION`) and a restart (`restart`), and is placed again. Policies:

- `restart-after-crash`: health is not read; gangs run on degrading nodes until they fail (today without it);
- `proactive-drain`: the agent's own cores: `placement.place` avoids degraded nodes, and a gang on a node that
  turns degraded moves when `drain.drain_timing` says (its next checkpoint, or at once when waiting risks more),
  paying a restart and any work since its checkpoint; failing first is a crash as above.

Effective training time: useful GPU-hours (the trace's durations) over GPU-hours held (every run, lost work,
restarts and crash detection included). Pure simulated time: the same seed gives the same result.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from bench.replay.capacity import GPU, GPUS_PER_NODE, Shape, build
from bench.replay.trace import TraceJob
from member_agent.drain import CRASH_DETECTION, drain_timing
from member_agent.nodehealth import DEGRADED, NodeHealth
from member_agent.placement import GangRequest, Placement, TaskRequest, place
from member_agent.state import ClusterState

POLICIES = ("restart-after-crash", "proactive-drain")
HOUR = 3600.0
# 419 interruptions / (54 days x 24 h x 16,384 GPUs): per GPU-hour
LLAMA3_GPU_FAILURE_RATE = 419 / (54 * 24 * 16_384)


@dataclass(frozen=True)
class FailureModel:
    gpu_rate: float = LLAMA3_GPU_FAILURE_RATE  # failures per GPU-hour
    warned: float = 0.5  # share of failures preceded by a degradation warning
    lead: float = 2 * HOUR  # mean warning lead time, seconds
    repair: float = 24 * HOUR  # seconds a failed node is out
    checkpoint: float = 30 * 60  # seconds of progress between two checkpoints
    restart: float = 300.0  # seconds a gang needs to start again from a checkpoint (a planned move too)


@dataclass(frozen=True, order=True)
class Failure:
    at: float
    node: str
    warned_at: float | None  # None: no warning


def draw_failures(nodes: Sequence[str], horizon: float, model: FailureModel, seed: int) -> list[Failure]:
    """Each node's failures over `horizon` seconds; a warning, when drawn, comes an Exp(lead) time before."""
    rng = random.Random(seed)
    rate = model.gpu_rate * GPUS_PER_NODE / HOUR  # per node-second
    out = []
    for node in sorted(nodes):
        t = 0.0
        while True:
            t += rng.expovariate(rate)
            if t >= horizon:
                break
            warned = rng.random() < model.warned
            lead = rng.expovariate(1 / model.lead) if warned else 0.0
            out.append(Failure(t, node, max(0.0, t - lead) if warned else None))
            t += model.repair  # out for repair: no second failure meanwhile
    return sorted(out)


@dataclass(eq=False)
class Run:
    job: TraceJob
    pods: int
    left: float  # seconds of progress still to do
    placement: Placement | None = None
    began: float = 0.0  # when its GPUs were taken
    progress_from: float = 0.0  # when progress (re)started: began plus the restart
    end_event: int = -1
    move_event: int = -1
    held: float = 0.0  # GPU-seconds held so far
    crashes: int = 0
    moves: int = 0


@dataclass
class Outcome:
    useful_gpu_h: float = 0.0
    held_gpu_h: float = 0.0
    crashes: int = 0
    moves: int = 0
    moved_at_checkpoint: int = 0
    failures: int = 0
    failures_hitting_gangs: int = 0
    unfinished: int = 0

    @property
    def lost_gpu_h(self) -> float:
        return self.held_gpu_h - self.useful_gpu_h

    @property
    def effective(self) -> float:
        return self.useful_gpu_h / self.held_gpu_h if self.held_gpu_h else 1.0


def gang_of(job: TraceJob, pods: int, leaf_gpus: int) -> GangRequest:
    hard = job.gpus <= leaf_gpus
    return GangRequest(tasks=(TaskRequest("worker", pods, {GPU: GPUS_PER_NODE}),), mode="hard" if hard else "soft",
                       highest_tier=1 if hard else None)


def replay(jobs: Sequence[TraceJob], shape: Shape, failures: Sequence[Failure], model: FailureModel,
           policy: str) -> Outcome:
    """One policy over the trace's gangs and the drawn failures, in one cluster of `shape` (its first)."""
    state: ClusterState = next(iter(build(shape).values()))
    proactive = policy == "proactive-drain"
    events: list[tuple[float, int, str, object]] = []
    seq = 0

    def push(at: float, kind: str, what: object) -> int:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (at, seq, kind, what))
        return seq

    gangs = [j for j in jobs if j.gpus >= GPUS_PER_NODE]
    for job in gangs:
        push(job.submit, "arrive", job)
    for f in failures:
        if f.warned_at is not None:
            push(f.warned_at, "warn", f)
        push(f.at, "fail", f)
        push(f.at + model.repair, "repair", f)
    waiting: deque[Run] = deque()
    running: dict[str, set[Run]] = {}  # node -> gangs with a pod there
    live: set[int] = set()  # event ids still wanted (a moved or crashed gang's old end is not)
    degraded: dict[str, NodeHealth] = {}
    rate = 1 / (model.lead / HOUR)  # per hour: a warned node fails at the end of an Exp(lead) lead time
    out = Outcome(failures=len(failures))
    now = 0.0

    def start(run: Run, restart: float) -> bool:
        placement = place(state, gang_of(run.job, run.pods, shape.leaf_gpus))
        if not isinstance(placement, Placement):
            return False
        for p in placement.pods:
            state.allocate(p.node, {GPU: GPUS_PER_NODE}, gang=len(placement.pods))
            running.setdefault(p.node, set()).add(run)
        run.placement, run.began, run.progress_from = placement, now, now + restart
        run.end_event = push(run.progress_from + run.left, "end", run)
        live.add(run.end_event)  # placed on degraded hardware only when nothing healthy fitted: left there then
        return True

    def stop(run: Run, lost_since_checkpoint: bool) -> None:
        """Take the gang off its nodes now; its progress up to its last checkpoint is kept."""
        assert run.placement is not None
        run.held += (now - run.began) * run.job.gpus
        progressed = max(0.0, now - run.progress_from)
        kept = math.floor(progressed / model.checkpoint) * model.checkpoint if lost_since_checkpoint else progressed
        run.left -= min(kept, run.left)
        for p in run.placement.pods:
            state.release(p.node, {GPU: GPUS_PER_NODE})
            running[p.node].discard(run)
        live.discard(run.end_event)
        live.discard(run.move_event)
        run.placement = None

    def admit() -> None:
        for _ in range(len(waiting)):
            run = waiting.popleft()
            if not start(run, model.restart if (run.crashes or run.moves) else 0.0):
                waiting.append(run)

    def plan_move(run: Run) -> None:
        if run.move_event in live:
            return
        timing = drain_timing(max(0.0, now - run.progress_from), model.checkpoint, rate, model.restart)
        run.move_event = push(now + timing.delay, "move", run)
        live.add(run.move_event)

    while events:
        now, eid, kind, what = heapq.heappop(events)
        if kind == "arrive":
            assert isinstance(what, TraceJob)
            waiting.append(Run(what, what.gpus // GPUS_PER_NODE, what.duration))
            admit()
        elif kind == "end":
            run = what
            assert isinstance(run, Run)
            if eid not in live:
                continue
            stop(run, lost_since_checkpoint=False)
            out.useful_gpu_h += run.job.duration * run.job.gpus / HOUR
            out.held_gpu_h += run.held / HOUR
            admit()
        elif kind == "warn" and proactive:
            assert isinstance(what, Failure)
            degraded[what.node] = NodeHealth(DEGRADED, ("warning",), failure_rate=rate)
            state.set_health(dict(degraded), {})
            for run in list(running.get(what.node, ())):
                plan_move(run)
        elif kind == "move":
            run = what
            assert isinstance(run, Run)
            if eid not in live:
                continue
            at_checkpoint = (now - run.progress_from) % model.checkpoint < 1e-6
            stop(run, lost_since_checkpoint=True)
            run.moves += 1
            out.moves += 1
            out.moved_at_checkpoint += at_checkpoint
            if not start(run, model.restart):
                waiting.appendleft(run)
        elif kind == "fail":
            assert isinstance(what, Failure)
            hit = list(running.get(what.node, ()))
            out.failures_hitting_gangs += bool(hit)
            for run in hit:
                stop(run, lost_since_checkpoint=True)
                run.held += CRASH_DETECTION * run.job.gpus  # running, broken, until the crash is noticed
                run.crashes += 1
                out.crashes += 1
                waiting.appendleft(run)
            degraded.pop(what.node, None)
            state.set_ready(what.node, False)
            state.set_health(dict(degraded), {})
            admit()
        elif kind == "repair":
            assert isinstance(what, Failure)
            state.set_ready(what.node, True)
            admit()
    out.unfinished = len(waiting)
    return out
