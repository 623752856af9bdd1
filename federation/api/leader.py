"""SchedulerService: the scheduling leader answers the API front ends (see `federation.control.leaderview`).

Only while this process leads, and only to a caller presenting the secret it published with its lease: a
process that lost the lease, or a stale address, answers UNAVAILABLE and the front end reads the lease again.
"""

from __future__ import annotations

import hmac
from typing import Any

import grpc

from federation.api.status import servicer
from federation.control.leader import Leadership
from federation.control.leaderview import SECRET_METADATA
from federation.control.scheduler import Scheduler
from federation.errors import FailedPrecondition, Unavailable
from federation.store.admin import AdminStore
from federation.store.jobs import JobStore
from federation.store.models import Queue
from federation.store.phases import WAITING_PHASES
from federation.v1 import jobs_pb2, scheduler_pb2, scheduler_pb2_grpc


@servicer
class SchedulerServicer(scheduler_pb2_grpc.SchedulerServiceServicer):
    def __init__(self, scheduler: Scheduler, leadership: Leadership, jobs: JobStore, admin: AdminStore) -> None:
        self.scheduler, self.leadership, self.jobs, self.admin = scheduler, leadership, jobs, admin

    def _check(self, context: grpc.aio.ServicerContext) -> None:
        presented = dict(context.invocation_metadata() or ()).get(SECRET_METADATA, "")
        if not hmac.compare_digest(str(presented), self.leadership.secret) or not self.leadership.is_leader:
            raise Unavailable("this process is not the scheduling leader")

    async def ExplainClusters(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._check(context)
        row = await self.jobs.get(request.job_id)
        if row["phase"] not in WAITING_PHASES:
            raise FailedPrecondition(f"job {row['id']} is not waiting")
        return scheduler_pb2.ExplainClustersResponse(clusters=[
            jobs_pb2.ClusterFit(cluster=cluster, fits=why is None, reason=why or "")
            for cluster, why in await self.scheduler.explain(row, request.name_holders)])

    async def ExpectedStarts(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._check(context)
        answer = scheduler_pb2.ExpectedStartsResponse()
        for job_id in request.job_ids:
            if (found := self.scheduler.forecast.get(job_id)) is not None:
                start = answer.starts[job_id]
                start.time.FromDatetime(found[0])
                start.cluster = found[1]
        return answer

    async def GetQueueStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self._check(context)
        return await self.scheduler.queue_status(await self.admin.get(Queue, request.name))
