"""The admin objects checked: tenants, queues, flavors, priority classes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from federation.kernel.durations import parse_duration
from federation.v1 import admin_pb2
from federation.validation.core import Violations, check_labels, check_name, check_qualified_key, check_resources

MAX_WEIGHT = 1_000_000
MAX_PRIORITY_VALUE = 1_000_000_000
MAX_DESCRIPTION = 1024
MAX_PROTECTED_RUN_SECONDS = 7 * 86_400  # a job's expected duration protects it from reclaim for at most this long


def _check_quota(v: Violations, path: str, guarantee: Mapping[str, str], limit: Mapping[str, str],
                 lending_limit: Mapping[str, str]) -> None:
    g = check_resources(v, f"{path}.guarantee", guarantee, flavored=True)
    lim = check_resources(v, f"{path}.limit", limit, flavored=True)
    for name, amount in g.items():
        if name in limit and name in lim and amount > lim[name]:
            v.add(f"{path}.guarantee[{name!r}]", f"guarantee {guarantee[name]} exceeds limit {limit[name]}")
    # A lending limit is on what is guaranteed, as Kueue's is on the nominal quota: at most all of it.
    lent = check_resources(v, f"{path}.lending_limit", lending_limit, flavored=True)
    for name in lending_limit:
        if name not in g:
            v.add(f"{path}.lending_limit[{name!r}]", f"lends {name} but guarantees none of it")
        elif lent.get(name, 0) > g[name]:
            v.add(f"{path}.lending_limit[{name!r}]",
                  f"lending limit {lending_limit[name]} exceeds guarantee {guarantee[name]}")


def _check_weight(v: Violations, path: str, weight: int) -> None:
    if not 0 <= weight <= MAX_WEIGHT:
        v.add(path, f"must be between 1 and {MAX_WEIGHT}")


def check_tenant(v: Violations, path: str, tenant: admin_pb2.Tenant) -> None:
    check_name(v, f"{path}.name", tenant.name)
    _check_weight(v, f"{path}.weight", tenant.weight)
    _check_quota(v, path, tenant.guarantee, tenant.limit, tenant.lending_limit)
    _check_run_time(v, f"{path}.max_run_time", tenant.max_run_time)


def _check_run_time(v: Violations, path: str, text: str) -> None:
    """A maximum run time: "" (none) or a duration of more than zero, as the job annotation takes."""
    if not text:
        return
    if len(text) > 32:
        v.add(path, f"is {len(text)} characters long, at most 32 are allowed")
        return
    try:
        if parse_duration(text) <= 0:
            raise ValueError("must be more than zero")
    except ValueError as err:
        v.add(path, str(err))


def check_queue(v: Violations, path: str, queue: admin_pb2.Queue) -> None:
    check_name(v, f"{path}.name", queue.name)
    _check_run_time(v, f"{path}.max_run_time", queue.max_run_time)
    for i, flavor in enumerate(queue.flavors):
        check_name(v, f"{path}.flavors[{i}]", flavor)
    if len(set(queue.flavors)) != len(queue.flavors):
        v.add(f"{path}.flavors", "names a flavor twice")
    check_name(v, f"{path}.tenant", queue.tenant)
    if queue.parent:
        check_name(v, f"{path}.parent", queue.parent)
        if queue.parent == queue.name:
            v.add(f"{path}.parent", "a queue cannot be its own parent")
    _check_weight(v, f"{path}.weight", queue.weight)
    _check_quota(v, path, queue.guarantee, queue.limit, queue.lending_limit)
    if queue.state not in admin_pb2.QueueState.values():
        v.add(f"{path}.state", f"{queue.state} is not a queue state")
    check_admission_checks(v, f"{path}.admission_checks", queue.admission_checks)


MAX_ADMISSION_CHECKS = 8  # Kueue allows any number; eight covers every setup we know of, and bounds each dispatch
ADMISSION_CHECK_STATES = ("PENDING", "READY", "RETRY", "REJECTED")


def check_admission_checks(v: Violations, path: str, names: Sequence[str]) -> None:
    if len(names) > MAX_ADMISSION_CHECKS:
        v.add(path, f"names {len(names)} checks; at most {MAX_ADMISSION_CHECKS}")
    for i, name in enumerate(names):
        check_name(v, f"{path}[{i}]", name)
    if len(set(names)) != len(names):
        v.add(path, "names a check twice")


def check_flavor(v: Violations, path: str, flavor: admin_pb2.Flavor) -> None:
    check_name(v, f"{path}.name", flavor.name)
    if not flavor.resource:
        v.add(f"{path}.resource", "is required (e.g. nvidia.com/gpu)")
    else:
        check_qualified_key(v, f"{path}.resource", flavor.resource)
    if not flavor.cluster_selector:
        v.add(f"{path}.cluster_selector", "is required: the labels of the clusters that have this flavor")
    check_labels(v, f"{path}.cluster_selector", flavor.cluster_selector)
    check_admission_checks(v, f"{path}.admission_checks", flavor.admission_checks)


def check_priority_class(v: Violations, path: str, pc: admin_pb2.PriorityClass) -> None:
    check_name(v, f"{path}.name", pc.name)
    if abs(pc.value) > MAX_PRIORITY_VALUE:
        v.add(f"{path}.value", f"must be between -{MAX_PRIORITY_VALUE} and {MAX_PRIORITY_VALUE}")
    if not 0 <= pc.protected_run_seconds <= MAX_PROTECTED_RUN_SECONDS:
        v.add(f"{path}.protected_run_seconds", f"must be between 0 and {MAX_PROTECTED_RUN_SECONDS} (a week)")
    if len(pc.description) > MAX_DESCRIPTION:
        v.add(f"{path}.description", f"must be at most {MAX_DESCRIPTION} characters")
