"""The federation-server and fedctl programs, run as processes against real PostgreSQL."""

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from sqlalchemy.engine import URL

from federation.store import database
from tests.conftest import REPO
from tests.processes import ServerProcess, fedctl, postgres_running_in

pytestmark = pytest.mark.e2e
EXAMPLES = REPO / "examples"


def url_arg(url: URL) -> str:
    return url.render_as_string(hide_password=False)


def test_server_refuses_an_out_of_date_schema(empty_db_url: URL) -> None:
    with pytest.raises(RuntimeError) as err:
        ServerProcess("--database-url", url_arg(empty_db_url))
    assert "run 'federation-server db upgrade' or start with --auto-migrate" in str(err.value)
    assert "Traceback" not in str(err.value)


def test_db_upgrade_then_serve(empty_db_url: URL) -> None:
    """Two upgrades at once, as the init containers of two replicas run them, both succeed."""
    import subprocess

    from tests.processes import BIN

    head = database.schema_revisions(empty_db_url)[1]
    argv = [str(BIN / "federation-server"), "db", "upgrade", "--database-url", url_arg(empty_db_url)]
    both = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for upgrade in both:
        out, err = upgrade.communicate(timeout=60)
        assert upgrade.returncode == 0, err
        assert f"database schema at {head}" in out
    server = ServerProcess("--database-url", url_arg(empty_db_url))
    try:
        # --insecure-dev (the dev processes' default) says at start what it takes: any token, or none.
        assert b"any bearer token, or none, is accepted and ignored, and every caller is an admin" in server.log
        assert fedctl(server.address, "tenant", "create", "ml").returncode == 0
    finally:
        assert server.stop() == 0


def _jobs(address: str) -> list[dict]:
    listed = fedctl(address, "list", "jobs", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout).get("jobs", [])


def test_restart_on_the_same_data_dir_loses_nothing(tmp_path: Path) -> None:
    data_dir = tmp_path / "pg"
    server = ServerProcess("--data-dir", str(data_dir), "--auto-migrate")
    try:
        applied = fedctl(server.address, "apply", "-f", str(EXAMPLES / "admin" / "federation.yaml"))
        assert applied.returncode == 0, applied.stderr
        examples = sorted((EXAMPLES / "jobs").glob("*.yaml"))
        submitted = fedctl(server.address, "submit", *map(str, examples))
        assert submitted.returncode == 0, submitted.stderr
        before = _jobs(server.address)
        assert len(before) == len(examples)
    finally:
        server.kill()  # no chance to clean up
    server = ServerProcess("--data-dir", str(data_dir))  # adopts the PostgreSQL the killed one left
    try:
        assert _jobs(server.address) == before
    finally:
        assert server.stop() == 0
    deadline = time.monotonic() + 10
    while postgres_running_in(data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert postgres_running_in(data_dir) == [], "a clean stop leaves no PostgreSQL behind"
    server = ServerProcess("--data-dir", str(data_dir))  # a cold start from the files on disk
    try:
        assert _jobs(server.address) == before
    finally:
        assert server.stop() == 0


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server with the example tenants and queues, shared by the CLI tests."""
    server = ServerProcess("--data-dir", str(tmp_path_factory.mktemp("cli") / "pg"), "--auto-migrate")
    applied = fedctl(server.address, "apply", "-f", str(EXAMPLES / "admin" / "federation.yaml"))
    assert applied.returncode == 0, applied.stderr
    yield server.address
    server.stop()


GOOD = (EXAMPLES / "jobs" / "finetune-soft.yaml").read_text()


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize(("old", "new", "problem"), [
    ("replicas: 4", "replicas: -4", "spec.tasks[0].replicas: must be at least 1, got -4"),
    ("queue: research-batch", "queue: no-such-queue", "spec.queue: queue 'no-such-queue' not found"),
    ('nvidia.com/gpu: "4"', 'nvidia.com/gpu: "four"', "'four' is not a valid quantity"),
    ("mode: soft", "mode: [soft", "invalid YAML"),
    ("replicas: 4", "replicas: many", "spec.tasks[0].replicas: must be an integer"),
])
def test_fedctl_submit_mistakes(live: str, tmp_path: Path, old: str, new: str, problem: str) -> None:
    before = _jobs(live)
    text = GOOD.replace(old, new, 1)
    path = tmp_path / "job.yaml"
    path.write_text(text)
    done = fedctl(live, "submit", str(path))
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"fedctl: {path}:")
    reported_line = int(lines[0].split(":")[2])
    assert abs(reported_line - line_of(text, new)) <= 1, lines[0]  # YAML syntax errors point at or after it
    assert problem in lines[0]
    assert _jobs(live) == before


def test_fedctl_submit_refuses_a_plugin_the_federation_does_not_carry_out(live: str, tmp_path: Path) -> None:
    before = _jobs(live)
    text = GOOD.replace("  queue: research-batch", "  queue: research-batch\n  plugins: {svc: [], tensorflow: []}", 1)
    path = tmp_path / "job.yaml"
    path.write_text(text)
    done = fedctl(live, "submit", str(path))
    assert done.returncode != 0 and _jobs(live) == before
    assert done.stderr.strip() == (f"fedctl: {path}:{line_of(text, 'tensorflow')}: spec.plugins.tensorflow: is not a "
                                   "job plugin the federation supports (env, svc, ssh, pytorch, mpi, ray)")


def test_fedctl_job_lifecycle(live: str, tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(GOOD + "---\n" + GOOD.replace("name: finetune-7b", "name: finetune-13b"))
    done = fedctl(live, "submit", str(path))
    assert done.returncode == 0, done.stderr
    ids = [line.split()[0].removeprefix("job/") for line in done.stdout.splitlines()]
    assert len(ids) == 2 and ids[1].startswith("finetune-13b-")
    shown = fedctl(live, "get", "job", ids[0])
    assert "Pending" in shown.stdout and "no member cluster is ready" in shown.stdout
    spaced = tmp_path / "spaced.yaml"  # metadata.namespace is kept and shown, as kubectl shows it
    spaced.write_text(GOOD.replace("metadata:\n", "metadata:\n  namespace: vision\n", 1))
    spaced_id = fedctl(live, "submit", str(spaced)).stdout.split()[0].removeprefix("job/")
    header, row = fedctl(live, "get", "job", spaced_id).stdout.splitlines()[:2]
    assert header.split()[:2] == ["ID", "NAMESPACE"] and row.split()[:2] == [spaced_id, "vision"]
    fedctl(live, "cancel", spaced_id)
    as_json = json.loads(fedctl(live, "get", "job", ids[0], "-o", "json").stdout)
    assert as_json["status"]["phase"] == "Pending" and as_json["spec"]["queue"] == "research-batch"  # as the table
    cancelled = fedctl(live, "cancel", ids[1], "--reason", "not needed")
    assert cancelled.stdout.strip() == f"job/{ids[1]} cancelled"
    pending = json.loads(fedctl(live, "list", "jobs", "--phase", "Cancelled", "-o", "json").stdout)["jobs"]
    assert ids[1] in [j["id"] for j in pending] and ids[0] not in [j["id"] for j in pending]
    import subprocess

    from tests.processes import BIN

    watch = subprocess.Popen([str(BIN / "fedctl"), "--server", live, "watch", "--after", "0", "-o", "json"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        events = [json.loads(watch.stdout.readline()) for _ in range(3)]
    finally:
        watch.kill()
        watch.wait()
    assert [int(e["sequence"]) for e in events] == [1, 2, 3]


def test_fedctl_admin_commands_and_errors(live: str) -> None:
    created = fedctl(live, "tenant", "create", "vision", "--weight", "2", "--guarantee", "nvidia.com/gpu=8")
    assert created.returncode == 0 and "vision" in created.stdout
    updated = fedctl(live, "tenant", "update", "vision", "--limit", "nvidia.com/gpu=32", "-o", "yaml")
    assert "nvidia.com/gpu: '32'" in updated.stdout and "weight: 2" in updated.stdout
    duplicate = fedctl(live, "tenant", "create", "vision")
    assert duplicate.returncode == 1
    assert duplicate.stderr.strip() == "fedctl: tenant 'vision' already exists (ALREADY_EXISTS)"
    bad = fedctl(live, "queue", "create", "v1", "--tenant", "nobody")
    assert bad.stderr.strip() == "fedctl: queue.tenant: tenant 'nobody' not found"
    queues = fedctl(live, "queue", "list")
    assert queues.stdout.splitlines()[0].split()[:2] == ["NAME", "TENANT"]
    assert fedctl(live, "tenant", "delete", "vision").stdout.strip() == "tenant/vision deleted"
    unreachable = fedctl("127.0.0.1:1", "list", "jobs")
    assert unreachable.returncode == 1
    assert "cannot reach the federation server at 127.0.0.1:1" in unreachable.stderr
    assert "Traceback" not in unreachable.stderr


def test_fedctl_apply_takes_volcano_queues_and_their_hierarchy(live: str, tmp_path: Path) -> None:
    """Volcano's own Queue files (tests/corpus/ecosystem/volcano-queues): fields one to one, the hierarchy
    annotations as parent queues with their weights, and what has no counterpart refused by name."""
    corpus = Path(__file__).parent / "corpus" / "ecosystem" / "volcano-queues"
    applied = fedctl(live, "apply", "-f", str(corpus / "queues_hierarchical.yaml"), "-f",
                     str(corpus / "queue_deployment.yaml"))
    assert applied.returncode == 0, applied.stderr
    assert "queue/eng created" in applied.stdout and "queue/root-eng-prod created" in applied.stdout
    listed = json.loads(fedctl(live, "queue", "list", "-o", "json").stdout)
    queues = {q["name"]: q for q in listed.get("queues", listed) if isinstance(q, dict)}
    assert (queues["root-eng-prod"]["parent"], queues["root-eng-prod"]["weight"]) == ("eng", 8)
    assert (queues["sci"]["weight"], queues["sci"]["tenant"]) == (8, "default")
    assert queues["test"]["limit"] == {"cpu": "2"} and queues["test"]["reclaimable"] is False
    bad = tmp_path / "queue.yaml"
    bad.write_text("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata:\n  name: q2\nspec:\n"
                   "  weight: 1\n  deserved:\n    cpu: 2\n")
    refused = fedctl(live, "apply", "-f", str(bad))
    assert refused.returncode != 0 and f"{bad}:7: spec.deserved: has no counterpart" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert fedctl(live, "queue", "get", "q2").returncode != 0  # nothing applied
    kueue = Path(__file__).parent / "corpus" / "ecosystem" / "kueue" / "admin_single-clusterqueue-setup.yaml"
    applied = fedctl(live, "apply", "-f", str(kueue))
    assert applied.returncode == 0 and "queue/cluster-queue created" in applied.stdout, applied.stderr
    assert "LocalQueue user-queue is not an object here" in applied.stderr
    queue = json.loads(fedctl(live, "queue", "get", "cluster-queue", "-o", "json").stdout)
    queue = queue[0] if isinstance(queue, list) else queue
    assert queue["guarantee"] == {"cpu": "9", "memory": "36Gi"}


def test_fedctl_reads_like_kubectl(live: str, tmp_path: Path) -> None:
    """Verb, kind, name; -f; --dry-run; global flags anywhere; zero values kept; apply says unchanged."""
    from federation.cli.main import cli

    def run(*args: str) -> subprocess.CompletedProcess[str]:  # the server flag after the subcommand
        return subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), *args, "--server", live], capture_output=True,
                              text=True, timeout=60)

    assert run("get", "queues").stdout == run("queue", "list").stdout
    assert run("get", "q", "research-batch").stdout.splitlines()[1].split()[0] == "research-batch"
    assert run("get", "tenants", "-o", "json").returncode == 0
    again = run("apply", "-f", str(EXAMPLES / "admin" / "federation.yaml"))
    assert again.returncode == 0 and set(line.split()[-1] for line in again.stdout.splitlines()) == {"unchanged"}
    status = json.loads(run("queue", "status", "research-batch", "-o", "json").stdout)
    assert status["running"] == 0  # a zero is a value, printed as such

    before = len(_jobs(live))
    job = tmp_path / "job.yaml"
    job.write_text(GOOD)
    dry = run("submit", "-f", str(job), "--dry-run=server")
    assert dry.returncode == 0 and "valid (dry run: server, nothing stored)" in dry.stdout
    assert len(_jobs(live)) == before
    broken = tmp_path / "broken.yaml"
    broken.write_text(GOOD.replace("replicas: 4", "replicas: -4"))
    local = subprocess.run([str(REPO / ".venv" / "bin" / "fedctl"), "submit", "-f", str(broken), "--dry-run=client",
                            "--server", "127.0.0.1:1"], capture_output=True, text=True, timeout=60)
    assert local.returncode == 1 and f"{broken}:{line_of(GOOD, 'replicas: 4')}: spec.tasks[0].replicas" in \
        local.stderr  # found without any server

    submitted = run("submit", "-f", str(job))
    job_id = submitted.stdout.split()[0].removeprefix("job/")
    described = run("describe", "job", job_id).stdout
    assert described.startswith("Id:") and job_id in described.splitlines()[0]
    assert "\nClusters:" in described and "\nEvents:\n" in described  # why it waits per cluster; its events
    assert run("delete", "job", job_id).stdout.strip() == f"job/{job_id} cancelled"
    assert "give the jobs whose pods to show" in run("get", "pods").stderr

    def commands(group: click.Command, path: str = "fedctl") -> list[tuple[str, str]]:
        out = [(path, group.help or "")]
        for name, sub in getattr(group, "commands", {}).items():
            out += commands(sub, f"{path} {name}")
        return out

    assert [path for path, text in commands(cli) if not text.strip()] == []  # help text on every command
    assert "complete" in run("completion", "bash").stdout
    watch = subprocess.Popen([str(REPO / ".venv" / "bin" / "fedctl"), "watch", "--after", "0", "--server", live],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        assert watch.stdout.readline().split()[:4] == ["SEQ", "TIME", "JOB", "EVENT"]  # a header, as tables have
    finally:
        watch.kill()
        watch.wait()
