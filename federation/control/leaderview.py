"""What the API asks of the scheduling leader: explanations, expected start times, queue status.

Only the process that decides knows the room its last cycle reserved and for whom, what holds each waiting
job, and its start-time forecast. When the scheduler runs in the API's own process (the in-process server the
tests start) it answers itself (`InProcess`); an API front end whose scheduler runs in a process of its own
(`federation-server serve`, whose scheduler is a child process, or `--role api`) calls the leader at the
address the leader published with its lease, with the lease's secret (`Remote`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import grpc
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from federation.errors import NotFound, Unavailable
from federation.v1 import admin_pb2, scheduler_pb2, scheduler_pb2_grpc

log = logging.getLogger(__name__)

SECRET_METADATA = "x-federation-lease-secret"
LEASE_READ_EVERY = 1.0  # seconds a front end trusts the leader's address it read
CALL_TIMEOUT = 30.0  # seconds: an explanation over a thousand clusters takes a while
ATTEMPTS, RETRY_PAUSE = 4, 0.5  # a question asked again while no leader answers, this long apart
NO_LEADER = ("no scheduling leader answers now (one is being elected, or the scheduler process is down); "
             "try again in a few seconds")

Explained = list[tuple[str, str | None]]  # each cluster, and why the job does not fit there now (None: it does)
Starts = dict[str, tuple[datetime, str]]  # job -> when and where it is expected to start


class LeaderView(Protocol):
    async def explain(self, row: Mapping[str, Any], name_holders: bool = False) -> Explained: ...

    async def expected_starts(self, ids: Sequence[str]) -> Starts: ...

    async def queue_status(self, queue: Mapping[str, Any]) -> admin_pb2.QueueStatus: ...


class InProcess:
    """The scheduler of this very process answers (it leads, or the answers are a standby's)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    async def explain(self, row: Mapping[str, Any], name_holders: bool = False) -> Explained:
        result: Explained = await self.scheduler.explain(row, name_holders)
        return result

    async def expected_starts(self, ids: Sequence[str]) -> Starts:
        forecast = self.scheduler.forecast
        return {job_id: forecast[job_id] for job_id in ids if job_id in forecast}

    async def queue_status(self, queue: Mapping[str, Any]) -> admin_pb2.QueueStatus:
        status: admin_pb2.QueueStatus = await self.scheduler.queue_status(queue)
        return status


class Remote:
    """The leader in another process, found through the lease row."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._leader: tuple[str, str] | None = None  # (address, secret) as last read
        self._read_at = float("-inf")

    async def _stub(self) -> tuple[scheduler_pb2_grpc.SchedulerServiceStub, tuple[tuple[str, str], ...]]:
        if time.monotonic() - self._read_at > LEASE_READ_EVERY:
            async with self.engine.connect() as conn:
                row = (await conn.execute(text(
                    "SELECT address, secret FROM leader_lease WHERE id = 1 AND expires_at > now()"))).first()
            self._leader = (row[0], row[1]) if row is not None and row[0] else None
            self._read_at = time.monotonic()
        if self._leader is None:
            raise Unavailable(NO_LEADER)
        address, secret = self._leader
        if address not in self._channels:
            for old in [a for a in self._channels if a != address]:  # a leader before it: gone
                await self._channels.pop(old).close()
            self._channels[address] = grpc.aio.insecure_channel(address)
        return scheduler_pb2_grpc.SchedulerServiceStub(self._channels[address]), ((SECRET_METADATA, secret),)

    async def _call(self, method: str, request: Any, attempts: int = ATTEMPTS) -> Any:
        """Ask the leader; while none answers (a takeover, a late renewal, a restart), ask again a few times."""
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(RETRY_PAUSE)
                self._read_at = float("-inf")  # the lease may have moved: read it again
            try:
                stub, metadata = await self._stub()
                return await getattr(stub, method)(request, metadata=metadata, timeout=CALL_TIMEOUT)
            except Unavailable:
                continue
            except grpc.aio.AioRpcError as err:
                if err.code() == grpc.StatusCode.NOT_FOUND:
                    raise NotFound(err.details() or "not found") from None
                log.info("the scheduling leader at %s did not answer %s: %s", self._leader and self._leader[0],
                         method, err.details())
        raise Unavailable(NO_LEADER)

    async def explain(self, row: Mapping[str, Any], name_holders: bool = False) -> Explained:
        answer = await self._call("ExplainClusters", scheduler_pb2.ExplainClustersRequest(
            job_id=row["id"], name_holders=name_holders))
        return [(c.cluster, None if c.fits else c.reason) for c in answer.clusters]

    async def expected_starts(self, ids: Sequence[str]) -> Starts:
        """An estimate: when the leader cannot be asked, none (never a failed GetJob for it)."""
        if not ids:
            return {}
        try:
            answer = await self._call("ExpectedStarts", scheduler_pb2.ExpectedStartsRequest(job_ids=ids), attempts=1)
        except Unavailable:
            return {}
        return {job_id: (s.time.ToDatetime(tzinfo=UTC), s.cluster)
                for job_id, s in answer.starts.items()}

    async def queue_status(self, queue: Mapping[str, Any]) -> admin_pb2.QueueStatus:
        status: admin_pb2.QueueStatus = await self._call("GetQueueStatus",
                                                         admin_pb2.GetQueueStatusRequest(name=queue["name"]))
        return status

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
