"""Health, reflection, schema migrations and generated stubs."""

import filecmp
import logging
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import URL

from federation.store import database
from federation.store.models import Base
from tests.conftest import REPO, Api
from tests.test_e2e_agents import wait_for


async def test_reflection_lists_the_three_services(api: Api) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(api.channel)

    async def requests():
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    async for response in stub.ServerReflectionInfo(requests()):
        names = {s.name for s in response.list_services_response.service}
        break
    assert {"federation.v1.JobService", "federation.v1.AdminService", "federation.v1.AgentService"} <= names


async def test_health_serving(api: Api) -> None:
    stub = health_pb2_grpc.HealthStub(api.channel)
    for service in ("", "federation.v1.JobService"):
        response = await stub.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    try:
        await stub.Check(health_pb2.HealthCheckRequest(service="nope"))
        raise AssertionError("unknown service reported healthy")
    except grpc.aio.AioRpcError as err:
        assert err.code() == grpc.StatusCode.NOT_FOUND


def _tables(url: URL) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_migrations_up_and_down_on_an_empty_database(empty_db_url: URL) -> None:
    assert database.schema_revisions(empty_db_url)[0] is None
    database.upgrade(empty_db_url)
    current, head = database.schema_revisions(empty_db_url)
    assert current == head
    assert {"tenants", "queues", "priority_classes", "clusters", "jobs", "job_events", "event_counter",
            "submit_keys"} <= _tables(empty_db_url)
    database.downgrade(empty_db_url, "base")
    assert _tables(empty_db_url) == {"alembic_version"}
    database.upgrade(empty_db_url)
    assert database.schema_revisions(empty_db_url)[0] == head


def test_a_migration_that_meets_a_replicas_locks_gives_way_and_is_tried_again(
        empty_db_url: URL, caplog: pytest.LogCaptureFixture) -> None:
    """A replica's transaction writes to queues, then reads tenants, while the migration to 0016 has locked tenants
    and waits for queues: a deadlock (or, if PostgreSQL looks before the replica waits, the migration's lock
    timeout). The migration gives way, the replica's transaction goes on, and the upgrade is tried again."""
    database.upgrade(empty_db_url, "0015")
    failed: list[BaseException] = []

    def upgrade() -> None:
        try:
            database.upgrade(empty_db_url)
        except BaseException as err:
            failed.append(err)

    with psycopg.connect(database.conninfo(empty_db_url)) as replica:
        replica.execute("SET deadlock_timeout = '10min'")  # the migration is the side PostgreSQL fails
        replica.execute("LOCK TABLE queues IN ROW EXCLUSIVE MODE")  # as its INSERT INTO queues did
        caplog.set_level(logging.WARNING, logger="federation.store.database")
        migrating = threading.Thread(target=upgrade)
        migrating.start()
        with psycopg.connect(database.conninfo(empty_db_url), autocommit=True) as watcher:
            wait_for("the migration waiting for queues", lambda: watcher.execute(
                "SELECT 1 FROM pg_locks WHERE NOT granted AND relation = 'queues'::regclass").fetchall())
        # It waits for the migration's lock on tenants; PostgreSQL fails the migration, not this.
        assert replica.execute("SELECT count(*) FROM tenants").fetchone() is not None
        replica.commit()
    migrating.join(120)
    assert not migrating.is_alive() and failed == []
    current, head = database.schema_revisions(empty_db_url)
    assert current == head
    assert "trying again" in caplog.text


def test_migrations_match_the_models(db_url: URL) -> None:
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    finally:
        engine.dispose()
    assert diff == []


def test_generated_stubs_are_up_to_date(tmp_path: Path) -> None:
    protos = sorted(str(p.relative_to(REPO / "proto")) for p in (REPO / "proto").rglob("*.proto"))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(REPO / "proto"), f"--python_out={tmp_path}",
                    f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}", *protos], check=True)
    generated = sorted(p.name for p in (tmp_path / "federation" / "v1").iterdir())
    committed = REPO / "federation" / "v1"
    match, mismatch, errors = filecmp.cmpfiles(tmp_path / "federation" / "v1", committed, generated, shallow=False)
    assert not mismatch and not errors, f"stale stubs {mismatch + errors}: run 'make proto'"
    assert sorted(match) == generated


async def test_container_healthcheck_command(api: Api) -> None:
    import asyncio

    for address, expected in ((api.address, 0), ("127.0.0.1:1", 1)):
        proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "federation.healthcheck", address,
                                                    stderr=asyncio.subprocess.PIPE)
        await proc.communicate()
        assert proc.returncode == expected
