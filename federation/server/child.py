"""`federation-server serve` with both roles: the API here, the scheduler as a child process it supervises.

The scheduler computes for as long as its backlog makes it; in a process of its own it holds nothing of the
API's (Armada splits its server and scheduler so, and Kueue's scheduler never blocks its webhooks). The child
gets the parent's settings, the database URL in its environment (not on a command line `ps` shows), a
loopback port for its metrics, which the parent's /metrics merges in (with a secret only the two know), and a
pipe on its standard input: when the parent goes, however it goes, the child sees the pipe close and stops.
A child that exits on its own is started again, after a pause that grows while it keeps failing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
from collections.abc import Sequence

from sqlalchemy.engine import URL

log = logging.getLogger(__name__)

EXIT_WITH_STDIN = "FEDERATION_EXIT_WITH_STDIN"  # set for the child: its standard input closing means the parent went
METRICS_SECRET = "FEDERATION_METRICS_SECRET"  # what the parent presents to the child's /metrics
METRICS_SOCKET = "FEDERATION_METRICS_SOCKET"  # set for the child: the descriptor of the socket to serve /metrics on
RESTART_PAUSE, RESTART_PAUSE_MAX = 1.0, 30.0


class SchedulerChild:
    def __init__(self, url: URL, settings: Sequence[str], log_level: str) -> None:
        self.url = url
        self.settings = list(settings)  # the scheduler's own flags, as the parent was given them
        self.log_level = log_level
        self.metrics_secret = secrets.token_hex(16)
        # The child's metrics socket, bound here once and handed to every child started: the parent's /metrics reads
        # the same address across restarts, and no other process can take the port meanwhile. A port found free and
        # bound again by each child could be taken in between (an outgoing connection's local port, on a busy
        # machine), and then every restart failed on it for as long as the parent lived.
        self.metrics_socket = socket.socket()
        self.metrics_socket.bind(("127.0.0.1", 0))
        self.metrics_socket.set_inheritable(True)
        self.metrics_address = f"127.0.0.1:{self.metrics_socket.getsockname()[1]}"
        self.process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        await self._spawn()
        self._task = asyncio.create_task(self._supervise(), name="scheduler-child")

    async def _spawn(self) -> None:
        argv = [sys.executable, "-m", "federation.server.main", "--log-level", self.log_level, "serve",
                "--role", "scheduler", "--listen", "127.0.0.1:0", "--metrics-listen", self.metrics_address,
                *self.settings]
        fd = self.metrics_socket.fileno()
        env = {**os.environ, "FEDERATION_DATABASE_URL": self.url.render_as_string(hide_password=False),
               EXIT_WITH_STDIN: "1", METRICS_SECRET: self.metrics_secret, METRICS_SOCKET: str(fd)}
        # Its own session: a Ctrl-C at the terminal reaches the parent, which stops it in its turn.
        self.process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, env=env,
                                                            start_new_session=True, pass_fds=(fd,))
        log.info("started the scheduler process (pid %d)", self.process.pid)

    async def _supervise(self) -> None:
        pause = RESTART_PAUSE
        while not self._stopping:
            assert self.process is not None
            code = await self.process.wait()
            if self._stopping:
                return
            log.warning("the scheduler process exited with %s; starting it again in %.0f s", code, pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, RESTART_PAUSE_MAX)
            if not self._stopping:
                await self._spawn()

    async def stop(self, grace: float = 30.0) -> None:
        """Stop the child as SIGTERM stops a server (woken first, if a failpoint froze it)."""
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            await self._end(grace)
        finally:
            self.metrics_socket.close()

    async def _end(self, grace: float) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)
            process.terminate()
        try:
            async with asyncio.timeout(grace):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


async def exit_with_stdin(stop: asyncio.Event) -> None:
    """In the child: set `stop` once standard input closes (the parent is gone)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        pass
    log.warning("the parent process is gone; stopping")
    stop.set()
