"""The federation with real processes: server, two simulated member agents, gangs over gRPC."""

import re
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.conftest import REPO
from tests.processes import fedctl

pytestmark = pytest.mark.e2e
CLUSTERS = REPO / "examples" / "clusters"
GPU = "nvidia.com/gpu"


def wait_for(what: str, probe: Callable[[], object], timeout: float = 60,
             state: Callable[[], object] | None = None) -> object:
    """`state`: what to show of the system when the wait times out (a failure seen once under load must say more
    than that it timed out)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}" + (f"; as it stands: {state()}" if state else ""))


def by_either_path(reason: str) -> tuple[str, str]:
    """A dispatch's reason as a cycle words it, and as admission on arrival does ("dispatched to cluster a (on
    arrival)..."): a job submitted to an idle federation goes by the one or the other, as it happens, depending on
    whether a cycle has looked at its queue since the queue was made."""
    head = re.match(r"dispatched to cluster [^ ;(]+", reason)
    assert head is not None, reason
    rest = reason[head.end():]
    said = f" (on arrival; {rest[2:]}" if rest.startswith(" (") else f" (on arrival){rest}"
    return reason, head.group() + said


class Federation:
    def __init__(self, db_url: URL) -> None:
        self.server = ServerProcess("--database-url", db_url.render_as_string(hide_password=False))
        self.agents = {
            "h100": AgentProcess("h100", self.server.address, "--simulate", str(CLUSTERS / "h100-spine-leaf.yaml"),
                                 "--label", "accelerator=h100", "--heartbeat", "0.5"),
            "gb300": AgentProcess("gb300", self.server.address, "--simulate", str(CLUSTERS / "gb300-nvl72.yaml"),
                                  "--label", "accelerator=gb300", "--heartbeat", "0.5"),
        }
        channel = grpc.insecure_channel(self.server.address)
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)

    def ready(self) -> set[str]:
        clusters = self.admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
        return {c.name for c in clusters if c.status == admin_pb2.READY and c.nodes}

    def job(self, job_id: str) -> common_pb2.Job:
        return self.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        self.server.stop()


@pytest.fixture
def federation(db_url: URL) -> Iterator[Federation]:
    fed = Federation(db_url)
    try:
        wait_for("both clusters Ready", lambda: fed.ready() == {"h100", "gb300"})
        fed.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
        fed.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="train", tenant="ml")))
        yield fed
    finally:
        fed.close()


def gang(name: str, pods: int, gpus: int, mode: str = "", tier: int = 0, accelerator: str = "h100",
         duration: str = "2s", **task: object) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=name, queue="train", cluster_selector={"accelerator": accelerator},
        annotations={"federation.dev/sim-duration": duration},
        network_topology=common_pb2.NetworkTopology(mode=mode, highest_tier_allowed=tier),
        tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: str(gpus), "cpu": "8"}, **task)])


def leaf(node: str) -> str:
    return node.rsplit("-", 1)[0]  # h100-<spine>-<leaf>-<n>: its tier-1 HyperNode


def spine(node: str) -> str:
    return node.rsplit("-", 2)[0]


def test_gangs_are_placed_within_their_tier_limits_and_finish(federation: Federation) -> None:
    specs = [
        gang("hard-leaf", 4, 8, "hard", 1),
        gang("soft-leaf", 6, 8, "soft", 1),
        gang("hard-spine", 8, 8, "hard", 2),
        gang("too-big-for-a-leaf", 5, 8, "hard", 1, duration="1s"),
        gang("nvl72-parts", 8, 4, accelerator="gb300", partition_policy=common_pb2.PartitionPolicy(
            total_partitions=2, partition_size=4, network_topology=common_pb2.NetworkTopology(
                mode="hard", highest_tier_allowed=1))),
    ]
    ids = [r.job_id for r in federation.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs)).results]
    jobs = dict(zip([s.name for s in specs], ids, strict=True))
    finished = {"hard-leaf", "soft-leaf", "hard-spine", "nvl72-parts"}

    def all_succeeded() -> bool:
        return all(federation.job(jobs[n]).status.phase == common_pb2.SUCCEEDED for n in finished)

    wait_for("the placeable gangs to succeed", all_succeeded, 90)
    placed = {n: federation.job(jobs[n]) for n in finished}
    hard_leaf = placed["hard-leaf"].status
    assert hard_leaf.cluster == "h100" and hard_leaf.tier == 1
    assert len({leaf(p.node) for p in hard_leaf.placements}) == 1 and hard_leaf.hypernode == leaf(
        hard_leaf.placements[0].node)
    assert len(hard_leaf.placements) == 4
    soft = placed["soft-leaf"].status
    assert len(soft.placements) == 6 and soft.tier == 2  # widened: a leaf holds only 4 such pods
    spine_job = placed["hard-spine"].status
    assert len({spine(p.node) for p in spine_job.placements}) == 1 and spine_job.tier <= 2
    parts = placed["nvl72-parts"].status
    assert parts.cluster == "gb300"
    by_partition: dict[int, set[str]] = {}
    for p in parts.placements:
        by_partition.setdefault(p.index // 4, set()).add(leaf(p.node))
    assert all(len(racks) == 1 for racks in by_partition.values())

    # Never split over two leaves; once the agents have reported their largest leaves, the job is
    # known never to fit and says so (before that, it only waits for room).
    wait_for("the too-big gang to be explained as one that cannot run",
             lambda: federation.job(jobs["too-big-for-a-leaf"]).status.reason.startswith("cannot run"))
    too_big = federation.job(jobs["too-big-for-a-leaf"])
    assert too_big.status.phase == common_pb2.PENDING
    assert too_big.status.reason == ("cannot run: needs nvidia.com/gpu=40 within one HyperNode of tier 1; "
                                     "the most any cluster offers is nvidia.com/gpu=32 (h100)")
    assert too_big.status.cluster == "" and not too_big.status.placements


def test_pods_select_nodes_by_labels_the_federation_checks_before_sending(federation: Federation) -> None:
    """Issue 42 (1). Volcano's own task-start-dependency example selects `kubernetes.io/os: linux`, a label the
    kubelet gives every node: it runs. A selector no node matches is never sent to a cluster (each would refuse
    it, again and again): the job waits, and its reason and each cluster's verdict name the label."""
    linux = gang("linux", 2, 8, node_selector={"kubernetes.io/os": "linux"})
    ssd = gang("ssd", 1, 8, accelerator="gb300", node_selector={"disktype": "ssd", "kubernetes.io/os": "linux"})
    ids = [r.job_id for r in federation.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[linux, ssd])).results]
    wait_for("the linux job to succeed", lambda: federation.job(ids[0]).status.phase == common_pb2.SUCCEEDED, 90)
    wait_for("the ssd job's reason", lambda: "disktype=ssd" in federation.job(ids[1]).status.reason)
    waiting = federation.job(ids[1]).status
    assert waiting.reason == ("cannot run: no member cluster matches its selector (it needs nodes labelled "
                              "disktype=ssd,kubernetes.io/os=linux, as its pods' nodeSelector asks)")
    assert waiting.phase == common_pb2.PENDING and waiting.attempt == 0  # never dispatched
    rows = {c.cluster: c.reason for c in federation.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=ids[1])).clusters}
    assert rows["gb300"] == "no node has label disktype=ssd (its pods' nodeSelector)", rows


def test_cancel_reaches_the_agent_and_frees_its_resources(federation: Federation) -> None:
    big = federation.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=gang("long", 32, 8, duration="10m"))).job
    wait_for("the long job to run", lambda: federation.job(big.id).status.phase == common_pb2.RUNNING)
    queued = federation.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=gang("next", 4, 8))).job
    time.sleep(1.5)
    assert federation.job(queued.id).status.phase == common_pb2.PENDING  # the cluster is full
    federation.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=big.id))
    wait_for("the queued job to finish on the freed nodes",
             lambda: federation.job(queued.id).status.phase == common_pb2.SUCCEEDED, 60)


def test_fedctl_shows_placements(federation: Federation) -> None:
    done = federation.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=gang("shown", 2, 8, "hard", 1))).job
    wait_for("the job to succeed", lambda: federation.job(done.id).status.phase == common_pb2.SUCCEEDED)
    shown = fedctl(federation.server.address, "get", "job", done.id)
    assert "Succeeded" in shown.stdout and "h100" in shown.stdout
    rows = [line.split() for line in shown.stdout.splitlines()]
    pods = [row for row in rows if len(row) > 6 and row[1].startswith(f"{done.id}-")]
    # one row per pod, as its cluster last reported it: name, namespace, task, index, node, status
    assert sorted(row[1] for row in pods) == [f"{done.id}-worker-0", f"{done.id}-worker-1"]
    assert all(row[3] == "worker" and row[5].startswith("h100-") and row[6] == "Succeeded" for row in pods)


def test_demo_runs_every_example_to_success_and_leaves_nothing_behind(tmp_path: Path) -> None:
    import subprocess

    import psutil

    from tests.processes import BIN, postgres_running_in

    data_dir = tmp_path / "pg"
    before = {p.pid for p in psutil.process_iter()}
    done = subprocess.run([str(BIN / "fedctl"), "dev", "demo", "--data-dir", str(data_dir), "--examples",
                           str(REPO / "examples")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.split("summary\n", 1)[1]
    rows = [line for line in summary.splitlines()[1:] if line and not line.startswith("stopped")]
    assert len(rows) == len(list((REPO / "examples" / "jobs").glob("*.yaml")))
    assert all(" Succeeded " in row for row in rows)
    time.sleep(1)
    # Its processes name its directory (data, certificates): another federation on the machine is not its own.
    leftovers = [p for p in psutil.process_iter(["cmdline"]) if p.pid not in before
                 and str(tmp_path) in " ".join(p.info["cmdline"] or [])
                 and any(name in " ".join(p.info["cmdline"] or []) for name in ("federation-server", "member-agent"))]
    assert leftovers == [] and postgres_running_in(data_dir) == []


def test_dev_up_serves_fedctl_until_interrupted_and_leaves_nothing_behind(tmp_path: Path) -> None:
    import signal
    import subprocess

    import psutil

    from tests.processes import BIN, postgres_running_in

    data_dir = tmp_path / "pg"
    command = [str(BIN / "fedctl"), "dev", "up", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0",
               "--metrics-listen", "127.0.0.1:0", "--agent-admin-port", "0", "--ui-listen", "127.0.0.1:0",
               "--examples", str(REPO / "examples")]
    up = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert up.stdout is not None
        out = b""
        for line in up.stdout:
            out += line
            if b"dashboard at" in line:  # the last line before it serves
                break
        address = out.decode().rsplit("federation ready at ", 1)[1].split()[0]
        started = psutil.Process(up.pid).children(recursive=True)
        commands = " ".join(" ".join(p.cmdline()) for p in started)
        assert "federation-server serve" in commands and commands.count("member-agent --cluster") == 3
        # A second one over the same data directory is refused in one line and wipes nothing.
        second = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert second.returncode != 0 and "belongs to a local federation that is running" in second.stderr
        assert "Traceback" not in second.stderr + second.stdout
        # What it prints can be followed: the metrics address answers, each process has its log file.
        text = out.decode()
        metrics = text.split("metrics on ", 1)[1].split()[0].rstrip(",")
        assert b"grpc_server_handled_total" in urllib.request.urlopen(metrics, timeout=10).read()
        logs = text.split("logs: ", 1)[1].splitlines()[0].split(", ")
        assert len(logs) == 4 and all(Path(log).stat().st_size > 0 for log in logs)
        assert "fault injection on 127.0.0.1:" in text
        dashboard = text.split("dashboard at ", 1)[1].split()[0]
        assert b"research-batch" in urllib.request.urlopen(f"{dashboard}/queues", timeout=10).read()
        # Issue 42 (9): the node-level view, from what the agents report: h100's 32 nodes, each with 8 GPUs free.
        page = urllib.request.urlopen(f"{dashboard}/clusters", timeout=10).read().decode()
        h100 = page.split('data-cluster="h100"', 1)[1].split("</section>", 1)[0]
        assert "Most free on one node:\n    8 of 8 GPUs</p>" in h100, h100
        free_nodes = h100.split('class="free-nodes"', 1)[1].split("</table>", 1)[0]
        assert [(f, int(n)) for f, n in re.findall(r"<td>(\d+)</td>.*?class=\"label\">(\d+)<", free_nodes,
                                                    re.S)] == [("8", 32)]
        cpu = page.split('data-cluster="cpu"', 1)[1].split("</section>", 1)[0]
        assert "free-nodes" not in cpu  # no GPUs there: nothing to say node by node
        described = fedctl(address, "describe", "cluster", "h100").stdout
        assert described.split("Nodes by free GPUs:\n", 1)[1].split("\n")[:2] == ["  FREE GPUS  NODES",
                                                                                "  8          32"], described
        submitted = fedctl(address, "submit", str(REPO / "examples" / "jobs" / "cpu-batch.yaml"))
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split("job/", 1)[1].split()[0]
        wait_for("the job to succeed", lambda: "Succeeded" in fedctl(address, "get", "job", job_id).stdout,
                 timeout=60)
        up.send_signal(signal.SIGINT)  # Ctrl-C
        rest, _ = up.communicate(timeout=60)
        assert up.returncode == 0, (out + rest).decode()
        assert b"stopped 4 processes" in rest
    finally:
        if up.poll() is None:  # it failed: stop it as a user would, so it stops what it started
            up.terminate()
            up.wait(60)
    psutil.wait_procs(started, timeout=10)
    assert [p for p in started if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert postgres_running_in(data_dir) == []


def test_dev_up_with_tokens_is_a_federation_with_tenants_in_one_command(tmp_path: Path) -> None:
    """Issue 42 (13): trying tenants locally took eight steps (certificates, db upgrade, the first token, a server
    with eight flags...). `fedctl dev up --tokens` requires tokens and prints an admin's and each tenant's; what
    one tenant submits, another cannot see."""
    import os
    import signal
    import subprocess

    from tests.processes import BIN

    up = subprocess.Popen([str(BIN / "fedctl"), "dev", "up", "--tokens", "--data-dir", str(tmp_path / "pg"),
                           "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--agent-admin-port", "0",
                           "--ui-listen", "127.0.0.1:0", "--examples", str(REPO / "examples")],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        assert up.stdout is not None
        out = b""
        for line in up.stdout:
            out += line
            if b"dashboard at" in line:
                break
        text = out.decode()
        address = text.rsplit("federation ready at ", 1)[1].split()[0]
        tokens = dict(line.split()[:2] for line in text.split("tokens (", 1)[1].splitlines()[1:4])
        assert set(tokens) == {"admin:", "research:", "product:"}, text
        ca = text.split("export FEDERATION_CA=", 1)[1].split()[0]

        def as_(who: str, *args: str) -> subprocess.CompletedProcess[str]:
            env = {k: v for k, v in os.environ.items() if k != "FEDERATION_TOKEN"} | {"FEDERATION_CA": ca}
            if who:
                env["FEDERATION_TOKEN"] = tokens[who]
            return subprocess.run([str(BIN / "fedctl"), "--server", address, *args], capture_output=True, text=True,
                                  timeout=60, env=env)

        nobody = as_("", "list", "jobs")
        assert nobody.returncode != 0 and "UNAUTHENTICATED" in nobody.stderr, nobody.stderr
        submitted = as_("research:", "submit", str(REPO / "examples" / "jobs" / "cpu-batch.yaml"))
        assert submitted.returncode == 0, submitted.stderr
        job_id = submitted.stdout.split("job/", 1)[1].split()[0]
        assert job_id in as_("admin:", "list", "jobs").stdout
        hidden = as_("product:", "get", "job", job_id)
        assert hidden.returncode != 0 and "not found" in hidden.stderr.lower(), hidden.stderr
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            up.kill()


def test_a_failed_jobs_pods_are_reported_as_they_ended(federation: Federation) -> None:
    """Issue 42 (2): on the simulated backend a Failed job's pod was still listed Running and `get job -o yaml`
    said `failed: 0`. Its failed pod is listed Failed (with why); the pods its end stopped are gone, as Volcano
    deletes them; and the Volcano status counts the failure."""
    import yaml

    spec = gang("fails", 2, 8, duration="10m")
    spec.max_retry = 0  # a failure no policy names fails the job at once
    job_id = federation.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec)).job.id
    wait_for("the job to run", lambda: federation.job(job_id).status.phase == common_pb2.RUNNING)
    wait_for("its pods running", lambda: [p.phase for p in federation.job(job_id).status.pods] == ["Running"] * 2)
    admin = federation.agents["h100"].admin
    urllib.request.urlopen(urllib.request.Request(f"http://{admin}/faults/pod/{job_id}/worker/1/fail",
                                                  method="POST"), timeout=30).close()
    wait_for("the job to fail", lambda: federation.job(job_id).status.phase == common_pb2.FAILED)
    wait_for("its pods as they ended", lambda: [(p.index, p.phase) for p in federation.job(job_id).status.pods]
             == [(1, "Failed")])
    (pod,) = federation.job(job_id).status.pods
    assert "failed by fault injection" in pod.message
    printed = fedctl(federation.server.address, "get", "job", job_id, "-o", "yaml")
    status = yaml.safe_load(printed.stdout)["status"]
    assert status["failed"] == 1 and status["running"] == 0, status
