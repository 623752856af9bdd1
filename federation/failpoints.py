"""Named points where a fault test freezes this process, inside the write it is testing.

As etcd's gofail or TiKV's fail-rs: a test starts a real server with `FEDERATION_FAILPOINTS=<name>[,<name>]`
and the process stops itself (SIGSTOP) the first time it reaches that point, e.g. holding the event counter's
row lock inside a submit, as a replica frozen by the kernel, a VM pause or a long GC would. `<name>=busy(S)`
computes in pure Python for S seconds there instead, as a long decision over a large backlog would (gofail's
`sleep` that holds the interpreter). Unset, a point costs one dictionary lookup.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import time

log = logging.getLogger(__name__)
_BUSY = re.compile(r"busy\((\d+(?:\.\d+)?)\)")
_armed = dict(item.partition("=")[::2] for item in os.environ.get("FEDERATION_FAILPOINTS", "").split(",") if item)


def reached(name: str) -> None:
    """Act here, once, if a test armed `name`: stop (the process goes on when it is continued), or compute."""
    action = _armed.pop(name, None)
    if action is None:
        return
    busy = _BUSY.fullmatch(action)
    if busy is None:
        os.kill(os.getpid(), signal.SIGSTOP)
        return
    log.warning("failpoint %s: computing for %s s", name, busy[1])
    end = time.perf_counter() + float(busy[1])
    while time.perf_counter() < end:
        pass
