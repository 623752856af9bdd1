"""Why fedctl could not talk to the server, by cause, when gRPC only says UNAVAILABLE.

gRPC reports a refused connection, a server certificate signed by another CA, one for another name, an
expired one and a client certificate the server refused all alike ("failed to connect to all addresses").
So on UNAVAILABLE fedctl connects once more itself with Python's `ssl`, as gRPC would (same CA, client
certificate and host name, ALPN h2), and says which of these it was.
"""

from __future__ import annotations

import socket
import ssl
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

# OpenSSL's X509_V_ERR_* codes, in the user's words.
_VERIFY = {
    2: "is not signed by the CA in {ca}", 18: "is self-signed, not signed by the CA in {ca}",
    19: "is not signed by the CA in {ca}", 20: "is not signed by the CA in {ca}",
    21: "is not signed by the CA in {ca}", 9: "is not valid yet", 10: "has expired",
}
_ALERTS = {
    "CERTIFICATE_REQUIRED": "the server requires a client certificate: give --cert and --key (or cert:/key: in "
                            "the config file)",
    "CERTIFICATE_EXPIRED": "the server refused the client certificate {cert}: it has expired",
    "UNKNOWN_CA": "the server refused the client certificate {cert}: it is not signed by a CA the server trusts "
                  "(its --client-ca)",
    "BAD_CERTIFICATE": "the server refused the client certificate {cert}",
    "HANDSHAKE_FAILURE": "the TLS handshake failed (the server may require a client certificate: --cert, --key)",
}


def host_port(target: str) -> tuple[str, int]:
    """HOST:PORT of a gRPC target (`dns:///h:p`, `ipv4:h:p`, `[v6]:p`); the first address of a list."""
    for scheme in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        if target.startswith(scheme):
            target = target[len(scheme):]
            break
    target = target.split(",", 1)[0]
    host, _, port = target.rpartition(":")
    return host.strip("[]") or "localhost", int(port or 443)


def diagnose(server: str, ca: str = "", cert: str = "", key: str = "", timeout: float = 5) -> str | None:
    """One line naming why a connection to `server` fails, or None if this probe finds nothing wrong."""
    try:
        host, port = host_port(server)
        raw = socket.create_connection((host, port), timeout)
    except (OSError, ValueError) as err:
        reason = getattr(err, "strerror", None) or str(err) or type(err).__name__
        return f"cannot reach the federation server at {server} ({reason}); is it running? " \
               "(set --server or FEDERATION_SERVER)"
    with raw:
        if not ca:
            return _plaintext(raw, server)
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(Path(ca).expanduser()))
        context.set_alpn_protocols(["h2"])
        if cert and key:
            context.load_cert_chain(str(Path(cert).expanduser()), str(Path(key).expanduser()))
        try:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3 refuses a client certificate after the handshake, so send the HTTP/2 preface: a gRPC
                # server that accepted us answers with its SETTINGS; one that did not closes (or alerts).
                tls.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
                if tls.recv(1) == b"":
                    return _refused(cert)
        except ssl.SSLCertVerificationError as err:
            if err.verify_code in (62, 64):  # X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
                return f"the server's certificate does not name {host}: connect by a name it holds (--server)"
            words = _VERIFY.get(err.verify_code, err.verify_message)
            return f"the server's certificate {words.format(ca=ca)}"
        except ssl.SSLError as err:
            reason = err.reason or ""
            if "WRONG_VERSION_NUMBER" in reason or "RECORD_LAYER" in reason or "PACKET_LENGTH" in reason:
                return f"the server at {server} does not speak TLS (is it run with --insecure-dev?): drop --ca"
            for alert, words in _ALERTS.items():
                if alert in reason:
                    return words.format(cert=cert or "(none)")
            return f"TLS to {server} failed: {reason or err}"
        except (OSError, TimeoutError):
            return None
    return None


def _refused(cert: str) -> str:
    """The server ended the connection right after the handshake: what it had against our certificate."""
    if not cert:
        return _ALERTS["CERTIFICATE_REQUIRED"]
    try:
        expires = x509.load_pem_x509_certificate(Path(cert).expanduser().read_bytes()).not_valid_after_utc
    except (OSError, ValueError):
        return f"the server refused the client certificate {cert}: it is not a readable PEM certificate"
    if expires <= datetime.now(UTC):
        return _ALERTS["CERTIFICATE_EXPIRED"].format(cert=cert)
    return _ALERTS["UNKNOWN_CA"].format(cert=cert)


def _plaintext(raw: socket.socket, server: str) -> str | None:
    """A plaintext client: if the server answers a TLS hello, it wants TLS."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with context.wrap_socket(raw):
            return f"the server at {server} speaks TLS: give its CA with --ca (or ca: in the config file)"
    except (OSError, ssl.SSLError):
        return None
