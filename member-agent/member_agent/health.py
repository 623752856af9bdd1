"""The agent's health port: /metrics for Prometheus, /healthz (the event loop answers) and /readyz (the
cluster has been read and the federation server heard from), for the kubelet's probes.

Served on the agent's own event loop, so a loop stuck in a long call fails /healthz as it should.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

Readiness = Callable[[], str]  # "" when ready, else why not


async def start(address: str, readiness: Readiness) -> tuple[web.AppRunner, str]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        why = readiness()
        return web.Response(text=f"not ready: {why}\n", status=503) if why else web.Response(text="ok\n")

    app = web.Application()
    app.add_routes([web.get("/metrics", metrics), web.get("/healthz", healthz), web.get("/readyz", readyz)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = address.rpartition(":")
    site = web.TCPSite(runner, host or "0.0.0.0", int(port))
    await site.start()
    sockets = site._server.sockets if site._server else []  # the bound port, when 0 was asked for
    bound = sockets[0].getsockname() if sockets else (host, port)
    return runner, f"{bound[0]}:{bound[1]}"
