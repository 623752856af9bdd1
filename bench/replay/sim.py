"""Replay a trace in simulated time: no clock, no sleeping, the same result for the same input.

Arrivals and completions are events; a scheduling cycle runs when something changed and jobs wait,
at most once per `interval` simulated seconds (the server cycles on events and every second; a
coarser step keeps two months of trace affordable and is the same for every policy). Policies:

- `fair`: the federation server's scheduling core (`federation.scheduling.cycle.schedule`: fair
  shares, priorities, reservations, reclaim) picks a cluster; the member agent's placement core
  (`member_agent.placement.place`) places the gang in it, hard tier-1 limit where a leaf can hold
  it, soft otherwise. A refusal sends the job back, as an agent's rejection does.
- `fair-history`: `fair` with usage history in the order of queue heads (half-life a day, weight 1: the server's
  `--usage-half-life 86400 --usage-history-weight 1`), each tenant's GPUs held integrated as the server's leader
  does.
- `topology-off`: the same scheduler; gangs carry no topology constraint and are placed on the same
  nodes with no HyperNodes, so nothing keeps them under one leaf.
- `fifo`: first come, first served across the federation, first fit: the oldest job goes to the
  first cluster and the first nodes with room; nothing behind it starts while it waits.

A preempted (reclaimed) job returns to its queue and runs again from the start, as a job without
checkpoints would; the GPU time it lost is counted.
"""

from __future__ import annotations

import heapq
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from bench.replay.capacity import GPU, GPUS_PER_NODE, Shape, build, cluster_names, leaf_of
from bench.replay.trace import TraceJob
from federation.scheduling.cycle import Decisions, PendingJob, QueueInfo, RunningJob, Snapshot, TenantInfo, schedule
from federation.scheduling.fairshare import water_fill
from federation.scheduling.fit import ClusterView, DomainFree, JobView
from federation.scheduling.forecast import Holding, Waiting, after_cycle, remaining
from federation.scheduling.usage import Decay, decayed, mean
from member_agent.placement import GangRequest, PodPlacement, Rejection, TaskRequest, place
from member_agent.state import ClusterState
from member_agent.topology import ROOT

POLICIES = ("fair", "fair-history", "topology-off", "fifo")
FAIR = ("fair", "fair-history")  # the policies placing with topology
HISTORY = Decay(half_life=86400.0, weight=1.0)  # fair-history's
HOUR = 3600.0
# The replay's priority class: a gang runs this long before another tenant may reclaim it (the trace's jobs keep
# no checkpoints, so an eviction loses all they did).
PROTECTED_RUN_TIME = 0.0


@dataclass(slots=True)
class Record:
    """What happened to one job."""

    job: TraceJob
    start: float = -1.0  # of the run that completed
    first_start: float = -1.0
    finish: float = -1.0
    cluster: str = ""
    leaves: int = 0  # tier-1 HyperNodes its pods spanned
    preemptions: int = 0
    lost_gpu_seconds: float = 0.0
    # When the forecast expected it to start, asked in the first cycle it waited through; and the naive
    # estimate (its place in its queue times its queue's mean run time). -1: it never waited a cycle.
    forecast: float = -1.0
    naive: float = -1.0


@dataclass
class Result:
    policy: str
    shape: Shape
    records: list[Record]
    utilisation: list[float]  # per hour: GPUs busy / capacity
    tenant_gpu_hours: dict[str, list[float]]  # per tenant, per day
    deserved_gpu_hours: dict[str, list[float]]  # per tenant, per day: its fair share of what was used
    share_error: list[float]  # per hour with demand: misallocated fraction of the GPUs in use
    cycles: int = 0
    scheduler_cpu: float = 0.0  # seconds in the scheduling core
    placement_cpu: float = 0.0  # seconds in the placement core
    forecast_cpu: float = 0.0  # seconds in the start-time forecast


class Replay:
    def __init__(self, jobs: Sequence[TraceJob], shape: Shape, policy: str, interval: float = 60.0,
                 progress: Callable[[float], None] | None = None, protected: float = PROTECTED_RUN_TIME,
                 history: Decay = HISTORY) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}")
        self.jobs, self.shape, self.policy, self.interval = jobs, shape, policy, interval
        self.progress = progress or (lambda _: None)
        self.states = build(shape, topology=policy in FAIR)
        self.names = cluster_names(shape)
        self.capacity = shape.gpus
        self.tenants = sorted({j.tenant for j in jobs})
        self.t0 = min(j.submit for j in jobs)
        self.records = {j.id: Record(j) for j in jobs}
        self.pending: dict[str, PendingJob] = {}  # in arrival order (dicts keep it)
        self.running: dict[str, tuple[RunningJob, list[PodPlacement], float]] = {}  # id -> (job, pods, start)
        self.ends: list[tuple[float, int, str]] = []  # (finish, sequence, job id); preempted runs' stay
        self.live_end: dict[str, int] = {}  # job id -> the sequence of its run's end: others are stale
        self.refused: dict[str, dict[str, str]] = {}
        self.making_room: dict[str, str] = {}
        self.used = {t: 0 for t in self.tenants}  # GPUs held per tenant now
        self.waiting = {t: 0 for t in self.tenants}  # GPUs asked for by waiting jobs, per tenant
        days = int((max(j.submit for j in jobs) - self.t0) // 86_400) + 2
        self.busy_hours: list[float] = []
        self.tenant_days = {t: [0.0] * days for t in self.tenants}
        self.deserved_days = {t: [0.0] * days for t in self.tenants}
        self.share_error: list[float] = []
        self.protected = protected
        self.ran: dict[str, list[float]] = {t: [0.0, 0] for t in self.tenants}  # completed runs: seconds, count
        self.seq = 0
        self.forecast_cpu = 0.0
        self.cycles = 0
        self.scheduler_cpu = 0.0
        self.placement_cpu = 0.0
        self.decay = history  # fair-history's half-life and weight
        self.history: dict[str, dict[str, float]] = {t: {} for t in self.tenants}  # fair-history's, GPU-seconds
        self.history_at = self.t0
        self.static = (
            [TenantInfo(t) for t in self.tenants],
            [QueueInfo(t, t, reclaimable=True) for t in self.tenants],
        )

    # -- gangs ---------------------------------------------------------------------------------

    def _pods(self, job: TraceJob) -> tuple[int, int]:
        """(pods, GPUs per pod): up to 8 GPUs is one pod, more is a gang of 8-GPU pods."""
        if job.gpus <= GPUS_PER_NODE:
            return 1, job.gpus
        return -(-job.gpus // GPUS_PER_NODE), GPUS_PER_NODE

    def _mode(self, job: TraceJob) -> tuple[str, int]:
        if self.policy not in FAIR or job.gpus <= GPUS_PER_NODE:
            return "", 0
        return ("hard" if job.gpus <= self.shape.leaf_gpus else "soft"), 1

    def _view(self, job: TraceJob) -> JobView:
        pods, per = self._pods(job)
        mode, tier = self._mode(job)
        return JobView(job.id, {GPU: pods * per}, {GPU: per}, mode=mode, highest_tier=tier)

    def _gang(self, job: TraceJob) -> GangRequest:
        pods, per = self._pods(job)
        mode, tier = self._mode(job)
        return GangRequest((TaskRequest("worker", pods, {GPU: per}),), mode=mode, highest_tier=tier or None)

    # -- time ----------------------------------------------------------------------------------

    def _account(self, record: Record, start: float, end: float, gpus: int) -> None:
        """Spread a run's GPU time over the hours (utilisation) and days (tenant shares) it covered."""
        t = start
        while t < end:
            hour = int((t - self.t0) // HOUR)
            stop = min(end, self.t0 + (hour + 1) * HOUR)
            while len(self.busy_hours) <= hour:
                self.busy_hours.append(0.0)
            self.busy_hours[hour] += gpus * (stop - t)
            day = hour // 24
            days = self.tenant_days[record.job.tenant]
            if day < len(days):
                days[day] += gpus * (stop - t) / HOUR
            t = stop

    def _sample(self, now: float) -> None:
        """Once an hour: how far the GPUs in use are from each tenant's fair share of them."""
        demand = [self.used[t] + self.waiting[t] for t in self.tenants]
        in_use = sum(self.used.values())
        if in_use == 0:
            return
        fair = water_fill(float(min(self.capacity, sum(demand))), [(1.0, 0.0, float(d)) for d in demand])
        scale = in_use / sum(fair) if sum(fair) else 0.0
        deserved = [f * scale for f in fair]  # the fair split of what is in use
        self.share_error.append(sum(abs(self.used[t] - d) for t, d in zip(self.tenants, deserved, strict=True))
                                / (2 * in_use))
        day = int((now - self.t0) // 86_400)
        for t, d in zip(self.tenants, deserved, strict=True):
            if day < len(self.deserved_days[t]):
                self.deserved_days[t][day] += d  # GPU-hours: one sample per hour

    # -- starting and ending -------------------------------------------------------------------

    def _start(self, job_id: str, cluster: str, pods: Sequence[PodPlacement], now: float) -> None:
        pending = self.pending.pop(job_id)
        record = self.records[job_id]
        job = record.job
        state = self.states[cluster]
        _, per = self._pods(job)
        for pod in pods:
            state.allocate(pod.node, {GPU: per}, gang=len(pods))
        record.start, record.cluster = now, cluster
        if record.first_start < 0:
            record.first_start = now
        record.leaves = len({leaf_of(p.node) for p in pods})
        hypernode = state.topology.lowest_common_domain(p.node for p in pods)
        self.running[job_id] = (RunningJob(job_id, job.tenant, cluster, 0, pending.seq, {GPU: job.gpus}, True,
                                           hypernode=hypernode if hypernode != ROOT else ""), list(pods), now)
        heapq.heappush(self.ends, (now + job.duration, self.seq, job_id))
        self.live_end[job_id] = self.seq
        self.seq += 1
        self._age(now)
        self.used[job.tenant] += job.gpus
        self.waiting[job.tenant] -= job.gpus
        self.refused.pop(job_id, None)
        self.making_room.pop(job_id, None)

    def _age(self, now: float) -> None:
        """fair-history's usage history on to `now`, each tenant having held what it holds since the last change
        (exact: called before every change)."""
        if self.policy != "fair-history":
            return
        for t in self.tenants:
            self.history[t] = decayed(self.history[t], now - self.history_at, self.decay.half_life, {GPU: self.used[t]})
        self.history_at = now

    def _stop(self, job_id: str, now: float) -> Record:
        running, pods, start = self.running.pop(job_id)
        record = self.records[job_id]
        _, per = self._pods(record.job)
        state = self.states[running.cluster]
        for pod in pods:
            state.release(pod.node, {GPU: per})
        self._age(now)
        self.used[record.job.tenant] -= record.job.gpus
        self._account(record, start, now, record.job.gpus)
        for refusals in self.refused.values():  # room freed there: refusals of that cluster are stale
            refusals.pop(running.cluster, None)
        return record

    def _arrive(self, job: TraceJob) -> None:
        self.pending[job.id] = PendingJob(self._view(job), job.tenant, 0, self.seq)
        self.seq += 1
        self.waiting[job.tenant] += job.gpus

    def _preempt(self, job_id: str, now: float) -> None:
        record = self._stop(job_id, now)
        record.preemptions += 1
        record.lost_gpu_seconds += (now - record.start) * record.job.gpus
        del self.live_end[job_id]  # its end in the heap is stale now: skipped when it comes up
        self.pending[job_id] = PendingJob(self._view(record.job), record.job.tenant, 0, self.seq)
        self.seq += 1
        self.waiting[record.job.tenant] += record.job.gpus

    # -- cycles ----------------------------------------------------------------------------------

    def _cluster_views(self) -> list[ClusterView]:
        out = []
        for name in self.names:
            state = self.states[name]
            _, allocatable, used = state.totals()
            free = {r: a - used.get(r, 0) for r, a in allocatable.items()}
            domains = [DomainFree(d.name, d.tier, "" if d.parent in (None, ROOT) else d.parent,
                                  dict(state.domain_free[d.name]))
                       for d in state.topology.domains.values() if d.name != ROOT]
            out.append(ClusterView(name, {}, free, state.summary(), domains=domains))
        return out

    def _cycle_fair(self, now: float) -> bool:
        """One cycle of the real cores; whether another should follow at once (room was made by
        preemption, or an agent refused a gang that another cluster may take)."""
        tenants, queues = self.static
        running = [replace(r, started=start, expected=self._mean_run(r.queue), protected_run=self.protected,
                           preempted_before=self.records[r.id].preemptions > 0)  # as the server counts it
                   for r, _, start in self.running.values()]
        views = self._cluster_views()
        past: dict[str, dict[str, float]] = {}
        if self.policy == "fair-history":
            self._age(now)
            past = {t: mean(h, self.decay.half_life, self.decay.weight) for t, h in self.history.items() if h}
        snapshot = Snapshot(tenants, queues, list(self.pending.values()), running, views, {GPU: self.capacity},
                            self.refused, self.making_room, past_tenants=past, now=now)
        began = time.process_time()
        decisions = schedule(snapshot)
        self.scheduler_cpu += time.process_time() - began
        self._forecast(now, decisions, views, running)
        again = bool(decisions.preempt)
        for victim in sorted(decisions.preempt):
            self._preempt(victim, now)
        self.making_room = dict(decisions.making_room)
        for job_id, cluster in sorted(decisions.assign.items(), key=lambda a: self.pending[a[0]].seq):
            began = time.process_time()
            placement = place(self.states[cluster], self._gang(self.records[job_id].job))
            self.placement_cpu += time.process_time() - began
            if isinstance(placement, Rejection):
                self.refused.setdefault(job_id, {})[cluster] = placement.reason
                again = True
                continue
            self._start(job_id, cluster, placement.pods, now)
        return again

    def _mean_run(self, tenant: str) -> float | None:
        """What the tenant's completed jobs took on average, as the server learns it from its past jobs."""
        seconds, count = self.ran[tenant]
        return seconds / count if count else None

    def _forecast(self, now: float, decisions: Decisions, views: Sequence[ClusterView],
                  running: Sequence[RunningJob]) -> None:
        """For jobs waiting through their first cycle, when the server's forecast expects them to start (run
        times as the server knows them: its queue's mean so far), and the naive estimate beside it."""
        new = [j for j in decisions.waiting if self.records[j].forecast < 0 and j not in decisions.cannot_run]
        if not new:
            return
        began = time.process_time()
        order = [j for j in decisions.waiting if j not in decisions.cannot_run]
        order = order[:max(order.index(j) for j in new) + 1]
        fallback = statistics.fmean(r for r in map(self._mean_run, self.tenants) if r is not None) \
            if any(self._mean_run(t) is not None for t in self.tenants) else HOUR

        def run_time(tenant: str) -> float:
            mean = self._mean_run(tenant)
            return fallback if mean is None else mean

        sent = [Holding(cluster, {GPU: self.records[j].job.gpus}, run_time(self.records[j].job.tenant))
                for j, cluster in decisions.assign.items()]
        held = [Holding(r.cluster, r.request, remaining(run_time(r.queue), r.ran_for(now)))
                for r in running if r.id not in decisions.preempt]
        clusters = [ClusterView(v.name, v.labels, {GPU: v.free.get(GPU, 0)}) for v in views]  # trace jobs ask GPUs
        waiting = [Waiting(j, {GPU: self.records[j].job.gpus}, run_time(self.records[j].job.tenant)) for j in order]
        starts = after_cycle(clusters, sent, held, waiting)
        position: dict[str, int] = {}
        for j in order:
            tenant = self.records[j].job.tenant
            position[tenant] = position.get(tenant, 0) + 1
            record = self.records[j]
            if record.forecast < 0 and j in starts:
                record.forecast = now + starts[j].seconds
                record.naive = now + position[tenant] * run_time(tenant)
        self.forecast_cpu += time.process_time() - began

    def _first_fit(self, state: ClusterState, job: TraceJob) -> list[PodPlacement] | None:
        pods, per = self._pods(job)
        free = {n: state.free[n].get(GPU, 0) for n in sorted(state.free)}
        out = []
        for index in range(pods):
            found = next((n for n, f in free.items() if f >= per), None)
            if found is None:
                return None
            free[found] -= per
            out.append(PodPlacement("worker", index, found))
        return out

    def _cycle_fifo(self, now: float) -> bool:
        began = time.process_time()
        for job_id in list(self.pending):
            job = self.records[job_id].job
            for name in self.names:
                state = self.states[name]
                if state.domain_free[ROOT].get(GPU, 0) < job.gpus:
                    continue
                pods = self._first_fit(state, job)
                if pods is not None:
                    self._start(job_id, name, pods, now)
                    break
            else:
                break  # the oldest job waits, and so does everything behind it
        self.scheduler_cpu += time.process_time() - began
        return False

    # -- the loop ----------------------------------------------------------------------------------

    def run(self) -> Result:
        arrivals = self.jobs
        i = 0
        last_cycle = -float("inf")
        changed = False
        next_sample = self.t0 + HOUR
        cycle = self._cycle_fifo if self.policy == "fifo" else self._cycle_fair
        end_of_trace = max(j.submit for j in self.jobs)
        while i < len(arrivals) or self.ends or self.pending:
            candidates = []
            if i < len(arrivals):
                candidates.append(arrivals[i].submit)
            if self.ends:
                candidates.append(self.ends[0][0])
            if changed and self.pending:
                candidates.append(last_cycle + self.interval)
            if not candidates:  # jobs wait that can never run here
                break
            now = min(candidates)
            while next_sample <= now:
                self._sample(next_sample)
                next_sample += HOUR
            while i < len(arrivals) and arrivals[i].submit <= now:
                self._arrive(arrivals[i])
                i += 1
                changed = True
            while self.ends and self.ends[0][0] <= now:
                _, seq, job_id = heapq.heappop(self.ends)
                if self.live_end.get(job_id) != seq:
                    continue
                del self.live_end[job_id]
                record = self.records[job_id]
                record.finish = now
                self._stop(job_id, now)
                ran = self.ran[record.job.tenant]
                ran[0] += record.job.duration
                ran[1] += 1
                changed = True
            if changed and self.pending and now >= last_cycle + self.interval:
                changed = cycle(now)
                self.cycles += 1
                last_cycle = now
            if not self.pending:
                changed = False
            self.progress(min(1.0, (now - self.t0) / max(1.0, end_of_trace - self.t0)))
        return Result(self.policy, self.shape, list(self.records.values()),
                      [b / (self.capacity * HOUR) for b in self.busy_hours],
                      self.tenant_days, self.deserved_days, self.share_error, self.cycles, self.scheduler_cpu,
                      self.placement_cpu, self.forecast_cpu)
