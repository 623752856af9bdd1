"""Issue 28 (6): a build of the test bed waiting on another's lock says who holds it and since when."""

from __future__ import annotations

import fcntl
import threading
from pathlib import Path

import pytest

from federation.testbed import build


def test_waiting_on_the_build_lock_names_its_holder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDERATION_TESTBED_CACHE", str(tmp_path))
    root = build.cache_root()
    root.mkdir(parents=True)
    target = root / build.key()
    said: list[str] = []
    with (root / "lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("pid 4242 (make kube-up), since 2026-11-25 10:00:00 UTC\n")
        held.flush()
        waiter = threading.Thread(target=build.ensure, args=(said.append,), daemon=True)
        waiter.start()
        for _ in range(200):
            if said:
                break
            waiter.join(0.05)
        target.mkdir(parents=True)
        (target / "complete").touch()  # the holder finished the build
    waiter.join(30)
    assert not waiter.is_alive()
    assert said == [f"waiting for the test bed build that holds {root / 'lock'}: pid 4242 (make kube-up), "
                    "since 2026-11-25 10:00:00 UTC"]
