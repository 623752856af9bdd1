"""fedctl's commands for admin objects: tenants, queues, flavors and priority classes, their manifests (apply,
validate, convert), tokens and the audit log."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import grpc
import yaml
from google.protobuf import duration_pb2, field_mask_pb2
from google.protobuf.message import Message

from federation.cli import convert, output
from federation.cli.app import (
    _dry_run,
    _format_option,
    _label_pairs,
    _quantity_pairs,
    _read_manifests,
    cli,
    pass_client,
)
from federation.cli.client import Client, fail, field_violations
from federation.cli.commands.jobs import Left, _check_here
from federation.cli.jobdocs import jobs_from_documents
from federation.cli.manifest import (
    HYPERJOB_API,
    Converted,
    admin_from_document,
    apply_documents,
    for_submit,
)
from federation.cli.output import pascal_case
from federation.cli.yamldoc import Document
from federation.kernel.durations import parse_duration
from federation.v1 import admin_pb2, common_pb2

# ---- admin objects --------------------------------------------------------------------------

def _mask(provided: dict[str, Any]) -> field_mask_pb2.FieldMask:
    return field_mask_pb2.FieldMask(paths=[k for k, v in provided.items() if v is not None])


def _crud_group(group_name: str, message: type[Message], field: str, list_rpc: str,
                options: list[Callable[..., Any]], build: Callable[..., dict[str, Any]]) -> click.Group:
    """create/update/get/list/delete for one admin kind, from its option list."""
    pascal = output.pascal_case(field)
    group = click.Group(group_name, help=f"Manage {group_name} objects.")

    def call(rpc: str, request: Message) -> Any:
        client = click.get_current_context().find_object(Client)
        return getattr(client.admin, rpc)(request)

    def request(verb: str, **kwargs: Any) -> Message:
        return getattr(admin_pb2, f"{verb}{pascal}Request")(**kwargs)

    def with_options(fn: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            fn = option(fn)
        return fn

    @group.command("create", help=f"Create {group_name} NAME with the options given.")
    @click.argument("name")
    @with_options
    @_format_option
    def create(name: str, fmt: str, **values: Any) -> None:
        obj = message(name=name, **{k: v for k, v in build(**values).items() if v is not None})
        output.emit(fmt, [call(f"Create{pascal}", request("Create", **{field: obj}))])

    @group.command("update", help=f"Change the options given of {group_name} NAME; the rest stays.")
    @click.argument("name")
    @with_options
    @_format_option
    def update(name: str, fmt: str, **values: Any) -> None:
        fields = build(**values)
        mask = _mask(fields)
        if not mask.paths:
            raise click.UsageError("give at least one field to change")
        obj = message(name=name, **{k: v for k, v in fields.items() if v is not None})
        output.emit(fmt, [call(f"Update{pascal}", request("Update", **{field: obj, "update_mask": mask}))])

    @group.command("get", help=f"Show {group_name} NAME (as `fedctl get {group_name} NAME`).")
    @click.argument("name")
    @_format_option
    def get_one(name: str, fmt: str) -> None:
        output.emit(fmt, [call(f"Get{pascal}", request("Get", name=name))])

    @group.command("list", help=f"List every {group_name} (as `fedctl get {group_name}s`).")
    @_format_option
    def list_all(fmt: str) -> None:
        response = call(list_rpc, getattr(admin_pb2, f"{list_rpc}Request")())
        items = list(getattr(response, response.DESCRIPTOR.fields[0].name))
        output.emit(fmt, items, response)

    @group.command("delete", help=f"Delete {group_name} NAME.")
    @click.argument("obj_name", metavar="NAME")
    def delete(obj_name: str) -> None:
        call(f"Delete{pascal}", request("Delete", name=obj_name))
        click.echo(f"{group_name}/{obj_name} deleted")

    return group


_guarantee = click.option("--guarantee", multiple=True, metavar="RES=QTY", help="Guaranteed amount (repeatable).")
_limit = click.option("--limit", multiple=True, metavar="RES=QTY", help="Hard cap (repeatable).")
_weight = click.option("--weight", type=click.IntRange(min=1), help="Fair-share weight.")


_admission_check = click.option(
    "--admission-check", "admission_checks", multiple=True, metavar="NAME",
    help="An admission check its jobs pass before their cluster runs them (repeatable): provisioning (nodes a "
         "cluster's autoscaler adds, when no cluster has room), or any name an external controller sets with "
         "`fedctl admission-check`.")


def _lending_limit(help_text: str) -> Callable[..., Any]:
    return click.option("--lending-limit", multiple=True, metavar="RES=QTY", help=help_text)


def _quota(guarantee: tuple[str, ...], limit: tuple[str, ...], lending_limit: tuple[str, ...]) -> dict[str, Any]:
    return {"guarantee": _quantity_pairs(guarantee, "--guarantee") or None,
            "limit": _quantity_pairs(limit, "--limit") or None,
            "lending_limit": _quantity_pairs(lending_limit, "--lending-limit") or None}


cli.add_command(_crud_group(
    "tenant", admin_pb2.Tenant, "tenant", "ListTenants",
    [_weight, _guarantee, _limit,
     _lending_limit("The most of its guarantee other tenants may use while it does not (repeatable; 0: none; "
                    "default: all of it)."),
     click.option("--disabled/--enabled", default=None, help="A disabled tenant's jobs are not scheduled."),
     click.option("--max-run-time", metavar="DURATION",
                  help="The longest any of its jobs may run, e.g. 24h (\"\": no cap): a job asking more is refused.")],
    lambda weight, guarantee, limit, lending_limit, disabled, max_run_time: {
        "weight": weight, **_quota(guarantee, limit, lending_limit), "disabled": disabled,
        "max_run_time": max_run_time}))

queue_group = _crud_group(
    "queue", admin_pb2.Queue, "queue", "ListQueues",
    [click.option("--tenant", help="Owning tenant (create only)."), _weight,
     click.option("--priority", type=int, help="Queues of higher priority are served first."), _guarantee, _limit,
     _lending_limit("The most of its guarantee its sibling queues may use while it does not (repeatable; 0: none; "
                    "default: all of it)."),
     click.option("--reclaimable/--no-reclaimable", default=None,
                  help="May what it holds beyond its deserved share be taken back (default on create: yes)."),
     click.option("--state", type=click.Choice(["open", "closed", "draining"], case_sensitive=False),
                  help="closed: refuses new jobs, its waiting ones wait; "
                       "draining: refuses new jobs, its waiting ones still run."),
     click.option("--flavor", "flavors", multiple=True, metavar="FLAVOR",
                  help="A flavor its jobs may use, in order of preference (repeatable; none: any)."),
     click.option("--parent", metavar="QUEUE",
                  help="A queue of the same tenant whose deserved share this one takes part of (\"\": none)."),
     click.option("--max-run-time", metavar="DURATION",
                  help="The maximum run time of its jobs that name none, e.g. 4h (\"\": none), held to its "
                       "tenant's cap."),
     _admission_check],
    lambda tenant, weight, priority, guarantee, limit, lending_limit, reclaimable, state, flavors, parent,
           max_run_time, admission_checks: {
        "tenant": tenant, "weight": weight, "priority": priority, **_quota(guarantee, limit, lending_limit),
        "reclaimable": reclaimable, "state": admin_pb2.QueueState.Value(state.upper()) if state else None,
        "flavors": list(flavors) or None, "parent": parent, "max_run_time": max_run_time,
        "admission_checks": list(admission_checks) or None})
cli.add_command(queue_group)

cli.add_command(_crud_group(
    "flavor", admin_pb2.Flavor, "flavor", "ListFlavors",
    [click.option("--resource", help="The resource it is a flavor of (e.g. nvidia.com/gpu)."),
     click.option("--selector", metavar="KEY=VALUE,...",
                  help="Labels of the member clusters whose resource is of this flavor (e.g. accelerator=h100)."),
     _admission_check],
    lambda resource, selector, admission_checks: {
        "resource": resource, "cluster_selector": _label_pairs(selector, "--selector") if selector else None,
        "admission_checks": list(admission_checks) or None}))


@queue_group.command("status")
@click.argument("name")
@_format_option
@pass_client
def queue_status(client: Client, name: str, fmt: str) -> None:
    """Usage, deserved share, dominant share and job counts of queue NAME."""
    status = client.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name=name))
    if fmt != "table":
        output.emit(fmt, [status], status)
        return
    share = "-" if status.dominant_share < 0 else f"{status.dominant_share:.2f}"
    click.echo(output.render_table(("QUEUE", "TENANT", "USAGE", "DESERVED", "DOMINANT-SHARE", "PENDING", "RUNNING"), [
        [status.queue, status.tenant, output.quantities(status.usage), output.quantities(status.deserved), share,
         status.pending, status.running]]))

cli.add_command(_crud_group(
    "priorityclass", admin_pb2.PriorityClass, "priority_class", "ListPriorityClasses",
    [click.option("--value", type=int, help="Higher values are served first and may preempt lower ones."),
     click.option("--preemptible/--not-preemptible", default=None,
                  help="May jobs of this class be preempted by higher ones."),
     click.option("--global-default/--no-global-default", default=None,
                  help="The class of jobs that name none (at most one is)."),
     click.option("--description", help="Shown in listings."),
     click.option("--protected-run-seconds", type=int,
                  help="seconds a job of this class runs before another queue may reclaim it")],
    lambda value, preemptible, global_default, description, protected_run_seconds: {
        "value": value, "preemptible": preemptible, "global_default": global_default, "description": description,
        "protected_run_seconds": protected_run_seconds}))


def _to_apply(doc: Document) -> list[tuple[str, Converted]]:
    """Kueue's queue objects go through `fedctl convert`'s mapping (its notes become warnings, its errors
    name the Kueue file); everything else is read as `fedctl apply` reads it."""
    if isinstance(doc.data, dict) and str(doc.data.get("apiVersion", "")).startswith(convert.KUEUE_API):
        result = convert.convert([doc])
        made = []
        for obj in result.objects:
            kind, converted = admin_from_document(Document(doc.file, doc.index, obj, {}, doc.start_line))
            converted.warnings.extend(result.notes)
            made.append((kind, converted))
        if not made:  # a LocalQueue, a ResourceFlavor...: nothing to apply, and why
            click.echo("\n".join(f"fedctl: note: {note}" for note in result.notes), err=True)
        return made
    return apply_documents(doc)


def _same(existing: Message, wanted: Message, paths: list[str]) -> bool:
    def value(message: Message, path: str) -> Any:
        found = getattr(message, path)
        return dict(found) if hasattr(found, "items") else list(found) if hasattr(found, "extend") else found
    return all(value(existing, p) == value(wanted, p) for p in paths)


@cli.command()
@click.option("-f", "--filename", "files", multiple=True, required=True,
              type=click.Path(path_type=Path, allow_dash=True), help="Manifest file (repeatable).")
@_dry_run
@pass_client
def apply(client: Client, files: tuple[Path, ...], dry_run: str) -> None:
    """Create or update the Tenant, Queue, PriorityClass and Flavor manifests in the files, in order; Volcano
    Queues too (scheduling.volcano.sh/v1beta1), in the tenant their federation.dev/tenant annotation names,
    and Kueue ClusterQueues and Cohorts, mapped as `fedctl convert` shows. Says `unchanged` of an object
    already as written."""
    jobs = Left("job manifest", "fedctl submit -f")
    converted = [made for doc in jobs.skip(_read_manifests(files), for_submit) for made in _to_apply(doc)]
    jobs.say(files, bool(converted))
    for _, c in converted:
        for warning in c.warnings:
            click.echo(f"fedctl: warning: {warning}", err=True)
    for kind, c in converted:
        field = {"Tenant": "tenant", "Queue": "queue", "PriorityClass": "priority_class", "Flavor": "flavor"}[kind]
        name = c.message.name  # type: ignore[attr-defined]
        if dry_run == "client":
            click.echo(f"{kind.lower()}/{name} read (dry run: client)")
            continue
        paths = [p for p in c.origin if p not in ("name", "tenant")]
        try:
            try:
                existing = getattr(client.admin, f"Get{kind}")(getattr(admin_pb2, f"Get{kind}Request")(name=name))
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                    raise
                existing = None
            if existing is None:
                if dry_run == "none":
                    getattr(client.admin, f"Create{kind}")(
                        getattr(admin_pb2, f"Create{kind}Request")(**{field: c.message}))
                verb = "created"
            elif _same(existing, c.message, paths):
                verb = "unchanged"
            else:
                if dry_run == "none":
                    getattr(client.admin, f"Update{kind}")(getattr(admin_pb2, f"Update{kind}Request")(
                        **{field: c.message, "update_mask": field_mask_pb2.FieldMask(paths=paths)}))
                verb = "configured"
        except grpc.RpcError as err:
            violations = field_violations(err)
            if not violations:
                fail([f"{c.doc.file}:{c.doc.start_line}: {kind.lower()}/{name}: {err.details()}"])  # type: ignore
            fail([f"{c.doc.file}:{c.line_of(v.field.partition('.')[2])}: {v.field}: {v.description}"
                  for v in violations])
        click.echo(f"{kind.lower()}/{name} {verb}" + (" (dry run: server)" if dry_run == "server" else ""))


@cli.command()
@click.option("-f", "--filename", "files", multiple=True, required=True,
              type=click.Path(path_type=Path, allow_dash=True), help="Manifest file (repeatable).")
def validate(files: tuple[Path, ...]) -> None:
    """Check manifests here, contacting nothing: Volcano Jobs as `submit` reads them, queues and the rest as
    `apply` does, and Nodes and HyperNodes (a cluster's topology, the agent's --simulate files, Volcano's
    discoverers' output) as the agent builds its topology from them. Exit 1 if any is refused."""
    from member_agent.topology import TopologyError, build, load_objects

    jobs: list[Converted] = []
    topology: dict[str, list[Any]] = {}
    claim_templates: list[Document] = []
    for doc in _read_manifests(files):
        data = doc.data if isinstance(doc.data, dict) else {}
        kind, api = str(data.get("kind", "")), str(data.get("apiVersion", ""))
        if kind == "ResourceClaimTemplate":
            list(jobs_from_documents([doc]))  # checked here; carried by the jobs after it that name it
            claim_templates.append(doc)
            click.echo(f"resourceclaimtemplate/{(data.get('metadata') or {}).get('name', '')} valid")
        elif (kind == "Job" and api.startswith("batch.volcano.sh/")) or (kind, api) == ("HyperJob", HYPERJOB_API):
            jobs.extend(jobs_from_documents([*claim_templates, doc]))
        elif kind in ("Node", "HyperNode"):
            topology.setdefault(doc.file, []).append(data)
        else:
            for made_kind, made in _to_apply(doc):
                click.echo(f"{made_kind.lower()}/{made.message.name} valid")  # type: ignore[attr-defined]
    if jobs:
        _check_here(jobs)
        for c in jobs:
            click.echo(f"job/{c.message.name} valid")  # type: ignore[attr-defined]
    refused = []
    for file, objects in topology.items():
        try:
            nodes, hypernodes, _ = load_objects(objects)
            built = build(nodes, hypernodes)
        except TopologyError as err:
            refused.append(f"{file}: topology refused: {err}")
            continue
        tiers = " ".join(f"{name}={tier}" for name, tier in sorted(built.tier_names.items()))
        click.echo(f"{file}: topology valid: {len(nodes)} nodes, {len(hypernodes)} HyperNodes"
                   + (f", tiers {tiers}" if tiers else ""))
        for note in built.notes:
            click.echo(f"fedctl: note: {file}: {note}", err=True)
    if refused:
        fail(refused)


@cli.command("convert")
@click.option("-f", "--filename", "files", multiple=True, required=True,
              type=click.Path(path_type=Path, allow_dash=True), help="Manifest file (repeatable).")
def convert_command(files: tuple[Path, ...]) -> None:
    """Print Kueue, Armada and Volcano queues and jobs as the manifests the federation takes (queues for
    `fedctl apply`, Volcano Jobs for `fedctl submit`), applying nothing; each mapping and what was lost is a
    note on stderr naming file and line."""
    result = convert.convert(list(_read_manifests(files)))
    for note in result.notes:
        click.echo(f"fedctl: note: {note}", err=True)
    if result.objects:
        click.echo(yaml.safe_dump_all(result.objects, sort_keys=False), nl=False)
    else:  # nothing to apply or submit: a pipeline into fedctl must not go on as if it had something
        fail([f"{', '.join(map(str, files))}: nothing converted (the notes above say why)"])


# ---- tokens and the audit log (admin) ---------------------------------------------------------

@cli.group()
def token() -> None:
    """Issue, list and revoke bearer tokens (admin)."""


@token.command("create")
@click.option("--tenant", default="", help="A tenant token: reaches only this tenant's queues and jobs.")
@click.option("--admin", is_flag=True, help="An admin token: manages tenants, queues, clusters and tokens.")
@click.option("--name", default="", help="What it is for (a DNS-1123 label); shown in the audit log.")
@click.option("--ttl", default="", help="Lifetime, e.g. 12h or 2160h (default: until revoked).")
@pass_client
def token_create(client: Client, tenant: str, admin: bool, name: str, ttl: str) -> None:
    """Print a new token. Only its hash is stored: keep it now, it cannot be shown again."""
    if admin == bool(tenant):
        raise click.UsageError("give exactly one of --admin or --tenant NAME")
    request = admin_pb2.CreateTokenRequest(name=name, tenant=tenant, admin=admin)
    if ttl:
        try:
            request.ttl.CopyFrom(duration_pb2.Duration(seconds=round(parse_duration(ttl))))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--ttl") from None
    response = client.admin.CreateToken(request)
    click.echo(response.bearer_token)
    click.echo(f"fedctl: token {response.token.id} created; it is not shown again", err=True)


@token.command("list")
@click.option("--tenant", default="", help="This tenant's tokens only.")
@_format_option
@pass_client
def token_list(client: Client, tenant: str, fmt: str) -> None:
    """Tokens (never their secrets)."""
    response = client.admin.ListTokens(admin_pb2.ListTokensRequest(tenant=tenant))
    output.emit(fmt, list(response.tokens), response)


@token.command("revoke")
@click.argument("token_id")
@pass_client
def token_revoke(client: Client, token_id: str) -> None:
    """Revoke a token: it stops working at once on this server, within 10 s on its other replicas."""
    client.admin.RevokeToken(admin_pb2.RevokeTokenRequest(id=token_id))
    click.echo(f"token {token_id} revoked")


@cli.command()
@click.option("--kind", type=click.Choice(["tenant", "queue", "priority_class", "cluster", "token"]), default=None,
              help="Changes to objects of this kind only.")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="At most this many.")
@_format_option
@pass_client
def audit(client: Client, kind: str | None, limit: int, fmt: str) -> None:
    """The latest admin changes, newest first (-o json shows each object before and after)."""
    response = client.admin.ListAuditEvents(admin_pb2.ListAuditEventsRequest(kind=kind or "", limit=limit))
    output.emit(fmt, list(response.events), response)


@cli.command("admission-check")
@click.argument("job_id")
@click.argument("check")
@click.argument("state", type=click.Choice(["pending", "ready", "retry", "rejected"], case_sensitive=False))
@click.option("--message", default="", help="What people are told of it.")
@pass_client
def admission_check(client: Client, job_id: str, check: str, state: str, message: str) -> None:
    """Say how admission check CHECK of dispatched job JOB_ID stands, as its controller (Kueue's
    AdmissionCheckState): ready (its cluster is told to run it once every check is), retry (its room is given back
    and it waits in its queue again), rejected (it fails)."""
    status = client.admin.SetAdmissionCheck(admin_pb2.SetAdmissionCheckRequest(
        job_id=job_id, name=check, state=state.upper(), message=message)).status
    click.echo(f"job/{job_id}: admission check {check} {state.lower()}; "
               f"{pascal_case(common_pb2.JobPhase.Name(status.phase))}: {status.reason}")
