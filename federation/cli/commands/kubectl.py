"""kubectl's grammar over the federation's objects: get, list, describe, delete and cancel (with -l, -n, --all,
-o, -w), with completion of kinds and names."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import click
import grpc
import yaml
from google.protobuf.message import Message

from federation.cli import output, query
from federation.cli.app import _client, _format_option, cli, pass_client
from federation.cli.client import Client, fail, rpc_error_lines
from federation.cli.volcano_job import volcano_job
from federation.v1 import admin_pb2, common_pb2, jobs_pb2

KIND_NAMES = {"job": "job", "jobs": "job", "vcjob": "job", "vcjobs": "job",
              "queue": "queue", "queues": "queue", "q": "queue",
              "tenant": "tenant", "tenants": "tenant",
              "priorityclass": "priority_class", "priorityclasses": "priority_class", "pc": "priority_class",
              "flavor": "flavor", "flavors": "flavor", "resourceflavor": "flavor", "resourceflavors": "flavor",
              "cluster": "cluster", "clusters": "cluster", "pod": "pod", "pods": "pod", "po": "pod",
              "event": "event", "events": "event", "ev": "event"}
ADMIN_LIST = {"queue": "ListQueues", "tenant": "ListTenants", "priority_class": "ListPriorityClasses",
              "flavor": "ListFlavors"}
KINDS = ("jobs", "pods", "events", "queues", "tenants", "priorityclasses", "flavors", "clusters")


def _completion_client() -> Client:
    """A client as the command line would make one from its variables and config (flags are not parsed yet
    while completing)."""
    return _client({k: os.environ.get(f"FEDERATION_{k.upper()}") for k in ("server", "token", "ca", "cert", "key")})


def _names(ctx: click.Context, incomplete: str, kind: str = "") -> list[Any]:
    """Names of the objects of `kind` (else the KIND on the line), from the server (nothing when it cannot be
    asked)."""
    from click.shell_completion import CompletionItem

    try:
        kind = _kind(kind or str(ctx.params.get("kind", "")))
        if kind in ("pod", "event"):
            kind = "job"
        client = _completion_client()
        if kind == "job":
            page = client.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1000), timeout=3)
            found = [j.id for j in page.jobs]
        else:
            items, _ = _listed(client, kind)
            found = [i.name for i in items]  # type: ignore[attr-defined]
    except (click.ClickException, grpc.RpcError, OSError, ValueError):
        return []
    return [CompletionItem(n) for n in found if n.startswith(incomplete)]


_kind_argument = click.argument("kind", metavar="KIND", shell_complete=lambda ctx, param, incomplete: [
    k for k in KINDS if k.startswith(incomplete)])


def _kind(text: str) -> str:
    kind = KIND_NAMES.get(text.lower().split(".", 1)[0])
    if kind is None:
        raise click.UsageError(f"unknown kind {text!r}; kinds: jobs, pods, events, queues, tenants, "
                               "priorityclasses, flavors, clusters")
    return kind


def _admin_call(client: Client, verb: str, kind: str, **fields: Any) -> Any:
    """AdminService's `verb` for `kind` (Get, priority_class -> GetPriorityClass(GetPriorityClassRequest))."""
    rpc = f"{verb}{output.pascal_case(kind)}"
    return getattr(client.admin, rpc)(getattr(admin_pb2, f"{rpc}Request")(**fields))


def _all_jobs(client: Client, tenant: str = "", queue: str = "", phases: tuple[str, ...] = (),
              limit: int | None = None, history: bool = False, cluster: str = "") -> list[common_pb2.Job]:
    jobs: list[common_pb2.Job] = []
    token = ""
    while True:
        page = client.jobs.ListJobs(jobs_pb2.ListJobsRequest(
            tenant=tenant, queue=queue, phases=[common_pb2.JobPhase.Value(p.upper()) for p in phases],
            page_size=min(limit or 500, 500), page_token=token, include_history=history, cluster=cluster))
        jobs.extend(page.jobs)
        token = page.next_page_token
        if not token or (limit and len(jobs) >= limit):
            break
    return jobs[:limit] if limit else jobs


def _one(client: Client, kind: str, name: str) -> Message:
    if kind == "job":
        return client.jobs.GetJob(jobs_pb2.GetJobRequest(id=name))
    if kind == "cluster":
        found = [c for c in client.admin.ListClusters(admin_pb2.ListClustersRequest()).clusters if c.name == name]
        if not found:
            fail([f"cluster {name!r} not found"])
        return found[0]
    return _admin_call(client, "Get", kind, name=name)


def _listed(client: Client, kind: str, history: bool = False) -> tuple[list[Message], Message]:
    """Every object of `kind`, and the response that held them (`history`: jobs of the history too)."""
    if kind == "job":
        jobs = _all_jobs(client, history=history)
        return list(jobs), jobs_pb2.ListJobsResponse(jobs=jobs)
    rpc = "ListClusters" if kind == "cluster" else ADMIN_LIST[kind]
    response = getattr(client.admin, rpc)(getattr(admin_pb2, f"{rpc}Request")())
    return list(getattr(response, response.DESCRIPTOR.fields[0].name)), response


def _narrowed(kind: str, items: list[Message], whole: Message | None, selector: str, namespace: str,
              sort_by: str, field_selector: str = "") -> tuple[list[Message], Message | None]:
    """kubectl's -l, -n, --field-selector and --sort-by over what was fetched (jobs' labels and namespaces; any
    kind's fields)."""
    if (selector or namespace) and kind != "job":
        raise click.UsageError("-l and -n select jobs (by their labels and namespaces)")
    try:
        wanted = query.Selector(selector) if selector else None
        fields = query.FieldSelector(field_selector) if field_selector else None
        key = query.sort_key(sort_by) if sort_by else None
    except query.QueryError as err:
        raise click.UsageError(str(err)) from None
    kept = [i for i in items if (wanted is None or wanted.matches(i.spec.labels))  # type: ignore[attr-defined]
            and (not namespace or i.spec.namespace == namespace)  # type: ignore[attr-defined]
            and (fields is None or fields.matches(output.as_dict(i)))]
    if key is not None:
        kept.sort(key=lambda i: key(output.as_dict(i)))
    if kept == items:
        return items, whole
    if whole is None or any(whole is i for i in items):  # a named object, not a list response
        return kept, None
    return kept, type(whole)(**{whole.DESCRIPTOR.fields[0].name: kept})


def _events(client: Client, job_ids: tuple[str, ...], quiet: float = 0.5) -> list[common_pb2.JobEvent]:
    """The event log so far (of these jobs, or every one the caller sees): replayed until it falls quiet."""
    found: list[common_pb2.JobEvent] = []
    for job_id in job_ids or ("",):
        stream = client.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0, job_id=job_id))
        timer = threading.Timer(quiet, stream.cancel)
        timer.start()
        try:
            for event in stream:
                timer.cancel()
                found.append(event)
                timer = threading.Timer(quiet, stream.cancel)
                timer.start()
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:  # type: ignore[attr-defined]
                raise
        finally:
            timer.cancel()
    return sorted(found, key=lambda e: e.sequence)


def _events_table(events: list[common_pb2.JobEvent]) -> str:
    return output.render_table(("SEQ", "AGE", "JOB", "TYPE", "CLUSTER", "MESSAGE"), [
        [e.sequence, output.age(e.time), e.job_id, e.type, e.cluster or "-", e.message] for e in events])


def _watch_jobs(client: Client, fmt: str, selector: str, namespace: str, names: tuple[str, ...]) -> None:
    """kubectl's -w: after the table, a row for each job as it changes, until Ctrl-C."""
    wanted = query.Selector(selector) if selector else None
    try:
        for event in client.jobs.WatchJobs(jobs_pb2.WatchJobsRequest()):
            if names and event.job_id not in names:
                continue
            job = client.jobs.GetJob(jobs_pb2.GetJobRequest(id=event.job_id))
            if (wanted and not wanted.matches(job.spec.labels)) or (namespace and job.spec.namespace != namespace):
                continue
            if fmt in ("table", "wide"):
                headers, row = output.table_row(fmt, job)
                click.echo(output.render_table(headers, [row]).splitlines()[1])
            else:
                output.emit(fmt, [job], job)
    except KeyboardInterrupt:
        pass


def _listing_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed((
            click.option("-l", "--selector", default="", help="Jobs whose labels match (a=b,c!=d,e,!f,g in (x,y))."),
            click.option("-n", "--namespace", default="", help="Jobs whose pods go to this namespace."),
            click.option("-A", "--all-namespaces", is_flag=True, help="Jobs of every namespace (the default)."),
            click.option("--field-selector", default="", metavar="SELECTOR",
                         help="Objects whose fields match, as -o json names them (status.phase=Running,"
                              "spec.queue!=batch)."),
            click.option("--sort-by", default="", metavar="PATH", help="Sort by a field, as -o json names it "
                                                                       "(.status.createTime)."),
            click.option("-w", "--watch", is_flag=True, help="After the list, a row for each job as it changes "
                                                             "(Ctrl-C to stop)."),
            click.option("--all", "history", is_flag=True, help="Jobs of the history too: those that ended more "
                                                                "than the server's --archive-after ago."))):
        fn = option(fn)
    return fn


@cli.command()
@_kind_argument
@click.argument("names", nargs=-1, metavar="[NAME]...", shell_complete=lambda ctx, param, incomplete: _names(
    ctx, incomplete))
@_format_option
@_listing_options
@pass_client
def get(client: Client, kind: str, names: tuple[str, ...], fmt: str, selector: str, namespace: str,
        all_namespaces: bool, field_selector: str, sort_by: str, watch: bool, history: bool) -> None:
    """Show objects of KIND (jobs, pods, events, queues, tenants, priorityclasses, flavors, clusters): the
    ones NAMEd, or all. A job is shown with its pods; with -o yaml, as the Volcano Job it came from, with a
    status (-o json: the federation's record). `get pods JOB...`: the pods of those jobs, as their member
    clusters report them; `get events [JOB...]`: the event log so far."""
    kind = _kind(kind)
    if namespace and all_namespaces:
        raise click.UsageError("-n and -A go one at a time")
    if watch and kind != "job":
        raise click.UsageError("-w watches jobs")
    if history and (kind != "job" or names):
        raise click.UsageError("--all lists jobs (a job NAMEd is shown wherever it is)")
    if kind == "event":
        events = _events(client, names)
        if fmt in ("table", "wide"):
            click.echo(_events_table(events) if events else "No resources found.")
        else:
            output.emit(fmt, events, None)
        return
    if kind == "pod":
        if not names:
            raise click.UsageError("give the jobs whose pods to show: fedctl get pods JOB...")
        jobs = [client.jobs.GetJob(jobs_pb2.GetJobRequest(id=name)) for name in names]
        pods = [pod for job in jobs for pod in job.status.pods]
        if fmt in ("table", "wide"):
            click.echo(output.pods_table(jobs) if pods else f"no pods reported for {', '.join(names)}")
        else:
            output.emit(fmt, pods, None)
        return
    if names:
        objects: list[Message] = [_one(client, kind, name) for name in names]
        items, whole = objects, objects[0] if len(objects) == 1 else None
    else:
        items, whole = _listed(client, kind, history)
    items, whole = _narrowed(kind, items, whole, selector, namespace, sort_by, field_selector)
    if kind == "job" and fmt == "yaml":  # as kubectl get vcjob -o yaml: Volcano Jobs (a List of several)
        made = [volcano_job(j) for j in items]  # type: ignore[arg-type]
        data = made[0] if names and len(made) == 1 else {"apiVersion": "v1", "kind": "List", "items": made}
        click.echo(yaml.safe_dump(data, sort_keys=False).rstrip())
    else:
        output.emit(fmt, items, whole)
    for job in items if kind == "job" and names and fmt == "table" else []:
        if job.status.pods:  # type: ignore[attr-defined]
            click.echo("\n" + output.pods_table([job]))  # type: ignore[list-item]
        elif job.status.placements:  # type: ignore[attr-defined]
            click.echo("\n" + output.render_table(("TASK", "INDEX", "NODE"), [
                [p.task, p.index, p.node] for p in job.status.placements]))  # type: ignore[attr-defined]
    if watch:
        _watch_jobs(client, fmt, selector, namespace, names)


@cli.command("list")
@_kind_argument
@click.option("--tenant", default="", help="Jobs of this tenant only.")
@click.option("--queue", default="", help="Jobs of this queue only.")
@click.option("--cluster", default="", help="Jobs sent to this member cluster only.")
@click.option("--phase", "phases", multiple=True, help="Jobs in this phase: Pending, Running, ... (repeatable).",
              type=click.Choice([p.capitalize() for p in common_pb2.JobPhase.keys()[1:]], case_sensitive=False))
@click.option("--limit", type=click.IntRange(min=1), help="At most this many jobs (default: all).")
@_format_option
@_listing_options
@pass_client
def list_(client: Client, kind: str, tenant: str, queue: str, cluster: str, phases: tuple[str, ...],
          limit: int | None,
          fmt: str, selector: str, namespace: str, all_namespaces: bool, field_selector: str, sort_by: str,
          watch: bool, history: bool) -> None:
    """List objects of KIND (jobs in submission order, with filters; queues, tenants, ...), as `get KIND`."""
    kind = _kind(kind)
    if kind != "job":
        if tenant or queue or cluster or phases or limit or history:
            raise click.UsageError("--tenant, --queue, --cluster, --phase, --limit and --all filter jobs")
        if kind in ("pod", "event"):
            raise click.UsageError(f"fedctl get {kind}s JOB... shows them")
        items, whole = _listed(client, kind)
    else:
        jobs = _all_jobs(client, tenant, queue, phases, limit, history, cluster)
        items, whole = list(jobs), jobs_pb2.ListJobsResponse(jobs=jobs)
    if watch and kind != "job":
        raise click.UsageError("-w watches jobs")
    items, whole = _narrowed(kind, items, whole, selector, namespace, sort_by, field_selector)
    output.emit(fmt, items, whole)
    if watch:
        _watch_jobs(client, fmt, selector, namespace, ())


@cli.command()
@_kind_argument
@click.argument("name", shell_complete=lambda ctx, param, incomplete: _names(ctx, incomplete))
@pass_client
def describe(client: Client, kind: str, name: str) -> None:
    """One object as kubectl describes one: its fields, then for a job its pods, why it runs where it does
    or waits (per cluster) and its events; for a queue, its usage against its deserved share."""
    kind = _kind(kind)
    if kind in ("pod", "event"):
        raise click.UsageError(f"describe the job: fedctl describe job JOB (its {kind}s are part of it)")
    obj = _one(client, kind, name)
    click.echo(output.describe(obj))
    if kind == "job":
        job: common_pb2.Job = obj  # type: ignore[assignment]
        click.echo("Pods:" + ("\n" + _indent(output.pods_table([job])) if job.status.pods else "  <none>"))
        if job.spec.hyperjob.id:
            click.echo(_hyperjob(client, job))
        explained = client.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=name))
        click.echo("Clusters:" + ("\n" + _indent(output.render_table(("CLUSTER", "FITS", "WHY"), [
            [c.cluster, "yes" if c.fits else "no", c.reason] for c in explained.clusters]))
            if explained.clusters else "  <none>"))
        events = _events(client, (name,))
        click.echo("Events:" + ("\n" + _indent(_events_table(events)) if events else "  <none>"))
    elif kind == "queue":
        status = client.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name=name))
        click.echo("Status:\n" + _indent(output.describe(status)))
    elif kind == "cluster":
        counts = list(obj.gpu_free_nodes)  # type: ignore[attr-defined]
        click.echo("Nodes by free GPUs:" + ("\n" + _indent(output.render_table(("FREE GPUS", "NODES"), [
            [str(free), str(nodes)] for free, nodes in reversed(list(enumerate(counts))) if nodes]))
            if counts else "  <none>"))


def _hyperjob(client: Client, job: common_pb2.Job) -> str:
    """A sub-job's HyperJob: what it asks of its sub-jobs, and a row for each as it stands."""
    h = job.spec.hyperjob
    siblings = client.jobs.ListJobs(jobs_pb2.ListJobsRequest(hyperjob=h.id, include_history=True,
                                                             page_size=1000)).jobs
    siblings = sorted(siblings, key=lambda j: j.spec.hyperjob.index)
    running = sum(j.status.phase == common_pb2.RUNNING for j in siblings)
    bounds = [f"{h.min_available or h.parts} together"] + ([f"at most {h.max_domains} clusters"] if h.max_domains
                                                           else [])
    if h.cluster_topology:
        bounds.append(f"one {h.cluster_topology}")
    return (f"HyperJob:  {h.name} ({h.id}): {running} of {h.parts} sub-jobs running; {', '.join(bounds)}\n" +
            _indent(output.render_table(("SUB-JOB", "JOB", "REPLICATED-JOB", "PHASE", "CLUSTER", "REASON"), [
                [str(j.spec.hyperjob.index), j.id, j.spec.hyperjob.replicated_job,
                 common_pb2.JobPhase.Name(j.status.phase).capitalize(), j.status.cluster or "-", j.status.reason or "-"]
                for j in siblings])))


def _indent(text: str) -> str:
    return "\n".join(f"  {line}" for line in text.splitlines())


def _selection(fn: Callable[..., Any]) -> Callable[..., Any]:
    """kubectl delete's ways to name many jobs: -l, --all, -n."""
    for option in reversed((
            click.option("-l", "--selector", default="", help="Every job not ended whose labels match."),
            click.option("--all", "every", is_flag=True, help="Every job not ended (that the caller sees)."),
            click.option("-n", "--namespace", default="", help="With -l or --all: of this namespace only."))):
        fn = option(fn)
    return fn


ENDED_PHASES = ("Succeeded", "Failed", "Cancelled")


def _chosen(client: Client, job_ids: tuple[str, ...], selector: str, every: bool, namespace: str) -> list[str]:
    """The jobs named, or those -l or --all picks among the jobs not ended."""
    if job_ids and (selector or every):
        raise click.UsageError("name the jobs, or pick them with -l or --all, not both")
    if not job_ids and not selector and not every:
        raise click.UsageError("name the jobs (JOB_ID...), or pick them with -l SELECTOR or --all")
    if job_ids:
        return list(job_ids)
    live = [p for p in common_pb2.JobPhase.keys()[1:] if p.capitalize() not in ENDED_PHASES]
    jobs: list[Message] = list(_all_jobs(client, phases=tuple(live)))
    picked, _ = _narrowed("job", jobs, None, selector, namespace, "")
    if not picked:
        click.echo("No resources found.", err=True)
    return [j.id for j in picked]  # type: ignore[attr-defined]


@cli.command()
@_kind_argument
@click.argument("names", nargs=-1, metavar="[NAME]...")
@_selection
@pass_client
def delete(client: Client, kind: str, names: tuple[str, ...], selector: str, every: bool, namespace: str) -> None:
    """Delete objects of KIND by name; deleting a job cancels it (its record and events stay), and jobs may be
    picked with -l or --all as kubectl deletes them."""
    kind = _kind(kind)
    if kind == "cluster":
        raise click.UsageError("a cluster leaves when its agent stops; `fedctl cordon NAME` stops new work for it")
    if kind == "job":
        _cancel(client, _chosen(client, names, selector, every, namespace))
        return
    if selector or every or namespace:
        raise click.UsageError("-l, --all and -n pick jobs")
    if not names:
        raise click.UsageError("name the objects to delete")
    for name in names:
        _admin_call(client, "Delete", kind, name=name)
        click.echo(f"{kind.replace('_', '')}/{name} deleted")


@cli.command()
@click.argument("job_ids", nargs=-1, metavar="[JOB_ID]...",
                shell_complete=lambda ctx, param, incomplete: _names(ctx, incomplete, "jobs"))
@click.option("--reason", default="", help="Shown as the jobs' reason.")
@_selection
@pass_client
def cancel(client: Client, job_ids: tuple[str, ...], reason: str, selector: str, every: bool,
           namespace: str) -> None:
    """Cancel the jobs JOB_ID... , or those -l or --all picks (each on its own: one that cannot be cancelled is
    said, the rest go on)."""
    _cancel(client, _chosen(client, job_ids, selector, every, namespace), reason)


def _cancel(client: Client, job_ids: Sequence[str], reason: str = "") -> None:
    failed = []
    for job_id in job_ids:
        try:
            job = client.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id, reason=reason))
        except grpc.RpcError as err:
            if err.code() == grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
                raise
            failed.append(f"job/{job_id}: " + "; ".join(rpc_error_lines(err, client)))
            continue
        click.echo(f"job/{job.id} {output.phase_name(job.status.phase).lower()}")
    if failed:
        fail(failed)
