"""The drift alarm (issue 26): what an agent says its gangs hold against what the federation believes runs in
its cluster. The pure watch, and the server over a real stream on real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
from prometheus_client import REGISTRY

from federation.control.drift import DriftWatch, difference, signed
from federation.server.app import FederationServer
from federation.v1 import admin_pb2, admin_pb2_grpc, agent_pb2, agent_pb2_grpc

GPU = "nvidia.com/gpu"


def test_a_difference_is_drift_only_once_the_same_difference_has_lasted() -> None:
    watch = DriftWatch(after=10)
    diff = difference({GPU: 16, "cpu": 8000}, {GPU: 8, "cpu": 8000})
    assert diff == {GPU: 8}
    assert watch.observe("east", diff, now=0) == {}
    assert watch.observe("east", diff, now=9.9) == {}
    assert watch.observe("east", diff, now=10) == {GPU: 8}
    assert watch.observe("east", {GPU: 16}, now=11) == {}  # it changed: work moving, its time starts again
    assert watch.observe("east", {GPU: 16}, now=21) == {GPU: 16}
    assert watch.observe("east", {}, now=22) == {}  # agreed again
    assert watch.observe("east", {GPU: 16}, now=23) == {}
    assert signed({GPU: -8, "cpu": 2000}) == {GPU: "-8", "cpu": "+2"}


async def test_pods_no_job_accounts_for_show_as_drift_until_they_go(db_url: object) -> None:
    server = FederationServer(db_url, "127.0.0.1:0", insecure_dev=True, drift_after=1.0)  # type: ignore[arg-type]
    port = await server.start()
    managed: dict[str, int] = {GPU: 16}  # what the agent says its pods hold: no job of the federation runs there
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)

            async def messages() -> AsyncIterator[agent_pb2.AgentMessage]:
                yield agent_pb2.AgentMessage(register=agent_pb2.Register(cluster="east", instance="a"))
                while True:
                    yield agent_pb2.AgentMessage(inventory=agent_pb2.Inventory(
                        allocatable=agent_pb2.ResourceAmounts(amounts={GPU: 64}),
                        used=agent_pb2.ResourceAmounts(amounts=managed),
                        managed=agent_pb2.ResourceAmounts(amounts=managed), healthy=True, nodes=8, ready_nodes=8))
                    yield agent_pb2.AgentMessage(heartbeat=agent_pb2.Heartbeat())
                    await asyncio.sleep(0.2)

            call = agent_pb2_grpc.AgentServiceStub(channel).Connect(messages())

            async def drift() -> dict[str, str] | None:
                clusters = (await admin.ListClusters(admin_pb2.ListClustersRequest())).clusters
                return next((dict(c.drift) for c in clusters if c.name == "east"), None)

            async def until(check: object, what: str) -> None:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    if await check():  # type: ignore[operator]
                        return
                    await asyncio.sleep(0.1)
                raise AssertionError(f"timed out waiting for {what}")

            started = time.monotonic()
            await until(lambda: _eq(drift(), {GPU: "+16"}), "the drift")
            assert time.monotonic() - started >= 1.0  # not before it lasted
            assert REGISTRY.get_sample_value("federation_cluster_drift", {"cluster": "east", "resource": GPU}) == 16
            managed.clear()  # the pods went (reconciliation deleted them)
            await until(lambda: _eq(drift(), {}), "the drift to end")
            assert REGISTRY.get_sample_value("federation_cluster_drift", {"cluster": "east", "resource": GPU}) is None
            call.cancel()
    finally:
        await server.stop(grace=0)


async def _eq(value: object, expected: object) -> bool:
    return await value == expected  # type: ignore[misc]
