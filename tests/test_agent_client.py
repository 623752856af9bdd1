"""The agent's stream to a real server: whatever ended the last connection, it connects again."""

import asyncio
import contextlib

import pytest

from federation.v1 import admin_pb2
from member_agent import client
from tests.conftest import Api
from tests.test_agent_recovery import make_agent


async def test_the_agent_reconnects_whatever_ended_its_last_connection(api: Api,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # A write that races the end of the stream raises InvalidStateError, not an RPC error; once, that
    # ended the agent's connection loop for good and its cluster looked lost while it ran its jobs.
    endings: list[BaseException] = [asyncio.InvalidStateError("RPC already finished."), RuntimeError("a bug")]
    real = client._connection

    async def ends_badly_twice(*args: object) -> None:
        if endings:
            raise endings.pop(0)
        await real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(client, "_connection", ends_badly_twice)
    connected = asyncio.Event()
    task = asyncio.create_task(client.run(api.address, make_agent(), heartbeat=0.5, connected=connected))
    try:
        await asyncio.wait_for(connected.wait(), timeout=30)
        assert not endings
        clusters = (await api.admin.ListClusters(admin_pb2.ListClustersRequest())).clusters
        assert [(c.name, c.status) for c in clusters] == [("h100", admin_pb2.READY)]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
