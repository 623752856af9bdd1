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


class ServerProcess:
    """A federation-server child process, started on a free port; its address once it listens."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> None:
        self.log = b""
        self.proc = subprocess.Popen(
            [str(BIN / "federation-server"), "serve", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self.address = self._wait_for_address(timeout)

    def _wait_for_address(self, timeout: float) -> str:
        found: list[str] = []

        def read() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                self.log += line
                if b"listening on" in line and not found:
                    found.append(line.decode().rsplit(" ", 1)[1].strip())

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not found:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(f"federation-server did not start:\n{self.log.decode()}")
            time.sleep(0.05)
        return found[0]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        """SIGTERM, so the server shuts down cleanly and stops its embedded PostgreSQL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


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
