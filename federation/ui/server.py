"""The dashboard: read-only pages over the federation's own gRPC API, served by `federation-server --ui-listen`.

Every page is rendered server-side (Jinja2) from calls to the API this process serves, made with the
viewer's token, so a tenant sees exactly what its token lets it read through fedctl, and nothing else.
The job list and a job's page follow the job event stream live (server-sent events), without a reload.
Nothing is loaded from outside: the page's script and style are served from here, so it works air-gapped.

As a web application it is hardened the way an auditor checks: the token is posted once to a sign-in form
(with a CSRF token tied to the session, and the Origin checked) and kept in an encrypted, HttpOnly,
SameSite=Strict session cookie that expires (Secure over TLS; aiohttp-session's EncryptedCookieStorage, so a
tampered or malformed cookie is an empty session: 401, never a 500); redirects go to local paths only; every
answer carries a Content-Security-Policy allowing this origin's scripts and styles only, and no framing,
sniffing, caching or referrer beyond this site (the `secure` library). Live streams are capped per
tenant by the API itself.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
import secrets
import socket
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import jinja2
import secure
import yaml
from aiohttp import web
from aiohttp_session import get_session, new_session
from aiohttp_session import setup as setup_sessions
from aiohttp_session.cookie_storage import EncryptedCookieStorage
from google.protobuf import json_format
from google.protobuf.message import Message

from federation.cli import output
from federation.kernel.resources import WHOLE, format_shown, parse_shown
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc

HERE = Path(__file__).parent
SESSION_COOKIE = "fed_session"
SESSION_SECONDS = 8 * 3600  # a signed-in browser signs in again after a working day
LOG_LINES = 500  # lines of a pod's log a page shows
LOG_PAGE_BYTES = 256 * 1024  # of them at most: what a page keeps while the log streams in
LOG_READ_BYTES = 8 * 1024 * 1024  # read at most, then the call ends (an agent may send more than it was asked)
MAX_TOKEN = 4096  # characters: a bearer token or a JWT is far shorter
HEADERS = secure.Secure(
    csp=secure.ContentSecurityPolicy().default_src("'none'").script_src("'self'").style_src("'self'")
    .img_src("'self'", "data:").connect_src("'self'").form_action("'self'").frame_ancestors("'none'")
    .base_uri("'none'"),
    xfo=secure.XFrameOptions().deny(), xcto=secure.XContentTypeOptions(),
    referrer=secure.ReferrerPolicy().same_origin(), cache=secure.CacheControl().no_store(),
    coop=secure.CrossOriginOpenerPolicy().same_origin(), server=secure.Server().set(""))
HSTS = secure.Secure(hsts=secure.StrictTransportSecurity().max_age(31_536_000))
PAGE_SIZE = 50
GPU = "nvidia.com/gpu"
PHASES = [p.capitalize() for p in common_pb2.JobPhase.keys()[1:]]
ENDED = (common_pb2.SUCCEEDED, common_pb2.FAILED, common_pb2.CANCELLED)


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


def _hours(amounts: Any) -> str:
    """A usage history: resource-hours."""
    return ", ".join(f"{k} {v} h" for k, v in sorted(amounts.items())) or "-"


def _ran(job: Any, now: datetime) -> int | None:
    """How long the job has run (till now, or till it ended); None before it started."""
    if not job.status.start_time.seconds:
        return None
    end = job.status.finish_time.ToDatetime(UTC) if job.status.finish_time.seconds else now
    return int((end - job.status.start_time.ToDatetime(UTC)).total_seconds())


def _share_of(usage: Any, deserved: Any) -> dict[str, tuple[int, int]]:
    """Per resource: (used, deserved) in canonical units, for the bars."""
    out = {}
    for resource in sorted({*usage, *deserved}):
        out[resource] = (parse_shown(resource, usage.get(resource, "0")),
                         parse_shown(resource, deserved.get(resource, "0")))
    return out


def http_status(code: grpc.StatusCode, details: str) -> int:
    """The page's status for an API refusal. RESOURCE_EXHAUSTED is 429 (try later) when the federation set the
    limit; gRPC's own, for a message over its size, is no rate limit: 413 for what we sent, 502 for an answer."""
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if "Sent message larger than max" in details:
            return 413
        if "Received message larger than max" in details:
            return 502
        return 429
    return {grpc.StatusCode.UNAUTHENTICATED: 401, grpc.StatusCode.PERMISSION_DENIED: 403,
            grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.INVALID_ARGUMENT: 400}.get(code, 502)


class _CookieStorage(EncryptedCookieStorage):
    """A session cookie that is not ASCII is none of ours (ours is a Fernet token, base64): no session, as for a
    cookie that does not decrypt, rather than an error while decoding it."""

    def load_cookie(self, request: web.Request) -> str | None:
        cookie = super().load_cookie(request)
        return cookie if cookie is None or cookie.isascii() else None


# A bearer token as RFC 6750 writes one (our tokens, and JWTs, are); anything else cannot go into a header.
_BEARER = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def local_path(wanted: str | None) -> str:
    """Where to go after signing in: a path of this site, never another's (`//evil`, `https://evil`, `/\\evil`)."""
    if not wanted or not wanted.startswith("/") or wanted.startswith(("//", "/\\")):
        return "/queues"
    parts = urlsplit(wanted)
    if parts.scheme or parts.netloc or any(ord(c) < 0x20 for c in wanted):
        return "/queues"
    return wanted


class Dashboard:
    def __init__(self, target: str, credentials: grpc.ChannelCredentials | None = None,
                 options: tuple[tuple[str, Any], ...] = (), tls: ssl.SSLContext | None = None) -> None:
        self.target, self.credentials, self.options = target, credentials, options
        self.tls = tls
        # Sessions are this process's: a restart signs everyone out, as a new key should.
        self.session_key = secrets.token_bytes(32)
        self.channel: grpc.aio.Channel | None = None
        self.templates = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                            autoescape=jinja2.select_autoescape(["html"]))
        self.templates.filters.update(phase=_phase, when=_when, amounts=_amounts, hours=_hours,
                                      expected=output.expected_start, span=output.span)
        self.runner: web.AppRunner | None = None
        self.port = 0

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors])
        setup_sessions(app, _CookieStorage(
            self.session_key, cookie_name=SESSION_COOKIE, max_age=SESSION_SECONDS, httponly=True,
            secure=self.tls is not None, samesite="Strict"))
        app.on_response_prepare.append(self._headers)
        app.add_routes([web.get("/", self.home), web.get("/login", self.login), web.post("/login", self.sign_in),
                        web.post("/logout", self.sign_out), web.get("/queues", self.queues),
                        web.get("/jobs", self.jobs), web.get("/jobs/rows", self.job_rows),
                        web.get("/jobs/{id}", self.job), web.get("/jobs/{id}/logs", self.logs),
                        web.post("/jobs/{id}/cancel", self.cancel),
                        web.get("/clusters", self.clusters),
                        web.get("/events", self.events), web.static("/static", HERE / "static")])
        return app

    async def start(self, listen: str) -> int:
        self.channel = grpc.aio.secure_channel(self.target, self.credentials, self.options) if self.credentials \
            else grpc.aio.insecure_channel(self.target, self.options)
        # A viewer gone (a tab closed) cancels its handler: a live stream gives back its watch at once.
        self.runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
        await self.runner.setup()
        host, _, port = listen.rpartition(":")
        sock = socket.create_server((host or "0.0.0.0", int(port)))  # bound here, so port 0's pick is known
        await web.SockSite(self.runner, sock, ssl_context=self.tls).start()
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

    async def _api(self, request: web.Request) -> Api:
        assert self.channel is not None
        session = await get_session(request)
        return Api(self.channel, str(session.get("token", "")))

    async def _page(self, request: web.Request, name: str, http_status: int = 200, **context: Any) -> web.Response:
        """A page, with the session's CSRF token for its forms (signing out)."""
        session = await get_session(request)
        if "csrf" not in session:
            session["csrf"] = secrets.token_urlsafe(32)
        context.setdefault("csrf", session["csrf"])
        return web.Response(text=self.templates.get_template(name).render(**context), content_type="text/html",
                            status=http_status)

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        HEADERS.set_headers(response)
        if self.tls is not None:
            HSTS.set_headers(response)

    def _same_origin(self, request: web.Request) -> bool:
        """A form posted from this site: the browser's Origin (when it sends one) is ours."""
        origin = request.headers.get("Origin")
        return origin is None or origin == f"{'https' if self.tls else 'http'}://{request.host}"

    async def _posted_here(self, request: web.Request) -> tuple[Any, Any, bool]:
        """The session, the posted form, and whether the form came from this site with the session's CSRF token."""
        session = await get_session(request)
        form = await request.post()
        expected = str(session.get("csrf", ""))
        ok = self._same_origin(request) and bool(expected) and hmac.compare_digest(str(form.get("csrf", "")),
                                                                                   expected)
        return session, form, ok

    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                      ) -> web.StreamResponse:
        """An API refusal is a page saying so with its status (no token, another tenant's job, ...)."""
        try:
            return await handler(request)
        except grpc.aio.AioRpcError as err:
            status = http_status(err.code(), err.details() or "")
            page = self.templates.get_template("error.html").render(status=status, message=err.details(),
                                                                      login=status == 401, next=request.path_qs,
                                                                      signed_out=status == 401)
            return web.Response(text=page, content_type="text/html", status=status)

    async def home(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/queues")

    async def login(self, request: web.Request) -> web.StreamResponse:
        """The sign-in form. A token in the URL is not taken: it would stay in history and proxies' logs,
        and a link from another site could sign a viewer in as someone else."""
        return await self._page(request, "login.html", title="Sign in", next=local_path(request.query.get("next")),
                                by_url="token" in request.query, signed_out=True)

    async def sign_in(self, request: web.Request) -> web.StreamResponse:
        session, form, ok = await self._posted_here(request)
        if not ok:
            raise web.HTTPForbidden(text="sign-in refused: the form is stale or was not posted from this site; "
                                         "open /login again\n")
        token = str(form.get("token", "")).strip()
        if not token or len(token) > MAX_TOKEN or not _BEARER.fullmatch(token):
            return await self._page(request, "login.html", http_status=401, title="Sign in", signed_out=True,
                                    next=local_path(str(form.get("next", ""))),
                                    problem="paste a token: at most 4,096 letters, digits and -._~+/ (no spaces "
                                            "or line breaks inside)")
        assert self.channel is not None
        viewer = Api(self.channel, token)
        try:  # the token's first call: a wrong one is said here, not on the next page
            await viewer(viewer.admin.ListQueues, admin_pb2.ListQueuesRequest())
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNAUTHENTICATED:
                raise
            return await self._page(request, "login.html", http_status=401, title="Sign in", signed_out=True,
                                    next=local_path(str(form.get("next", ""))), problem=err.details())
        session = await new_session(request)  # a fresh session (and CSRF token) for the signed-in viewer
        session["token"], session["csrf"] = token, secrets.token_urlsafe(32)
        raise web.HTTPSeeOther(local_path(str(form.get("next", ""))))

    async def sign_out(self, request: web.Request) -> web.StreamResponse:
        session, _, ok = await self._posted_here(request)
        if ok:
            session.invalidate()
        raise web.HTTPSeeOther("/login")

    # -- pages ------------------------------------------------------------------------------------

    async def queues(self, request: web.Request) -> web.Response:
        api = await self._api(request)
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
        try:
            tenants = {t.name: t for t in (await api(api.admin.ListTenants, admin_pb2.ListTenantsRequest())).tenants}
        except grpc.aio.AioRpcError as err:
            if err.code() not in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.NOT_FOUND):
                raise
            tenants = {}
        summaries = {}
        for name, queue_rows in by_tenant.items():
            summaries[name] = await self._tenant_summary(api, name, tenants.get(name), queue_rows)
        return await self._page(request, "queues.html", title="Queues", tenants=sorted(by_tenant.items()),
                                summaries=summaries)

    async def _tenant_summary(self, api: Api, name: str, tenant: Any, rows: list[dict[str, Any]]) -> dict[str, Any]:
        """A tenant's row above its queues: its weight and quotas, what its top-level queues hold against its
        limit, and how many of its waiting jobs its own limit holds (of the first page of them)."""
        usage: dict[str, int] = {}
        for row in rows:
            if not row["queue"].parent:
                for resource, amount in row["status"].usage.items():
                    usage[resource] = usage.get(resource, 0) + parse_shown(resource, amount)
        limit = {r: parse_shown(r, a) for r, a in (tenant.limit.items() if tenant is not None else [])}
        waiting = await api(api.jobs.ListJobs, jobs_pb2.ListJobsRequest(
            tenant=name, phases=[common_pb2.PENDING], page_size=1000))
        held = sum(f"tenant {name} at limit" in j.status.reason for j in waiting.jobs)
        return {"tenant": tenant, "usage": {r: format_shown(r, v) for r, v in usage.items()},
                "bars": {r: (usage.get(r, 0), limit[r]) for r in sorted(limit)},
                "pending": sum(row["status"].pending for row in rows),
                "running": sum(row["status"].running for row in rows if not row["queue"].parent),
                "held": f"{held}+" if waiting.next_page_token else str(held)}

    async def _job_list(self, request: web.Request) -> dict[str, Any]:
        api = await self._api(request)
        q = request.query
        phases = [common_pb2.JobPhase.Value(p.upper()) for p in q.getall("phase", []) if p.capitalize() in PHASES]
        oldest_first = q.get("order") == "oldest"
        listed = await api(api.jobs.ListJobs, jobs_pb2.ListJobsRequest(
            tenant=q.get("tenant", ""), queue=q.get("queue", ""), phases=phases, page_size=PAGE_SIZE,
            page_token=q.get("page_token", ""), newest_first=not oldest_first, count_phases=True,
            cluster=q.get("cluster", "")))  # filtered by the server: a page of that cluster's jobs
        jobs = list(listed.jobs)
        now = datetime.now(UTC)
        rows = [{"job": j, "gpus": output.gpus(j),
                 "age": (now - j.status.create_time.ToDatetime(UTC)).total_seconds(),  # sorts to the microsecond
                 "ran": _ran(j, now)} for j in jobs]
        # The same reason said once with its count (a busy day has dozens of jobs waiting for the same thing).
        waiting = Counter(j.status.reason for j in jobs if j.status.phase in (common_pb2.PENDING, common_pb2.PREEMPTED)
                          and j.status.reason)
        return {"rows": rows, "next": listed.next_page_token, "filters": dict(q), "phases": PHASES,
                "waiting": sorted(waiting.items(), key=lambda kv: (-kv[1], kv[0])),
                "counts": [(p, listed.phase_counts.get(p, 0)) for p in PHASES], "oldest_first": oldest_first}

    async def jobs(self, request: web.Request) -> web.Response:
        return await self._page(request, "jobs.html", title="Jobs", **await self._job_list(request))

    async def job_rows(self, request: web.Request) -> web.Response:
        return await self._page(request, "job_rows.html", **await self._job_list(request))

    async def job(self, request: web.Request) -> web.Response:
        api = await self._api(request)
        job_id = request.match_info["id"]
        job = await api(api.jobs.GetJob, jobs_pb2.GetJobRequest(id=job_id))
        explained = await api(api.jobs.ExplainJob, jobs_pb2.ExplainJobRequest(id=job_id))
        siblings = sorted((await api(api.jobs.ListJobs, jobs_pb2.ListJobsRequest(
            hyperjob=job.spec.hyperjob.id, include_history=True, page_size=1000))).jobs,
            key=lambda j: j.spec.hyperjob.index) if job.spec.hyperjob.id else []
        return await self._page(request, "job.html", title=job.id, job=job, explained=explained, siblings=siblings,
                                events=await self._timeline(api, job_id),
                                manifest=yaml.safe_dump(output.as_dict(job.spec), sort_keys=False),
                                ended=job.status.phase in ENDED)

    async def cancel(self, request: web.Request) -> web.StreamResponse:
        """Cancel from the job's page: a POST with the session's CSRF token; the API decides who may."""
        _, _, ok = await self._posted_here(request)
        if not ok:
            raise web.HTTPForbidden(text="cancel refused: the form is stale or was not posted from this site\n")
        api = await self._api(request)
        job_id = request.match_info["id"]
        await api(api.jobs.CancelJob, jobs_pb2.CancelJobRequest(id=job_id, reason="cancelled from the dashboard"))
        raise web.HTTPSeeOther(f"/jobs/{job_id}")

    async def logs(self, request: web.Request) -> web.Response:
        """A pod's last lines, read through the federation as `fedctl logs` does (the viewer's token)."""
        api = await self._api(request)
        job_id, task = request.match_info["id"], request.query.get("task", "")
        try:
            index = int(request.query.get("index", "0"))
        except ValueError:
            raise web.HTTPBadRequest(text="index must be a number\n") from None
        stream = api.jobs.GetJobLogs(jobs_pb2.GetJobLogsRequest(id=job_id, task=task, index=index,
                                                                tail_lines=LOG_LINES), metadata=api.metadata,
                                     timeout=30)
        text, cut = await last_lines(stream, LOG_LINES, LOG_PAGE_BYTES, LOG_READ_BYTES)
        return await self._page(request, "logs.html", title=f"Log of {job_id}", job_id=job_id, task=task,
                                index=index, tail=LOG_LINES, text=output.safe_log(text), cut=cut)

    async def _timeline(self, api: Api, job_id: str) -> list[common_pb2.JobEvent]:
        """The job's events so far: its watch replayed from the start, until it has nothing more to say."""
        events: list[common_pb2.JobEvent] = []
        stream = api.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0, job_id=job_id),
                                    metadata=api.metadata)
        try:
            while True:
                async with asyncio.timeout(0.5):
                    event = await stream.read()
                if event is grpc.aio.EOF:
                    break
                events.append(event)
        except TimeoutError:
            pass
        finally:
            stream.cancel()
        return events

    async def clusters(self, request: web.Request) -> web.Response:
        api = await self._api(request)
        clusters = (await api(api.admin.ListClusters, admin_pb2.ListClustersRequest())).clusters
        job = None
        if request.query.get("job"):
            job = await api(api.jobs.GetJob, jobs_pb2.GetJobRequest(id=request.query["job"]))
        rows = []
        for c in clusters:
            unit = GPU if GPU in c.allocatable else "cpu"  # what the heat is measured in: GPUs, where there are
            tiers = []
            for t in c.topology:
                free = parse_shown(unit, t.max_free.get(unit, "0"))
                cap = parse_shown(unit, t.max_capacity.get(unit, "0"))
                tiers.append({"tier": t.tier, "name": t.tier_name, "free": format_shown(unit, free),
                              "capacity": format_shown(unit, cap), "heat": free / cap if cap else 0})
            children: dict[str, list[Any]] = {}
            for h in c.hypernodes:
                free = parse_shown(unit, h.free.get(unit, "0"))
                total = parse_shown(unit, h.allocatable.get(unit, "0"))
                children.setdefault(h.parent, []).append({
                    "name": h.name, "tier": h.tier, "free": format_shown(unit, free),
                    "allocatable": format_shown(unit, total),
                    "heat": free / total if total else 0})
            landed: set[str] = set()  # the HyperNode the job's gang is in, and those above it
            if job is not None and job.status.cluster == c.name:
                parent_of = {h.name: h.parent for h in c.hypernodes}
                at = job.status.hypernode
                while at:
                    landed.add(at)
                    at = parent_of.get(at, "")
            rows.append({"cluster": c, "shares": _share_of(c.used, c.allocatable), "tiers": tiers,
                         "children": children, "landed": landed, "unit": unit, **_nodes_by_free_gpus(c)})
        if job is not None:  # the job's cluster first, where the eye starts
            rows.sort(key=lambda r: r["cluster"].name != job.status.cluster)
        nodes = {p.node for p in job.status.placements} if job is not None else set()
        return await self._page(request, "clusters.html", title="Clusters", rows=rows, job=job, nodes=sorted(nodes),
                          status=admin_pb2.ClusterStatus.Name)

    async def events(self, request: web.Request) -> web.StreamResponse:
        """The job event stream as server-sent events: what the pages refresh on."""
        api = await self._api(request)
        watch = api.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(job_id=request.query.get("job", "")),
                                   metadata=api.metadata)
        await watch.initial_metadata()  # the API answers at once: a watch it refuses is refused before the stream
        if watch.done():
            await watch.read()  # raises the refusal (no token, too many live streams), a page with its status
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
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


def _nodes_by_free_gpus(c: Any) -> dict[str, Any]:
    """The node-level view: how many Ready nodes have each number of GPUs free, most free first, and the most one
    node has free beside the largest node's GPUs ("137 of 256 free" can still hold no 8-GPU pod)."""
    counts = list(c.gpu_free_nodes)
    if not counts:
        return {"free_nodes": [], "largest_free": None, "node_gpus": None}
    total = sum(counts)
    node_gpus = next((parse_shown(GPU, t.max_capacity.get(GPU, "0")) // WHOLE for t in c.topology if t.tier == 0), None)
    return {"free_nodes": [{"free": f, "nodes": n, "ratio": n / total} for f, n in reversed(list(enumerate(counts)))
                           if n],
            "largest_free": len(counts) - 1, "node_gpus": node_gpus or None}


async def last_lines(stream: Any, lines: int, keep: int, read: int) -> tuple[bytes, bool]:
    """The last `lines` lines of a streamed log, holding at most `keep` bytes of it and reading at most `read`
    (then the call is cancelled); and whether the log was cut (longer lines, or more, than a page holds)."""
    tail, seen, cut = bytearray(), 0, False
    async for chunk in stream:
        seen += len(chunk.data)
        tail += chunk.data
        if len(tail) > keep:
            del tail[:len(tail) - keep]
            cut = True
        if seen >= read:
            stream.cancel()
            cut = True
            break
    kept = bytes(tail).split(b"\n")
    if cut and len(kept) > 1:
        kept = kept[1:]  # the first line lost its start
    kept = kept[-lines - (0 if kept[-1] else 1):]  # a log ending in a line break ends in an empty piece
    return b"\n".join(kept), cut
