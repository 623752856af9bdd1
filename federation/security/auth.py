"""Who is calling: bearer tokens on the user API, the caller's rights, and per-token submit rates.

A token reads `fed_<id>_<secret>`. Only the SHA-256 of the secret is stored: the secret is 256
random bits, so a fast hash is enough (as for GitHub's or Kubernetes' bootstrap tokens) and a
leaked table grants nothing. The id finds the row without scanning.

The servicers learn the caller from `current()`: the interceptor authenticates each call before
its handler runs and sets the caller for that call's task only.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import re
import secrets
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import grpc

from federation.errors import NotFound, PermissionDenied, ResourceExhausted

TOKEN = re.compile(r"fed_([0-9a-f]{16})_([A-Za-z0-9_-]{43})")
CACHE_SECONDS = 10.0  # how long a verified token is trusted before its row is read again
CACHE_ENTRIES = 10_000  # forged ids must not grow the cache without bound


@dataclass(frozen=True)
class Principal:
    name: str  # "token <id> (<name>)": what the audit log records
    tenant: str | None  # None: not bound to a tenant (admins)
    admin: bool

    def sees(self, tenant: str) -> bool:
        return self.admin or self.tenant == tenant


INSECURE_DEV = Principal("insecure-dev", None, True)  # every caller, when the server runs with --insecure-dev
WARNING_METADATA = "x-federation-warning"  # trailing metadata a client shows its user (as kubectl shows Warning:)
INSECURE_DEV_WARNING = ("the server runs with --insecure-dev: your token was not checked, and you act as an admin "
                        "over every tenant")
NOBODY = Principal("nobody", None, False)  # sees nothing: what a call no interceptor vouched for gets
_current: contextvars.ContextVar[Principal] = contextvars.ContextVar("principal", default=NOBODY)


def current() -> Principal:
    """The caller of the RPC being served."""
    return _current.get()


async def insecure_dev(header: str | None) -> Principal:
    """The authenticator of --insecure-dev: whoever calls is an admin."""
    return INSECURE_DEV


def require_sees(tenant: str, what: str) -> None:
    """NOT_FOUND, worded as for what does not exist, unless the caller may see `tenant`'s `what`."""
    if not current().sees(tenant):
        raise NotFound(f"{what} not found")


def require_admin() -> Principal:
    principal = current()
    if not principal.admin:
        raise PermissionDenied("this needs an admin token")
    return principal


def new_token() -> tuple[str, str, str]:
    """A fresh token: (id, the bearer token to hand out once, the SHA-256 to store)."""
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    return token_id, f"fed_{token_id}_{secret}", digest(secret)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class TokenRow:
    id: str
    name: str
    tenant: str | None
    admin: bool
    secret_sha256: str
    expires_at: datetime | None
    revoked_at: datetime | None


class Authenticator:
    """Checks bearer tokens against their stored hashes, trusting a checked token for a few seconds.

    Revoking through this replica forgets the token at once; other replicas notice within
    `cache_seconds`. Expiry is checked on every call.
    """

    def __init__(self, load: Callable[[str], Awaitable[TokenRow | None]], cache_seconds: float = CACHE_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 jwt_verifier: Callable[[str], Principal | str] | None = None) -> None:
        self.load = load
        self.jwt_verifier = jwt_verifier  # OIDC: bearer values that are JWTs go here
        self.cache_seconds = cache_seconds
        self.clock = clock
        self._cache: dict[str, tuple[float, TokenRow | None]] = {}

    def forget(self, token_id: str) -> None:
        self._cache.pop(token_id, None)

    async def authenticate(self, header: str | None) -> Principal | str:
        """The caller, or why not (the same words whether the token is unknown, wrong or revoked)."""
        scheme, _, value = (header or "").strip().partition(" ")
        value = value.strip() if scheme.lower() == "bearer" else ""
        match = TOKEN.fullmatch(value)
        if match is None:
            if self.jwt_verifier is not None and value.count(".") == 2:
                return self.jwt_verifier(value)
            return "missing or malformed bearer token (authorization: Bearer fed_...)"
        token_id, secret = match.groups()
        cached = self._cache.get(token_id)
        if cached is None or self.clock() - cached[0] > self.cache_seconds:
            cached = (self.clock(), await self.load(token_id))
            if len(self._cache) >= CACHE_ENTRIES:
                self._cache.clear()
            self._cache[token_id] = cached
        row = cached[1]
        if row is None or row.revoked_at is not None or not hmac.compare_digest(row.secret_sha256, digest(secret)):
            return "invalid or revoked token"
        if row.expires_at is not None and row.expires_at <= datetime.now(UTC):
            return "token expired"
        label = f"token {row.id}" + (f" ({row.name})" if row.name else "")
        return Principal(label, row.tenant, row.admin)


class TenantSlots:
    """At most `most` live calls of one kind (watches, log reads) per tenant on this replica; admins, who pass
    no tenant, are not capped. `refusal` is what the one too many is told."""

    def __init__(self, most: int, refusal: str) -> None:
        self.most, self.refusal = most, refusal
        self._held: Counter[str] = Counter()

    @contextlib.contextmanager
    def slot(self, tenant: str | None) -> Iterator[None]:
        if tenant is not None and self._held[tenant] >= self.most:
            raise ResourceExhausted(self.refusal)
        if tenant is not None:
            self._held[tenant] += 1
        try:
            yield
        finally:
            if tenant is not None:
                self._held[tenant] -= 1
                if not self._held[tenant]:
                    del self._held[tenant]


class RateLimiter:
    """Jobs each token may submit: `rate` per second on average, `burst` at once (a token bucket)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # principal -> (tokens, when)

    def take(self, principal: Principal, jobs: int) -> None:
        if self.rate <= 0 or principal is INSECURE_DEV:
            return
        now = self.clock()
        tokens, when = self._buckets.get(principal.name, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - when) * self.rate)
        if jobs > tokens:
            self._buckets[principal.name] = (tokens, now)
            wait = (jobs - tokens) / self.rate
            raise ResourceExhausted(f"submit rate limit: {jobs} jobs asked, {int(tokens)} allowed now "
                                    f"({self.rate:g}/s, burst {self.burst}); retry in {wait:.1f}s")
        self._buckets[principal.name] = (tokens - jobs, now)


class AuthInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates every call to the protected services and makes the caller `current()` for it."""

    def __init__(self, authenticate: Callable[[str | None], Awaitable[Principal | str]],
                 services: tuple[str, ...]) -> None:
        self.authenticate = authenticate
        self.prefixes = tuple(f"/{s}/" for s in services)

    async def intercept_service(self, continuation: Callable[[Any], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(self.prefixes):
            return handler
        header = next((v for k, v in details.invocation_metadata or () if k == "authorization"), None)
        authenticate = self.authenticate

        async def who(context: grpc.aio.ServicerContext) -> Principal:
            principal = await authenticate(header if isinstance(header, str) else None)
            if isinstance(principal, str):
                await context.abort(grpc.StatusCode.UNAUTHENTICATED, principal)
            assert isinstance(principal, Principal)
            if principal is INSECURE_DEV and header is not None:  # the caller thinks its token counts: say not
                context.set_trailing_metadata(((WARNING_METADATA, INSECURE_DEV_WARNING),))
            return principal

        if handler.unary_unary is not None:
            inner = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                _current.set(await who(context))
                return await inner(request, context)

            return grpc.unary_unary_rpc_method_handler(unary, handler.request_deserializer,
                                                       handler.response_serializer)
        if handler.unary_stream is not None:
            inner_stream = handler.unary_stream

            async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                _current.set(await who(context))
                async for item in inner_stream(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(stream, handler.request_deserializer,
                                                        handler.response_serializer)
        raise RuntimeError(f"{details.method}: streaming requests are not expected on a protected service")
