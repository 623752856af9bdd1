"""History out of the hot path: jobs that ended a while ago move from `jobs` to `finished_jobs`, and the history is
expired after its retention.

The submit path and the scheduler read `jobs` (its indexes, its pages); a federation that has run ten million
jobs should not make them pay for it. GetJob, ListJobs (`fedctl get jobs --all`), phase counts and the queues'
mean run times read both tables, so an archived job answers as before, only without a place in a queue. Events
stay in the append-only log (read by sequence ranges, whose cost does not grow with it) until the job expires.
On the leader only, every `period` seconds, in batches: two replicas doing it at once would only share the work
(each batch locks its rows and skips the locked).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from federation.control.loop import WakeLoop
from federation.store.jobs import ARCHIVE_BATCH, JobStore

log = logging.getLogger(__name__)

ARCHIVE_AFTER = 3600.0  # seconds after a job ends before it moves to the history
RETENTION = 30 * 24 * 3600.0  # seconds after a job ends before it is deleted (0: kept for ever)
PERIOD = 60.0
BATCHES = 10  # per pass, of ARCHIVE_BATCH each: the rest waits for the next pass


class History:
    def __init__(self, jobs: JobStore, is_leader: Callable[[], bool], archive_after: float = ARCHIVE_AFTER,
                 retention: float = RETENTION, period: float = PERIOD) -> None:
        self.jobs = jobs
        self.is_leader = is_leader
        self.archive_after = archive_after
        self.retention = retention
        self._loop = WakeLoop("history", period, self.tick)
        self.start, self.stop = self._loop.start, self._loop.stop

    async def tick(self) -> None:
        if not self.is_leader():
            return
        moved = expired = 0
        for _ in range(BATCHES):
            done = await self.jobs.archive(self.archive_after)
            moved += done
            if done < ARCHIVE_BATCH:
                break
        if self.retention:
            for _ in range(BATCHES):
                done = await self.jobs.expire(self.retention)
                expired += done
                if done < ARCHIVE_BATCH:
                    break
        if moved or expired:
            log.info("history: %d ended jobs moved out of the live tables, %d expired", moved, expired)
