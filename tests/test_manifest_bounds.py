"""Issue 27 (8): fedctl's manifests are hostile input. Alias bombs and oversized documents are refused before
their values are built, quotes in errors are bounded, numbers of any length are an error not a crash, and a
manifest of any size is read as a stream and sent in batches, under a memory limit the old reader exceeded."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

from sqlalchemy.engine import URL

from federation.cli.dev import BIN, ServerProcess
from federation.cli.yamldoc import MAX_DOCUMENT_BYTES

MEMORY_LIMIT = 1 << 30  # address space: reading the 35 MB manifest whole took 2.3 GB; an alias bomb, any amount

JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {name}
  annotations:
    federation.dev/sim-duration: "1s"
spec:
  queue: {queue}
  tasks:
    - name: worker
      replicas: {replicas}
      template:
        spec:
          containers:
            - name: worker
              image: ghcr.io/example/worker:latest
              resources:
                requests:
                  cpu: "1"
"""

BOMB = """a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def fedctl(*args: str, server: str = "127.0.0.1:1", timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """fedctl under the memory limit."""
    return subprocess.run([str(BIN / "fedctl"), "--server", server, *args], capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_limited)


def test_hostile_manifests_are_refused_with_a_bounded_message(tmp_path: Path) -> None:
    huge_field = JOB.format(name="x", queue="q", replicas='"' + "9x" * 1_000_000 + '"')  # a 2 MB string
    cases = {
        "bomb.yaml": (BOMB, "bomb.yaml:", "aliases expand too far"),
        "field.yaml": (huge_field, "field.yaml:11: spec.tasks[0].replicas: must be an integer", "characters)"),
        "digits.yaml": (JOB.format(name="x", queue="q", replicas="1" * 100_000), "digits.yaml:11:",
                        "is not a usable value (too many digits)"),
        "document.yaml": (JOB.format(name="x", queue="q", replicas=1) + "  padding: " + "p" * MAX_DOCUMENT_BYTES,
                          "document.yaml:1:", "at most 3,145,728"),
    }
    assert len(BOMB) < 700
    for name, (text, where, what) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        run = fedctl("submit", "--dry-run", "client", "-f", str(path))
        assert run.returncode == 1 and "Traceback" not in run.stderr, (name, run.stderr[:500])
        assert where in run.stderr and what in run.stderr, (name, run.stderr[:500])
        assert len(run.stderr) < 600, (name, len(run.stderr))  # quoted in part, as the server quotes


def test_a_35_mb_manifest_is_read_as_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    count = 0
    with path.open("w") as out:
        while out.tell() < 35_000_000:
            out.write(("---\n" if count else "") + JOB.format(name=f"job-{count}", queue="q", replicas=2))
            count += 1
    run = fedctl("submit", "--dry-run", "client", "-f", str(path), timeout=600)
    assert run.returncode == 0, run.stderr[-500:]
    assert run.stdout.count("valid (dry run: client)") == count
    assert f"job/job-{count - 1} valid" in run.stdout


def test_a_large_manifest_is_submitted_in_batches(db_url: URL, tmp_path: Path) -> None:
    server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
    try:
        admin = tmp_path / "admin.yaml"
        admin.write_text("apiVersion: federation.dev/v1\nkind: Tenant\nmetadata: {name: t}\n---\n"
                         "apiVersion: federation.dev/v1\nkind: Queue\nmetadata: {name: q}\nspec: {tenant: t}\n")
        assert fedctl("apply", "-f", str(admin), server=server.address).returncode == 0
        many = tmp_path / "many.yaml"
        many.write_text("---\n".join(JOB.format(name=f"job-{i}", queue="q", replicas=1) for i in range(2_300)))
        run = fedctl("submit", "-f", str(many), server=server.address)
        assert run.returncode == 0, run.stderr[-500:]
        assert run.stdout.count(" submitted") == 2_300
        # A refusal in the third batch: the first two stay submitted, and fedctl says where it stopped.
        bad = tmp_path / "bad.yaml"
        bad.write_text("---\n".join(JOB.format(name=f"more-{i}", queue="nope" if i == 2_100 else "q", replicas=1)
                                    for i in range(2_300)))
        run = fedctl("submit", "-f", str(bad), server=server.address)
        assert run.returncode == 1, run.stdout[-300:]
        assert "queue 'nope' not found" in run.stderr
        assert "2,000 jobs of earlier batches were submitted" in run.stderr, run.stderr
        assert run.stdout.count(" submitted") == 2_000
        listed = subprocess.run([str(BIN / "fedctl"), "--server", server.address, "list", "jobs", "--limit", "1",
                                 "-o", "json"], capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0
    finally:
        server.stop()


def test_a_64_mb_list_is_refused_before_it_is_composed(tmp_path: Path) -> None:
    """One document of 64 MB (`kind: List`, as `kubectl get -o yaml` prints): libyaml would compose all of it
    (1.6 GB) before its size is known; it is measured line by line first, from a file and from a pipe."""
    item = "  - " + JOB.replace("\n", "\n    ").rstrip() + "\n"
    path = tmp_path / "list.yaml"
    with path.open("w") as out:
        out.write("apiVersion: v1\nkind: List\nitems:\n")
        n = 0
        while out.tell() < 64_000_000:
            out.write(item.format(name=f"job-{n}", queue="q", replicas=1))
            n += 1
    for args, stdin in (((str(path),), None), (("-",), path.open("rb"))):
        run = subprocess.run([str(BIN / "fedctl"), "--server", "127.0.0.1:1", "submit", "--dry-run", "client",
                              "-f", *args], capture_output=True, timeout=300, preexec_fn=_limited, stdin=stdin)
        err = run.stderr.decode()
        assert run.returncode == 1 and "Traceback" not in err and "MemoryError" not in err, err[-500:]
        assert f"{args[0]}:1: a document of over 3,145,728 characters" in err, err[-500:]
