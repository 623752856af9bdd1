"""fedctl's commands for jobs: submit, explain, logs, version and watch."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import click
import grpc

import federation
from federation.cli import output
from federation.cli.app import _dry_run, _filename, _format_option, _read_manifests, cli, pass_client
from federation.cli.client import Client, fail, field_violations, rpc_error_lines
from federation.cli.jobdocs import jobs_from_documents
from federation.cli.manifest import (
    Converted,
    for_apply,
)
from federation.cli.yamldoc import Document
from federation.v1 import common_pb2, jobs_pb2
from federation.validation import Violations, check_hyperjobs, check_job_spec, normalise_job_spec

SUBMIT_BATCH = 1000  # jobs per SubmitJobs, the server's most


@cli.command()
@click.argument("files", nargs=-1, type=click.Path(path_type=Path, allow_dash=True))
@_filename
@click.option("--reject-inadmissible", is_flag=True,
              help="Refuse the jobs if one of them cannot run as the federation stands (no cluster could hold it, "
                   "or it is over its queue's or tenant's limit by itself), instead of accepting it to wait.")
@click.option("--allow-unknown-resources", is_flag=True,
              help="Accept resource names no member cluster has reported yet (refused by default: a typo would "
                   "wait forever).")
@_dry_run
@_format_option
@pass_client
def submit(client: Client, files: tuple[Path, ...], named: tuple[Path, ...], reject_inadmissible: bool,
           allow_unknown_resources: bool, dry_run: str, fmt: str) -> None:
    """Submit the Volcano Job manifests in FILES or -f FILE (several documents per file allowed).

    The manifests are read as a stream and sent in batches of 1,000 jobs; each batch is accepted together or
    not at all, and a manifest of 1,000 jobs or fewer is one batch. A job that cannot run as the federation
    stands is accepted with a warning (capacity may come), unless --reject-inadmissible.
    """
    files = (*files, *named)
    if not files:
        raise click.UsageError("give the manifests: fedctl submit -f FILE (or FILE ...)")
    submitted = 0  # jobs of earlier batches (each batch is let go once sent: a manifest is never held whole)
    last: Document | None = None
    responses = jobs_pb2.SubmitJobsResponse()
    admin = Left("admin object", "fedctl apply -f")
    for converted in _job_batches(jobs_from_documents(admin.skip(_read_manifests(files), for_apply))):
        for c in converted:
            for warning in c.warnings:
                click.echo(f"fedctl: warning: {warning}", err=True)
        if dry_run == "client":
            _check_here(converted)
            for c in converted:
                click.echo(f"job/{c.message.name} valid (dry run: client)")  # type: ignore[attr-defined]
            submitted += len(converted)
            continue
        try:
            response = client.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(
                specs=[c.message for c in converted], reject_inadmissible=reject_inadmissible,
                allow_unknown_resources=allow_unknown_resources, dry_run=dry_run == "server"))
        except grpc.RpcError as err:
            fail(_located(err, converted, client) + _partly(submitted, last, converted[0].doc, dry_run))
        _report_batch(converted, response, dry_run, fmt)
        responses.results.extend(response.results)
        submitted += len(converted)
        last = converted[-1].doc
    admin.say(files, bool(submitted))
    if not submitted:
        fail([f"{', '.join(map(str, files))}: no job manifests found"])
    if fmt != "table" and dry_run != "client":
        output.emit(fmt, [responses], responses)


def _job_batches(jobs: Iterable[Converted]) -> Iterator[list[Converted]]:
    """The jobs in batches of SUBMIT_BATCH at most, a HyperJob's sub-jobs (which come one after another) never split
    over two: the server takes them only together."""
    batch: list[Converted] = []
    for c in jobs:
        part = c.message.hyperjob  # type: ignore[attr-defined]
        if batch and not (part.id and part.index) and len(batch) + (part.parts if part.id else 1) > SUBMIT_BATCH:
            yield batch
            batch = []
        batch.append(c)
    if batch:
        yield batch


class Left:
    """Documents of a stream that the other command takes (`fedctl convert`'s output holds queues and jobs): a
    stream of only those is refused by the reader, with the document's line; in a mixed one they are left and
    counted, and said."""

    def __init__(self, what: str, command: str) -> None:
        self.what, self.command = what, command
        self.first: Document | None = None
        self.count = 0

    def skip(self, docs: Iterable[Document], other: Callable[[Document], bool]) -> Iterator[Document]:
        for doc in docs:
            if other(doc):
                self.first = self.first or doc
                self.count += 1
            else:
                yield doc

    def say(self, files: Sequence[Path], any_taken: bool) -> None:
        """After the stream: a note of what was left, or, when nothing else was in it, the reader's own error."""
        if not self.count:
            return
        if not any_taken and self.first is not None:
            raise self.first.error("kind", f"a {self.what} is for '{self.command}' (this command takes none here)")
        plural = "s" if self.count > 1 else ""
        click.echo(f"fedctl: note: {self.count} {self.what}{plural} left for '{self.command} "
                   f"{' '.join(map(str, files))}'", err=True)


def _partly(submitted: int, last: Document | None, refused: Document, dry_run: str) -> list[str]:
    """What a failed batch leaves behind: the batches before it were submitted (each is all or nothing)."""
    if last is None or dry_run != "none":
        return []
    return [f"{submitted:,} jobs of earlier batches were submitted (through {last.file}:{last.start_line}); "
            f"those from {refused.file}:{refused.start_line} on were not"]


def _report_batch(converted: list[Converted], response: jobs_pb2.SubmitJobsResponse, dry_run: str, fmt: str) -> None:
    for c, result in zip(converted, response.results, strict=True):
        if result.inadmissible:
            who = f"job/{result.job_id or c.message.name}"  # type: ignore[attr-defined]
            click.echo(f"fedctl: warning: {c.doc.file}:{c.doc.start_line}: {who} {result.inadmissible}; "
                       "it waits until the federation can hold it", err=True)
    if fmt != "table":
        return
    for c, result in zip(converted, response.results, strict=True):
        if dry_run == "server":
            click.echo(f"job/{c.message.name} valid (dry run: server, nothing stored)")  # type: ignore[attr-defined]
            continue
        note = " (already submitted)" if result.duplicate else ""
        click.echo(f"job/{result.job_id} submitted{note}")


def _check_here(converted: list[Converted]) -> None:
    """What the server would refuse of the specs themselves, found without it (--dry-run=client)."""
    v = Violations()
    specs = []
    for i, c in enumerate(converted):
        spec = common_pb2.JobSpec.FromString(c.message.SerializeToString())
        normalise_job_spec(spec)
        check_job_spec(v, f"specs[{i}]", spec)
        specs.append(spec)
    check_hyperjobs(v, specs, [f"specs[{i}]" for i in range(len(specs))])
    if v:  # a HyperJob's field is every sub-job's: said once
        fail(list(dict.fromkeys(_at_line(converted, item.field, item.description) for item in v.items)))


def _at_line(converted: list[Converted], field: str, description: str) -> str:
    """A violation of `specs[i].field` at the file and line of that field (the server's or ours)."""
    index, _, rest = field.removeprefix("specs[").partition("]")
    if not index.isdigit() or int(index) >= len(converted):
        return f"{field}: {description}"
    c = converted[int(index)]
    path = rest.removeprefix(".")
    manifest_path = next((c.origin[p] for p in _prefixes(path) if p in c.origin), "")
    return f"{c.doc.file}:{c.line_of(path)}: {manifest_path or path}: {description}"


def _located(err: grpc.RpcError, converted: list[Converted], client: Client) -> list[str]:
    """Server errors about `specs[i].field` shown at the file and line of that field (or of the job)."""
    if err.code() == grpc.StatusCode.FAILED_PRECONDITION and (err.details() or "").startswith("specs["):
        lines = []
        for part in (err.details() or "").split("; specs["):
            index, _, why = part.removeprefix("specs[").partition("]: ")
            c = converted[int(index)] if index.isdigit() and int(index) < len(converted) else None
            lines.append(f"{c.doc.file}:{c.doc.start_line}: {why}" if c else part)
        return lines
    return list(dict.fromkeys(_at_line(converted, v.field, v.description) for v in field_violations(err))) or \
        rpc_error_lines(err, client)


def _prefixes(path: str) -> Iterator[str]:
    while path:
        yield path
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""


# kubectl's grammar: a verb, then a kind as kubectl users write it (plural, singular or short), then names.


@cli.command()
@click.argument("job_id")
@_format_option
@pass_client
def explain(client: Client, job_id: str, fmt: str) -> None:
    """Why job JOB_ID waits: its reason, its place in its queue, when it is expected to start, and each
    cluster's verdict.

    The expected start comes from the scheduler's forecast: running jobs end after their
    federation.dev/expected-duration annotation (else their queue's recent mean run time), and waiting
    jobs start in the order they are served, each at the earliest time a cluster has room for it. It
    looks at free totals, not HyperNodes, and moves as jobs arrive and shares change."""
    response = client.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=job_id))
    if fmt != "table":
        output.emit(fmt, [response], response)
        return
    click.echo(f"job/{response.job_id}: {output.phase_name(response.phase)}")
    if response.queue_position:
        click.echo(f"position in its queue: {response.queue_position}")
    if response.expected_start_time.seconds:
        click.echo(f"expected: {output.expected_start(response)} (an estimate: see `fedctl explain --help`)")
    click.echo(f"reason: {output.safe(response.reason or '-')}")
    if response.past_usage:
        click.echo(f"order: {output.safe(response.past_usage)}")
    if response.clusters:
        click.echo("\n" + output.render_table(("CLUSTER", "FITS", "WHY"), [
            [c.cluster, "yes" if c.fits else "no", c.reason] for c in response.clusters]))


@cli.command()
@click.argument("job_id")
@click.argument("task", required=False, default="")
@click.argument("index", required=False, default=0, type=click.IntRange(min=0))
@click.option("-f", "--follow", is_flag=True, help="Keep printing as the pod writes, until it ends or Ctrl-C.")
@click.option("-p", "--previous", is_flag=True, help="The log of the pod's previous container (after a restart).")
@click.option("--tail", type=click.IntRange(min=-1), default=-1, show_default=True,
              help="Lines from the end to show (-1: all).")
@pass_client
def logs(client: Client, job_id: str, task: str, index: int, follow: bool, previous: bool, tail: int) -> None:
    """Print the log of a pod of JOB_ID: TASK's replica INDEX (default: the first task's replica 0), read from
    its member cluster through the federation (no member kubeconfig needed). Control characters are written
    out on a terminal (the pod's or its cluster's words cannot drive it), passed as they are into a pipe."""
    stream = client.jobs.GetJobLogs(jobs_pb2.GetJobLogsRequest(
        id=job_id, task=task, index=index, follow=follow, previous=previous, tail_lines=max(tail, 0)))
    terminal = sys.stdout.isatty()
    for chunk in stream:
        if terminal:
            sys.stdout.write(output.safe_log(chunk.data))
            sys.stdout.flush()
        else:
            sys.stdout.buffer.write(chunk.data)
            sys.stdout.buffer.flush()


@cli.command()
@_format_option
@pass_client
def version(client: Client, fmt: str) -> None:
    """fedctl's version, and the server's (its release, API and database schema)."""
    server = client.jobs.GetVersion(jobs_pb2.GetVersionRequest())
    if fmt in ("table", "wide"):
        click.echo(f"Client Version: {federation.__version__}")
        click.echo(f"Server Version: {server.version} (API {server.api}, schema {server.schema_revision})")
        return
    output.emit(fmt, [server], server)


@cli.command()
@click.option("--after", type=click.IntRange(min=0), help="Replay events after this sequence number.")
@click.option("--tenant", default="", help="Events of this tenant's jobs only.")
@click.option("--queue", default="", help="Events of this queue's jobs only.")
@click.option("--job", "job_id", default="", help="Events of this job only.")
@click.option("-o", "--output", "fmt", type=click.Choice(("table", "json")), default="table",
              help="A table row or a JSON object per event.")
@pass_client
def watch(client: Client, after: int | None, tenant: str, queue: str, job_id: str, fmt: str) -> None:
    """Stream job events as they happen (Ctrl-C to stop)."""
    request = jobs_pb2.WatchJobsRequest(tenant=tenant, queue=queue, job_id=job_id)
    if after is not None:
        request.after_sequence = after
    try:
        if fmt == "table":
            click.echo(f"{'SEQ':>8}  {'TIME':<8}  {'JOB':<32} {'EVENT':<12} {'PHASE':<11} MESSAGE")
        for event in client.jobs.WatchJobs(request):
            if fmt == "json":
                click.echo(json.dumps(output.as_dict(event)))
            else:
                when = event.time.ToDatetime().strftime("%H:%M:%S")
                click.echo(f"{event.sequence:>8}  {when}  {event.job_id:<32} {output.safe(event.type):<12} "
                           f"{output.phase_name(event.phase):<11} {output.safe(event.message)}")
    except KeyboardInterrupt:
        pass
