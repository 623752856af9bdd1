"""Issue 28 (2): fedctl keeps kubectl's habits, against a real server and agent: -l, -n, --sort-by, -o wide,
-o jsonpath=, -o custom-columns=, get -w, get events, describe (fields, pods, clusters, events), version,
cancel of several jobs, and shell completion of kinds and names."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from federation.cli.dev import AgentProcess, ServerProcess
from tests.conftest import REPO
from tests.processes import BIN
from tests.test_volcano_fields import CORPUS

JOB = """apiVersion: batch.volcano.sh/v1alpha1
kind: Job
metadata:
  name: {name}
  namespace: {namespace}
  labels: {labels}
  annotations:
    federation.dev/sim-duration: "600s"
spec:
  queue: research-batch
  tasks:
    - name: worker
      replicas: 1
      template:
        spec:
          containers:
            - name: main
              image: example
              resources:
                requests:
                  cpu: "1"
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("kubectl")
    server = ServerProcess("--data-dir", str(data / "pg"), "--auto-migrate")
    agent = None
    try:
        agent = AgentProcess("cpu", server.address, "--simulate", str(REPO / "examples" / "clusters" /
                                                                         "cpu-small.yaml"))
        assert run(server, "apply", "-f", str(REPO / "examples" / "admin" / "federation.yaml")).returncode == 0
        yield server
    finally:
        if agent is not None:
            agent.stop()
        server.stop()


def run(server: ServerProcess, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "fedctl"), "--server", server.address, *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def submit(server: ServerProcess, tmp: Path, name: str, namespace: str, labels: str) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(JOB.format(name=name, namespace=namespace, labels=labels))
    done = run(server, "submit", "-f", str(path))
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[0].removeprefix("job/")


def test_selectors_namespaces_sorting_and_output_formats(server: ServerProcess, tmp_path: Path) -> None:
    a = submit(server, tmp_path, "sel-a", "team-a", "{team: a, tier: gold}")
    b = submit(server, tmp_path, "sel-b", "team-b", "{team: b}")
    c = submit(server, tmp_path, "sel-c", "team-a", "{}")

    def ids(*args: str) -> list[str]:
        done = run(server, "get", "jobs", *args, "-o", "jsonpath={.jobs[*].id}")
        assert done.returncode == 0, done.stderr
        return [i for i in done.stdout.split() if i in (a, b, c)]

    assert ids("-l", "team=a") == [a]
    assert ids("-l", "team in (a,b)") == [a, b]
    assert ids("-l", "!team") == [c]
    assert ids("-l", "team,tier!=gold") == [b]
    assert ids("-n", "team-a") == [a, c]
    assert ids("--sort-by", ".spec.name") == [a, b, c]
    names = run(server, "get", "jobs", "--sort-by", ".spec.name", "-l", "team", "-o",
                "custom-columns=NAME:.spec.name,NS:.spec.namespace,TEAM:.spec.labels.team").stdout.splitlines()
    assert [line.split() for line in names] == [["NAME", "NS", "TEAM"], ["sel-a", "team-a", "a"],
                                                ["sel-b", "team-b", "b"]]
    wide = run(server, "get", "jobs", "-o", "wide").stdout.splitlines()
    assert {"GPUS", "PODS", "ATTEMPT", "LABELS"} <= set(wide[0].split())
    bad = run(server, "get", "jobs", "-l", "team in a")
    assert bad.returncode == 2 and "is not a label requirement" in bad.stderr
    badpath = run(server, "get", "jobs", "-o", "jsonpath={.status..[}")
    assert badpath.returncode == 2 and "not a path fedctl can read" in badpath.stderr


def test_describe_events_version_and_cancelling_several(server: ServerProcess, tmp_path: Path) -> None:
    job = submit(server, tmp_path, "described", "team-a", "{team: a}")
    other = submit(server, tmp_path, "other", "team-a", "{}")
    described = run(server, "describe", "job", job)
    assert described.returncode == 0, described.stderr
    text = described.stdout
    assert text.startswith("Id:") and "\nSpec:\n" in text and "\nPods:" in text and "\nClusters:" in text
    assert "PodTemplateJson:" in text and '\\"' not in text  # the template as structure, not an escaped string
    events_part = text.split("\nEvents:\n", 1)[1]
    assert "Submitted" in events_part
    events = run(server, "get", "events", job)
    assert events.returncode == 0 and events.stdout.split()[:6] == ["SEQ", "AGE", "JOB", "TYPE", "CLUSTER",
                                                                    "MESSAGE"]
    assert "Submitted" in events.stdout and other not in events.stdout

    version = run(server, "version")
    assert version.returncode == 0, version.stderr
    from federation import __version__
    from federation.store.database import head_revision
    assert version.stdout.splitlines() == [f"Client Version: {__version__}",
                                           f"Server Version: {__version__} (API federation.v1, schema "
                                           f"{head_revision()})"]
    assert json.loads(run(server, "version", "-o", "json").stdout)["schemaRevision"] == head_revision()

    cancelled = run(server, "cancel", job, "nosuch-job", other, "--reason", "done with it")
    assert cancelled.returncode == 1
    assert cancelled.stdout.splitlines() == [f"job/{job} cancelled", f"job/{other} cancelled"]
    assert "job/nosuch-job: job 'nosuch-job' not found" in cancelled.stderr


def test_get_watch_prints_a_row_as_a_job_changes(server: ServerProcess, tmp_path: Path) -> None:
    watch = subprocess.Popen([str(BIN / "fedctl"), "--server", server.address, "get", "jobs", "-w", "-l", "w=1"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert watch.stdout is not None
        first = watch.stdout.readline()  # the table first: no job has w=1 yet
        assert "No resources found." in first
        job = submit(server, tmp_path, "watched", "team-a", "{w: '1'}")
        submit(server, tmp_path, "unwatched", "team-a", "{w: '2'}")
        line = watch.stdout.readline()
        assert line.startswith(job), line
    finally:
        watch.terminate()
        watch.wait(30)


def test_completion_of_kinds_and_names(server: ServerProcess, tmp_path: Path) -> None:
    job = submit(server, tmp_path, "completed-name", "team-a", "{}")

    def complete(words: str) -> list[str]:
        done = subprocess.run([str(BIN / "fedctl")], capture_output=True, text=True, timeout=60, env={
            **os.environ, "_FEDCTL_COMPLETE": "bash_complete", "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split(" ")) - 1), "FEDERATION_SERVER": server.address})
        return [line.split(",", 1)[1] for line in done.stdout.splitlines() if "," in line]

    assert complete("fedctl get jo") == ["jobs"]
    assert job in complete("fedctl get jobs ")
    assert complete("fedctl describe queue research-b") == ["research-batch"]
    assert job in complete(f"fedctl cancel {job[:6]}")


def test_get_job_as_yaml_is_the_volcano_job_and_submits_again(server: ServerProcess, tmp_path: Path) -> None:
    """`fedctl get job -o yaml` prints the Volcano Job with a status, as `kubectl get vcjob -o yaml` does, and
    what it prints is a manifest `fedctl submit` takes again (its status and server-set metadata ignored)."""
    import yaml

    job = submit(server, tmp_path, "roundtrip", "team-a", "{team: a}")
    printed = run(server, "get", "job", job, "-o", "yaml")
    assert printed.returncode == 0, printed.stderr
    obj = yaml.safe_load(printed.stdout)
    assert (obj["apiVersion"], obj["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert obj["metadata"]["name"] == "roundtrip" and obj["metadata"]["namespace"] == "team-a"
    assert obj["metadata"]["labels"] == {"team": "a"}
    assert obj["metadata"]["annotations"]["federation.dev/job-id"] == job
    assert obj["spec"]["queue"] == "research-batch"
    (task,) = obj["spec"]["tasks"]
    assert task["replicas"] == 1 and task["template"]["spec"]["containers"][0]["image"] == "example"
    assert obj["status"]["state"]["phase"] in ("Pending", "Running")
    again = tmp_path / "again.yaml"
    again.write_text(printed.stdout)
    resubmitted = run(server, "submit", "-f", str(again))
    assert resubmitted.returncode == 0, resubmitted.stderr
    new = resubmitted.stdout.split()[0].removeprefix("job/")
    assert new != job  # a new job, which does not carry the old one's id (issue 42, 8)
    stored = json.loads(run(server, "get", "job", new, "-o", "json").stdout)["spec"].get("annotations", {})
    assert "federation.dev/job-id" not in stored, stored
    several = yaml.safe_load(run(server, "get", "jobs", "-l", "team=a", "-o", "yaml").stdout)
    assert several["kind"] == "List" and {i["kind"] for i in several["items"]} == {"Job"}


def test_convert_output_of_queues_and_jobs_is_applied_then_submitted(server: ServerProcess, tmp_path: Path) -> None:
    """Issue 42 (7): a Kueue setup and its job converted in one call gave one stream of queues and jobs, which
    neither `apply` nor `submit` took. Each takes its part and says what it left for the other; a cohort-less
    ClusterQueue keeps Kueue's meaning, capped at its nominal quota."""
    setup, job = CORPUS / "kueue" / "admin_single-clusterqueue-setup.yaml", CORPUS / "kueue" / "jobs_sample-job.yaml"
    converted = run(server, "convert", "-f", str(setup), "-f", str(job))
    assert converted.returncode == 0, converted.stderr
    assert "has no cohort: capped at its nominal quota" in converted.stderr
    queue = next(o for o in yaml.safe_load_all(converted.stdout) if o["kind"] == "Queue")
    assert queue["spec"]["limit"] == queue["spec"]["guarantee"] and queue["spec"]["guarantee"]
    mixed = tmp_path / "converted.yaml"
    mixed.write_text(converted.stdout)
    run(server, "tenant", "create", "default")  # the tenant converted queues go to (already there: fine)
    applied = run(server, "apply", "-f", str(mixed))
    assert applied.returncode == 0, applied.stderr
    assert f"queue/{queue['metadata']['name']} created" in applied.stdout
    assert f"note: 1 job manifest left for 'fedctl submit -f {mixed}'" in applied.stderr
    submitted = run(server, "submit", "-f", str(mixed))
    assert submitted.returncode == 0, submitted.stderr
    assert submitted.stdout.startswith("job/sample-job-")
    assert f"note: 1 admin object left for 'fedctl apply -f {mixed}'" in submitted.stderr
    only = tmp_path / "queue.yaml"  # a stream of nothing it takes: refused at the document, as before
    only.write_text(yaml.safe_dump(queue))
    refused = run(server, "submit", "-f", str(only))
    assert refused.returncode != 0 and f"{only}:" in refused.stderr and "for 'fedctl apply -f'" in refused.stderr


def test_fedctl_starts_without_the_kubernetes_client_or_cel() -> None:
    """Issue 42 (8): every fedctl call spent 0.5 s importing, 0.22 s of it the whole Kubernetes client (for its
    quantity parser) and cel-python besides; a TAB completion took 2-2.8 s. They are imported when first used."""
    loaded = subprocess.run([str(BIN / "python"), "-c", "import sys, federation.cli.main; "
                             "print(sorted(m for m in ('kubernetes', 'celpy') if m in sys.modules))"],
                            capture_output=True, text=True, timeout=60)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
    from federation.kernel.resources import parse_amount  # and when used, they are there

    assert parse_amount("memory", "1Gi") == 2**30


def test_a_token_given_to_an_insecure_dev_server_is_warned_of(server: ServerProcess) -> None:
    """Issue 42 (8): with --insecure-dev, `--token bogus` showed every tenant without a word. The server says in
    the call's trailing metadata that the token was not checked; fedctl shows it once, as kubectl shows Warning:."""
    given = run(server, "--token", "bogus", "list", "jobs")
    assert given.returncode == 0, given.stderr
    assert given.stderr.count("fedctl: warning: the server runs with --insecure-dev: your token was not checked") == 1
    assert "insecure-dev" not in run(server, "list", "jobs").stderr  # no token, nothing to warn of


def test_cancel_and_delete_pick_jobs_as_kubectl_delete_does(server: ServerProcess, tmp_path: Path) -> None:
    """Issue 42 (8): `-l`, `--all` and `-n` on cancel and delete, `-o name`, a phase filter on get
    (`--field-selector status.phase=...`), and a jsonpath that matches nothing printing nothing."""
    x = [submit(server, tmp_path, f"sweep-x{i}", "sweep", "{sweep: x}") for i in range(2)]
    y = submit(server, tmp_path, "sweep-y", "sweep", "{sweep: y}")
    names = run(server, "get", "jobs", "-l", "sweep", "-o", "name")
    assert sorted(names.stdout.split()) == sorted(f"job/{j}" for j in [*x, y]), names.stderr
    cancelled = run(server, "cancel", "-l", "sweep=x", "--reason", "sweep")
    assert cancelled.returncode == 0, cancelled.stderr
    assert sorted(cancelled.stdout.split("\n")[:-1]) == sorted(f"job/{j} cancelled" for j in x)
    gone = run(server, "get", "jobs", "-l", "sweep", "--field-selector", "status.phase=Cancelled", "-o", "name")
    assert sorted(gone.stdout.split()) == sorted(f"job/{j}" for j in x)
    alive = run(server, "get", "jobs", "-l", "sweep", "--field-selector", "status.phase!=Cancelled", "-o", "name")
    assert alive.stdout.split() == [f"job/{y}"]
    assert run(server, "delete", "jobs", "-l", "sweep=y", "-n", "elsewhere").stdout == ""  # not in that namespace
    deleted = run(server, "delete", "jobs", "-l", "sweep=y", "-n", "sweep")
    assert deleted.returncode == 0 and deleted.stdout.strip() == f"job/{y} cancelled", deleted.stderr
    again = run(server, "cancel", "-l", "sweep")  # none left that has not ended
    assert again.returncode == 0 and again.stdout == "" and "No resources found." in again.stderr
    nothing = run(server, "get", "jobs", "-l", "sweep=none", "-o", "jsonpath={.jobs[*].id}")
    assert nothing.returncode == 0 and nothing.stdout == ""
    for wrong in (("cancel",), ("cancel", x[0], "--all"), ("delete", "queue", "--all")):
        refused = run(server, *wrong)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, (wrong, refused.stderr)


def test_jobs_are_listed_by_the_cluster_they_were_sent_to(server: ServerProcess, tmp_path: Path) -> None:
    """Issue 42 (9): the dashboard's cluster filter picked from a 50-row page; the API filters by cluster now
    (ListJobsRequest.cluster), for the dashboard and `fedctl list jobs --cluster`."""
    from tests.test_e2e_agents import wait_for

    job = submit(server, tmp_path, "where", "team-c", "{}")
    wait_for("the job to be sent to cpu", lambda: run(server, "get", "job", job, "-o",
                                                       "jsonpath={.status.cluster}").stdout.strip() == "cpu")
    assert f"job/{job}" in run(server, "list", "jobs", "--cluster", "cpu", "-o", "name").stdout.split()
    assert run(server, "list", "jobs", "--cluster", "elsewhere", "-o", "name").stdout == ""
