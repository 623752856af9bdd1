"""`fedctl dev`: run a local federation from this checkout, for demos and trying things out."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import click

BIN = Path(sys.executable).parent


class _Child:
    """A child process of ours whose output is collected, started when a line says it is ready."""

    def __init__(self, argv: list[str], ready: bytes, env: dict[str, str] | None, timeout: float) -> None:
        self.log = b""
        self.ready_line = ""
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})
        found = threading.Event()

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log += line
                if ready in line and not found.is_set():
                    self.ready_line = line.decode().strip()
                    found.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"{Path(argv[0]).name} did not start:\n{self.log.decode()}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM and wait: the programs shut down cleanly on it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


class ServerProcess(_Child):
    """federation-server on a free port; `address` once it listens."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> None:
        super().__init__([str(BIN / "federation-server"), "serve", "--listen", "127.0.0.1:0", *args],
                         b"listening on", env, timeout)
        self.address = self.ready_line.rsplit(" ", 1)[1]


class AgentProcess(_Child):
    """A simulated member-agent; `admin` is its fault-injection address."""

    def __init__(self, cluster: str, cluster_file: Path, server: str, *args: str,
                 env: dict[str, str] | None = None, timeout: float = 60) -> None:
        super().__init__([str(BIN / "member-agent"), "--cluster", cluster, "--simulate", str(cluster_file),
                          "--server", server, "--admin-listen", "127.0.0.1:0", *args],
                         b"admin listening on", env, timeout)
        self.admin = self.ready_line.rsplit(" ", 1)[1]


@click.group()
def dev() -> None:
    """Run a local federation from this checkout."""


def _run(server: str, *args: str) -> None:
    click.secho(f"$ fedctl {' '.join(args)}", bold=True)
    done = subprocess.run([str(BIN / "fedctl"), "--server", server, *args], check=False)
    if done.returncode:
        raise click.ClickException(f"'fedctl {' '.join(args)}' failed")


@dev.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path(".demo/postgres"), show_default=True,
              help="Embedded PostgreSQL data; wiped first so every demo starts the same.")
@click.option("--examples", type=click.Path(path_type=Path, exists=True, file_okay=False), default=Path("examples"),
              show_default=True)
def demo(data_dir: Path, examples: Path) -> None:
    """Start the server on an embedded PostgreSQL, load the examples, show the jobs, clean up."""
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    click.echo(f"starting federation-server on an embedded PostgreSQL in {data_dir} ...")
    server = ServerProcess("--data-dir", str(data_dir), "--auto-migrate")
    try:
        click.echo(f"federation-server listening on {server.address}\n")
        _run(server.address, "apply", "-f", str(examples / "admin" / "federation.yaml"))
        _run(server.address, "submit", *map(str, sorted((examples / "jobs").glob("*.yaml"))))
        _run(server.address, "list", "jobs")
        _run(server.address, "clusters")
    finally:
        code = server.stop()
        click.echo(f"\nfederation-server stopped (exit {code}); its PostgreSQL data stays in {data_dir}")
