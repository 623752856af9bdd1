"""Member agents over mTLS: only a certificate signed by the configured CA, naming the cluster the
agent registers as, gets a stream (real sockets, real TLS handshakes)."""

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from sqlalchemy import select
from sqlalchemy.engine import URL

from federation.security import certs
from federation.server.app import AgentTls, FederationServer
from federation.store.models import Cluster
from federation.v1 import agent_pb2, agent_pb2_grpc
from tests.processes import ServerProcess


@dataclass
class Tls:
    server: FederationServer
    dir: Path
    ca: bytes

    def credentials(self, cert: str | None, directory: Path | None = None) -> grpc.ChannelCredentials:
        """The CA the server is trusted by, and the client certificate `cert`.crt/.key (or none)."""
        d = directory or self.dir
        if cert is None:
            return grpc.ssl_channel_credentials(self.ca)
        return grpc.ssl_channel_credentials(self.ca, (d / f"{cert}.key").read_bytes(),
                                            (d / f"{cert}.crt").read_bytes())

    async def registered(self) -> list[str]:
        async with self.server.engine.connect() as conn:
            return list((await conn.execute(select(Cluster.name))).scalars().all())


@pytest.fixture
async def tls(db_url: URL, tmp_path: Path) -> AsyncIterator[Tls]:
    directory = tmp_path / "certs"
    certs.write_all(directory, ["east", "west"])
    server = FederationServer(db_url, "127.0.0.1:0", agent_listen="127.0.0.1:0", agent_tls=AgentTls(
        (directory / "server.crt").read_bytes(), (directory / "server.key").read_bytes(),
        (directory / "ca.crt").read_bytes()))
    await server.start()
    yield Tls(server, directory, (directory / "ca.crt").read_bytes())
    await server.stop(grace=0)


async def connect(channel: grpc.aio.Channel, cluster: str) -> agent_pb2.ControlMessage | grpc.StatusCode:
    """Register as `cluster` and read the first answer; the status code if the stream fails."""
    messages = [agent_pb2.AgentMessage(register=agent_pb2.Register(cluster=cluster, agent_version="t"))]
    call = agent_pb2_grpc.AgentServiceStub(channel).Connect(iter(messages))
    try:
        async for answer in call:
            return answer
    except grpc.aio.AioRpcError as err:
        return err.code()
    return await call.code()


async def test_an_agent_with_its_own_clusters_certificate_connects(tls: Tls) -> None:
    address = f"localhost:{tls.server.agent_port}"  # the server certificate names localhost
    async with grpc.aio.secure_channel(address, tls.credentials("east")) as channel:
        answer = await connect(channel, "east")  # the server's first word: it has recorded the cluster
        assert answer.registered.cluster == "east"
    assert await tls.registered() == ["east"]


async def test_strangers_cannot_connect_or_pose_as_another_cluster(tls: Tls, tmp_path: Path) -> None:
    address = f"localhost:{tls.server.agent_port}"
    rogue = tmp_path / "rogue"
    certs.write_all(rogue, ["east"])  # a certificate named east, from a CA the server does not trust
    attempts = {
        "no TLS": grpc.aio.insecure_channel(address),
        "no client certificate": grpc.aio.secure_channel(address, tls.credentials(None)),
        "another CA's certificate": grpc.aio.secure_channel(address, tls.credentials("east", rogue)),
    }
    for what, channel in attempts.items():
        async with channel:
            assert await connect(channel, "east") == grpc.StatusCode.UNAVAILABLE, what
    async with grpc.aio.secure_channel(address, tls.credentials("west")) as channel:
        assert await connect(channel, "east") == grpc.StatusCode.PERMISSION_DENIED
    assert await tls.registered() == []
    # Nor is the agent service on the user port, without --insecure-dev. (No messages are sent: writing
    # to a stream the server has already refused races its status, which may then read INTERNAL.)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{tls.server.port}") as channel:
        call = agent_pb2_grpc.AgentServiceStub(channel).Connect(iter(()))
        assert await call.code() == grpc.StatusCode.UNIMPLEMENTED
    assert await tls.registered() == []


def test_server_flags_need_all_the_tls_files(tmp_path: Path, db_url: URL) -> None:
    with pytest.raises(RuntimeError) as info:
        ServerProcess("--database-url", db_url.render_as_string(hide_password=False), "--agent-listen",
                      "127.0.0.1:0", secure=True, timeout=30)
    assert "--agent-listen needs --tls-cert, --tls-key and --agent-ca" in str(info.value)
