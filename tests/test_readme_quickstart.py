"""Issue 28 (6): the README's quick start is true. Each `make` line is a Makefile target; what `make demo-kube`
and `make kube-up` run is run here (in a directory of the test's own, not the checkout's `.demo/`): the demo on
the Kubernetes test bed to success, and the test bed until it prints its kubeconfigs and is stopped. `make
demo` runs in tests/test_e2e_agents.py (the same command); `make test` is what runs this."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from federation.testbed.build import Tools
from tests.conftest import REPO


def quick_start() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def recipe(target: str) -> list[str]:
    """The command `make TARGET` runs (its last line, the one that is not setting up the virtualenv)."""
    done = subprocess.run(["make", "-n", "-s", target], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1].split()


def test_every_quick_start_line_is_a_target_that_runs(tmp_path: Path, testbed_tools: Tools) -> None:
    lines = quick_start()
    assert lines == ["make demo", "make test", "make demo-kube", "make kube-up"]
    assert recipe("demo") == [".venv/bin/fedctl", "dev", "demo"]  # run by test_e2e_agents with its own data dir
    assert "pytest" in " ".join(recipe("test"))

    demo = recipe("demo-kube")
    assert demo == [".venv/bin/fedctl", "dev", "demo", "--kube"]
    done = subprocess.run([*demo, "--data-dir", str(tmp_path / "demo" / "postgres")], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "on the Kubernetes test bed" in done.stdout
    summary = done.stdout.split("summary\n", 1)[1]
    rows = [line for line in summary.splitlines()[1:] if line and not line.startswith("stopped")]
    assert rows and all(" Succeeded " in row for row in rows)

    kube = recipe("kube-up")
    assert kube == [".venv/bin/fedctl", "dev", "kube"]
    # started as a script's background job is, with SIGINT ignored: Ctrl-C (here SIGINT) must still stop it
    argv = ["sh", "-c", 'trap "" INT && exec "$@"', "sh", *kube, "--dir", str(tmp_path / "kube")]
    bed = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert bed.stdout is not None
        printed = ""
        for line in bed.stdout:
            printed += line
            if "stop with Ctrl-C" in line:
                break
        assert "kubeconfig (admin):" in printed and "kubeconfig (member-agent's ServiceAccount):" in printed
        bed.send_signal(signal.SIGINT)
        assert bed.wait(300) == 0  # it stops the API server, etcd, the controllers and KWOK: slow when loaded
    finally:
        if bed.poll() is None:
            bed.kill()
