"""Starting the real programs as processes, the way users run them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent


class ServerProcess:
    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = b""
        self.proc = subprocess.Popen(
            [str(BIN / "federation-server"), "serve", "--listen", "127.0.0.1:0", *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        self.address = self._wait_for_address()

    def _wait_for_address(self, timeout: float = 60) -> str:
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
                raise RuntimeError(f"server did not start:\n{self.log.decode()}")
            time.sleep(0.05)
        return found[0]

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


def fedctl(server: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "fedctl"), "--server", server, *args], capture_output=True, text=True,
                          input=stdin, timeout=60)


def postgres_running_in(data_dir: Path) -> list[psutil.Process]:
    out = []
    for proc in psutil.process_iter(["name", "cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["name"] == "postgres" and str(data_dir) in " ".join(cmdline):
            out.append(proc)
    return out
