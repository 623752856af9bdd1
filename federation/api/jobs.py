"""JobService: submit, read, cancel and watch gang jobs.

A tenant's token reaches only its own tenant's queues and jobs; another tenant's are NOT_FOUND
(or simply absent from lists and watches), worded as if they did not exist.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import difflib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import grpc
from google.protobuf import json_format

import federation
from federation import metrics
from federation.api import convert
from federation.api.status import servicer
from federation.api.usage import PastUsageView
from federation.control.jobcache import job_view
from federation.control.leaderview import LeaderView
from federation.control.scheduler import HEARTBEAT_TIMEOUT, Scheduler
from federation.errors import FailedPrecondition, InvalidArgument
from federation.kernel.durations import parse_duration
from federation.kernel.jobspec import MAX_RUN_TIME, READY_TIMEOUT
from federation.relay.events import EventHub
from federation.relay.logrelay import LogRelay
from federation.scheduling.cycle import NO_READY_CLUSTER
from federation.security.auth import Principal, RateLimiter, TenantSlots, current, require_sees
from federation.store import database
from federation.store.admin import AdminStore, SubmissionView
from federation.store.jobs import JobStore
from federation.store.phases import WAITING_PHASES
from federation.store.submission import NewJob
from federation.v1 import agent_pb2, common_pb2, jobs_pb2, jobs_pb2_grpc
from federation.validation import (
    CheckedJob,
    Violation,
    Violations,
    check_hyperjobs,
    check_job_spec,
    check_text,
    normalise_job_spec,
)

MAX_BATCH = 1000
DEFAULT_PAGE_SIZE = 100
MAX_PAGE_SIZE = 1000
MAX_PAGE_BYTES = 3 * 1024 * 1024  # under gRPC clients' default 4 MiB; a job is at most 1.5 MiB
MAX_WATCHES_PER_TENANT = 32  # live WatchJobs of one tenant on one replica

WAITING_REASON = "waiting for the scheduler"


def _page_token(job_id: str) -> str:
    """The last job of a page, by id: a number here would tell a tenant how many jobs the federation has."""
    return base64.urlsafe_b64encode(f"after:{job_id}".encode()).decode()


def _after_id(token: str) -> str:
    try:
        kind, _, value = base64.urlsafe_b64decode(token.encode()).decode().partition(":")
        if kind == "after" and value:
            return value
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise _not_our_token()


def _not_our_token() -> InvalidArgument:
    return InvalidArgument([Violation("page_token", "is not a token this server issued")])


@servicer
class JobServicer(jobs_pb2_grpc.JobServiceServicer):
    def __init__(self, jobs: JobStore, admin: AdminStore, hub: EventHub, leader: LeaderView,
                 on_change: Callable[..., None], limiter: RateLimiter, logs: LogRelay,
                 heartbeat_timeout: float = HEARTBEAT_TIMEOUT, ready_timeout: float = 0.0,
                 past: PastUsageView | None = None) -> None:
        self.logs = logs
        self.past = past or PastUsageView(None, None)  # tenants' and queues' usage histories, as the leader wrote
        self.ready_timeout = ready_timeout  # seconds: the ready timeout of jobs that do not say (0: none)
        self.schema_revision = database.head_revision()
        self.jobs = jobs
        self.admin = admin
        self.hub = hub
        self.leader = leader  # what only the scheduling leader knows: explanations, expected starts
        self.heartbeat_timeout = heartbeat_timeout
        self.on_change = on_change  # wakes the scheduler and the watchers (`announced`: the others were told)
        self.limiter = limiter
        # each live watch holds a queue in the event hub, so one tenant must not hold them all
        self._watches = TenantSlots(MAX_WATCHES_PER_TENANT, f"at most {MAX_WATCHES_PER_TENANT} live watches per "
                                    "tenant on this replica; close one (each fedctl watch or dashboard tab holds one)")

    async def _job(self, job_id: str) -> Any:
        row = await self.jobs.get(job_id)
        require_sees(row["tenant"], f"job {job_id!r}")
        return row

    async def _prepare(self, specs: Sequence[common_pb2.JobSpec], paths: Sequence[str], view: SubmissionView,
                       allow_unknown_resources: bool, reject_inadmissible: bool) -> tuple[list[NewJob], list[str]]:
        """Validate a batch in full, resolve its references (`view`) and say why each job could not run as the
        federation stands (`_admissibility`); raise before anything is stored. CEL compiles, every spec (up to
        1,000 of 64 tasks) is walked, checked and turned to JSON: off the loop, in one hand-over to a worker."""
        def prepared() -> tuple[list[NewJob], list[str]]:
            new = _prepared(specs, paths, view, allow_unknown_resources, self.ready_timeout)
            return new, self._admissibility(new, paths, reject_inadmissible, view)

        return await asyncio.to_thread(prepared)

    def _admissibility(self, new: Sequence[NewJob], paths: Sequence[str], reject: bool,
                       view: SubmissionView) -> list[str]:
        """Why each job could not run as the federation stands ("" if it could). Such a job is accepted,
        since capacity may come, unless the caller asked to refuse it: then nothing is stored."""
        tenants = {t["name"]: t for t in view.tenants}
        reasons = Scheduler.inadmissible([
            (job_view({"id": n.name, "request": n.request, "spec": n.spec}), n.queue, tenants[n.tenant])
            for n in new], view.queues, view.clusters, self.admin.inventories)
        refused = [(path, why) for path, why in zip(paths, reasons, strict=True) if why]
        if reject and refused:
            raise FailedPrecondition("; ".join(f"{path}: {why}" for path, why in refused))
        return reasons

    async def SubmitJob(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.limiter.take(current(), 1)
        view = await self.admin.for_submission(self.heartbeat_timeout)
        (new,), (why,) = await self._prepare([request.spec], ["spec"], view, request.allow_unknown_resources,
                                             request.reject_inadmissible)
        if request.dry_run:  # as SubmitJobs: validated and judged, nothing stored, so the job has no id
            job = common_pb2.Job(tenant=new.tenant, priority=new.priority,
                                 spec=json_format.ParseDict(new.spec, common_pb2.JobSpec()),
                                 status=common_pb2.JobStatus(phase=common_pb2.PENDING, reason=new.reason))
            return jobs_pb2.SubmitJobResponse(job=job, inadmissible=why)
        (result,) = await self.jobs.submit([new])
        self.on_change(announced=True)  # the submission's own transaction told the other processes
        job = convert.job_to_proto(await self.jobs.get(result.job_id))
        return jobs_pb2.SubmitJobResponse(job=job, duplicate=result.duplicate, inadmissible=why)

    async def SubmitJobs(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not request.specs:
            raise InvalidArgument([Violation("specs", "at least one job spec is required")])
        if len(request.specs) > MAX_BATCH:
            raise InvalidArgument([Violation("specs", f"at most {MAX_BATCH} jobs per batch, got {len(request.specs)}")])
        self.limiter.take(current(), len(request.specs))
        paths = [f"specs[{i}]" for i in range(len(request.specs))]
        view = await self.admin.for_submission(self.heartbeat_timeout)
        new, reasons = await self._prepare(request.specs, paths, view, request.allow_unknown_resources,
                                           request.reject_inadmissible)
        if request.dry_run:  # valid, and what the federation as it stands says of each: nothing stored
            return jobs_pb2.SubmitJobsResponse(results=[jobs_pb2.SubmitJobResult(inadmissible=why) for why in reasons])
        results = await self.jobs.submit(new)
        self.on_change(announced=True)  # the submission's own transaction told the other processes
        return jobs_pb2.SubmitJobsResponse(results=[
            jobs_pb2.SubmitJobResult(job_id=r.job_id, duplicate=r.duplicate, inadmissible=why)
            for r, why in zip(results, reasons, strict=True)])

    async def GetJob(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        row = await self._job(request.id)
        return convert.job_to_proto(row, (await self._expected([row])).get(row["id"]))

    async def _expected(self, rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[datetime, str]]:
        """When and where these jobs, those waiting, are expected to start: by the leader's last forecast."""
        return await self.leader.expected_starts([r["id"] for r in rows if r["phase"] in WAITING_PHASES])

    async def ListJobs(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        if request.page_size < 0:
            raise InvalidArgument([Violation("page_size", "must not be negative")])
        size = min(request.page_size or DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE)
        unknown = [i for i, p in enumerate(request.phases) if p not in common_pb2.JobPhase.values()]
        if unknown:
            raise InvalidArgument([Violation(f"phases[{i}]", f"{request.phases[i]} is not a job phase")
                                   for i in unknown])
        phases = [common_pb2.JobPhase.Name(p) for p in request.phases if p]
        caller = current()
        if not caller.admin and (caller.tenant is None or request.tenant not in ("", caller.tenant)):
            return jobs_pb2.ListJobsResponse()  # another tenant's jobs: as if there were none
        tenant = request.tenant if caller.admin else caller.tenant or ""
        after = 0
        if request.page_token:
            found = await self.jobs.seq_of(_after_id(request.page_token), tenant)
            if found is None:  # not a job, or another tenant's: the same answer either way
                raise _not_our_token()
            after = found
        rows = await self.jobs.list(tenant=tenant, queue=request.queue, phases=phases, after_seq=after,
                                    limit=size + 1, newest_first=request.newest_first,
                                    history=request.include_history, cluster=request.cluster,
                                    hyperjob=request.hyperjob)
        page, used = [], 0
        expected = await self._expected(rows[:size])
        for row in rows[:size]:  # a page is also bounded in bytes, so any client's default limit takes it
            job = convert.job_to_proto(row, expected.get(row["id"]))
            if page and used + job.ByteSize() > MAX_PAGE_BYTES:
                break
            page.append(job)
            used += job.ByteSize()
        token = _page_token(page[-1].id) if len(rows) > len(page) else ""
        response = jobs_pb2.ListJobsResponse(jobs=page, next_page_token=token)
        if request.count_phases:
            counts = await self.jobs.phase_counts(tenant=tenant, queue=request.queue, history=request.include_history,
                                                  cluster=request.cluster)
            response.phase_counts.update({phase.capitalize(): n for phase, n in counts.items()})
        return response

    async def CancelJob(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        v = Violations()
        check_text(v, "reason", request.reason)
        if v:
            raise InvalidArgument(v.items)
        before = await self._job(request.id)
        row = await self.jobs.cancel(request.id, request.reason)
        if before["phase"] != "CANCELLED" and row["phase"] == "CANCELLED":
            metrics.JOBS_FINISHED.labels("cancelled").inc()
        self.on_change()  # the Cancelled event is relayed to the job's agent as an order
        return convert.job_to_proto(row)

    async def WatchJobs(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if request.HasField("after_sequence") and request.after_sequence < 0:
            raise InvalidArgument([Violation("after_sequence", "must not be negative")])
        after = request.after_sequence if request.HasField("after_sequence") else None
        caller = current()
        with self._watches.slot(caller.tenant if not caller.admin and caller.tenant else None):
            await context.send_initial_metadata(())  # accepted: say so now, though no event may come for long
            async for event in self._watch(request, caller, after):
                yield event

    async def _watch(self, request: Any, caller: Principal, after: int | None) -> AsyncIterator[Any]:
        # A tenant's token numbers its watch by the tenant's own events (JobEvent.tenant_seq); an admin's
        # by the federation's.
        own = None if caller.admin else caller.tenant
        own_after = after
        if own is not None and after is not None:
            after = await self.jobs.seq_of_tenant_event(own, after)
        async for event in self.hub.watch(after):
            if not caller.sees(event["tenant"]):
                continue
            if own is not None and own_after is not None and event["tenant_seq"] <= own_after:
                continue
            if request.tenant and event["tenant"] != request.tenant:
                continue
            if request.queue and event["queue"] != request.queue:
                continue
            if request.job_id and event["job_id"] != request.job_id:
                continue
            yield convert.event_to_proto(event, tenant_numbered=own is not None)

    async def GetJobLogs(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        row = await self._job(request.id)  # the job's owner or an admin: NOT_FOUND for anyone else
        spec = json_format.ParseDict(row["spec"], common_pb2.JobSpec(), ignore_unknown_fields=True)
        v = Violations()
        task = request.task or spec.tasks[0].name
        replicas = {t.name: t.replicas for t in spec.tasks}
        if task not in replicas:
            v.add("task", f"job {row['id']} has no task {task[:64]!r} (tasks: {', '.join(replicas)})")
        elif not 0 <= request.index < replicas[task]:
            v.add("index", f"task {task} has replicas 0-{replicas[task] - 1}, not {request.index}")
        if request.tail_lines < 0:
            v.add("tail_lines", "must not be negative")
        if v:
            raise InvalidArgument(v.items)
        if not row["cluster"] or not row["attempt"]:
            raise FailedPrecondition(f"job {row['id']} has no pods: it is {row['phase'].lower()}")
        caller = current()
        async for data in self.logs.stream(row["cluster"], agent_pb2.LogsRequest(
                job_id=row["id"], attempt=row["attempt"], task=task, index=request.index, follow=request.follow,
                previous=request.previous, tail_lines=request.tail_lines),
                tenant=caller.tenant if not caller.admin and caller.tenant else None):
            yield jobs_pb2.LogData(data=data)

    async def GetVersion(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        # The server refuses to serve a schema other than its head, so the head is the schema it runs on.
        return jobs_pb2.Version(version=federation.__version__, api=jobs_pb2.DESCRIPTOR.package,
                                schema_revision=self.schema_revision)

    async def ExplainJob(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        row = await self._job(request.id)
        response = jobs_pb2.ExplainJobResponse(job_id=row["id"], phase=common_pb2.JobPhase.Value(row["phase"]),
                                               reason=row["reason"], queue_position=row["queue_position"])
        expected = (await self._expected([row])).get(row["id"])
        if expected is not None:
            response.expected_start_time.FromDatetime(expected[0])
            response.expected_cluster = expected[1]
        if row["phase"] in WAITING_PHASES:
            response.past_usage = await self.past.order_note(row["tenant"], row["queue"])
            # An admin sees every tenant's jobs: the job room is held for is named to one, whoever's it is.
            for cluster, why in await self.leader.explain(row, current().admin):
                response.clusters.add(cluster=cluster, fits=why is None,
                                      reason=why or "fits now; waiting for its turn in the next cycle")
        return response


def _check_resource_names(v: Violations, specs: Sequence[common_pb2.JobSpec], paths: Sequence[str],
                          clusters: Sequence[Any]) -> None:
    """A resource no member cluster has ever reported is a typo more often than a device to come
    (`nvidia.com/gpus` would wait forever): refused with the names that exist (MIG profiles a cluster could
    cut its idle GPUs into among them), unless the caller allows it. Before any cluster has reported, nothing
    is known and nothing is refused."""
    known: set[str] = set()
    for cluster in clusters:
        inventory = cluster["inventory"] or {}
        known.update(inventory.get("capacity", {}), inventory.get("allocatable", {}))
        for tier in inventory.get("partitionable", []):  # MIG slices its agent could cut idle GPUs into
            known.update(tier["max_capacity"])
    if not known:
        return
    known.update(("cpu", "memory", "pods", "ephemeral-storage"))
    for spec, path in zip(specs, paths, strict=True):
        for i, task in enumerate(spec.tasks):
            for name in task.resources:
                if name in known or name.startswith("hugepages-"):
                    continue
                close = difflib.get_close_matches(name, sorted(known), n=1)
                hint = f"did you mean {close[0]}?" if close else f"reported: {', '.join(sorted(known))}"
                v.add(f"{path}.tasks[{i}].resources[{name!r}]", f"no member cluster has reported {name!r}; "
                      f"{hint} (submit with --allow-unknown-resources if a cluster will have it)")


def _prepared(specs: Sequence[common_pb2.JobSpec], paths: Sequence[str], view: SubmissionView,
              allow_unknown_resources: bool, ready_timeout: float = 0.0) -> list[NewJob]:
    v = Violations()
    normalised, checked, stored = _checked(v, specs, paths)
    check_hyperjobs(v, normalised, paths)
    caller = current()
    queues = {q["name"]: q for q in view.queues if caller.sees(q["tenant"])}
    classes = {c["name"]: c for c in view.classes}
    default_class = next((c for c in classes.values() if c["global_default"]), None)
    for spec, path in zip(normalised, paths, strict=True):
        if spec.queue and spec.queue not in queues:
            v.add(f"{path}.queue", f"queue {spec.queue!r} not found")
        elif spec.queue:
            children = sorted(q for q, row in queues.items() if row["parent"] == spec.queue)
            if children:
                v.add(f"{path}.queue", f"queue {spec.queue!r} is a parent queue; jobs go to its leaf queues "
                                       f"({', '.join(children)})")
        if spec.priority_class_name and spec.priority_class_name not in classes:
            v.add(f"{path}.priority_class_name", f"priority class {spec.priority_class_name!r} not found")
    if not allow_unknown_resources:
        _check_resource_names(v, normalised, paths, view.clusters)
    if v:
        raise InvalidArgument(v.items)

    tenants = {t["name"]: t for t in view.tenants}
    ready = any(c["status"] == "READY" and not c["cordoned"] for c in view.clusters)
    reason = WAITING_REASON if ready else NO_READY_CLUSTER
    out = []
    for spec, check, spec_json, path in zip(normalised, checked, stored, paths, strict=True):
        queue = queues[spec.queue]
        if queue["state"] != "OPEN":
            raise FailedPrecondition(f"queue {spec.queue!r} is {queue['state'].lower()} and accepts no new jobs")
        if tenants[queue["tenant"]]["disabled"]:
            raise FailedPrecondition(f"tenant {queue['tenant']!r} is disabled")
        _hold_run_time(spec_json, path, queue, tenants[queue["tenant"]])
        if ready_timeout > 0 and READY_TIMEOUT not in spec_json.get("annotations", {}):
            # The server's default, written where the agent reads it: a job keeps the timeout it was accepted with.
            spec_json.setdefault("annotations", {})[READY_TIMEOUT] = f"{ready_timeout:g}s"
        pc = classes.get(spec.priority_class_name) or default_class
        assert check is not None
        out.append(NewJob(
            name=spec.name, tenant=queue["tenant"], queue=spec.queue,
            priority_class=pc["name"] if pc else "", priority=pc["value"] if pc else 0,
            request=check.minimum, spec=spec_json, request_id=spec.request_id, reason=reason))
    return out


def _hold_run_time(spec_json: dict[str, Any], path: str, queue: Mapping[str, Any], tenant: Mapping[str, Any]) -> None:
    """The job's maximum run time as its agent will hold it, written into the stored spec: its own, else its
    queue's default, else its tenant's cap, and never more than that cap (a job asking more is refused, as Slurm
    refuses a --time over its partition's MaxTime)."""
    annotations = spec_json.setdefault("annotations", {})
    own, cap = annotations.get(MAX_RUN_TIME), tenant["max_run_time"]
    if own is not None and cap is not None and parse_duration(own) > parse_duration(cap):
        raise InvalidArgument([Violation(f"{path}.annotations[{MAX_RUN_TIME!r}]",
                                         f"{own} is more than tenant {tenant['name']!r} allows its jobs ({cap})")])
    held = own or queue["max_run_time"] or cap  # a cap binds jobs that name no run time too
    if held is not None and cap is not None and parse_duration(held) > parse_duration(cap):
        held = cap
    if held is not None:
        annotations[MAX_RUN_TIME] = held
    elif not annotations:
        del spec_json["annotations"]


def _checked(v: Violations, specs: Sequence[common_pb2.JobSpec], paths: Sequence[str]
             ) -> tuple[list[common_pb2.JobSpec], list[CheckedJob | None], list[dict[str, Any]]]:
    """Each spec normalised (a copy), checked (violations into `v`) and as it is stored (JSON; {} if invalid)."""
    normalised, checked, stored = [], [], []
    for spec, path in zip(specs, paths, strict=True):
        spec = common_pb2.JobSpec.FromString(spec.SerializeToString())
        normalise_job_spec(spec)
        normalised.append(spec)
        checked.append(check := check_job_spec(v, path, spec))
        stored.append(convert.spec_to_json(spec) if check is not None else {})
    return normalised, checked, stored
