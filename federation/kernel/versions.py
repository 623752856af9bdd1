"""Which member agents a server serves: those of its own minor release and of the one before it.

Servers and agents upgrade one at a time, never together: servers first, then each member cluster's agent, as
Kubernetes upgrades its API servers before its kubelets (its version skew policy). An agent more than one minor
release behind, or newer than the server, is refused at registration with a message saying what to upgrade,
instead of meeting messages it cannot read. The stream's messages change only compatibly within that window
(fields added, none reused); a change that cannot be read by the release before waits a release.
"""

from __future__ import annotations

import re

RELEASE = "0.2.0"  # this release: the server's and the agent's (pyproject.toml's version says the same)
SKEW = 1  # minor releases an agent may be behind its server

_RELEASE = re.compile(r"v?(\d+)\.(\d+)(?:\.\d+)?(?:[-+].*)?")


def minor(version: str) -> tuple[int, int] | None:
    """(major, minor) of a release such as 0.2.0 or v0.2.1-rc.1; None for anything else (a development build)."""
    found = _RELEASE.fullmatch(version.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def agent_refused(agent: str, server: str = RELEASE) -> str | None:
    """Why a server of release `server` refuses an agent of release `agent`; None when it serves it. An agent
    that names no release (a development build, a test's client) is served."""
    theirs, ours = minor(agent), minor(server)
    if theirs is None or ours is None or theirs == ours:
        return None
    oldest = (ours[0], ours[1] - SKEW)
    if theirs > ours:
        return f"agent release {agent} is newer than this server's ({server}): upgrade the servers first"
    if theirs < oldest:
        return (f"agent release {agent} is too old for this server ({server}), which serves agents of release "
                f"{oldest[0]}.{max(oldest[1], 0)} and later: upgrade the agent")
    return None
