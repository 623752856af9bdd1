"""What a cluster that sent a job back keeps it from: being offered that job again until the cluster changed.

A rejection is the agent's verdict on the cluster as it was when it tried. It stays true while the cluster's
inventory stays as it was, and no longer: a fixed memory either sends the job back to a cluster that will refuse
it again, or keeps it from room freed for it (the room a reclaim made, a link healed) until the time is up. So a
rejection holds until the cluster reports an inventory other than the one last read before the rejection (what
the agent's inventory says includes the gangs it keeps nodes for). Under that, a floor: each rejection of the same
waiting job by the same cluster doubles the time it holds whatever changes (from `FLOOR` to at most `CEILING`
seconds), as Kueue's requeue backoff does, so a busy cluster whose inventory changes every second is not asked
every second about a job it keeps refusing. A cluster that gave a job back because its pods did not start in time
(`put` with `hold`) is passed over for that long whatever it reports: its inventory says nothing of images that
never arrive, and the job must come back to it when no other cluster takes it. Pure: the caller gives the clock and
each cluster's inventory version.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass

FLOOR = 1.0  # seconds the first rejection of a job by a cluster holds, whatever the cluster reports
CEILING = 60.0  # the most the floor doubles to


@dataclass
class _Held:
    why: str
    until: float  # the floor's end
    inventory: int | None  # the cluster's inventory version last read before the rejection (or first after it)
    timed: bool = False  # holds until `until` only, whatever the cluster reports


class Rejections:
    """(job, cluster) -> the cluster's reason, while it holds."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], _Held] = {}
        self._count: dict[tuple[str, str], int] = {}  # rejections of a waiting job by a cluster so far

    def put(self, job_id: str, cluster: str, why: str, now: float, hold: float | None = None,
            seen: int | None = None) -> None:
        """`seen`: the cluster's inventory version read last before the rejection was made, when known (else the
        first given after it is the rejection's baseline, and a change in between goes unnoticed)."""
        key = (job_id, cluster)
        if hold is not None:
            self._held[key] = _Held(why, now + hold, None, timed=True)
            return
        count = self._count[key] = self._count.get(key, 0) + 1
        self._held[key] = _Held(why, now + min(FLOOR * 2 ** (count - 1), CEILING), seen)

    def live(self, now: float, inventories: Mapping[str, int] | None = None,
             waiting: Container[str] | None = None) -> dict[tuple[str, str], str]:
        """The rejections that hold. `inventories`: each Ready cluster's inventory version now (one left out
        changes nothing); a rejection's baseline is the first it is given after it was put. `waiting`: the jobs
        still waiting (the others' rejections and counts are forgotten)."""
        if waiting is not None:
            self._count = {k: n for k, n in self._count.items() if k[0] in waiting}
        kept: dict[tuple[str, str], _Held] = {}
        for key, held in self._held.items():
            if waiting is not None and key[0] not in waiting:
                continue
            if held.timed:
                if now < held.until:
                    kept[key] = held
                continue
            now_seen = (inventories or {}).get(key[1])
            if held.inventory is None:
                held.inventory = now_seen
            elif now_seen is not None and now_seen != held.inventory and now >= held.until:
                continue  # the cluster changed since, and the floor has passed
            kept[key] = held
        self._held = kept
        return {key: held.why for key, held in kept.items()}
