"""The drift alarm: where what a member agent says its gangs hold and what the federation believes runs in
its cluster disagree, for longer than reconciliation takes to settle it.

Pure: the caller gives the clock. A difference of a moment is normal (a gang bound whose Running update
is in flight, one stopped whose inventory is on its way); one that outlasts `after` seconds means a job
the federation counts that the cluster does not run, or pods it runs that no job accounts for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from federation.kernel.resources import SHARE, Resources, base, format_amount


def difference(reported: Mapping[str, int], believed: Mapping[str, int]) -> Resources:
    """Reported minus believed, for every resource where they differ. GPU shares are left out: a `gpu-memory` ask
    counts as whole devices in the federation and as the share its node's device memory gives it in the agent,
    and whole devices are compared anyway."""
    out = {r: reported.get(r, 0) - believed.get(r, 0) for r in reported.keys() | believed.keys() if base(r) != SHARE}
    return {r: d for r, d in sorted(out.items()) if d}


def signed(drift: Mapping[str, int]) -> dict[str, str]:
    """A drift as quantities with their sign ("+16", "-8"), for people."""
    return {r: ("+" if d > 0 else "-") + format_amount(r, abs(d)) for r, d in sorted(drift.items())}


@dataclass
class DriftWatch:
    after: float  # seconds a difference must last to be drift
    _since: dict[str, tuple[float, Resources]] = field(default_factory=dict)  # cluster -> first seen, difference

    def observe(self, cluster: str, diff: Resources, now: float) -> Resources:
        """The cluster's drift now: its difference if the same difference has lasted `after` seconds, else none.
        A difference that changes starts its time again (work moving is not drift)."""
        if not diff:
            self._since.pop(cluster, None)
            return {}
        seen = self._since.get(cluster)
        if seen is None or seen[1] != diff:
            self._since[cluster] = seen = (now, diff)
        return diff if now - seen[0] >= self.after else {}

    def forget(self, cluster: str) -> None:
        self._since.pop(cluster, None)
