"""Issue 44 (5): kubectl habits, the last step. `fedctl` is also installed as `kubectl-fed`, a kubectl plugin: the
test bed's real kubectl (v1.34, built with it) finds it on PATH, and `kubectl fed ...` is `fedctl ...`, global
options anywhere on the line."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from sqlalchemy.engine import URL

from federation.cli.dev import ServerProcess
from federation.testbed.build import Tools
from tests.processes import BIN

JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: plugin-demo
spec:
  minAvailable: 1
  tasks:
    - name: worker
      replicas: 1
      template:
        spec:
          containers:
            - name: c
              image: busybox
              resources:
                requests: {cpu: "1"}
"""


def test_kubectl_finds_the_fed_plugin_and_runs_fedctl(db_url: URL, testbed_tools: Tools, tmp_path: Path) -> None:
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    try:
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("FEDERATION_")}, "HOME": str(tmp_path),
               "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}

        def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([testbed_tools.program("kubectl"), *args], capture_output=True, text=True,
                                  timeout=60, env=env)

        listed = kubectl("plugin", "list")
        assert str(BIN / "kubectl-fed") in listed.stdout, listed.stdout + listed.stderr

        manifest = tmp_path / "job.yaml"
        manifest.write_text(JOB)
        submitted = kubectl("fed", "submit", "-f", str(manifest), "--server", server.address)
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split("job/", 1)[1].split()[0]
        named = kubectl("fed", "get", "jobs", "-o", "name", "--server", server.address)
        assert named.returncode == 0 and named.stdout.split() == [f"job/{job_id}"], named.stdout + named.stderr
        direct = subprocess.run([str(BIN / "fedctl"), "--server", server.address, "get", "jobs", "-o", "name"],
                                capture_output=True, text=True, timeout=60, env=env)
        assert direct.stdout == named.stdout  # the same program, whichever way it is called

        wrong = kubectl("fed", "get", "gadgets", "--server", server.address)
        assert wrong.returncode != 0 and "gadgets" in wrong.stderr and "Traceback" not in wrong.stderr
    finally:
        server.stop()
