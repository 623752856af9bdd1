"""The five-minute tour (docs/tutorials/local.md) is run as written, against `fedctl dev up` (what `make up`
runs), so it stays true: every command exits 0; those that follow a stream (`-f`, `-w`, `watch`) print and
keep running until stopped. `<suffix>` is the id the tour's submit printed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from tests.conftest import REPO
from tests.processes import BIN
from tests.test_e2e_agents import wait_for

STREAMING = re.compile(r"(^|\s)(-f|-w|--follow|--watch)(\s|$)|^fedctl watch\b")


def tour() -> list[str]:
    text = (REPO / "docs" / "tutorials" / "local.md").read_text()
    block = text.split("## A five-minute tour with fedctl", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip() and
            not line.lstrip().startswith("#")]


def test_the_tour_runs_as_written(tmp_path: Path) -> None:
    commands = tour()
    assert commands[0] == "make up" and commands[1].startswith("export PATH=")
    up = subprocess.Popen([str(BIN / "fedctl"), "dev", "up", "--data-dir", str(tmp_path / "up"), "--listen",
                           "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--agent-admin-port", "0",
                           "--ui-listen", "127.0.0.1:0", "--examples", str(REPO / "examples")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert up.stdout is not None
        out = b""
        for line in up.stdout:
            out += line
            if b"dashboard at" in line:
                break
        address = out.decode().rsplit("federation ready at ", 1)[1].split()[0]
        env = {**os.environ, "FEDERATION_SERVER": address, "PATH": f"{BIN}:{os.environ['PATH']}"}
        env.pop("FEDERATION_TOKEN", None)
        suffix = ""
        for command in commands[2:]:
            if command.startswith("source <("):
                command = command.removeprefix("source <(").removesuffix(")")
            if "<suffix>" in command:
                assert suffix, f"{command}: no job submitted yet"
                command = command.replace("<suffix>", suffix)
            if STREAMING.search(command):
                stream = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=REPO, env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                assert stream.stdout is not None
                first = stream.stdout.readline()
                stream.terminate()  # as Ctrl-C would end it; it was streaming
                stream.wait(30)
                assert first, (command, stream.stderr.read() if stream.stderr else "")
                continue
            done = subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode == 0, (command, done.stdout[-500:], done.stderr[-500:])
            if command.startswith("fedctl cancel"):
                # The tour's job runs until cancelled, however slow the machine: the cancel ended it, not time.
                phase = subprocess.run([str(BIN / "fedctl"), "get", "job", f"llama-pretrain-{suffix}", "-o",
                                        "jsonpath={.status.phase}"], env=env, capture_output=True, text=True,
                                       timeout=60)
                assert phase.stdout.strip() == "Cancelled", (phase.stdout, phase.stderr)
            if command.startswith("fedctl submit examples/tour/llama-pretrain.yaml"):
                suffix = done.stdout.split()[0].removeprefix("job/llama-pretrain-")
                job = f"llama-pretrain-{suffix}"
                # The tour reads the job's pods and log next: let it start (a cycle, a bind) and say its pods.
                wait_for("the job's pods to be reported", lambda job=job: "Running" in subprocess.run(
                    [str(BIN / "fedctl"), "get", "pods", job], env=env, capture_output=True, text=True,
                    timeout=60).stdout, 60)
        assert suffix
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()
