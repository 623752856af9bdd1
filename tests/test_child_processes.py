"""The test harness's child processes (`federation.cli.dev._Child`): one that will not stop on SIGTERM is killed
after its grace, and the error says where it was and what it last said, so a test that meets one can be read."""

from __future__ import annotations

import sys

import pytest

from federation.cli.dev import _Child

STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
def holding_on():
    while True:
        time.sleep(0.05)
print("ready: ignoring SIGTERM", flush=True)
holding_on()
"""


def test_a_child_that_outlasts_its_grace_is_killed_and_says_where_it_was() -> None:
    child = _Child([sys.executable, "-c", STUBBORN], b"ready", None, timeout=120)
    with pytest.raises(RuntimeError) as raised:
        child.stop(grace=1)
    said = str(raised.value)
    assert "did not stop within 1 s of SIGTERM" in said
    assert "holding_on" in said  # its stack, from py-spy (a test dependency)
    assert "ready: ignoring SIGTERM" in said  # its last words
    assert child.proc.poll() is not None  # and it is gone
