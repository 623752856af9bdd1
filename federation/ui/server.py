"""The dashboard: read-only pages over the federation's own gRPC API, served by `federation-server --ui-listen`.

Every page is rendered server-side (Jinja2) from calls to the API this process serves, made with the
viewer's token, so a tenant sees exactly what its token lets it read through fedctl, and nothing else.
The job list and a job's page follow the job event stream live (server-sent events), without a reload.
Nothing is loaded from outside: the page's script and style are served from here, so it works air-gapped.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import grpc
import jinja2
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.message import Message

from federation.cli import output
from federation.resources import format_amount, parse_amount
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

HERE = Path(__file__).parent
TOKEN_COOKIE = "fed_token"
PAGE_SIZE = 50
GPU = "nvidia.com/gpu"
PHASES = [p.capitalize() for p in common_pb2.JobPhase.keys()[1:]]


class Api:
    """The federation's API as the viewer: their token on every call."""

    def __init__(self, channel: grpc.aio.Channel, token: str) -> None:
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)
        self.metadata = (("authorization", f"Bearer {token}"),) if token else ()

    async def __call__(self, rpc: Callable[..., Awaitable[Any]], request: Message, timeout: float = 10) -> Any:
        return await rpc(request, metadata=self.metadata, timeout=timeout)


def _phase(value: int) -> str:
    return common_pb2.JobPhase.Name(value).capitalize()


def _when(ts: Any) -> str:
    return ts.ToDatetime(UTC).strftime("%Y-%m-%d %H:%M:%S") if ts.seconds else "-"


def _amounts(amounts: Any) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(amounts.items())) or "-"


def _share_of(usage: Any, deserved: Any) -> dict[str, tuple[int, int]]:
    """Per resource: (used, deserved) in canonical units, for the bars."""
    out = {}
    for resource in sorted({*usage, *deserved}):
        out[resource] = (parse_amount(resource, usage.get(resource, "0")),
                         parse_amount(resource, deserved.get(resource, "0")))
    return out


class Dashboard:
    def __init__(self, target: str, credentials: grpc.ChannelCredentials | None = None,
                 options: tuple[tuple[str, Any], ...] = ()) -> None:
        self.target, self.credentials, self.options = target, credentials, options
        self.channel: grpc.aio.Channel | None = None
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                            autoescape=jinja2.select_autoescape(["html"]))
        self.templates.filters.update(phase=_phase, when=_when, amounts=_amounts, expected=output.expected_start)
        self.runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors])
        app.add_routes([web.get("/", self.home), web.get("/login", self.login), web.get("/queues", self.queues),
                        web.get("/jobs", self.jobs), web.get("/jobs/rows", self.job_rows),
                        web.get("/jobs/{id}", self.job), web.get("/clusters", self.clusters),
                        web.get("/events", self.events), web.static("/static", HERE / "static")])
        return app

    async def start(self, listen: str) -> int:
        self.channel = grpc.aio.secure_channel(self.target, self.credentials, self.options) if self.credentials \
            else grpc.aio.insecure_channel(self.target, self.options)
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        host, _, port = listen.rpartition(":")
        sock = socket.create_server((host or "0.0.0.0", int(port)))  # bound here, so port 0's pick is known
        await web.SockSite(self.runner, sock).start()
        self.port = int(sock.getsockname()[1])
        return self.port

    async def stop(self) -> None:
        """The channel first: that ends the live pages' event streams, which would otherwise hold the
        web server's shutdown until its handlers' timeout."""
        if self.channel is not None:
            await self.channel.close()
        if self.runner is not None:
            await self.runner.cleanup()

    # -- plumbing ---------------------------------------------------------------------------------

    def _api(self, request: web.Request) -> Api:
        assert self.channel is not None
        return Api(self.channel, request.cookies.get(TOKEN_COOKIE, ""))

    def _page(self, name: str, **context: Any) -> web.Response:
        return web.Response(text=self.templates.get_template(name).render(**context), content_type="text/html")

    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        """An API refusal is a page saying so with its status (no token, another tenant's job, ...)."""
        try:
            return await handler(request)
        except grpc.aio.AioRpcError as err:
            status = {grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
                      grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.INVALID_ARGUMENT: 400}.get(err.code(), 502)
            page = self.templates.get_template("error.html").render(status=status, message=err.details(),
                                                                      login=status == 401)
            return web.Response(text=page, content_type="text/html", status=status)

    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/queues")

    async def login(self, request: web.Request) -> web.StreamResponse:
        """`/login?token=fed_...`: the token kept in a cookie for the pages that follow."""
        response = web.HTTPFound(request.query.get("next", "/queues"))
        response.set_cookie(TOKEN_COOKIE, request.query.get("token", ""), httponly=True, samesite="Strict")
        raise response

    # -- pages ------------------------------------------------------------------------------------

    async def queues(self, request: web.Request) -> web.Response:
        api = self._api(request)
        queues = (await api(api.admin.ListQueues, admin_pb2.ListQueuesRequest())).queues
        statuses = await asyncio.gather(*(api(api.admin.GetQueueStatus, admin_pb2.GetQueueStatusRequest(name=q.name))
                                          for q in queues))
        rows = []
        for queue, status in zip(queues, statuses, strict=True):
            rows.append({"queue": queue, "status": status, "shares": _share_of(status.usage, status.deserved),
                         "share": status.dominant_share,
                         "history": [[s.time.seconds, s.dominant_share] for s in status.history]})
        by_tenant: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_tenant.setdefault(row["queue"].tenant, []).append(row)
        return self._page("queues.html", title="Queues", tenants=sorted(by_tenant.items()))

    async def _job_list(self, request: web.Request) -> dict[str, Any]:
        api = self._api(request)
        q = request.query
        phases = [common_pb2.JobPhase.Value(p.upper()) for p in q.getall("phase", []) if p.capitalize() in PHASES]
        listed = await api(api.jobs.ListJobs, jobs_pb2.ListJobsRequest(
            tenant=q.get("tenant", ""), queue=q.get("queue", ""), phases=phases, page_size=PAGE_SIZE,
            page_token=q.get("page_token", "")))
        cluster = q.get("cluster", "")
        jobs = [j for j in listed.jobs if not cluster or j.status.cluster == cluster]
        return {"jobs": jobs, "next": listed.next_page_token, "filters": dict(q), "phases": PHASES}

    async def jobs(self, request: web.Request) -> web.Response:
        return self._page("jobs.html", title="Jobs", **await self._job_list(request))

    async def job_rows(self, request: web.Request) -> web.Response:
        return self._page("job_rows.html", **await self._job_list(request))

    async def job(self, request: web.Request) -> web.Response:
        api = self._api(request)
        job_id = request.match_info["id"]
        job = await api(api.jobs.GetJob, jobs_pb2.GetJobRequest(id=job_id))
        explained = await api(api.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(id=job_id))
        return self._page("job.html", title=job.id, job=job, explained=explained,
                          events=await self._timeline(api, job_id))

    async def _timeline(self, api: Api, job_id: str) -> list[common_pb2.JobEvent]:
        """The job's events so far: its watch replayed from the start, until it has nothing more to say."""
        events: list[common_pb2.JobEvent] = []
        stream = api.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0, job_id=job_id),
                                    metadata=api.metadata)
        try:
            while True:
                event = await asyncio.wait_for(stream.read(), 0.5)
                if event is grpc.aio.EOF:
                    break
                events.append(event)
        except TimeoutError:
            pass
        finally:
            stream.cancel()
        return events

    async def clusters(self, request: web.Request) -> web.Response:
        api = self._api(request)
        clusters = (await api(api.admin.ListClusters, admin_pb2.ListClustersRequest())).clusters
        job = None
        if request.query.get("job"):
            job = await api(api.jobs.GetJob, jobs_pb2.GetJobRequest(id=request.query["job"]))
        rows = []
        for c in clusters:
            unit = GPU if GPU in c.allocatable else "cpu"  # what the heat is measured in: GPUs, where there are
            tiers = []
            for t in c.topology:
                free = parse_amount(unit, t.max_free.get(unit, "0"))
                cap = parse_amount(unit, t.max_capacity.get(unit, "0"))
                tiers.append({"tier": t.tier, "name": t.tier_name, "free": format_amount(unit, free),
                              "capacity": format_amount(unit, cap), "heat": free / cap if cap else 0})
            children: dict[str, list[Any]] = {}
            for h in c.hypernodes:
                free = parse_amount(unit, h.free.get(unit, "0"))
                total = parse_amount(unit, h.allocatable.get(unit, "0"))
                children.setdefault(h.parent, []).append({
                    "name": h.name, "tier": h.tier, "free": format_amount(unit, free),
                    "allocatable": format_amount(unit, total),
                    "heat": free / total if total else 0})
            landed: set[str] = set()  # the HyperNode the job's gang is in, and those above it
            if job is not None and job.status.cluster == c.name:
                parent_of = {h.name: h.parent for h in c.hypernodes}
                at = job.status.hypernode
                while at:
                    landed.add(at)
                    at = parent_of.get(at, "")
            rows.append({"cluster": c, "shares": _share_of(c.used, c.allocatable), "tiers": tiers,
                         "children": children, "landed": landed, "unit": unit})
        nodes = {p.node for p in job.status.placements} if job is not None else set()
        return self._page("clusters.html", title="Clusters", rows=rows, job=job, nodes=sorted(nodes),
                          status=admin_pb2.ClusterStatus.Name)

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The job event stream as server-sent events: what the pages refresh on."""
        api = self._api(request)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        watch = api.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(job_id=request.query.get("job", "")),
                                   metadata=api.metadata)
        try:
            async for event in watch:
                data = json.dumps(json_format.MessageToDict(event))
                await response.write(f"event: job\ndata: {data}\n\n".encode())
        except ConnectionResetError:
            pass  # the viewer went away
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.CANCELLED:  # cancelled: the server is stopping
                await response.write(f"event: denied\ndata: {json.dumps(err.details())}\n\n".encode())
        finally:
            watch.cancel()
        return response

