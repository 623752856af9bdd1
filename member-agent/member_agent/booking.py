"""A change of a gang's pods booked on the cluster state as one (Volcano's Statement, Armada's node-database
transactions): pods' resources taken or given back at once, so that a placement made meanwhile sees them, then kept
together (`commit`) or undone together (`discard`; on leaving a `with` block, unless committed). It replaces the
allocate and release calls each path used to pair by hand, and the trials that changed the state and put it back."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType

from federation.kernel.resources import Resources
from member_agent.placement import PodPlacement
from member_agent.state import ClusterState


class Booking:
    def __init__(self, state: ClusterState, requests: Mapping[str, Resources], gang: int = 1) -> None:
        """`requests`: one pod's, per task; `gang`: the gang's pods, as the pod mix counts them."""
        self.state, self.requests, self.gang = state, requests, gang
        self._done: list[tuple[PodPlacement, int]] = []  # what to undo, in order: (pod, 1 booked or -1 freed)

    def book(self, pods: Sequence[PodPlacement]) -> Booking:
        """Take these pods' resources on their nodes."""
        for pod in pods:
            self.state.allocate(pod.node, self.requests[pod.task], 1, pod.devices, pod.share, self.gang)
            self._done.append((pod, 1))
        return self

    def free(self, pods: Sequence[PodPlacement]) -> Booking:
        """Give these pods' resources back."""
        for pod in pods:
            self.state.release(pod.node, self.requests[pod.task], pod.devices, pod.share)
            self._done.append((pod, -1))
        return self

    def commit(self) -> None:
        """Keep what was booked and freed."""
        self._done.clear()

    def discard(self) -> None:
        """Undo what was booked and freed, last first: the state is as it was."""
        for pod, sign in reversed(self._done):
            if sign > 0:
                self.state.release(pod.node, self.requests[pod.task], pod.devices, pod.share)
            else:
                self.state.allocate(pod.node, self.requests[pod.task], 1, pod.devices, pod.share, self.gang)
        self._done.clear()

    def __enter__(self) -> Booking:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.discard()
