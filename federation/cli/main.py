"""`fedctl`: submit and inspect jobs; manage tenants, queues, priority classes and clusters."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, TypeVar

import click
import grpc
import yaml
from google.protobuf import duration_pb2, field_mask_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

import federation
from federation.cli import convert, output, query, tlsprobe
from federation.cli.dev import dev
from federation.cli.manifest import (
    Converted,
    admin_from_document,
    apply_documents,
    for_apply,
    for_submit,
    jobs_from_documents,
)
from federation.cli.volcano_job import volcano_job
from federation.cli.yamldoc import Document, ManifestError, iter_documents, load_documents
from federation.cliargs import hoist
from federation.kernel.durations import parse_duration
from federation.security.auth import WARNING_METADATA
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from federation.validation import Violations, check_job_spec, normalise_job_spec

DEFAULT_SERVER = "localhost:50051"
SUBMIT_BATCH = 1000  # jobs per SubmitJobs, the server's most
T = TypeVar("T")


def config_path() -> Path:
    """fedctl's config file: `server:`, `token:`, and for TLS `ca:` (and `cert:`/`key:` for a client
    certificate) as file paths (YAML), read for whatever no flag or variable gives."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(os.environ.get("FEDCTL_CONFIG") or Path(base) / "fedctl" / "config.yaml")


def read_config(path: Path) -> dict[str, str]:
    try:
        docs = load_documents(path.read_text(), str(path))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as err:
        raise click.ClickException(f"{path}: cannot read the config: {err}") from None
    except ManifestError as err:
        raise click.ClickException(f"{err} (the config)") from None
    if not docs:
        return {}
    doc = docs[0]
    if len(docs) > 1 or not isinstance(doc.data, dict):
        raise click.ClickException(f"{path}:{doc.start_line}: the config is one mapping of "
                                   f"{', '.join(CONFIG_KEYS)}")
    for key, value in doc.data.items():
        if key not in CONFIG_KEYS:
            known = ", ".join(CONFIG_KEYS)
            raise click.ClickException(str(doc.error(str(key), f"unknown key; expected one of {known}")))
        if not isinstance(value, str):
            raise click.ClickException(str(doc.error(str(key), "must be a string")))
    return {k: doc.data[k] for k in CONFIG_KEYS if doc.data.get(k)}


CONFIG_KEYS = ("server", "token", "ca", "cert", "key")


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Adds `authorization: Bearer <token>` to every call."""

    def __init__(self, token: str) -> None:
        self.header = ("authorization", f"Bearer {token}")

    def _with_token(self, details: Any) -> _CallDetails:
        return _CallDetails(details.method, details.timeout, [*(details.metadata or ()), self.header],
                            details.credentials, details.wait_for_ready, details.compression)

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        outcome = continuation(self._with_token(details), request)
        _warn(outcome)
        return outcome

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._with_token(details), request)


_warned: set[str] = set()


def _warn(call: Any) -> None:
    """What the server warns of in a call's trailing metadata, once per command (kubectl's `Warning:` lines)."""
    try:
        trailing = call.trailing_metadata() or ()
    except Exception:
        return
    for key, value in trailing:
        if key == WARNING_METADATA and value not in _warned:
            _warned.add(value)
            click.echo(f"fedctl: warning: {value}", err=True)


def _pem(path: str, what: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as err:
        raise click.UsageError(f"{path}: cannot read the {what}: {err.strerror}") from None


class Client:
    def __init__(self, server: str, token: str = "", ca: str = "", cert: str = "", key: str = "") -> None:
        self.server = server
        self.tls = (ca, cert, key)  # what a failed connection is diagnosed with (tlsprobe)
        if bool(cert) != bool(key):
            raise click.UsageError("--cert and --key go together")
        if ca:  # TLS: the server's certificate checked against `ca`; a client certificate when given
            credentials = grpc.ssl_channel_credentials(
                _pem(ca, "CA certificate"), _pem(key, "client key") if key else None,
                _pem(cert, "client certificate") if cert else None)
            self.channel = grpc.secure_channel(server, credentials)
        elif cert:
            raise click.UsageError("a client certificate needs --ca: it is presented over TLS")
        else:
            self.channel = grpc.insecure_channel(server)
        self._raw = self.channel
        if token:
            self.channel = grpc.intercept_channel(self.channel, _Bearer(token))
        self.jobs = jobs_pb2_grpc.JobServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)


    def close(self) -> None:
        """Close the channel before the interpreter exits: left to the garbage collector at exit (after an error
        ends the command), gRPC's poller can find its descriptors closed under it and abort the process."""
        self._raw.close()


def field_violations(err: grpc.RpcError) -> list[error_details_pb2.BadRequest.FieldViolation]:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    out = []
    for detail in status.details if status else []:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            out.extend(bad.field_violations)
    return out


def fail(lines: list[str]) -> NoReturn:
    for line in lines:
        click.echo(f"fedctl: {line}", err=True)
    sys.exit(1)


def rpc_error_lines(err: grpc.RpcError, client: Client | str) -> list[str]:
    code = err.code()  # type: ignore[attr-defined]
    server = client.server if isinstance(client, Client) else client
    if code == grpc.StatusCode.UNAVAILABLE:
        ca, cert, key = client.tls if isinstance(client, Client) else ("", "", "")
        try:
            cause = tlsprobe.diagnose(server, ca, cert, key)
        except (OSError, ssl.SSLError, ValueError) as probe:  # unreadable --ca etc.: say that instead
            cause = f"cannot use the TLS files: {probe}"
        return [cause or f"cannot reach the federation server at {server} ({err.details()}); is it "  # type: ignore[attr-defined]
                "running? (set --server or FEDERATION_SERVER)"]
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return [f"{err.details()} (UNAUTHENTICATED): set --token, FEDERATION_TOKEN or token: in "  # type: ignore[attr-defined]
                f"{config_path()}"]
    violations = field_violations(err)
    if violations:
        return [f"{v.field}: {v.description}" for v in violations]
    return [f"{err.details()} ({code.name})"]  # type: ignore[attr-defined]


GLOBAL_OPTIONS = ("--server", "--token", "--ca", "--cert", "--key")


class FedctlGroup(click.Group):
    """Turns the errors users can cause into one clear line each, never a traceback."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist(args, GLOBAL_OPTIONS))

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except grpc.RpcError as err:
            fail(rpc_error_lines(err, ctx.obj if isinstance(ctx.obj, Client) else DEFAULT_SERVER))
        except ManifestError as err:
            fail([str(err)])
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit, KeyboardInterrupt):
            raise
        except RecursionError:
            fail(["the input is nested too deeply to be a manifest"])
        except Exception as err:  # a bug of ours: one line saying so, never a traceback
            if os.environ.get("FEDCTL_DEBUG"):
                raise
            fail([f"unexpected {type(err).__name__}: {str(err)[:300]} (please report it; FEDCTL_DEBUG=1 shows more)"])


class OutputFormat(click.ParamType):
    """kubectl's -o: table, wide, json, yaml, jsonpath=TEMPLATE, custom-columns=NAME:.PATH,..."""

    name = "format"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        text = str(value)
        kind, sep, rest = text.partition("=")
        if text in ("table", "wide", "json", "yaml", "name") or (
                sep and kind in ("jsonpath", "custom-columns") and rest):
            if sep:  # a bad path is said now, not after the call
                try:
                    query.custom_columns([], rest) if kind == "custom-columns" else query.jsonpath({}, rest)
                except query.QueryError as err:
                    self.fail(str(err), param, ctx)
            return text
        self.fail(f"{text!r} is not one of {', '.join(output.FORMATS)}", param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(f) for f in ("table", "wide", "json", "yaml", "name", "jsonpath=", "custom-columns=")
                if f.startswith(incomplete)]


def _format_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("-o", "--output", "fmt", type=OutputFormat(), default="table", show_default=True,
                        help="Output format: table, wide, json, yaml, name, jsonpath=TEMPLATE, "
                             "custom-columns=NAME:.PATH,...")(fn)


def _label_pairs(text: str, option: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE (write a=b,c=d)", param_hint=option)
        out[key.strip()] = value.strip()
    return out


def _quantity_pairs(values: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in values:
        name, eq, quantity = item.partition("=")
        if not eq or not name:
            raise click.BadParameter(f"{item!r} is not RESOURCE=QUANTITY (e.g. nvidia.com/gpu=16)", param_hint=option)
        out[name] = quantity
    return out


@click.group(cls=FedctlGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--server", envvar="FEDERATION_SERVER", default=None,
              help=f"Address of the federation server [default: server: in the config file, else {DEFAULT_SERVER}].")
@click.option("--token", envvar="FEDERATION_TOKEN", default=None,
              help="Bearer token (fed_...) [default: token: in the config file, $FEDCTL_CONFIG or "
                   "~/.config/fedctl/config.yaml].")
@click.option("--ca", envvar="FEDERATION_CA", default=None, metavar="FILE",
              help="PEM CA certificate of the server's: connect over TLS [default: ca: in the config file].")
@click.option("--cert", envvar="FEDERATION_CERT", default=None, metavar="FILE",
              help="PEM client certificate, for a server that asks for one (with --key) [default: cert: in the "
                   "config file].")
@click.option("--key", envvar="FEDERATION_KEY", default=None, metavar="FILE",
              help="PEM private key of --cert [default: key: in the config file].")
@click.pass_context
def cli(ctx: click.Context, server: str | None, token: str | None, ca: str | None, cert: str | None,
        key: str | None) -> None:
    """Client of the federation scheduler."""
    ctx.obj = _client({"server": server, "token": token, "ca": ca, "cert": cert, "key": key})
    ctx.call_on_close(ctx.obj.close)


def _client(given: dict[str, str | None]) -> Client:
    """A client from what the command line gave, else the config file's values."""
    config = read_config(config_path()) if any(v is None for v in given.values()) else {}
    values = {k: v if v is not None else config.get(k, "") for k, v in given.items()}
    return Client(values["server"] or DEFAULT_SERVER, values["token"], values["ca"], values["cert"], values["key"])


pass_client = click.make_pass_decorator(Client)


# ---- jobs -----------------------------------------------------------------------------------

def _read_manifests(files: tuple[Path, ...]) -> Iterator[Document]:
    """Each file's documents, read as a stream: a manifest of any size is never held whole."""
    for path in files:
        try:
            with contextlib.ExitStack() as stack:
                stream = sys.stdin.buffer if str(path) == "-" else stack.enter_context(path.open("rb"))
                yield from iter_documents(stream, str(path))
        except OSError as err:
            raise ManifestError(str(path), None, f"cannot read: {err.strerror}") from None


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


_dry_run = click.option("--dry-run", type=click.Choice(["none", "client", "server"]), default="none",
                        show_default=True, help="client: read and check the manifests here; server: validated and "
                                                "judged against the federation as it stands; nothing is stored.")
_filename = click.option("-f", "--filename", "named", multiple=True, type=click.Path(path_type=Path, allow_dash=True),
                         help="Manifest file (repeatable; '-' reads standard input).")


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
    for converted in _batches(jobs_from_documents(admin.skip(_read_manifests(files), for_apply)), SUBMIT_BATCH):
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
    for i, c in enumerate(converted):
        spec = common_pb2.JobSpec.FromString(c.message.SerializeToString())
        normalise_job_spec(spec)
        check_job_spec(v, f"specs[{i}]", spec)
    if v:
        fail([_at_line(converted, item.field, item.description) for item in v.items])


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
    return [_at_line(converted, v.field, v.description) for v in field_violations(err)] or \
        rpc_error_lines(err, client)


def _prefixes(path: str) -> Iterator[str]:
    while path:
        yield path
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""


# kubectl's grammar: a verb, then a kind as kubectl users write it (plural, singular or short), then names.
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


def _quota(guarantee: tuple[str, ...], limit: tuple[str, ...]) -> dict[str, Any]:
    return {"guarantee": _quantity_pairs(guarantee, "--guarantee") or None,
            "limit": _quantity_pairs(limit, "--limit") or None}


cli.add_command(_crud_group(
    "tenant", admin_pb2.Tenant, "tenant", "ListTenants",
    [_weight, _guarantee, _limit, click.option("--disabled/--enabled", default=None,
                                                  help="A disabled tenant's jobs are not scheduled."),
     click.option("--max-run-time", metavar="DURATION",
                  help="The longest any of its jobs may run, e.g. 24h (\"\": no cap): a job asking more is refused.")],
    lambda weight, guarantee, limit, disabled, max_run_time: {
        "weight": weight, **_quota(guarantee, limit), "disabled": disabled, "max_run_time": max_run_time}))

queue_group = _crud_group(
    "queue", admin_pb2.Queue, "queue", "ListQueues",
    [click.option("--tenant", help="Owning tenant (create only)."), _weight,
     click.option("--priority", type=int, help="Queues of higher priority are served first."), _guarantee, _limit,
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
                       "tenant's cap.")],
    lambda tenant, weight, priority, guarantee, limit, reclaimable, state, flavors, parent, max_run_time: {
        "tenant": tenant, "weight": weight, "priority": priority, **_quota(guarantee, limit),
        "reclaimable": reclaimable, "state": admin_pb2.QueueState.Value(state.upper()) if state else None,
        "flavors": list(flavors) or None, "parent": parent, "max_run_time": max_run_time})
cli.add_command(queue_group)

cli.add_command(_crud_group(
    "flavor", admin_pb2.Flavor, "flavor", "ListFlavors",
    [click.option("--resource", help="The resource it is a flavor of (e.g. nvidia.com/gpu)."),
     click.option("--selector", metavar="KEY=VALUE,...",
                  help="Labels of the member clusters whose resource is of this flavor (e.g. accelerator=h100).")],
    lambda resource, selector: {"resource": resource,
                                "cluster_selector": _label_pairs(selector, "--selector") if selector else None}))


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
        elif kind == "Job" and api.startswith("batch.volcano.sh/"):
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


cli.add_command(dev)


@cli.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print SHELL's completion script for fedctl: `source <(fedctl completion bash)`."""
    from click.shell_completion import get_completion_class

    completer = get_completion_class(shell)
    assert completer is not None
    click.echo(completer(cli, {}, "fedctl", "_FEDCTL_COMPLETE").source())


# ---- clusters -------------------------------------------------------------------------------

@cli.command()
@_format_option
@pass_client
def clusters(client: Client, fmt: str) -> None:
    """List member clusters."""
    response = client.admin.ListClusters(admin_pb2.ListClustersRequest())
    output.emit(fmt, list(response.clusters), response)


_NODE_KINDS = ("node", "hypernode")
_in_cluster = click.option("--cluster", "in_cluster", default="", metavar="CLUSTER",
                           help="The member cluster of the node or HyperNode.")


def _order(client: Client, action: str, kind: str, name: str, cluster: str, grace: str | None = None) -> None:
    if not cluster:
        raise click.UsageError(f"{action} {kind} NAME needs --cluster (the member cluster it is in)")
    request = admin_pb2.OrderNodeRequest(cluster=cluster, action=action, kind=kind, name=name)
    if grace is not None:
        try:
            request.grace.CopyFrom(duration_pb2.Duration(seconds=round(parse_duration(grace))))
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="--grace") from None
    click.echo(client.admin.OrderNode(request).message)


@cli.command()
@click.argument("what")
@click.argument("name", required=False)
@_in_cluster
@pass_client
def cordon(client: Client, what: str, name: str | None, in_cluster: str) -> None:
    """Stop new work: `cordon CLUSTER` (the federation sends it no new jobs), or `cordon node|hypernode NAME
    --cluster C` (the cluster's agent marks them unschedulable, as kubectl cordon)."""
    if name is None:
        client.admin.CordonCluster(admin_pb2.CordonClusterRequest(name=what))
        click.echo(f"cluster/{what} cordoned")
    elif what == "cluster":
        client.admin.CordonCluster(admin_pb2.CordonClusterRequest(name=name))
        click.echo(f"cluster/{name} cordoned")
    elif what in _NODE_KINDS:
        _order(client, "cordon", what, name, in_cluster)
    else:
        raise click.BadParameter(f"{what!r}: give cluster, node or hypernode", param_hint="WHAT")


@cli.command()
@click.argument("what")
@click.argument("name", required=False)
@_in_cluster
@pass_client
def uncordon(client: Client, what: str, name: str | None, in_cluster: str) -> None:
    """Resume new work: `uncordon CLUSTER`, or `uncordon node|hypernode NAME --cluster C` (ends a drain too)."""
    if name is None or what == "cluster":
        cluster = name or what
        client.admin.UncordonCluster(admin_pb2.UncordonClusterRequest(name=cluster))
        click.echo(f"cluster/{cluster} uncordoned")
    elif what in _NODE_KINDS:
        _order(client, "uncordon", what, name, in_cluster)
    else:
        raise click.BadParameter(f"{what!r}: give cluster, node or hypernode", param_hint="WHAT")


@cli.command()
@click.argument("kind", type=click.Choice(_NODE_KINDS))
@click.argument("name")
@_in_cluster
@click.option("--grace", default=None, metavar="DURATION",
              help="The longest a gang waits for its next checkpoint before it moves (e.g. 30m); default: no bound.")
@pass_client
def drain(client: Client, kind: str, name: str, in_cluster: str, grace: str | None) -> None:
    """Cordon a node or HyperNode and move every gang off it, each at its next checkpoint (the
    federation.dev/checkpoint-interval annotation), elsewhere in the cluster within its tier limit or, with no
    room there, in another cluster."""
    _order(client, "drain", kind, name, in_cluster, grace)


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
