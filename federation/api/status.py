"""Turning domain errors into gRPC statuses, once, for every servicer method.

Bad input becomes INVALID_ARGUMENT with `google.rpc.BadRequest` field violations; anything
unexpected is logged with its traceback on the server and reaches the client only as INTERNAL.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
import psycopg
import sqlalchemy.exc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from federation.errors import (
    AlreadyExists,
    FailedPrecondition,
    FederationError,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unavailable,
)
from federation.validation import Violation, text_violations

log = logging.getLogger(__name__)

_CODES: dict[type[FederationError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    Unavailable: grpc.StatusCode.UNAVAILABLE,
}


MAX_TEXT = 400  # characters of a message or violation sent back: errors may quote input, of any size


def _short(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


async def abort(context: grpc.aio.ServicerContext, err: FederationError) -> None:
    code = _CODES.get(type(err), grpc.StatusCode.INVALID_ARGUMENT)
    status = status_pb2.Status(code=code.value[0], message=_short(str(err)))
    if isinstance(err, InvalidArgument):
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=_short(v.field), description=_short(v.description))
            for v in err.violations[:MAX_VIOLATIONS]
        ]))
        status.details.append(detail)
    await context.abort_with_status(rpc_status.to_status(status))


MAX_VIOLATIONS = 50


class Undecodable:
    """A request whose bytes are not the message the method takes (garbage, or another message)."""

    def __init__(self, message: str) -> None:
        self.message = message


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # protobuf's DecodeError, or worse: the method answers INVALID_ARGUMENT
            return Undecodable(f"the request is not a valid message ({len(data)} bytes)")
    return decode


def register(add_to_server: Callable[[Any, Any], None], servicer: Any, server: grpc.aio.Server) -> None:
    """Add a servicer as its generated `add_..._to_server` would, but with requests that cannot be decoded
    handed to the method as `Undecodable` (answered INVALID_ARGUMENT) instead of failing inside gRPC
    (INTERNAL or UNKNOWN, naming a Python exception)."""
    class Capture:
        def add_generic_rpc_handlers(self, handlers: Any) -> None:
            pass  # made again below from the method handlers, with tolerant deserializers

        def add_registered_method_handlers(self, name: str, handlers: dict[str, Any]) -> None:
            wrapped = {m: h._replace(request_deserializer=_tolerant(h.request_deserializer))
                       for m, h in handlers.items()}
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(name, wrapped),))
            server.add_registered_method_handlers(name, wrapped)

    add_to_server(servicer, Capture())


class _ClientGone(logging.Filter):
    """gRPC's core logs at ERROR, with a traceback, an answer it could not send because the client had just
    gone (a `fedctl logs -f` ended with Ctrl-C while the next chunk was on its way, before the core saw the
    cancel). Nothing failed on our side: it is said in one line at INFO."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        if said.startswith("ExecuteBatchError raised in core by servicer method"):
            record.msg, record.args = "%s: the client went away before the answer was sent", (said.rsplit(" ", 1)[-1],)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info, record.exc_text = None, None
        return True


logging.getLogger("grpc._cython.cygrpc").addFilter(_ClientGone())


def check_request(request: Any, texts: bool = True) -> None:
    """Refuse, naming the field, a request that could not be decoded or (`texts`) holds a text that breaks the
    one rule set for texts (validation.text_problem: bounded, printable, line breaks only where text spans
    lines). An agent's reports apply the same rule themselves, with an agent's consequences."""
    if isinstance(request, Undecodable):
        raise InvalidArgument([Violation("request", request.message)])
    if texts and isinstance(request, Message):
        bad = text_violations(request)
        if bad:
            raise InvalidArgument(bad)


async def _internal(context: grpc.aio.ServicerContext, method: str) -> None:
    err = sys.exc_info()[1]
    if isinstance(err, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError | psycopg.OperationalError):
        # PostgreSQL unreachable or going away (a primary failing over): nothing was stored, and a retry reaches
        # the promoted standby once the pool reconnects; not a bug, so no traceback.
        log.warning("%s: the database is unavailable: %s", method, str(err).splitlines()[0] if str(err) else err)
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the database is unavailable; retry")
    log.exception("unhandled error in %s", method)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error; the server log has the details")


LARGE_REQUEST = 64 * 1024  # bytes of a request whose texts are checked on a worker thread


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                check_request(request)
                async for item in method(self, request, context):
                    yield item
            except FederationError as err:
                await abort(context, err)
            except (grpc.aio.AbortError, GeneratorExit):
                raise
            except Exception:
                await _internal(context, method.__qualname__)
        return stream

    @functools.wraps(method)
    async def unary(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        try:
            if isinstance(request, Message) and request.ByteSize() > LARGE_REQUEST:
                await asyncio.to_thread(check_request, request)  # every text of a big batch: off the loop
            else:
                check_request(request)
            return await method(self, request, context)
        except FederationError as err:
            await abort(context, err)
        except grpc.aio.AbortError:
            raise
        except Exception:
            await _internal(context, method.__qualname__)
    return unary


T = TypeVar("T", bound=type)


def servicer(cls: T) -> T:
    """Class decorator: every public RPC method of `cls` maps errors to statuses."""
    for name, member in list(vars(cls).items()):
        is_rpc = inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
        if is_rpc and not name.startswith("_"):
            setattr(cls, name, _wrap(member))
    return cls

