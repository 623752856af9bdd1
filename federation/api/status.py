"""Turning domain errors into gRPC statuses, once, for every servicer method.

Bad input becomes INVALID_ARGUMENT with `google.rpc.BadRequest` field violations; anything
unexpected is logged with its traceback on the server and reaches the client only as INTERNAL.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
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
)

log = logging.getLogger(__name__)

_CODES: dict[type[FederationError], grpc.StatusCode] = {
    InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    NotFound: grpc.StatusCode.NOT_FOUND,
    AlreadyExists: grpc.StatusCode.ALREADY_EXISTS,
    FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    PermissionDenied: grpc.StatusCode.PERMISSION_DENIED,
    ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


async def abort(context: grpc.aio.ServicerContext, err: FederationError) -> None:
    code = _CODES.get(type(err), grpc.StatusCode.INVALID_ARGUMENT)
    status = status_pb2.Status(code=code.value[0], message=str(err))
    if isinstance(err, InvalidArgument):
        detail = any_pb2.Any()
        detail.Pack(error_details_pb2.BadRequest(field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field=v.field, description=v.description)
            for v in err.violations
        ]))
        status.details.append(detail)
    await context.abort_with_status(rpc_status.to_status(status))


async def _internal(context: grpc.aio.ServicerContext, method: str) -> None:
    log.exception("unhandled error in %s", method)
    await context.abort(grpc.StatusCode.INTERNAL, "internal error; the server log has the details")


def _wrap(method: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.isasyncgenfunction(method):
        @functools.wraps(method)
        async def stream(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
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

