"""Room held for a HyperJob's sub-job (a part of `agent.Agent`): sent here with its `hyperjob` admission check
pending, the gang is placed and its pods' resources booked, not bound, and the federation is told (HELD). The
Assign again with the check READY is the commit: the gang is bound where it was placed. The hold lasts
`hold_seconds`; then, or when the federation takes the sub-job back, the booking is undone.

Level-triggered as the rest of the agent: the commit, a cancel and the deadline each reconcile the job, and
`JobLoop._place` binds from a held room when there is one for the attempt."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from federation.kernel.hyperjob import HELD, hold_state
from federation.v1 import agent_pb2, common_pb2
from member_agent.booking import Booking
from member_agent.model import Desired
from member_agent.placement import Placement

log = logging.getLogger(__name__)


@dataclass
class Room:
    """A sub-job's placement, booked and waiting for the federation's commit."""

    attempt: int
    placement: Placement
    booking: Booking
    timer: asyncio.TimerHandle | None = None
    expired: bool = False


class Rooms:
    """Held rooms (a mixin of `agent.Agent`, whose state it shares)."""

    desired: dict[str, Desired]
    hold_seconds: float
    _rooms: dict[str, Room]
    _report: Callable[[agent_pb2.JobUpdate], None]
    _send_inventory: Callable[[], None]
    _serially: Callable[[str, Coroutine[Any, Any, Any]], Any]
    reconcile_job: Callable[..., Coroutine[Any, Any, int]]

    @staticmethod
    def holds_only(job: common_pb2.Job) -> bool:
        """Whether the federation wants the gang's room held, not yet bound (its HyperJob is not committed)."""
        return hold_state(job.status.admission_checks) in ("PENDING", HELD)

    def hold_room(self, job: common_pb2.Job, attempt: int, placement: Placement, booking: Booking) -> None:
        """Keep the booked placement for the commit, and tell the federation."""
        room = self._rooms[job.id] = Room(attempt, placement, booking)
        room.timer = asyncio.get_running_loop().call_later(self.hold_seconds, self._hold_over, job.id, room)
        self._send_inventory()
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.HELD, hypernode=placement.hypernode, tier=placement.tier,
            reason=f"{len(placement.pods)} pods placed under {placement.hypernode}, held {self.hold_seconds:g} s"))

    def take_room(self, job_id: str, attempt: int) -> Room | None:
        """The room held for this attempt, no longer held (the caller binds it); a room of another attempt, or one
        whose time ran out, is undone."""
        room = self._rooms.get(job_id)
        if room is None or room.attempt != attempt or room.expired:
            self.drop_room(job_id)
            return None
        del self._rooms[job_id]
        if room.timer is not None:
            room.timer.cancel()
        return room

    def drop_room(self, job_id: str) -> None:
        """The federation no longer wants this room: its booking is undone."""
        room = self._rooms.pop(job_id, None)
        if room is not None:
            if room.timer is not None:
                room.timer.cancel()
            room.booking.discard()
            self._send_inventory()

    def _hold_over(self, job_id: str, room: Room) -> None:
        if self._rooms.get(job_id) is not room:
            return
        room.expired = True
        self._serially(job_id, self._give_up(job_id, room))

    async def _give_up(self, job_id: str, room: Room) -> None:
        """The hold's time ran out with no commit: the room goes, and the sub-job back to the federation."""
        if self._rooms.get(job_id) is not room:
            return
        self.drop_room(job_id)
        want = self.desired.get(job_id)
        if want is not None and want.attempt == room.attempt and self.holds_only(want.job):
            del self.desired[job_id]
            log.info("job %s: held its room %g s with no commit; given back", job_id, self.hold_seconds)
            self._report(agent_pb2.JobUpdate(
                job_id=job_id, attempt=room.attempt, type=agent_pb2.REJECTED,
                reason=f"its room was held {self.hold_seconds:g} s and its HyperJob was not committed"))
