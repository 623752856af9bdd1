"""A server whose shutdown waits on a task that does not end says which: a thread dump shows only the loop's thread
waiting in its selector, so the stacks of the tasks still pending are what name the culprit."""

import asyncio
import contextlib
import logging

import pytest

from federation.server.main import _report_slow_shutdown


async def _never_ending_sweep(forever: asyncio.Event) -> None:
    await forever.wait()


async def test_a_slow_shutdown_names_the_tasks_it_waits_on(caplog: pytest.LogCaptureFixture) -> None:
    stuck = asyncio.create_task(_never_ending_sweep(asyncio.Event()))
    try:
        with caplog.at_level(logging.WARNING, logger="federation.server"):
            await _report_slow_shutdown(0.05)
        [record] = [r for r in caplog.records if "still shutting down" in r.getMessage()]
        assert "_never_ending_sweep" in record.getMessage()
        assert "forever.wait()" in record.getMessage()  # the line it waits on
    finally:
        stuck.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stuck
