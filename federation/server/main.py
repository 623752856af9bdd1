"""`federation-server`: serve the API, or manage the database schema."""

from __future__ import annotations

import asyncio
import contextlib
import io
import ipaddress
import logging
import os
import signal
import socket
import ssl
import sys
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click
import grpc
from cryptography import x509
from sqlalchemy.engine import URL

from federation import metrics
from federation.cliargs import hoist
from federation.control.history import ARCHIVE_AFTER, RETENTION
from federation.control.leader import LEASE
from federation.control.scheduler import DRIFT_AFTER, HEARTBEAT_TIMEOUT, LOST_GRACE
from federation.errors import FederationError
from federation.kernel import heap
from federation.kernel.durations import parse_duration
from federation.scheduling.usage import Decay
from federation.security import certs
from federation.security.oidc import OidcConfig
from federation.server.app import (
    ALL,
    API,
    SCHEDULER,
    SUBMIT_BURST,
    SUBMIT_RATE,
    AgentTls,
    ApiTls,
    FederationServer,
    PortInUse,
    SchemaOutOfDate,
    ensure_schema,
)
from federation.server.child import EXIT_WITH_STDIN, METRICS_SECRET, METRICS_SOCKET, SchedulerChild, exit_with_stdin
from federation.store import database
from federation.store.tokens import TokenStore
from federation.store.transitions import Requeueing
from federation.ui.server import Dashboard

log = logging.getLogger("federation.server")
SLOW_SHUTDOWN = 10.0  # seconds of shutdown after which it says what it still waits for
BOTH = "both"  # `serve`'s default: the API in this process, the scheduler in a child it supervises

_database_url = click.option(
    "--database-url", envvar="FEDERATION_DATABASE_URL", metavar="URL",
    help="PostgreSQL URL (postgresql://user:pass@host:5432/db). Unset: run an embedded PostgreSQL in --data-dir.")
_data_dir = click.option(
    "--data-dir", envvar="FEDERATION_DATA_DIR", type=click.Path(path_type=Path), metavar="DIR",
    default=database.default_data_dir,
    show_default="the user data directory", help="Where the embedded PostgreSQL keeps its data.")


@contextlib.contextmanager
def _database(database_url: str | None, data_dir: Path) -> Iterator[URL]:
    try:
        if database_url:
            yield database.sqlalchemy_url(database_url)
        else:
            with database.embedded_postgres(data_dir) as uri:
                yield database.sqlalchemy_url(uri)
    except ValueError as err:
        raise click.UsageError(str(err)) from err


class _ServerGroup(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, hoist(args, ("--log-level",)))  # `serve --log-level debug` too


@click.group(cls=_ServerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--log-level", envvar="FEDERATION_LOG_LEVEL", default="info",
              type=click.Choice(["debug", "info", "warning", "error"]), show_default=True,
              help="Least severe log messages shown (debug, info, warning, error).")
def cli(log_level: str) -> None:
    """Federation control plane: the gRPC API, state in PostgreSQL."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # The embedded server and Alembic narrate every step at INFO; keep their warnings only.
    for noisy in ("embedded_postgres", "alembic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLogger().level))
    warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")


@cli.command()
@click.option("--role", envvar="FEDERATION_ROLE", default=BOTH, show_default=True,
              type=click.Choice([BOTH, API, SCHEDULER, ALL]),
              help="What this process runs. both: the API and the agents' streams here, and the scheduler as a child "
                   "process (started again if it exits), so a long scheduling cycle never holds the API; api: the "
                   "API only (any number of them, sharing the database; the scheduler runs elsewhere); scheduler: the "
                   "scheduler only (leader-elected; --listen is its own address, where API processes ask it what "
                   "only it knows: explanations, expected starts, queue status); all: everything in one process.")
@click.option("--listen", envvar="FEDERATION_LISTEN", default="0.0.0.0:50051", show_default=True,
              help="Address of the gRPC API (port 0 picks a free port); with --role scheduler, of the scheduler's own "
                   "listener (a cluster-internal address: it is for the API processes).")
@click.option("--advertise", envvar="FEDERATION_ADVERTISE", default="", metavar="HOST:PORT",
              help="With --role scheduler: the address API processes reach it by, published with its lease ('': "
                   "--listen's, or this host's address when --listen is every address).")
@_database_url
@_data_dir
@click.option("--auto-migrate/--no-auto-migrate", envvar="FEDERATION_AUTO_MIGRATE", default=False,
              show_default=True, help="Upgrade an out-of-date database schema at startup instead of refusing.")
@click.option("--metrics-listen", envvar="FEDERATION_METRICS_LISTEN", default="127.0.0.1:9464", show_default=True,
              help="Address of the Prometheus /metrics endpoint ('' turns it off; port 0 picks one). Per-queue "
                   "series only for a scrape with an admin's bearer token.")
@click.option("--ui-listen", envvar="FEDERATION_UI_LISTEN", default="", show_default=True,
              help="Address of the read-only web dashboard (off when ''; port 0 picks one); it reads the API with "
                   "each viewer's token.")
@click.option("--ui-tls-cert", envvar="FEDERATION_UI_TLS_CERT",
              type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="PEM certificate the dashboard serves HTTPS with (needed for a --ui-listen beyond loopback).")
@click.option("--ui-tls-key", envvar="FEDERATION_UI_TLS_KEY",
              type=click.Path(path_type=Path, exists=True, dir_okay=False), help="PEM private key of --ui-tls-cert.")
@click.option("--heartbeat-timeout", envvar="FEDERATION_HEARTBEAT_TIMEOUT", type=click.FloatRange(min=1),
              default=HEARTBEAT_TIMEOUT, show_default=True,
              help="Seconds without a heartbeat after which a cluster is NotReady: it gets no new work and "
                   "its jobs not yet placed go back to their queues.")
@click.option("--lost-grace", envvar="FEDERATION_LOST_GRACE", type=click.FloatRange(min=0), default=LOST_GRACE,
              show_default=True, help="Seconds more after which a silent cluster's running jobs are lost and "
                                      "retried elsewhere while their maxRetry allows.")
@click.option("--drift-after", envvar="FEDERATION_DRIFT_AFTER", type=click.FloatRange(min=0), default=DRIFT_AFTER,
              show_default=True, help="Seconds a difference between what a cluster's agent reports its gangs hold "
                                      "and what the federation believes runs there must last to be reported as "
                                      "drift (metric, `fedctl get clusters`, dashboard).")
@click.option("--archive-after", envvar="FEDERATION_ARCHIVE_AFTER", type=click.FloatRange(min=0),
              default=ARCHIVE_AFTER, show_default=True,
              help="Seconds after a job ends before it moves to the history (finished_jobs): out of the tables the "
                   "submit path and the scheduler read; GetJob and `fedctl get jobs --all` still show it.")
@click.option("--retention", envvar="FEDERATION_RETENTION", type=click.FloatRange(min=0), default=RETENTION,
              show_default=True, help="Seconds after a job ends before it and its events are deleted (0: kept "
                                      "for ever).")
@click.option("--cycle-burst", envvar="FEDERATION_CYCLE_BURST", type=click.IntRange(min=0), default=0,
              show_default=True, help="Jobs dispatched per scheduling cycle at most (Armada's scheduling burst; 0: no "
                                      "limit): a cycle that reaches it stops, and the next goes on at once in the "
                                      "same order, so one large change never holds the loop for long.")
@click.option("--admit-on-arrival/--no-admit-on-arrival", envvar="FEDERATION_ADMIT_ON_ARRIVAL", default=True,
              show_default=True, help="Dispatch a submitted job that fits the room the last cycle left at once, as its "
                                      "queue's head within its deserved shares, instead of waiting for the next "
                                      "cycle.")
@click.option("--ready-timeout", envvar="FEDERATION_READY_TIMEOUT", type=click.FloatRange(min=0), default=0.0,
              show_default=True,
              help="Seconds after a job is sent to a cluster by which every task's gang minimum of pods must be "
                   "running, for jobs without a federation.dev/ready-timeout annotation (0: not watched). Past it, "
                   "the agent deletes the pods and the job is requeued with backoff (Kueue's waitForPodsReady).")
@click.option("--requeue-backoff", envvar="FEDERATION_REQUEUE_BACKOFF", type=click.FloatRange(min=0),
              default=Requeueing.base, show_default=True,
              help="Seconds a job not ready in time waits before it is back in its queue, doubling with each "
                   "requeue (Kueue's backoffBaseSeconds).")
@click.option("--requeue-backoff-max", envvar="FEDERATION_REQUEUE_BACKOFF_MAX", type=click.FloatRange(min=0),
              default=Requeueing.ceiling, show_default=True,
              help="The most --requeue-backoff doubles to (Kueue's backoffMaxSeconds).")
@click.option("--requeue-limit", envvar="FEDERATION_REQUEUE_LIMIT", type=click.IntRange(min=0), default=None,
              help="Requeues after which a job not ready in time fails instead (Kueue's backoffLimitCount; "
                   "unset: no limit).")
@click.option("--usage-half-life", envvar="FEDERATION_USAGE_HALF_LIFE", type=click.FloatRange(min=1),
              default=Decay.half_life, show_default=True,
              help="Seconds in which past usage counts half as much (Slurm's PriorityDecayHalfLife): each tenant's "
                   "and queue's usage history, kept by the scheduling leader in PostgreSQL.")
@click.option("--usage-history-weight", envvar="FEDERATION_USAGE_HISTORY_WEIGHT", type=click.FloatRange(min=0),
              default=Decay.weight, show_default=True,
              help="How much past usage counts in the order of queue heads: its decayed mean, times this, is added "
                   "to what a tenant or queue holds now (0: only what it holds now). Shares, limits and reclaim "
                   "go by what is held now.")
@click.option("--leader-lease", envvar="FEDERATION_LEADER_LEASE", type=click.FloatRange(min=0.2, max=120),
              default=LEASE, show_default=True,
              help="Seconds the scheduling leader's lease lasts: a leader that cannot renew it (frozen, cut off "
                   "from PostgreSQL) stops deciding, and another replica takes over within about this long.")
@click.option("--insecure-dev", envvar="FEDERATION_INSECURE_DEV", is_flag=True, default=False,
              help="No authentication: every caller is an admin. For a laptop only (make demo); logged loudly.")
@click.option("--submit-rate", envvar="FEDERATION_SUBMIT_RATE", type=click.FloatRange(min=0), default=SUBMIT_RATE,
              show_default=True, help="Jobs per second each token may submit on average (0: no limit); beyond it "
                                      "SubmitJob(s) answers RESOURCE_EXHAUSTED.")
@click.option("--submit-burst", envvar="FEDERATION_SUBMIT_BURST", type=click.IntRange(min=1), default=SUBMIT_BURST,
              show_default=True, help="Jobs each token may submit at once before --submit-rate applies.")
@click.option("--agent-listen", envvar="FEDERATION_AGENT_LISTEN", default="", metavar="HOST:PORT",
              help="Address of the member agents' listener, mTLS only: each agent's certificate must be signed by "
                   "--agent-ca and name its cluster ('' : agents connect only in --insecure-dev, on --listen).")
@click.option("--tls-cert", envvar="FEDERATION_TLS_CERT", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="PEM certificate the server presents: on the agent listener, and on --listen too (TLS for users "
                   "and their tokens) unless --insecure-dev (fedctl dev certs makes one for local use).")
@click.option("--tls-key", envvar="FEDERATION_TLS_KEY", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="PEM private key of --tls-cert.")
@click.option("--agent-ca", envvar="FEDERATION_AGENT_CA", type=click.Path(path_type=Path, exists=True,
                                                                         dir_okay=False),
              help="PEM CA certificate that signs the agents' client certificates.")
@click.option("--client-ca", envvar="FEDERATION_CLIENT_CA", type=click.Path(path_type=Path, exists=True,
                                                                           dir_okay=False),
              help="PEM CA whose client certificates users must also present on --listen (mutual TLS; needs "
                   "--tls-cert).")
@click.option("--oidc-issuer", envvar="FEDERATION_OIDC_ISSUER", default="", metavar="URL",
              help="Also accept JWTs from this OIDC issuer as bearer tokens (with --oidc-audience, --oidc-jwks).")
@click.option("--oidc-audience", envvar="FEDERATION_OIDC_AUDIENCE", default="", help="The JWTs' required audience.")
@click.option("--oidc-jwks", envvar="FEDERATION_OIDC_JWKS", type=click.Path(path_type=Path, exists=True,
                                                                           dir_okay=False),
              help="The issuer's JWKS document (its jwks_uri), as a file.")
@click.option("--oidc-tenant-claim", envvar="FEDERATION_OIDC_TENANT_CLAIM", default="tenant", show_default=True,
              help="The claim naming the caller's tenant.")
@click.option("--oidc-admin-claim", envvar="FEDERATION_OIDC_ADMIN_CLAIM", default="groups", show_default=True,
              help="The claim (a string or a list) that makes the caller an admin when it holds --oidc-admin-value.")
@click.option("--oidc-admin-value", envvar="FEDERATION_OIDC_ADMIN_VALUE", default="federation-admins",
              show_default=True, help="The value of --oidc-admin-claim that makes the caller an admin.")
def serve(role: str, listen: str, advertise: str, database_url: str | None, data_dir: Path, auto_migrate: bool,
          metrics_listen: str,
          ui_listen: str, ui_tls_cert: Path | None, ui_tls_key: Path | None, heartbeat_timeout: float,
          lost_grace: float, drift_after: float, archive_after: float, retention: float, cycle_burst: int,
          admit_on_arrival: bool, ready_timeout: float, requeue_backoff: float, requeue_backoff_max: float,
          requeue_limit: int | None,
          usage_half_life: float, usage_history_weight: float, leader_lease: float, insecure_dev: bool,
          submit_rate: float, submit_burst: int, agent_listen: str, tls_cert: Path | None, tls_key: Path | None,
          agent_ca: Path | None, client_ca: Path | None, oidc_issuer: str, oidc_audience: str, oidc_jwks: Path | None,
          oidc_tenant_claim: str, oidc_admin_claim: str, oidc_admin_value: str) -> None:
    """Serve JobService and AdminService (and AgentService on --agent-listen) until SIGINT or SIGTERM."""
    if role == SCHEDULER and (ui_listen or agent_listen):
        raise click.UsageError("--role scheduler serves no dashboard and no agents: drop --ui-listen and "
                               "--agent-listen")
    if agent_listen and not (tls_cert and tls_key and agent_ca):
        raise click.UsageError("--agent-listen needs --tls-cert, --tls-key and --agent-ca")
    if agent_ca and not agent_listen:
        raise click.UsageError("--agent-ca is for --agent-listen; give it too")
    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together")
    if client_ca and not tls_cert:
        raise click.UsageError("--client-ca needs --tls-cert and --tls-key: client certificates are checked over TLS")
    if bool(ui_tls_cert) != bool(ui_tls_key):
        raise click.UsageError("--ui-tls-cert and --ui-tls-key go together")
    if ui_listen and not ui_tls_cert and not _loopback(ui_listen):
        if not insecure_dev:
            raise click.UsageError(f"--ui-listen {ui_listen} is reachable from other hosts: give --ui-tls-cert and "
                                   "--ui-tls-key (tokens and session cookies must not cross a network in clear), or "
                                   "listen on 127.0.0.1")
        log.warning("--insecure-dev: the dashboard on %s is plain HTTP and open to other hosts", ui_listen)
    try:
        ui_tls = None
        if ui_tls_cert and ui_tls_key:
            certs.load_pair(ui_tls_cert, ui_tls_key, datetime.now(UTC))
            ui_tls = certs.server_context(ui_tls_cert, ui_tls_key)
        pair = certs.load_pair(tls_cert, tls_key, datetime.now(UTC)) if tls_cert and tls_key else None
        agent_ca_pem = certs.load_ca(agent_ca) if agent_ca else None
        client_ca_pem = certs.load_ca(client_ca) if client_ca else None
    except ValueError as err:
        raise click.ClickException(str(err)) from None
    tls = AgentTls(pair.cert, pair.key, agent_ca_pem) if pair and agent_ca_pem else None
    api_tls = ApiTls(pair.cert, pair.key, client_ca_pem) if pair and not insecure_dev else None
    if tls_cert and insecure_dev:
        log.warning("--insecure-dev: the user API stays plaintext (no tokens to protect); --tls-cert serves agents")
    if any((oidc_issuer, oidc_audience, oidc_jwks)) and not all((oidc_issuer, oidc_audience, oidc_jwks)):
        raise click.UsageError("OIDC needs all of --oidc-issuer, --oidc-audience and --oidc-jwks")
    oidc = OidcConfig(oidc_issuer, oidc_audience, oidc_jwks.read_text(), oidc_tenant_claim, oidc_admin_claim,
                      oidc_admin_value) if oidc_jwks else None
    with _database(database_url, data_dir) as url:
        _current_schema(url, auto_migrate)
        try:
            server = FederationServer(url, listen, heartbeat_timeout, lost_grace, insecure_dev=insecure_dev,
                                      submit_rate=submit_rate, submit_burst=submit_burst, agent_listen=agent_listen,
                                      agent_tls=tls, oidc=oidc, api_tls=api_tls, leader_lease=leader_lease,
                                      drift_after=drift_after, archive_after=archive_after, retention=retention,
                                      cycle_burst=cycle_burst, admit_on_arrival=admit_on_arrival,
                                      role=API if role == BOTH else role,
                                      advertise=advertise, ready_timeout=ready_timeout,
                                      requeueing=Requeueing(requeue_backoff, requeue_backoff_max, requeue_limit),
                                      decay=Decay(usage_half_life, usage_history_weight))
        except ValueError as err:
            raise click.ClickException(str(err)) from None
        child = None
        if role == BOTH:  # the scheduler's settings, as given here
            settings = ["--heartbeat-timeout", str(heartbeat_timeout), "--lost-grace", str(lost_grace),
                        "--drift-after", str(drift_after), "--archive-after", str(archive_after),
                        "--retention", str(retention), "--cycle-burst", str(cycle_burst),
                        "--admit-on-arrival" if admit_on_arrival else "--no-admit-on-arrival",
                        "--leader-lease", str(leader_lease), "--usage-half-life", str(usage_half_life),
                        "--usage-history-weight", str(usage_history_weight),
                        *(["--insecure-dev"] if insecure_dev else [])]
            child = SchedulerChild(url, settings, logging.getLevelName(logging.getLogger().level).lower())
        heap.tune()  # process-wide, so here, where the server process starts
        try:
            asyncio.run(_serve(server, metrics_listen, ui_listen, ui_tls, child))
        except PortInUse as err:
            raise click.ClickException(str(err)) from None


def _current_schema(url: URL, auto_migrate: bool) -> None:
    try:
        ensure_schema(url, auto_migrate)
    except SchemaOutOfDate as err:
        raise click.ClickException(str(err)) from err


def _loopback(listen: str) -> bool:
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # '' (every address) or a name: reachable from elsewhere


def _dashboard(server: FederationServer, port: int, ui_tls: ssl.SSLContext | None) -> Dashboard:
    """The dashboard's client of this server's own API: over loopback, with TLS when the API has it."""
    target = f"127.0.0.1:{port}"
    if server.api_tls is None:
        return Dashboard(target, tls=ui_tls)
    if server.api_tls.client_ca:
        raise click.ClickException("--ui-listen cannot be used with --client-ca: the dashboard has no client "
                                   "certificate to present")
    cert = x509.load_pem_x509_certificate(server.api_tls.cert)
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        name = next(iter(names.get_values_for_type(x509.DNSName)), "localhost")
    except x509.ExtensionNotFound:
        name = "localhost"
    return Dashboard(target, grpc.ssl_channel_credentials(root_certificates=server.api_tls.cert),
                     (("grpc.ssl_target_name_override", name),), tls=ui_tls)


async def _serve(server: FederationServer, metrics_listen: str, ui_listen: str = "",
                 ui_tls: ssl.SSLContext | None = None, child: SchedulerChild | None = None) -> None:
    listen = server.listen
    port = await server.start()
    stop = asyncio.Event()
    watching = asyncio.create_task(exit_with_stdin(stop)) if os.environ.get(EXIT_WITH_STDIN) else None
    dashboard = None
    if ui_listen:
        dashboard = _dashboard(server, port, ui_tls)
        try:
            ui_port = await dashboard.start(ui_listen)
        except OSError as err:
            await server.stop(0)
            raise PortInUse(f"cannot serve the dashboard on {ui_listen}: {err.strerror}") from None
        scheme = "https" if ui_tls else "http"
        print(f"federation-server dashboard on {scheme}://{ui_listen.rpartition(':')[0]}:{ui_port}", flush=True)
    metrics_runner = None
    if metrics_listen:
        try:
            inherited = os.environ.get(METRICS_SOCKET)  # a scheduler process: its parent bound the socket
            metrics_runner = await metrics.serve(
                metrics_listen, server.authenticate, os.environ.get(METRICS_SECRET, ""),
                (child.metrics_address, child.metrics_secret) if child is not None else None,
                socket.socket(fileno=int(inherited)) if inherited else None)
        except OSError as err:
            await server.stop(0)
            raise PortInUse(f"cannot serve metrics on {metrics_listen}: {err.strerror}") from None
        metrics_port = metrics_runner.addresses[0][1]
        what = "scheduler's metrics at" if server.role == SCHEDULER else "metrics on"
        print(f"federation-server {what} {metrics_listen.rpartition(':')[0]}:{metrics_port}", flush=True)
    if server.agent_listen:
        print(f"federation-server agents (mTLS) on {server.agent_listen.rpartition(':')[0]}:{server.agent_port}",
              flush=True)
    if child is not None:  # once this process listens: nothing left that could fail and leave it behind
        await child.start()
    host = listen.rpartition(":")[0]
    if server.role == SCHEDULER:
        print(f"federation-server scheduler answering the API processes on {host}:{port}", flush=True)
    else:
        print(f"federation-server listening{' with TLS' if server.api_tls else ''} on {host}:{port}", flush=True)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    slow = asyncio.create_task(_report_slow_shutdown(SLOW_SHUTDOWN))
    try:
        if child is not None:
            await child.stop()
        if dashboard is not None:
            await dashboard.stop()
        if metrics_runner is not None:
            await metrics_runner.cleanup()
        if watching is not None:
            watching.cancel()
        await server.stop()
    finally:
        slow.cancel()


async def _report_slow_shutdown(after: float) -> None:
    """Say what a shutdown still waits for once it has taken `after` seconds. A task that does not end is invisible
    to a thread dump (the loop's thread just waits in its selector); its coroutine's stack names it."""
    await asyncio.sleep(after)
    stacks = io.StringIO()
    for task in asyncio.all_tasks():
        if task is not asyncio.current_task():
            task.print_stack(file=stacks)
    log.warning("still shutting down after %g s; the tasks it waits on:\n%s", after, stacks.getvalue())


@cli.group()
def db() -> None:
    """Manage the database schema (Alembic migrations)."""


@db.command()
@_database_url
@_data_dir
@click.option("--revision", default="head", show_default=True, help="The Alembic revision to upgrade to.")
def upgrade(database_url: str | None, data_dir: Path, revision: str) -> None:
    """Apply migrations up to REVISION."""
    with _database(database_url, data_dir) as url:
        database.upgrade(url, revision)
        click.echo(f"database schema at {database.schema_revisions(url)[0]}")


@db.command()
@_database_url
@_data_dir
@click.argument("revision")
def downgrade(database_url: str | None, data_dir: Path, revision: str) -> None:
    """Revert migrations down to REVISION ('base' removes everything)."""
    with _database(database_url, data_dir) as url:
        database.downgrade(url, revision)
        click.echo(f"database schema at {database.schema_revisions(url)[0] or 'base'}")


@db.command()
@_database_url
@_data_dir
def current(database_url: str | None, data_dir: Path) -> None:
    """Print the schema revision of the database and of this code."""
    with _database(database_url, data_dir) as url:
        rev, head = database.schema_revisions(url)
        click.echo(f"database: {rev or 'none'}\ncode:     {head}")
        if rev != head:
            sys.exit(1)


@cli.group()
def token() -> None:
    """Issue bearer tokens directly in the database (the first admin token; later ones: fedctl token)."""


@token.command("create")
@_database_url
@_data_dir
@click.option("--admin", is_flag=True, help="An admin token: manages tenants, queues, clusters and tokens.")
@click.option("--tenant", default="", help="A tenant token: reaches only this tenant's queues and jobs.")
@click.option("--name", default="", help="What the token is for (a DNS-1123 label), shown in the audit log.")
@click.option("--ttl", default="", help="Lifetime, e.g. 12h or 2160h (default: until revoked).")
def token_create(database_url: str | None, data_dir: Path, admin: bool, tenant: str, name: str, ttl: str) -> None:
    """Print a new bearer token; only its hash is stored, so keep it now."""
    if admin == bool(tenant):
        raise click.UsageError("give exactly one of --admin or --tenant NAME")
    try:
        lifetime = timedelta(seconds=parse_duration(ttl)) if ttl else None
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--ttl") from None
    with _database(database_url, data_dir) as url:
        _current_schema(url, auto_migrate=False)

        async def create() -> str:
            engine = database.async_engine(url)
            try:
                _, bearer = await TokenStore(engine).create("federation-server token create", name, tenant or None,
                                                            admin, lifetime)
            finally:
                await engine.dispose()
            return bearer

        try:
            click.echo(asyncio.run(create()))
        except FederationError as err:  # an unknown tenant, say: one line, no traceback
            raise click.ClickException(str(err)) from None


if __name__ == "__main__":  # the scheduler process `serve` starts: python -m federation.server.main
    cli()
