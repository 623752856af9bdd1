"""A TCP proxy to PostgreSQL that a test can partition: paused, it keeps every connection open and relays
nothing either way, as a network that drops packets does (a connection reset would be noticed at once)."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable

from sqlalchemy.engine import URL


class Proxy:
    def __init__(self, connect: Callable[[], socket.socket]) -> None:
        """`connect` opens a connection to the real server (a TCP or Unix socket)."""
        self.connect = connect
        self.flowing = threading.Event()
        self.flowing.set()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def partition(self) -> None:
        self.flowing.clear()

    def heal(self) -> None:
        self.flowing.set()

    def close(self) -> None:
        self._stop = True
        self.flowing.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.flowing.wait()  # a partitioned network does not answer new connections either
            try:
                server = self.connect()
            except OSError:
                client.close()
                continue
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._relay, args=(a, b), daemon=True).start()

    def _relay(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


def proxied(db_url: URL) -> tuple[Proxy, URL]:
    """A proxy to this PostgreSQL (TCP or Unix socket), and the URL that goes through it."""
    host, port = db_url.query.get("host") or db_url.host or "127.0.0.1", db_url.port or 5432
    if isinstance(host, str) and host.startswith("/"):
        def connect() -> socket.socket:
            conn = socket.socket(socket.AF_UNIX)
            conn.connect(f"{host}/.s.PGSQL.{port}")
            return conn
    else:
        def connect() -> socket.socket:
            return socket.create_connection((str(host), port))
    proxy = Proxy(connect)
    query = {k: v for k, v in db_url.query.items() if k != "host"}
    return proxy, db_url.set(host="127.0.0.1", port=proxy.port, query=query)
