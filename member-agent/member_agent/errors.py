"""The errors a backend raises, which the agent answers."""

from __future__ import annotations


class BindError(Exception):
    """The backend could not bind every pod; it has removed whatever it created. The message names the step
    that failed and what the cluster said. `permanent`: the cluster refused for good (forbidden, invalid, not
    found, denied by an admission webhook or a quota), so trying again cannot help; else it may pass (429,
    5xx, a timeout) and is tried again."""

    def __init__(self, message: str, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
