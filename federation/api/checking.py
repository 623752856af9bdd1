"""A batch of job specs checked where no serving loop waits for it.

Checking a batch (CEL compiled, every spec walked, normalised and turned to JSON) takes seconds for the largest
one a request may hold (1,000 jobs of 64 tasks). On a worker thread it still shares the interpreter with the
API's event loop, which then waits for it at every step (145 ms for that batch, measured). So a batch of
`OFF_PROCESS_TASKS` tasks or more is checked in a process of its own (spawned on first use, one at a time): the
loop only encodes the request and decodes the answer. Smaller batches stay on a worker thread, where the wait is
short and a process's round trip would cost more.
"""

from __future__ import annotations

import asyncio
import difflib
import multiprocessing
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from typing import Any

from federation.api import convert
from federation.errors import FailedPrecondition, InvalidArgument
from federation.scheduling.cycle import NO_READY_CLUSTER
from federation.security.auth import Principal
from federation.store.admin import SubmissionView
from federation.store.jobs import NewJob
from federation.v1 import common_pb2, jobs_pb2
from federation.validation import CheckedJob, Violation, Violations, check_job_spec, normalise_job_spec

OFF_PROCESS_TASKS = 2_000  # tasks in a batch from which it is checked in the checking process
WAITING_REASON = "waiting for the scheduler"


class Checking:
    """Where batches are checked: a worker thread, or for large ones the checking process."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None

    async def prepared(self, specs: Sequence[common_pb2.JobSpec], paths: Sequence[str], view: SubmissionView,
                       allow_unknown_resources: bool, caller: Principal,
                       whole: jobs_pb2.SubmitJobsRequest | None = None) -> list[NewJob]:
        """`prepared` for these specs (`whole`: the request that holds them, sent as it is rather than copied)."""
        if sum(len(s.tasks) for s in specs) < OFF_PROCESS_TASKS:
            return await asyncio.to_thread(prepared, specs, paths, view, allow_unknown_resources, caller)
        if self._pool is None:
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        request = (whole or jobs_pb2.SubmitJobsRequest(specs=specs)).SerializeToString()
        answer, found = await asyncio.get_running_loop().run_in_executor(
            self._pool, _prepared_elsewhere, request, list(paths), _slim(view), allow_unknown_resources, caller)
        if answer == "invalid":
            raise InvalidArgument([Violation(f, d) for f, d in found])
        if answer == "precondition":
            raise FailedPrecondition(found)
        return found  # type: ignore[no-any-return]

    def stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _prepared_elsewhere(request: bytes, paths: list[str], view: SubmissionView, allow_unknown_resources: bool,
                        caller: Principal) -> tuple[str, Any]:
    """`prepared` in the checking process; its errors as plain values (a domain error does not pickle whole)."""
    specs = jobs_pb2.SubmitJobsRequest.FromString(request).specs
    try:
        return "ok", prepared(specs, paths, view, allow_unknown_resources, caller)
    except InvalidArgument as err:
        return "invalid", [(v.field, v.description) for v in err.violations]
    except FailedPrecondition as err:
        return "precondition", str(err)


def _slim(view: SubmissionView) -> SubmissionView:
    """What a batch's check reads of the federation, as plain values: of each cluster its status and the
    resource names it has reported, not its HyperNodes."""
    clusters = []
    for c in view.clusters:
        inventory = c["inventory"] or {}
        clusters.append({"status": c["status"], "cordoned": c["cordoned"], "inventory": {
            "capacity": dict(inventory.get("capacity", {})), "allocatable": dict(inventory.get("allocatable", {})),
            "partitionable": [{"max_capacity": dict(t["max_capacity"])} for t in inventory.get("partitionable", [])]}})
    return replace(view, queues=[dict(q) for q in view.queues], classes=[dict(c) for c in view.classes],
                   tenants=[dict(t) for t in view.tenants], clusters=clusters)


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


def prepared(specs: Sequence[common_pb2.JobSpec], paths: Sequence[str], view: SubmissionView,
             allow_unknown_resources: bool, caller: Principal) -> list[NewJob]:
    """Validate a batch in full and resolve its references (`view`): the jobs to store, or InvalidArgument naming
    every field at fault (FailedPrecondition for a closed queue or a disabled tenant). Pure CPU."""
    v = Violations()
    normalised, checked, stored = _checked(v, specs, paths)
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
    for spec, check, spec_json in zip(normalised, checked, stored, strict=True):
        queue = queues[spec.queue]
        if queue["state"] != "OPEN":
            raise FailedPrecondition(f"queue {spec.queue!r} is {queue['state'].lower()} and accepts no new jobs")
        if tenants[queue["tenant"]]["disabled"]:
            raise FailedPrecondition(f"tenant {queue['tenant']!r} is disabled")
        pc = classes.get(spec.priority_class_name) or default_class
        assert check is not None
        out.append(NewJob(
            name=spec.name, tenant=queue["tenant"], queue=spec.queue,
            priority_class=pc["name"] if pc else "", priority=pc["value"] if pc else 0,
            request=check.minimum, spec=spec_json, request_id=spec.request_id, reason=reason))
    return out


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
