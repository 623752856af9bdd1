"""Issue 27 (9): TLS failures named by their cause, on both sides. fedctl against a real server with TLS and
client certificates (and a server whose certificate has expired); federation-server given a certificate and a
key that do not belong together, or files that are not PEM."""

from __future__ import annotations

import datetime as dt
import re
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from sqlalchemy.engine import URL

from federation.cli.dev import BIN, ServerProcess
from federation.security import certs
from tests.processes import fedctl


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    ca = certs.make_ca()
    ca.write(d, "ca")
    certs.issue(ca, "federation-server", ["federation-server", "localhost"]).write(d, "server")
    certs.issue(ca, "alice").write(d, "alice")
    other = certs.make_ca(common_name="someone else's CA")
    other.write(d, "other-ca")
    certs.issue(other, "mallory").write(d, "mallory")
    certs.issue(ca, "bob", days=-1, since=dt.timedelta(days=30)).write(d, "bob-expired")
    return d


@pytest.fixture(scope="module")
def mtls_server(pki: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("pg")
    server = ServerProcess("--data-dir", str(data), "--auto-migrate", "--tls-cert", str(pki / "server.crt"),
                           "--tls-key", str(pki / "server.key"), "--client-ca", str(pki / "ca.crt"),
                           "--metrics-listen", "", secure=True)
    yield server
    server.stop()


def _fails(result: subprocess.CompletedProcess[str]) -> str:
    """fedctl's own message, alone: no traceback, and none of gRPC's C-core log lines before it."""
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    core = [line for line in result.stderr.splitlines() if re.match(r"[EWIF]\d{4} |WARNING: All log messages", line)]
    assert not core, result.stderr
    return result.stderr


def test_fedctl_names_each_tls_failure(mtls_server: ServerProcess, pki: Path) -> None:
    port = mtls_server.address.rsplit(":", 1)[1]
    at = f"localhost:{port}"
    ca, other = str(pki / "ca.crt"), str(pki / "other-ca.crt")
    alice = ("--cert", str(pki / "alice.crt"), "--key", str(pki / "alice.key"))
    mallory = ("--cert", str(pki / "mallory.crt"), "--key", str(pki / "mallory.key"))
    cases = {
        "plaintext to TLS": ((at, "list", "jobs"), "speaks TLS: give its CA with --ca"),
        "another CA": ((at, "--ca", other, *alice, "list", "jobs"),
                       f"the server's certificate is not signed by the CA in {other}"),
        "a name not in the certificate": ((f"127.0.0.1:{port}", "--ca", ca, *alice, "list", "jobs"),
                                          "the server's certificate does not name 127.0.0.1"),
        "no client certificate": ((at, "--ca", ca, "list", "jobs"), "the server requires a client certificate"),
        "a stranger's client certificate": ((at, "--ca", ca, *mallory, "list", "jobs"),
                                            "the server refused the client certificate"),
        "an expired client certificate": ((at, "--ca", ca, "--cert", str(pki / "bob-expired.crt"), "--key",
                                           str(pki / "bob-expired.key"), "list", "jobs"), "it has expired"),
    }
    for what, ((server, *args), expected) in cases.items():
        stderr = _fails(fedctl(server, *args))
        assert expected in stderr, (what, stderr)
        assert "is it running" not in stderr, what
    # With everything right, the only complaint left is the missing token: TLS itself worked.
    assert "UNAUTHENTICATED" in _fails(fedctl(at, "--ca", ca, *alice, "list", "jobs"))


def test_fedctl_names_an_expired_server_certificate_and_a_server_without_tls(pki: Path) -> None:
    ca = certs.Pair((pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes())
    expired = certs.issue(ca, "old", ["localhost"], days=-1, since=dt.timedelta(days=30))
    expired.write(pki, "expired")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki / "expired.crt", pki / "expired.key")
    listener = socket.create_server(("127.0.0.1", 0))
    plain = socket.create_server(("127.0.0.1", 0))

    def serve(sock: socket.socket, tls: bool) -> None:
        for _ in range(2):  # fedctl's own try, then its probe
            conn, _ = sock.accept()
            try:
                if tls:
                    context.wrap_socket(conn, server_side=True).close()
                else:
                    conn.recv(1024)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            except (OSError, ssl.SSLError):
                pass
            finally:
                conn.close()

    threads = [threading.Thread(target=serve, args=(s, s is listener), daemon=True) for s in (listener, plain)]
    for t in threads:
        t.start()
    try:
        stderr = _fails(fedctl(f"localhost:{listener.getsockname()[1]}", "--ca", str(pki / "ca.crt"), "list", "jobs"))
        assert "the server's certificate has expired" in stderr, stderr
        stderr = _fails(fedctl(f"127.0.0.1:{plain.getsockname()[1]}", "--ca", str(pki / "ca.crt"), "list", "jobs"))
        assert "does not speak TLS" in stderr, stderr
    finally:
        listener.close()
        plain.close()


def test_the_server_names_a_bad_certificate_or_key(pki: Path, tmp_path: Path, db_url: URL) -> None:
    ca = certs.Pair((pki / "ca.crt").read_bytes(), (pki / "ca.key").read_bytes())
    certs.issue(ca, "old", ["localhost"], days=-1, since=dt.timedelta(days=30)).write(tmp_path, "expired")
    (tmp_path / "garbage.pem").write_text("not a certificate\n")
    url = db_url.render_as_string(hide_password=False)
    cases = {
        "a key of another certificate": (pki / "server.crt", pki / "alice.key",
                                         f"{pki / 'alice.key'} is not the private key of {pki / 'server.crt'}"),
        "not PEM": (tmp_path / "garbage.pem", pki / "server.key", f"{tmp_path / 'garbage.pem'}: not a PEM certificate"),
        "a key that is not PEM": (pki / "server.crt", tmp_path / "garbage.pem",
                                  f"{tmp_path / 'garbage.pem'}: not a PEM private key"),
        "expired": (tmp_path / "expired.crt", tmp_path / "expired.key", "the certificate expired on "),
    }
    for what, (cert, key, expected) in cases.items():
        run = subprocess.run([str(BIN / "federation-server"), "serve", "--listen", "127.0.0.1:0", "--metrics-listen",
                              "", "--database-url", url, "--tls-cert", str(cert), "--tls-key", str(key)],
                             capture_output=True, text=True, timeout=60)
        assert run.returncode == 1 and "Traceback" not in run.stderr, (what, run.stderr)
        assert expected in run.stderr and "address is in use" not in run.stderr, (what, run.stderr)
    expired_at = x509.load_pem_x509_certificate((tmp_path / "expired.crt").read_bytes()).not_valid_after_utc
    assert expired_at < dt.datetime.now(dt.UTC)
