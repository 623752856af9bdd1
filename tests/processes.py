"""Starting the real programs as processes, the way users run them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import psutil

from federation.cli.dev import BIN, ServerProcess

__all__ = ["BIN", "ServerProcess", "fedctl", "postgres_running_in"]


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
