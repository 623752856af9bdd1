"""A gang waiting while NVIDIA's MIG manager cuts idle GPUs into the slices it needs (a part of
`agent.Agent`)."""

from __future__ import annotations

import asyncio
import logging

from federation.kernel.gangs import minimum
from federation.v1 import agent_pb2, common_pb2
from member_agent import mig
from member_agent.errors import BindError
from member_agent.model import Preparing
from member_agent.placement import GangRequest

log = logging.getLogger(__name__)


class MigPreparation:
    """MIG repartitioning for a gang (a part of `agent.Agent`)."""

    async def _repartition(self, job: common_pb2.Job, attempt: int, rejected: str, request: GangRequest
                           ) -> str | None:
        """A gang that does not fit for want of MIG slices waits here while idle MIG-capable GPUs are cut into
        them (said to the federation); None while it waits, else why it is rejected after all."""
        prep = self._preparing.get(job.id)
        if prep is not None and prep.attempt == attempt:
            nodes = {n: self.state.topology.nodes[n].labels for n in prep.layouts if n in self.state.topology.nodes}
            failed = sorted(n for n, labels in nodes.items() if labels.get(mig.STATE_LABEL) == mig.FAILED)
            busy = sorted(n for n, labels in nodes.items() if mig.reconfiguring(labels))
            if not failed and busy and not prep.expired:
                return None
            self._stop_preparing(job.id)
            if failed:
                return f"{rejected}; NVIDIA's MIG manager failed to repartition node(s) {', '.join(failed)}"
            if busy:
                return (f"{rejected}; node(s) {', '.join(busy)} did not report their new MIG layout within "
                        f"{self.mig_wait:g} s")
            return f"{rejected} (after repartitioning {prep.said})"
        wanted = minimum(job.spec)
        layouts = mig.plan_for(wanted, self.state, request.highest_tier if request.mode == "hard" else None)
        if layouts is None:
            return rejected
        nodes = self.state.topology.nodes
        try:  # a node being cut into it already is waited for as it is (relabelling it could undo its success)
            await self.backend.repartition({n: c for n, c in layouts.items()
                                            if nodes[n].labels.get(mig.CONFIG_LABEL) != c})
        except BindError as err:
            return f"{rejected}; repartitioning GPUs for it failed: {err}"
        for node in layouts:  # nothing new goes there while it is cut (its labels will say so too)
            self.state.set_ready(node, False)
        self._preparing[job.id] = prep = Preparing(attempt, layouts)

        def expire() -> None:
            prep.expired = True
            self._serially(job.id, self.reconcile_job(job.id))

        prep.timer = asyncio.get_running_loop().call_later(self.mig_wait, expire)
        asked = ", ".join(f"{a} {r}" for r, a in sorted(wanted.items()) if mig.profile_of(r))
        log.info("job %s: repartitioning %s for %s", job.id, prep.said, asked)
        self._report(agent_pb2.JobUpdate(
            job_id=job.id, attempt=attempt, type=agent_pb2.PREPARING,
            reason=f"NVIDIA's MIG manager is repartitioning {prep.said} for its {asked}; it is placed "
                   "when they report their new layout"))
        return None

    def _stop_preparing(self, job_id: str) -> Preparing | None:
        prep = self._preparing.pop(job_id, None)
        if prep is not None and prep.timer is not None:
            prep.timer.cancel()
        return prep
