"""Printing API messages as tables for people, or canonical JSON / YAML for scripts."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import click
import yaml
from google.protobuf import json_format
from google.protobuf.message import Message

from federation.cli import query
from federation.kernel.resources import parse_amount
from federation.v1 import admin_pb2, common_pb2
from federation.validation import escape_controls

FORMATS = ("table", "wide", "json", "yaml", "name", "jsonpath=TEMPLATE", "custom-columns=NAME:.PATH,...")


def age(ts: Any, now: datetime | None = None) -> str:
    if not ts.seconds:
        return "-"
    return span(((now or datetime.now(UTC)) - ts.ToDatetime(UTC)).total_seconds())


def span(elapsed: float | None) -> str:
    """A duration as kubectl prints ages: 45s, 12m, 3h, 2d ("-" for none)."""
    if elapsed is None:
        return "-"
    seconds = int(elapsed)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def gpus(job: common_pb2.Job) -> int:
    """Every replica's GPUs (a stored spec's amounts are valid)."""
    return sum(parse_amount(GPU, t.resources.get(GPU, "0")) * t.replicas for t in job.spec.tasks)


def expected_start(status: common_pb2.JobStatus | Any, now: datetime | None = None, short: bool = False) -> str:
    """"starts in about 2h on h100" (short: "~2h h100") for a waiting job with an estimate, else ""."""
    if not status.expected_start_time.seconds:
        return ""
    seconds = int((status.expected_start_time.ToDatetime(UTC) - (now or datetime.now(UTC))).total_seconds())
    when = f"in about {span(seconds)}" if seconds >= 60 else "now"
    if short:
        return f"{'~' + span(seconds) if seconds >= 60 else 'now'} {status.expected_cluster}"
    return f"starts {when} on {status.expected_cluster}"


def quantities(values: Any) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(values.items())) or "-"


def safe(text: object) -> str:
    """Server-held text as a terminal may show it: control characters written out (`\\x1b`), never run (a
    member cluster's or another user's words could otherwise set the window title or clear the screen)."""
    return escape_controls(str(text))


_LOG_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe_log(data: bytes) -> str:
    """A pod's log as a terminal may show it: lines and tabs kept, every other control character written out."""
    return _LOG_CONTROLS.sub(lambda m: escape_controls(m.group()), data.decode(errors="replace"))


def pods_table(jobs: Sequence[common_pb2.Job]) -> str:
    """The pods of these jobs, as kubectl lists pods (and the job and task each belongs to)."""
    rows = [[job.id, p.name, p.namespace or "-", p.task, p.index, p.node or "-", p.phase or "-", p.restarts,
             p.message or ""] for job in jobs for p in job.status.pods]
    return render_table(("JOB", "NAME", "NAMESPACE", "TASK", "INDEX", "NODE", "STATUS", "RESTARTS", "MESSAGE"),
                        rows)


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[safe(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def pascal_case(name: str) -> str:
    """NOT_READY -> NotReady, priority_class -> PriorityClass: enum values as every output prints them (tables,
    JSON and YAML alike, as Kubernetes and Volcano write phases and states), and kinds as RPC names have them."""
    return "".join(part.capitalize() for part in name.split("_"))


def phase_name(phase: int) -> str:
    return pascal_case(common_pb2.JobPhase.Name(phase))


def _job_row(j: common_pb2.Job) -> list[Any]:
    s = j.status
    where = f"{s.hypernode}/t{s.tier}" if s.hypernode else "-"
    return [j.id, j.spec.namespace or "-", j.tenant, j.spec.queue, phase_name(s.phase), j.priority,
            s.queue_position or "-", expected_start(s, short=True) or "-", s.cluster or "-", where, age(s.create_time),
            s.reason or "-"]


def _token_row(t: admin_pb2.Token) -> list[Any]:
    expires = t.expire_time.ToDatetime(UTC).strftime("%Y-%m-%d %H:%M") if t.expire_time.seconds else "never"
    return [t.id, t.name or "-", "admin" if t.admin else t.tenant, "revoked" if t.revoke_time.seconds else "active",
            expires, age(t.create_time), t.created_by]


JOB_HEADERS = ("ID", "NAMESPACE", "TENANT", "QUEUE", "PHASE", "PRIO", "POS", "STARTS", "CLUSTER", "HYPERNODE", "AGE",
               "REASON")

TABLES: dict[type[Message], tuple[Sequence[str], Callable[[Any], list[Any]]]] = {
    common_pb2.Job: (JOB_HEADERS, _job_row),
    admin_pb2.Tenant: (("NAME", "WEIGHT", "GUARANTEE", "LENDING-LIMIT", "LIMIT", "MAX-RUN", "DISABLED", "AGE"),
                       lambda t: [t.name, t.weight, quantities(t.guarantee), quantities(t.lending_limit),
                                  quantities(t.limit), t.max_run_time or "-", t.disabled, age(t.create_time)]),
    admin_pb2.Queue: (("NAME", "TENANT", "PARENT", "WEIGHT", "PRIORITY", "GUARANTEE", "LENDING-LIMIT", "LIMIT",
                       "RECLAIMABLE", "STATE", "FLAVORS", "MAX-RUN", "CHECKS"),
                      lambda q: [q.name, q.tenant, q.parent or "-", q.weight, q.priority, quantities(q.guarantee),
                                 quantities(q.lending_limit), quantities(q.limit), q.reclaimable,
                                 pascal_case(admin_pb2.QueueState.Name(q.state)),
                                 ",".join(q.flavors) or "any", q.max_run_time or "-",
                                 ",".join(q.admission_checks) or "-"]),
    admin_pb2.Flavor: (("NAME", "RESOURCE", "CLUSTER-SELECTOR", "CHECKS", "AGE"), lambda f: [
        f.name, f.resource, ",".join(f"{k}={v}" for k, v in sorted(f.cluster_selector.items())),
        ",".join(f.admission_checks) or "-", age(f.create_time)]),
    admin_pb2.PriorityClass: (("NAME", "VALUE", "PREEMPTIBLE", "PROTECTED", "DEFAULT", "DESCRIPTION"), lambda p: [
        p.name, p.value, p.preemptible, f"{p.protected_run_seconds}s" if p.protected_run_seconds else "-",
        p.global_default, p.description or "-"]),
    admin_pb2.Cluster: (("NAME", "STATUS", "CORDONED", "NODES", "ALLOCATABLE", "USED", "DRIFT", "HEALTH", "HEARTBEAT"),
                        lambda c: [c.name, pascal_case(admin_pb2.ClusterStatus.Name(c.status)), c.cordoned, c.nodes,
                                   quantities(c.allocatable), quantities(c.used), quantities(c.drift),
                                   "; ".join([*c.health, *(f"links degraded: {h}" for h in c.degraded_hypernodes)])
                                   or "healthy", age(c.last_heartbeat)]),
    admin_pb2.Token: (("ID", "NAME", "FOR", "STATE", "EXPIRES", "AGE", "CREATED BY"), _token_row),
    admin_pb2.AuditEvent: (("ID", "AGE", "ACTOR", "ACTION", "KIND", "NAME"), lambda e: [
        e.id, age(e.time), e.actor, e.action, e.kind, e.name]),
}


GPU = "nvidia.com/gpu"


def _wide_job_row(j: common_pb2.Job) -> list[Any]:
    s = j.status
    labels = ",".join(f"{k}={v}" for k, v in sorted(j.spec.labels.items())) or "-"
    return [*_job_row(j)[:-1], gpus(j), sum(t.replicas for t in j.spec.tasks), s.attempt, s.retries, s.requeues,
            ",".join(f"{c.name}={pascal_case(c.state)}" for c in s.admission_checks) or "-",
            f"{j.spec.hyperjob.name}[{j.spec.hyperjob.index}]" if j.spec.hyperjob.id else "-",
            ",".join(sorted({p.node for p in s.placements})) or "-", labels, s.reason or "-"]


def _past_usage(item: Any) -> str:
    """A tenant's or queue's usage history, in resource-hours decayed by the server's half-life."""
    return ",".join(f"{k}={v}h" for k, v in sorted(item.past_usage.items())) or "-"


def _with_past(kind: type[Message]) -> tuple[Sequence[str], Callable[[Any], list[Any]]]:
    headers, row = TABLES[kind]
    return (*headers, "PAST-USAGE"), lambda item: [*row(item), _past_usage(item)]


WIDE: dict[type[Message], tuple[Sequence[str], Callable[[Any], list[Any]]]] = {
    common_pb2.Job: ((*JOB_HEADERS[:-1], "GPUS", "PODS", "ATTEMPT", "RETRIES", "REQUEUES", "CHECKS", "HYPERJOB",
                      "NODES", "LABELS", "REASON"),
                     _wide_job_row),
    admin_pb2.Tenant: _with_past(admin_pb2.Tenant),
    admin_pb2.Queue: _with_past(admin_pb2.Queue),
}


def table_row(fmt: str, item: Message) -> tuple[Sequence[str], list[Any]]:
    """The headers and the row of `item` in a table (`wide`: with its extra columns)."""
    headers, row = (WIDE.get(type(item)) if fmt == "wide" else None) or TABLES[type(item)]
    return headers, row(item)


def resource_name(item: Message) -> str:
    """kubectl's `-o name`: `kind/name` (a job by its id, an event by its sequence number)."""
    kind = {common_pb2.PodStatus: "pod", common_pb2.JobEvent: "event"}.get(type(item)) or \
        item.DESCRIPTOR.name.lower()
    for field in ("id", "name", "sequence"):
        if field in item.DESCRIPTOR.fields_by_name:
            return f"{kind}/{getattr(item, field)}"
    return kind


def emit(fmt: str, items: Sequence[Message], whole: Message | None = None) -> None:
    """Print `items` as a table (`wide`: more columns), their names (`kind/name`), their fields by kubectl's
    `jsonpath=` or `custom-columns=`, or `whole` (the response holding them) as JSON or YAML."""
    if fmt == "name":
        for item in items:
            click.echo(resource_name(item))
        return
    if fmt in ("table", "wide"):
        if not items:
            click.echo("No resources found.")
            return
        headers = table_row(fmt, items[0])[0]
        click.echo(render_table(headers, [table_row(fmt, i)[1] for i in items]))
        return
    if fmt.startswith("custom-columns="):
        headers, rows = query.custom_columns([as_dict(i) for i in items], fmt.partition("=")[2])
        click.echo(render_table(headers, rows))
        return
    if whole is not None or len(items) == 1:
        data: Any = as_dict(whole if whole is not None else items[0])
    else:  # several objects named: a list of them, as kubectl prints one
        data = {"items": [as_dict(i) for i in items]}
    if fmt.startswith("jsonpath="):
        found = query.jsonpath(data, fmt.partition("=")[2])
        if found:  # nothing matched prints nothing, as kubectl (not an empty line)
            click.echo(safe_log(found.encode()), nl=not found.endswith("\n"))
        return
    if fmt == "json":
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())


def as_dict(message: Message) -> dict[str, Any]:
    """Proto JSON with every field, zero values included (pod index 0, running 0 are values, not absences),
    and enum values written as the tables write them."""
    data = json_format.MessageToDict(message, always_print_fields_with_no_presence=True)
    _enums_as_text(message, data)
    return data


def _enums_as_text(message: Message, data: dict[str, Any]) -> None:
    for field in message.DESCRIPTOR.fields:
        key = field.json_name
        if key not in data:
            continue
        repeated = field.is_repeated
        if field.enum_type is not None:
            data[key] = [pascal_case(v) for v in data[key]] if repeated else pascal_case(data[key])
        elif field.message_type is not None and not field.message_type.GetOptions().map_entry:
            values = getattr(message, field.name)
            for sub, sub_data in zip(values, data[key], strict=True) if repeated else [(values, data[key])]:
                if isinstance(sub_data, dict):
                    _enums_as_text(sub, sub_data)


def describe(message: Message) -> str:
    """An object as `kubectl describe` prints one: `Key:  value` lines, nested blocks indented, maps as
    key=value lines, and a pod template's JSON shown as the structure it is."""
    data = as_dict(message)
    for task in (data.get("spec") or {}).get("tasks") or []:
        if task.get("podTemplateJson"):
            with contextlib.suppress(ValueError):
                task["podTemplateJson"] = json.loads(task["podTemplateJson"])
    lines: list[str] = []
    _describe_into(lines, data, 0)
    return "\n".join(lines)


def _label(key: str) -> str:
    return key[:1].upper() + key[1:] + ":"


def _scalar(value: Any) -> str:
    return safe(str(value).lower() if isinstance(value, bool) else value)


def _describe_into(lines: list[str], data: dict[str, Any], indent: int) -> None:
    pad = " " * indent
    width = max((len(k) for k in data), default=0) + 2
    for key, value in data.items():
        label = _label(key)
        if isinstance(value, dict) and value and all(not isinstance(v, dict | list) for v in value.values()):
            lines.append(f"{pad}{label}")
            lines += [f"{pad}  {safe(k)}={_scalar(v)}" for k, v in value.items()]
        elif isinstance(value, dict) and value:
            lines.append(f"{pad}{label}")
            _describe_into(lines, value, indent + 2)
        elif isinstance(value, list) and value and all(not isinstance(v, dict | list) for v in value):
            lines.append(f"{pad}{label:<{width}}{', '.join(_scalar(v) for v in value)}")
        elif isinstance(value, list) and value:
            lines.append(f"{pad}{label}")
            for i, item in enumerate(value):
                lines.append(f"{pad}  [{i}]")
                if isinstance(item, dict):
                    _describe_into(lines, item, indent + 4)
                else:
                    lines.append(f"{pad}    {_scalar(item)}")
        elif value in ({}, [], ""):
            lines.append(f"{pad}{label:<{width}}<none>")
        else:
            lines.append(f"{pad}{label:<{width}}{_scalar(value)}")
