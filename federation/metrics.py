"""Prometheus metrics of the federation server (served on --metrics-listen).

Series that name a queue (and so a tenant's business: the API hides a queue from other tenants) live in
their own registry, `TENANTS`, served only to a scrape carrying an admin's bearer token; everyone else gets
the federation-wide series (`federation_pending_jobs`, not per queue), which name no tenant.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import aiohttp
import grpc
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from federation.security.auth import Principal

TENANTS = CollectorRegistry()

CYCLE_SECONDS = Histogram("federation_scheduler_cycle_seconds", "Duration of one scheduling cycle.",
                          buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
CYCLE_STEP_SECONDS = Histogram("federation_scheduler_cycle_step_seconds",
                               "Duration of each step of a scheduling cycle: snapshot, decide, write, explain.",
                               ["step"], buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
JOBS_SCHEDULED = Counter("federation_jobs_scheduled_total", "Jobs dispatched to a member cluster.")
JOBS_ON_ARRIVAL = Counter("federation_jobs_dispatched_on_arrival_total",
                          "Jobs dispatched when submitted, in the room the last cycle left, without waiting for a "
                          "cycle (counted in federation_jobs_scheduled_total too).")
JOBS_PREEMPTED = Counter("federation_jobs_preempted_total", "Running jobs preempted or reclaimed.")
PENDING = Gauge("federation_pending_jobs", "Jobs waiting, in every queue.")
LOST_GPU_HOURS = Counter("federation_lost_gpu_hours_total",
                         "GPU-hours of work preempted jobs did since their last checkpoint, in every queue.")
PREEMPTION_LOST_GPU_HOURS = Counter("federation_preemption_lost_gpu_hours_total",
                                    "GPU-hours of work preempted jobs did since their last checkpoint.", ["queue"],
                                    registry=TENANTS)
class QueueSeries(Collector):
    """Per queue, what the last cycle left: jobs waiting, dominant share, usage and deserved share by resource.
    Made at scrape time from what the leader last published (`publish`): a thousand queues are thousands of
    series, and setting each one every cycle took 20-25 ms of the scheduler's event loop a cycle (scrapes come every
    15 s or so, cycles every second). A queue deleted is absent from the next publication, so its series go with
    it."""

    FAMILIES = (("federation_queue_pending_jobs", "Jobs waiting in a queue.", ["queue"]),
                ("federation_queue_dominant_share", "Largest share of its deserved resources a queue uses.",
                 ["queue"]),
                ("federation_queue_usage", "What each queue's running jobs hold, by resource (and resource@flavor), "
                 "canonical units (cpu in millicores).", ["queue", "resource"]),
                ("federation_queue_deserved", "Each queue's deserved share, by resource (and resource@flavor), "
                 "canonical units.", ["queue", "resource"]))

    def __init__(self) -> None:
        # (jobs waiting per queue, usage per queue, deserved per queue, dominant share of usage against deserved)
        self._latest: tuple[Mapping[str, int], Mapping[str, Mapping[str, int]], Mapping[str, Mapping[str, float]],
                            Callable[[Mapping[str, int], Mapping[str, float]], float]] | None = None

    def publish(self, waiting: Mapping[str, int], usage: Mapping[str, Mapping[str, int]],
                deserved: Mapping[str, Mapping[str, float]],
                share: Callable[[Mapping[str, int], Mapping[str, float]], float]) -> None:
        """The figures of a cycle, copied: the cycle's own go on changing as jobs are admitted on arrival, in a
        worker thread, while a scrape may read these on the loop."""
        self._latest = (dict(waiting), {q: dict(u) for q, u in usage.items()},
                        {q: dict(d) for q, d in deserved.items()}, share)

    def describe(self) -> list[GaugeMetricFamily]:
        return self._families()

    def _families(self) -> list[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, text, labels=labels) for name, text, labels in self.FAMILIES]

    def collect(self) -> list[GaugeMetricFamily]:
        pending, dominant, used, owed = families = self._families()
        if self._latest is None:
            return families
        waiting, usage, deserved, share = self._latest
        for queue, count in waiting.items():
            pending.add_metric([queue], count)
        for queue, amounts in usage.items():
            fair = deserved.get(queue, {})
            found = share(amounts, fair)
            dominant.add_metric([queue], found if found != float("inf") else -1)
            for resource in {*amounts, *fair}:  # per resource, and per flavor of it
                used.add_metric([queue, resource], amounts.get(resource, 0))
                owed.add_metric([queue, resource], fair.get(resource, 0))
        return families


QUEUES = QueueSeries()
TENANTS.register(QUEUES)

CLUSTER_UTILISATION = Gauge("federation_cluster_utilisation", "Used / allocatable per resource.",
                            ["cluster", "resource"])


class _Both(Collector):
    """Every series: the federation-wide ones and the per-queue ones, one exposition."""

    def collect(self) -> Any:
        yield from REGISTRY.collect()
        yield from TENANTS.collect()


SCOPE_HEADER, SECRET_HEADER = "X-Federation-Metrics-Scope", "X-Federation-Metrics-Secret"
CHILD_TIMEOUT = 5.0  # seconds the parent waits for its scheduler process's series


class _Merged(Collector):
    """This process's series, with the scheduler's families (and any this one lacks) from the scheduler process's
    exposition: one scrape for `federation-server serve`'s two processes, each series from the process that sets
    it (the API process has the scheduler's families too, never set)."""

    def __init__(self, own: Collector | CollectorRegistry, other: str) -> None:
        self.own, self.other = own, other

    def collect(self) -> Any:
        mine = {m.name: m for m in self.own.collect()}
        for family in text_string_to_metric_families(self.other):
            if family.name in _scheduler_families() or family.name not in mine:
                mine[family.name] = family
        yield from mine.values()


def _scheduler_families() -> set[str]:
    """The metric families the scheduler sets (a cycle's, and what it reads of queues and clusters each cycle)."""
    return {family.name for m in (
        CYCLE_SECONDS, CYCLE_STEP_SECONDS, JOBS_SCHEDULED, JOBS_ON_ARRIVAL, JOBS_PREEMPTED, PENDING, LOST_GPU_HOURS,
        PREEMPTION_LOST_GPU_HOURS, QUEUES, CLUSTER_UTILISATION, CLUSTER_READY, CLUSTER_HEARTBEAT_AGE, CLUSTER_DRIFT)
        for family in m.describe()}


def app(authenticate: Callable[[str | None], Awaitable[Principal | str]], secret: str = "",
        child: tuple[str, str] | None = None) -> web.Application:
    """/metrics: per-queue series for an admin's bearer token, the federation-wide ones for anyone else;
    a token that does not authenticate is a 401 (a scraper misconfigured should hear it, not get less).
    `secret`: a caller presenting it names the scope itself (the parent of a scheduler process). `child`: the
    scheduler process's metrics address and secret, whose series this one's scrape includes."""

    async def handle(request: web.Request) -> web.StreamResponse:
        header = request.headers.get("Authorization")
        if secret and hmac.compare_digest(request.headers.get(SECRET_HEADER, ""), secret):
            everything = request.headers.get(SCOPE_HEADER) == "all"
        else:
            principal = await authenticate(header)  # --insecure-dev: everyone is an admin
            if not isinstance(principal, Principal) and header is not None:
                raise web.HTTPUnauthorized(text=f"{principal}\n", headers={"WWW-Authenticate": "Bearer"})
            everything = isinstance(principal, Principal) and principal.admin
        own: Collector | CollectorRegistry = _Both() if everything else REGISTRY
        if child is not None:
            own = _Merged(own, await _scrape(child, "all" if everything else "public"))
        return web.Response(body=generate_latest(own), headers={"Content-Type": CONTENT_TYPE_LATEST})  # type: ignore[arg-type]

    application = web.Application()
    application.router.add_get("/metrics", handle)
    return application


async def _scrape(child: tuple[str, str], scope: str) -> str:
    """The scheduler process's exposition, or nothing while it is not there (restarting, say)."""
    address, secret = child
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=CHILD_TIMEOUT)) as session, \
                session.get(f"http://{address}/metrics", headers={SECRET_HEADER: secret, SCOPE_HEADER: scope}) as got:
            return await got.text() if got.status == 200 else ""
    except (aiohttp.ClientError, TimeoutError):
        return ""


async def serve(address: str, authenticate: Callable[[str | None], Awaitable[Principal | str]], secret: str = "",
                child: tuple[str, str] | None = None, sock: socket.socket | None = None) -> web.AppRunner:
    """Serve /metrics at HOST:PORT (port 0 picks one), or on `sock` (bound by the parent of a scheduler process),
    on this event loop; the runner's `addresses` say where."""
    runner = web.AppRunner(app(authenticate, secret, child), access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    try:
        site = web.SockSite(runner, sock) if sock is not None else \
            web.TCPSite(runner, host or "127.0.0.1", int(port), reuse_port=False)
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    return runner


CLUSTER_READY = Gauge("federation_cluster_ready", "1 while a member cluster is schedulable (Ready, heard from within "
                      "the heartbeat timeout, not cordoned, its report usable), else 0.", ["cluster"])
CLUSTER_HEARTBEAT_AGE = Gauge("federation_cluster_heartbeat_age_seconds",
                              "Seconds since a member cluster's agent was last heard from.", ["cluster"])
JOB_WAIT_SECONDS = Histogram("federation_job_wait_seconds", "Seconds from a job's submission to its pods running, "
                             "by queue.", ["queue"], registry=TENANTS,
                             buckets=(1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400))
JOBS_FINISHED = Counter("federation_jobs_finished_total", "Jobs that ended, by outcome (succeeded, failed, "
                        "cancelled).", ["outcome"])
REJECTIONS = Counter("federation_rejections_total", "Dispatched jobs a member cluster's agent sent back "
                     "(rejected, or refused for good), by cluster.", ["cluster"])
ORPHAN_PODS_DELETED = Counter("federation_orphan_pods_deleted_total",
                              "Pods of attempts the federation no longer runs in a cluster, found there by its agent's "
                              "reconciliation and deleted.", ["cluster"])
STALLED_SESSIONS_ENDED = Counter("federation_stalled_sessions_ended_total",
                                 "PostgreSQL sessions of the federation this process ended: their process had "
                                 "stopped sending inside a statement, holding its locks, for as long as PostgreSQL "
                                 "lets a session sit idle in its transaction.")
AGENTS_REFUSED = Counter("federation_agents_refused_total",
                         "Agents refused because another agent process holds the cluster's live stream.", ["cluster"])
CLUSTER_DRIFT = Gauge("federation_cluster_drift", "What a cluster's agent reports in use minus what the federation "
                      "believes runs there, by resource, once the difference outlasted a reconcile (else 0).",
                      ["cluster", "resource"])

# Per-RPC metrics under go-grpc-prometheus' names, which Grafana dashboards for gRPC services already query.
# Written here because no maintained instrumentation fits: OpenTelemetry's gRPC instrumentation makes only
# traces, py-grpc-prometheus has no asyncio server, and grpcio-observability pins an exact grpcio release.
RPC_STARTED = Counter("grpc_server_started_total", "RPCs started on the server.",
                      ["grpc_type", "grpc_service", "grpc_method"])
RPC_HANDLED = Counter("grpc_server_handled_total", "RPCs completed on the server, by status code.",
                      ["grpc_type", "grpc_service", "grpc_method", "grpc_code"])
RPC_SECONDS = Histogram("grpc_server_handling_seconds", "Time to complete an RPC (a stream: its whole life).",
                        ["grpc_type", "grpc_service", "grpc_method"],
                        buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
LOOP_LAG_SECONDS = Histogram("federation_event_loop_lag_seconds",
                             "How late the server's event loop ran a timer it set (sampled every 0.1 s): how long "
                             "something held the loop that serves the API, the agents' streams and the lease.",
                             buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
LOOP_LAG_PERIOD = 0.1


async def watch_loop_lag() -> None:
    """Sample the event loop's lag until cancelled: a handler or a pass that computes on the loop shows here."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + LOOP_LAG_PERIOD
        await asyncio.sleep(LOOP_LAG_PERIOD)
        LOOP_LAG_SECONDS.observe(max(loop.time() - due, 0.0))


class Series:
    """The label sets a gauge family was last set for, so those of deleted objects are removed with them
    (a deleted queue must not stay in the metrics at its last value)."""

    def __init__(self, *gauges: Gauge) -> None:
        self.gauges = gauges
        self.seen: dict[Gauge, set[tuple[str, ...]]] = {g: set() for g in gauges}

    def keep(self, gauge: Gauge, current: set[tuple[str, ...]]) -> None:
        for labels in self.seen[gauge] - current:
            with contextlib.suppress(KeyError):
                gauge.remove(*labels)
        self.seen[gauge] = current


class RpcMetrics(grpc.aio.ServerInterceptor):
    """Counts and times every RPC of a server by service, method and status code."""

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None:
            return None
        service, _, method = details.method.lstrip("/").rpartition("/")
        kind = ("client_stream" if handler.request_streaming else "unary") if not handler.response_streaming \
            else ("bidi_stream" if handler.request_streaming else "server_stream")
        labels = (kind, service, method)

        def done(context: grpc.aio.ServicerContext, started: float, failed: BaseException | None) -> None:
            code = context.code()  # set by an abort or set_code; else as the call ended
            if code is None:
                code = grpc.StatusCode.OK if failed is None or isinstance(failed, grpc.aio.AbortError) \
                    else grpc.StatusCode.CANCELLED if isinstance(failed, asyncio.CancelledError) \
                    else grpc.StatusCode.UNKNOWN
            name = code.name if isinstance(code, grpc.StatusCode) else str(code)
            RPC_HANDLED.labels(*labels, name).inc()
            RPC_SECONDS.labels(*labels).observe(time.perf_counter() - started)

        if not handler.response_streaming:
            inner = handler.unary_unary or handler.stream_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                RPC_STARTED.labels(*labels).inc()
                started, failed = time.perf_counter(), None
                try:
                    return await inner(request, context)
                except BaseException as err:
                    failed = err
                    raise
                finally:
                    done(context, started, failed)

            make = grpc.stream_unary_rpc_method_handler if handler.request_streaming \
                else grpc.unary_unary_rpc_method_handler
            return make(unary, handler.request_deserializer, handler.response_serializer)
        inner_stream = handler.unary_stream or handler.stream_stream

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            RPC_STARTED.labels(*labels).inc()
            started, failed = time.perf_counter(), None
            try:
                async for item in inner_stream(request, context):
                    yield item
            except BaseException as err:
                failed = err
                raise
            finally:
                done(context, started, failed)

        make_stream = grpc.stream_stream_rpc_method_handler if handler.request_streaming \
            else grpc.unary_stream_rpc_method_handler
        return make_stream(stream, handler.request_deserializer, handler.response_serializer)
