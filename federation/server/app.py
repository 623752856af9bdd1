"""One federation server process: engine, stores, event hub and the gRPC server around them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import socket
import sys
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection
from sqlalchemy.engine import URL

from federation import metrics
from federation.api.admin import AdminServicer
from federation.api.agents import AgentServicer
from federation.api.jobs import JobServicer
from federation.api.leader import SchedulerServicer
from federation.api.status import register
from federation.api.usage import PastUsageView
from federation.control.history import ARCHIVE_AFTER, RETENTION, History
from federation.control.leader import LEASE, Leadership, announce
from federation.control.leaderview import InProcess, LeaderView, Remote
from federation.control.scheduler import DRIFT_AFTER, HEARTBEAT_TIMEOUT, LOST_GRACE, Scheduler
from federation.control.stalled import StalledSessions
from federation.relay.connections import Connections
from federation.relay.events import EventHub
from federation.relay.logrelay import LogRelay
from federation.relay.orders import OrderRelay
from federation.scheduling.usage import Decay
from federation.security.auth import Authenticator, AuthInterceptor, RateLimiter, insecure_dev
from federation.security.oidc import OidcConfig, OidcVerifier
from federation.store import database
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.tokens import TokenStore
from federation.store.transitions import Requeueing
from federation.store.usage import UsageStore
from federation.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    agent_pb2,
    agent_pb2_grpc,
    jobs_pb2,
    jobs_pb2_grpc,
    scheduler_pb2_grpc,
)

log = logging.getLogger(__name__)

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
USER_SERVICES = (
    jobs_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
    admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
)
SERVICE_NAMES = (*USER_SERVICES, agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name)
SUBMIT_RATE, SUBMIT_BURST = 100.0, 2000  # jobs per second and at once, per token
# What one process runs: everything (ALL: the in-process server of the tests, and replicas of the previous
# release's shape), the user API and the agents' streams (API: any number of them), or the scheduler (SCHEDULER:
# leader-elected; it answers the API's questions about its decisions on its own listener).
ALL, API, SCHEDULER = "all", "api", "scheduler"
ROLES = (ALL, API, SCHEDULER)
SWITCH_INTERVAL = 0.001  # seconds a thread computing in Python keeps the interpreter while another waits for it


class SchemaOutOfDate(RuntimeError):
    pass


@dataclass(frozen=True)
class AgentTls:
    """The agent listener's TLS: the server's certificate and key, and the CA agents' certificates
    must be signed by (each names its cluster as common name). PEM bytes."""

    cert: bytes
    key: bytes
    client_ca: bytes


@dataclass(frozen=True)
class ApiTls:
    """The user API's TLS: the server's certificate and key (PEM), and optionally a CA whose client
    certificates callers must then present as well as their tokens."""

    cert: bytes
    key: bytes
    client_ca: bytes | None = None


class PortInUse(RuntimeError):
    """Another process (a second server, say) already listens on the address."""


def ensure_schema(url: URL, auto_migrate: bool) -> None:
    """Refuse to serve on a schema the code does not match, unless told to migrate it."""
    current, head = database.schema_revisions(url)
    if current == head:
        return
    if not auto_migrate:
        raise SchemaOutOfDate(
            f"database schema is at revision {current or 'none'} but this server needs {head}: "
            "run 'federation-server db upgrade' or start with --auto-migrate")
    log.info("migrating database schema %s -> %s", current or "none", head)
    database.upgrade(url)


def _bind(add_port: Any, address: str, *credentials: Any) -> int:
    try:
        return int(add_port(address, *credentials))
    except RuntimeError as err:  # gRPC's "Failed to bind to address"
        raise PortInUse(f"cannot listen on {address}: the address is in use (or not this host's)") from err


class FederationServer:
    def __init__(self, url: URL, listen: str, heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
                 lost_grace: float = LOST_GRACE, *, insecure_dev: bool = False, submit_rate: float = SUBMIT_RATE,
                 submit_burst: int = SUBMIT_BURST, agent_listen: str = "", agent_tls: AgentTls | None = None,
                 oidc: OidcConfig | None = None, api_tls: ApiTls | None = None, leader_lease: float = LEASE,
                 drift_after: float = DRIFT_AFTER, archive_after: float = ARCHIVE_AFTER,
                 retention: float = RETENTION, cycle_burst: int = 0, admit_on_arrival: bool = True,
                 role: str = "all", advertise: str = "",
                 ready_timeout: float = 0.0, requeueing: Requeueing | None = None, decay: Decay | None = None
                 ) -> None:
        if bool(agent_listen) != (agent_tls is not None):
            raise ValueError("an agent listener needs its TLS files, and TLS files need an agent listener")
        self.url = url
        self.listen = listen
        self.heartbeat_timeout = heartbeat_timeout
        self.lost_grace = lost_grace
        self.drift_after = drift_after
        self.archive_after = archive_after
        self.cycle_burst = cycle_burst
        self.admit_on_arrival = admit_on_arrival
        self.retention = retention
        self.ready_timeout = ready_timeout
        self.requeueing = requeueing or Requeueing()
        self.decay = decay or Decay()  # how usage history counts in the order of queue heads
        self.insecure_dev = insecure_dev
        self.limiter = RateLimiter(submit_rate, submit_burst)
        self.agent_listen = agent_listen
        self.agent_tls = agent_tls
        self.api_tls = api_tls
        self.leader_lease = leader_lease
        self.oidc = OidcVerifier(oidc) if oidc else None  # a bad JWKS document fails here, before serving
        self.port = 0
        self.agent_port = 0
        self.agent_server: grpc.aio.Server | None = None
        if role not in ROLES:
            raise ValueError(f"role {role!r} is not one of {', '.join(ROLES)}")
        self.role = role
        self.advertise = advertise  # SCHEDULER: the address front ends reach it by ('': from --listen)
        # Each process has only its role's parts.
        self.scheduler: Scheduler | None = None
        self.history: History | None = None
        self.hub: EventHub | None = None
        self.relay: OrderRelay | None = None
        self.health: health_aio.HealthServicer | None = None
        self.leader_view: LeaderView | None = None

    async def start(self) -> int:
        """Start this process's role; the port it listens on (the user API's; the scheduler's own, for SCHEDULER)."""
        # A scheduling cycle computes in a worker thread; the loop's thread gets the interpreter back this often
        # (5 ms by default), so the API, the agents' streams and the lease wait at most that for it.
        sys.setswitchinterval(SWITCH_INTERVAL)
        self._lag = asyncio.create_task(metrics.watch_loop_lag(), name="loop-lag")
        # A replica frozen inside any write (holding the event counter's row lock) must not stall the others'
        # writes longer than it could hold the lease: PostgreSQL ends its transaction after that long, and this
        # process's sweep ends those stopped mid-statement, which PostgreSQL leaves alone.
        stalled_after = database.stalled_after(self.leader_lease)
        self.engine = database.async_engine(self.url, stalled_after=stalled_after)
        self._sweeping = asyncio.create_task(StalledSessions(self.url, stalled_after).run(), name="stalled-sessions")
        jobs = JobStore(self.engine, self.requeueing)
        admin = AdminStore(self.engine)
        self.tokens = TokenStore(self.engine)
        self.authenticator = Authenticator(self.tokens.load, jwt_verifier=self.oidc.verify if self.oidc else None)
        self.authenticate = insecure_dev if self.insecure_dev else self.authenticator.authenticate
        # Notices of changes from every process; only a process that schedules campaigns for the lease.
        self.leadership = Leadership(self.url, self._noticed, self.leader_lease, candidate=self.role != API)
        self._announcing: asyncio.Task[None] | None = None
        self._announce_again = False
        if self.role != API:
            self.scheduler = Scheduler(jobs, admin, lambda: self.leadership.is_leader, self._changed,
                                       heartbeat_timeout=self.heartbeat_timeout, lost_grace=self.lost_grace,
                                       fence=lambda: self.leadership.fence, drift_after=self.drift_after,
                                       burst=self.cycle_burst, usage=UsageStore(self.engine), decay=self.decay,
                                       admit_on_arrival=self.admit_on_arrival)
            self.history = History(jobs, lambda: self.leadership.is_leader, self.archive_after, self.retention)
        if self.role == SCHEDULER:
            await self._serve_leader(jobs, admin)
        else:
            self.leader_view = InProcess(self.scheduler) if self.role == ALL else Remote(self.engine)
            await self._serve_api(jobs, admin)
        self.leadership.start()
        if self.scheduler is not None and self.history is not None:
            self.scheduler.start()
            self.history.start()
        return self.port

    async def _serve_leader(self, jobs: JobStore, admin: AdminStore) -> None:
        """The scheduler's own listener: SchedulerService, for the API front ends, published with the lease."""
        assert self.scheduler is not None
        self.server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        register(scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server,
                 SchedulerServicer(self.scheduler, self.leadership, jobs, admin), self.server)
        self.port = _bind(self.server.add_insecure_port, self.listen)
        await self.server.start()
        host = self.listen.rpartition(":")[0]
        if host in ("", "0.0.0.0", "[::]"):  # every address: the one this host's name resolves to (a pod's IP)
            host = socket.gethostbyname(socket.gethostname())
        self.leadership.address = self.advertise or f"{host}:{self.port}"

    async def _serve_api(self, jobs: JobStore, admin: AdminStore) -> None:
        """The user API, the agents' streams, the order relay and the watchers."""
        if self.insecure_dev:
            log.warning("INSECURE DEV MODE: no authentication: any bearer token, or none, is accepted and ignored, and "
                        "every caller is an admin. Never expose this server.")
        self.hub = EventHub(jobs.events_after, jobs.last_event_seq, await jobs.last_event_seq())
        self.hub.start()
        # No SO_REUSEPORT: a second server on a port in use must fail, not share the port with the first
        # (gRPC sets it by default, and calls then land on either at random).
        options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_send_message_length", MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)]
        self.server = grpc.aio.server(options=options, interceptors=[metrics.RpcMetrics(),
                                                                     AuthInterceptor(self.authenticate, USER_SERVICES)])
        self.connections = Connections()
        self.relay = OrderRelay(self.connections, jobs.order_events, jobs.last_event_seq, jobs.by_ids)
        self.logs = LogRelay(self.connections)
        past = PastUsageView(UsageStore(self.engine), self.decay)
        job_servicer = JobServicer(jobs, admin, self.hub, self.leader_view, self._changed, self.limiter, self.logs,
                                   self.heartbeat_timeout, self.ready_timeout, past)
        register(jobs_pb2_grpc.add_JobServiceServicer_to_server, job_servicer, self.server)
        register(admin_pb2_grpc.add_AdminServiceServicer_to_server,
                 AdminServicer(admin, self.leader_view, self.tokens, self.authenticator.forget, self.connections,
                               past, jobs, self._changed), self.server)
        agents = functools.partial(AgentServicer, admin, jobs, self.connections, self._changed, self.logs,
                                   heartbeat_timeout=self.heartbeat_timeout, lost_grace=self.lost_grace)
        # Agents on the user port only in --insecure-dev; otherwise only on the mTLS listener, where
        # each must present a certificate naming the cluster it registers as.
        if self.insecure_dev:
            register(agent_pb2_grpc.add_AgentServiceServicer_to_server, agents(), self.server)
        elif self.agent_tls is None:
            log.warning("no --agent-listen: member agents cannot connect (they need mTLS: --agent-listen with "
                        "--tls-cert, --tls-key and --agent-ca)")
        self.health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        if self.agent_tls is not None:
            self.agent_server = grpc.aio.server(options=options, interceptors=[metrics.RpcMetrics()])
            register(agent_pb2_grpc.add_AgentServiceServicer_to_server, agents(require_identity=True),
                     self.agent_server)
            health_pb2_grpc.add_HealthServicer_to_server(self.health, self.agent_server)
            credentials = grpc.ssl_server_credentials([(self.agent_tls.key, self.agent_tls.cert)],
                                                      root_certificates=self.agent_tls.client_ca,
                                                      require_client_auth=True)
            self.agent_port = _bind(self.agent_server.add_secure_port, self.agent_listen, credentials)
            await self.agent_server.start()
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME),
            self.server)
        if self.api_tls is not None:
            credentials = grpc.ssl_server_credentials([(self.api_tls.key, self.api_tls.cert)],
                                                      root_certificates=self.api_tls.client_ca,
                                                      require_client_auth=self.api_tls.client_ca is not None)
            self.port = _bind(self.server.add_secure_port, self.listen, credentials)
        else:
            self.port = _bind(self.server.add_insecure_port, self.listen)
        await self.server.start()
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self.relay.start()

    def _changed(self, announced: bool = False) -> None:
        """Something changed here: act on it, and tell the other processes (unless the write's own transaction
        did: `announced`)."""
        self._noticed()
        if not announced:
            self._announce()

    def _noticed(self) -> None:
        """Something changed, here or in another process."""
        if self.scheduler is not None:
            self.scheduler.wake()
        if self.relay is not None:
            self.relay.wake()
        if self.hub is not None:
            self.hub.notify()

    def _announce(self) -> None:
        """Tell the other replicas, one NOTIFY at a time however many changes come meanwhile."""
        if self._announcing is not None and not self._announcing.done():
            self._announce_again = True
            return

        async def run() -> None:
            while True:
                self._announce_again = False
                try:
                    await announce(self.engine)
                except Exception as err:  # the period will still wake the leader
                    log.warning("could not announce a change: %s", err)
                if not self._announce_again:
                    return

        self._announcing = asyncio.create_task(run())

    async def stop(self, grace: float = 5.0) -> None:
        if self.health is not None:
            await self.health.enter_graceful_shutdown()
        if self.scheduler is not None and self.history is not None:
            await self.scheduler.stop()
            await self.history.stop()
        await self.leadership.stop()
        if self.relay is not None:
            await self.relay.stop()
        if self._announcing is not None:
            await self._announcing
        await self.server.stop(grace)
        if self.agent_server is not None:
            await self.agent_server.stop(grace)
        if self.hub is not None:
            await self.hub.stop()
        if isinstance(self.leader_view, Remote):
            await self.leader_view.close()
        await self.engine.dispose()
        for task in (self._lag, self._sweeping):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
