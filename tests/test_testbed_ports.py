"""A test bed process whose port another process took between its being found free and bound is started again on
another port (a KWOK test failed once beside a loaded machine: the API server could not bind its port); any other
failure to start is reported at once."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from federation.testbed import cluster
from federation.testbed.build import Tools
from federation.testbed.cluster import Testbed


def _server(port: int) -> list[str]:
    return [sys.executable, "-c", "import socket, time; s = socket.socket(); "
            f"s.bind(('127.0.0.1', {port})); s.listen(); time.sleep(120)"]


def _ready(port: int) -> bool:
    socket.create_connection(("127.0.0.1", port), timeout=1).close()
    return True


@pytest.fixture
def held() -> Iterator[int]:
    """A port some other process holds (bound, not accepting: only the process started on it could answer)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


def test_a_port_taken_before_the_process_binds_it_is_tried_again_on_another(
        tmp_path: Path, held: int, monkeypatch: pytest.MonkeyPatch) -> None:
    ports = iter([held, held, cluster.free_port()])  # taken twice, then free
    monkeypatch.setattr(cluster, "free_port", lambda: next(ports))
    bed = Testbed(tmp_path, Tools(tmp_path, tmp_path))
    bed.dir.mkdir(parents=True, exist_ok=True)
    try:
        port, = bed._listening("server", _server, _ready)
        assert port != held
        assert [name for name, _ in bed.procs] == ["server"]  # the failed starts are not kept
        assert (tmp_path / "server.log").read_text().lower().count("address already in use") == 2
    finally:
        bed.stop()


def test_a_process_that_fails_for_another_reason_is_reported_at_once(tmp_path: Path) -> None:
    bed = Testbed(tmp_path, Tools(tmp_path, tmp_path))
    bed.dir.mkdir(parents=True, exist_ok=True)
    starts = []

    def failing(port: int) -> list[str]:
        starts.append(port)
        return [sys.executable, "-c", "raise SystemExit('no such flag')"]

    try:
        with pytest.raises(cluster.TestbedError, match="no such flag"):
            bed._listening("server", failing, _ready)
        assert len(starts) == 1
    finally:
        bed.stop()
