"""Domain errors raised below the API layer; servicers turn them into gRPC status codes."""

from __future__ import annotations

from federation.validation import Violation


class FederationError(Exception):
    """Base of errors a caller caused; the message is shown to the user as is."""


class InvalidArgument(FederationError):
    def __init__(self, violations: list[Violation]) -> None:
        self.violations = violations
        first = violations[0]
        more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
        super().__init__(f"{first.field}: {first.description}{more}")


class NotFound(FederationError):
    pass


class AlreadyExists(FederationError):
    pass


class FailedPrecondition(FederationError):
    pass


class PermissionDenied(FederationError):
    pass


class ResourceExhausted(FederationError):
    pass


class Unavailable(FederationError):
    """Not here, not now (an agent connected to another replica): the caller may try again."""
