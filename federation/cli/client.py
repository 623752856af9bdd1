"""fedctl's connection to the federation server: its configuration, credentials and TLS, and its errors
said in one line each."""

from __future__ import annotations

import os
import ssl
import sys
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import click
import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from federation.cli import tlsprobe
from federation.cli.yamldoc import ManifestError, load_documents
from federation.security.auth import WARNING_METADATA
from federation.v1 import admin_pb2_grpc, jobs_pb2_grpc

DEFAULT_SERVER = "localhost:50051"


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
