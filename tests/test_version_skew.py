"""Agents and servers of adjacent releases work together; an agent out of that window is refused at registration
with a message saying what to upgrade, and changes nothing."""

from __future__ import annotations

import grpc
import pytest
from sqlalchemy import select

from federation.kernel.versions import RELEASE, agent_refused, minor
from federation.store.models import Cluster
from federation.v1 import agent_pb2, agent_pb2_grpc
from tests.conftest import Api


def test_the_server_serves_its_own_release_and_the_one_before() -> None:
    major, current = minor(RELEASE) or (0, 0)
    assert current >= 1  # there is a release before this one to serve
    assert agent_refused(RELEASE) is None
    assert agent_refused(f"{major}.{current - 1}.7") is None  # the release before, any patch
    assert agent_refused(f"v{major}.{current}.1-rc.1") is None
    older = agent_refused(f"{major}.{current - 2}.0", f"{major}.{current}.0") if current >= 2 else \
        agent_refused(f"{major - 1}.9.0")
    assert older is not None and "too old" in older and "upgrade the agent" in older
    newer = agent_refused(f"{major}.{current + 1}.0")
    assert newer is not None and "upgrade the servers first" in newer
    assert agent_refused("") is None and agent_refused("dev-build") is None  # no release named: served


async def register(api: Api, cluster: str, version: str) -> agent_pb2.ControlMessage | grpc.aio.AioRpcError:
    messages = [agent_pb2.AgentMessage(register=agent_pb2.Register(cluster=cluster, agent_version=version))]
    call = agent_pb2_grpc.AgentServiceStub(api.channel).Connect(iter(messages))
    try:
        async for answer in call:
            call.cancel()
            return answer
    except grpc.aio.AioRpcError as err:
        return err
    raise AssertionError("the stream ended without an answer")


@pytest.mark.parametrize(("version", "served"), [
    (RELEASE, True),
    ("0.1.0", True),  # the release before: an agent not yet upgraded
    ("0.0.9", False),
    ("0.3.0", False),
])
async def test_an_agent_is_served_within_one_release_and_refused_beyond(api: Api, version: str,
                                                                          served: bool) -> None:
    answer = await register(api, "east", version)
    async with api.server.engine.connect() as conn:
        registered = list((await conn.execute(select(Cluster.name, Cluster.agent_version))).all())
    if served:
        assert isinstance(answer, agent_pb2.ControlMessage) and answer.registered.cluster == "east"
        assert registered == [("east", version)]
    else:
        assert isinstance(answer, grpc.aio.AioRpcError)
        assert answer.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert version in answer.details() and "upgrade the" in answer.details()
        assert registered == []  # refused: nothing recorded
