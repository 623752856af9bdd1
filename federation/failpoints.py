"""Named points where a fault test freezes this process, inside the write it is testing.

As etcd's gofail or TiKV's fail-rs: a test starts a real server with `FEDERATION_FAILPOINTS=<name>[,<name>]`
and the process stops itself (SIGSTOP) the first time it reaches that point, e.g. holding the event counter's
row lock inside a submit, as a replica frozen by the kernel, a VM pause or a long GC would. Unset, a point
costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

_armed = {name for name in os.environ.get("FEDERATION_FAILPOINTS", "").split(",") if name}


def reached(name: str) -> None:
    """Stop here if a test armed `name` (once: the process goes on when it is continued)."""
    if name in _armed:
        _armed.discard(name)
        os.kill(os.getpid(), signal.SIGSTOP)
