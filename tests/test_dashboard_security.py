"""Issue 27 (6): the dashboard as a web application an auditor would pass, against a real server with tokens
(the dashboard tests' site) and, for the cross-site sign-in, a real browser on a page of another origin."""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path

import grpc
import pytest
import requests
from selenium import webdriver
from selenium.webdriver.common.by import By
from sqlalchemy.engine import URL

from federation.api.jobs import MAX_WATCHES_PER_TENANT
from federation.cli.dev import ServerProcess
from federation.security import certs
from federation.ui.server import SESSION_COOKIE, SESSION_SECONDS, http_status
from federation.v1 import jobs_pb2, jobs_pb2_grpc
from tests.conftest import Api
from tests.test_dashboard import Site, browser, site  # noqa: F401  (fixtures)

pytestmark = pytest.mark.e2e


def _csrf(session: requests.Session, ui: str) -> str:
    page = session.get(f"{ui}/login", timeout=30)
    assert page.status_code == 200
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found
    return found.group(1)


def signed_in(ui: str, token: str, next_path: str = "") -> tuple[requests.Session, requests.Response]:
    session = requests.Session()
    csrf = _csrf(session, ui)
    answer = session.post(f"{ui}/login", data={"csrf": csrf, "token": token, "next": next_path},
                          headers={"Origin": ui}, allow_redirects=False, timeout=30)
    return session, answer


def test_sign_in_is_a_post_with_csrf_into_a_hardened_session(site: Site) -> None:  # noqa: F811
    ui, alpha = site.server.dashboard, site.tokens["alpha"]

    # A token in the URL is not taken: it would live on in history and logs, and a link could sign a viewer in.
    by_url = requests.Session()
    page = by_url.get(f"{ui}/login?token={alpha}", timeout=30)
    assert page.status_code == 200 and 'id="by-url"' in page.text
    assert by_url.get(f"{ui}/queues", timeout=30).status_code == 401

    # A post without the session's CSRF token, or from another origin, is refused and signs no one in.
    bare = requests.Session()
    assert bare.post(f"{ui}/login", data={"token": alpha}, allow_redirects=False, timeout=30).status_code == 403
    assert bare.get(f"{ui}/queues", timeout=30).status_code == 401
    foreign = requests.Session()
    csrf = _csrf(foreign, ui)
    refused = foreign.post(f"{ui}/login", data={"csrf": csrf, "token": alpha}, allow_redirects=False, timeout=30,
                           headers={"Origin": "http://evil.example"})
    assert refused.status_code == 403 and foreign.get(f"{ui}/queues", timeout=30).status_code == 401

    # A wrong token is said at once.
    _, wrong = signed_in(ui, "fed_0000000000000000_" + "x" * 43)
    assert wrong.status_code == 401 and "invalid or revoked token" in wrong.text

    # Signed in: a session cookie, encrypted, HttpOnly, SameSite=Strict, expiring; not Secure on loopback HTTP.
    session, answer = signed_in(ui, alpha)
    assert answer.status_code == 303 and answer.headers["Location"] == "/queues"
    cookie = answer.headers["Set-Cookie"]
    assert cookie.startswith(f"{SESSION_COOKIE}=") and alpha not in cookie
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and f"Max-Age={SESSION_SECONDS}" in cookie
    assert "Secure" not in cookie
    queues = session.get(f"{ui}/queues", timeout=30)
    assert queues.status_code == 200 and 'data-tenant="alpha"' in queues.text

    # Redirects after sign-in stay on this site.
    for wanted, went in (("//evil.example/x", "/queues"), ("https://evil.example/", "/queues"),
                         ("/\\evil.example", "/queues"), ("javascript:alert(1)", "/queues"),
                         ("/jobs?phase=Running", "/jobs?phase=Running")):
        _, answer = signed_in(ui, alpha, wanted)
        assert answer.headers["Location"] == went, wanted

    # Every answer carries the security headers: pages, static files, refusals, unknown paths.
    for path in ("/queues", "/static/app.css", "/login", "/jobs/nope", "/no-such-page"):
        headers = session.get(f"{ui}{path}", timeout=30).headers
        csp = headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
        assert "unsafe-inline" not in csp, path
        assert headers["X-Frame-Options"] == "DENY" and headers["X-Content-Type-Options"] == "nosniff", path
        assert headers["Referrer-Policy"] == "same-origin" and headers["Cache-Control"] == "no-store", path
        assert "aiohttp" not in headers.get("Server", ""), path

    # A malformed or tampered cookie is no credential: 401, never a 500.
    for bad in ("garbage", "gAAAAA" + "A" * 200, "x" * 3000, session.cookies[SESSION_COOKIE][:-4] + "AAAA"):
        answer = requests.get(f"{ui}/queues", cookies={SESSION_COOKIE: bad}, timeout=30)
        assert answer.status_code == 401, bad[:20]
    odd = requests.get(f"{ui}/queues", headers={"Cookie": f"{SESSION_COOKIE}=gAAAA\xffA"}, timeout=30)  # byte 0xFF
    assert odd.status_code == 401
    # A token that could not go into a header (a line break pasted inside it) is said to be one, not a 500.
    _, broken = signed_in(ui, alpha[:12] + "\r\n" + alpha[12:])
    assert broken.status_code == 401 and "no spaces or line breaks inside" in broken.text

    # Signing out ends the session.
    csrf = re.search(r'name="csrf" value="([^"]+)"', queues.text)
    assert csrf
    session.post(f"{ui}/logout", data={"csrf": csrf.group(1)}, headers={"Origin": ui}, timeout=30)
    assert session.get(f"{ui}/queues", timeout=30).status_code == 401


def test_live_streams_are_capped_per_tenant(site: Site) -> None:  # noqa: F811
    ui = site.server.dashboard
    alpha, _ = signed_in(ui, site.tokens["alpha"])
    streams = []
    try:
        for _ in range(MAX_WATCHES_PER_TENANT):
            stream = alpha.get(f"{ui}/events", stream=True, timeout=30)
            assert stream.status_code == 200
            streams.append(stream)
        refused = alpha.get(f"{ui}/events", stream=True, timeout=30)
        assert refused.status_code == 429 and "live watches per tenant" in refused.text
        beta, _ = signed_in(ui, site.tokens["beta"])  # another tenant is not held back by alpha's
        other = beta.get(f"{ui}/events", stream=True, timeout=30)
        assert other.status_code == 200
        other.close()
        streams.pop().close()  # one closed, one may open
        for _ in range(50):
            again = alpha.get(f"{ui}/events", stream=True, timeout=30)
            if again.status_code == 200:
                streams.append(again)
                break
            again.close()
        else:
            raise AssertionError("a closed stream's slot never came back")
    finally:
        for stream in streams:
            stream.close()


def test_a_cross_site_form_cannot_sign_a_viewer_in(site: Site, browser: webdriver.Chrome,  # noqa: F811
                                                   tmp_path: Path) -> None:
    """The attack of issue 27 (6): a page elsewhere posts the attacker's token to /login, so the victim would
    then work in the attacker's tenant. The browser sends no session (SameSite=Strict) and the form has no
    CSRF token: refused, and the victim is not signed in."""
    ui = site.server.dashboard
    page = tmp_path / "evil.html"
    page.write_text(f"""<!doctype html><form id="f" method="post" action="{ui}/login">
<input name="token" value="{site.tokens['beta']}"><input name="csrf" value="guessed"></form>
<script>document.getElementById("f").submit();</script>""")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, directory=str(tmp_path), **kwargs)  # type: ignore[arg-type]

        def log_message(self, *args: object) -> None:
            pass

    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        browser.get(f"{ui}/login")  # the victim has been to the dashboard: it holds a session (and CSRF token)
        browser.get(f"http://localhost:{evil.server_address[1]}/evil.html")  # another origin
        for _ in range(50):
            if browser.current_url.startswith(ui):
                break
            browser.implicitly_wait(0.1)
        assert "403" in browser.page_source or "refused" in browser.page_source
        browser.get(f"{ui}/queues")
        assert "401" in browser.find_element(By.ID, "error").text  # not signed in as the attacker
    finally:
        evil.shutdown()


def test_the_dashboard_over_tls_and_never_in_clear_beyond_loopback(db_url: URL, tmp_path: Path) -> None:
    url = db_url.render_as_string(hide_password=False)
    certs.write_all(tmp_path, ["x"])
    with pytest.raises(RuntimeError) as refused:
        ServerProcess("--database-url", url, ui_listen="0.0.0.0:0", secure=True, timeout=30)
    assert "is reachable from other hosts: give --ui-tls-cert and --ui-tls-key" in str(refused.value)
    server = ServerProcess("--database-url", url, "--ui-tls-cert", str(tmp_path / "server.crt"), "--ui-tls-key",
                           str(tmp_path / "server.key"), ui_listen="0.0.0.0:0", secure=True)
    try:
        assert server.dashboard.startswith("https://")
        ui = f"https://localhost:{server.dashboard.rsplit(':', 1)[1]}"
        page = requests.get(f"{ui}/login", verify=str(tmp_path / "ca.crt"), timeout=30)
        assert page.status_code == 200 and "max-age=31536000" in page.headers["Strict-Transport-Security"]
        assert "Secure" in page.headers["Set-Cookie"]
        with pytest.raises(requests.exceptions.ConnectionError):
            requests.get(f"http://localhost:{server.dashboard.rsplit(':', 1)[1]}/login", timeout=30)
    finally:
        server.stop()


async def test_only_a_limit_the_federation_set_is_shown_as_429(api: Api) -> None:
    """gRPC's own RESOURCE_EXHAUSTED (a message over its size) is no rate limit: waiting would not help."""
    async with grpc.aio.insecure_channel(api.address, options=[("grpc.max_receive_message_length", 8)]) as small:
        with pytest.raises(grpc.aio.AioRpcError) as received:
            await jobs_pb2_grpc.JobServiceStub(small).GetVersion(jobs_pb2.GetVersionRequest())
    assert http_status(received.value.code(), received.value.details() or "") == 502
    async with grpc.aio.insecure_channel(api.address, options=[("grpc.max_send_message_length", 8)]) as small:
        with pytest.raises(grpc.aio.AioRpcError) as sent:
            await jobs_pb2_grpc.JobServiceStub(small).GetJob(jobs_pb2.GetJobRequest(id="x" * 64))
    assert http_status(sent.value.code(), sent.value.details() or "") == 413
    assert http_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "submit rate limit: 5 jobs asked, 0 allowed now") == 429
