"""Fair share, reclaim, priority preemption, limits and leader failover with real processes.

Each test runs federation-server processes on a real PostgreSQL database and simulated
member-agent processes: two member clusters of four 8-GPU nodes (64 GPUs in all).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import pytest
import yaml
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from federation.cli.dev import AgentProcess, ServerProcess
from federation.store.phases import ACTIVE_PHASES
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from member_agent import clusters
from tests.netproxy import proxied
from tests.test_e2e_agents import GPU, wait_for

pytestmark = pytest.mark.e2e
CLUSTERS = ("east", "west")
CAPACITY = 64


class Federation:
    """Server replicas and one simulated agent per member cluster; API calls go to the first replica."""

    def __init__(self, db_url: URL, tmp_path: Path, replicas: int = 1, *server_args: str,
                 urls: list[URL] | None = None, envs: list[dict[str, str]] | None = None) -> None:
        """`urls`: each replica's own way to PostgreSQL (through a proxy, say); the same database. `envs`: each
        replica's extra environment (failpoints)."""
        self.db_url = db_url
        urls = urls or [db_url] * replicas
        envs = envs or [{}] * len(urls)
        self.servers = [ServerProcess("--database-url", url.render_as_string(hide_password=False), *server_args,
                                      env={**os.environ, **env})
                        for url, env in zip(urls, envs, strict=True)]
        self.agents: dict[str, AgentProcess] = {}
        for i, name in enumerate(CLUSTERS):
            path = tmp_path / f"{name}.yaml"
            path.write_text(yaml.safe_dump_all(clusters.tree(f"{name}-", [1, 2, 2], clusters.H100), sort_keys=False))
            self.agents[name] = AgentProcess(name, self.target(i), "--simulate", str(path), "--heartbeat", "0.5")
        self.connect(self.servers[0].address)

    def target(self, first: int) -> str:
        """Every replica, starting with the `first`-th, for gRPC's pick_first: an agent moves on when its dies."""
        addresses = [s.address for s in self.servers]
        return "ipv4:" + ",".join(addresses[first % len(addresses):] + addresses[:first % len(addresses)])

    def connect(self, address: str) -> None:
        channel = grpc.insecure_channel(address)
        self.jobs = jobs_pb2_grpc.JobServiceStub(channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)

    def ready(self) -> bool:
        found = self.admin.ListClusters(admin_pb2.ListClustersRequest()).clusters
        return {c.name for c in found if c.status == admin_pb2.READY and c.nodes} == set(CLUSTERS)

    def tenant(self, name: str, weight: int = 1, **fields: Mapping[str, str]) -> None:
        self.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(
            name=name, weight=weight, **fields)))

    def queue(self, name: str, tenant: str, **fields: object) -> None:
        self.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name=name, tenant=tenant, **fields)))

    def submit(self, queue: str, count: int, pods: int, gpus: int, duration: str, priority_class: str = "",
               name: str = "job") -> list[str]:
        return self.submit_specs([spec(queue, pods, gpus, duration, priority_class, name)] * count)

    def submit_specs(self, specs: list[common_pb2.JobSpec]) -> list[str]:
        return [r.job_id for r in self.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=specs)).results]

    def gpus(self, queue: str) -> int:
        usage = self.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name=queue)).usage
        return int(usage.get(GPU, "0"))

    def held_gpus(self, *queues: str) -> dict[str, int]:
        """GPUs the jobs of these queues hold (dispatched or running), as PostgreSQL has them at one moment: one
        statement, so the queues' figures add up (two GetQueueStatus calls are two moments, maybe a cycle, apart)."""
        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT queue, sum((request->>:gpu)::bigint) FROM jobs "
                                         "WHERE queue = ANY(:queues) AND phase = ANY(:active) GROUP BY queue"),
                                    {"gpu": GPU, "queues": list(queues), "active": list(ACTIVE_PHASES)})
                return {queue: 0 for queue in queues} | {queue: int(gpus or 0) for queue, gpus in rows}
        finally:
            engine.dispose()

    def job(self, job_id: str) -> common_pb2.Job:
        return self.jobs.GetJob(jobs_pb2.GetJobRequest(id=job_id))

    def cancel(self, job_id: str) -> None:
        """Cancel as a client must: resent while the server answers UNAVAILABLE ("retry"), which it may while a
        stalled replica's sessions are being ended or the machine is loaded; cancelling twice is harmless."""
        deadline = time.monotonic() + 60
        while True:
            try:
                self.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=job_id))
                return
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:  # type: ignore[attr-defined]
                    raise
                time.sleep(0.5)

    def events(self, *types: str) -> list[tuple[str, str, str, int, str]]:
        """(job, queue, type, attempt, message) of every logged event of these types (none named: of all), in
        order."""
        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(text("SELECT job_id, queue, type, attempt, message FROM job_events "
                                         "WHERE cardinality(CAST(:types AS text[])) = 0 "
                                         "OR type = ANY(CAST(:types AS text[])) ORDER BY seq"),
                                    {"types": list(types)})
                return [tuple(r) for r in rows]  # type: ignore[misc]
        finally:
            engine.dispose()

    def story(self, cluster: str, jobs: list[str]) -> str:
        """What a timed-out wait must show (a failure seen once in a loaded run has to say why): the clusters as the
        answering replica lists them, these jobs' phases, reasons and clusters, and the last words of the cluster's
        agent and of every replica."""
        clusters = [(c.name, admin_pb2.ClusterStatus.Name(c.status), c.problem)
                    for c in self.admin.ListClusters(admin_pb2.ListClustersRequest()).clusters]
        jobs_now = [(j, common_pb2.JobPhase.Name(s.phase), s.cluster, s.reason)
                    for j, s in ((j, self.job(j).status) for j in jobs)]
        tails = [f"--- agent of {cluster}:\n" + self.agents[cluster].log.decode(errors="replace")[-3000:]]
        tails += [f"--- replica {i}:\n" + s.log.decode(errors="replace")[-3000:] for i, s in enumerate(self.servers)]
        return f"clusters {clusters}\njobs {jobs_now}\nsessions {self.sessions()}\n" + "\n".join(tails)

    def sessions(self) -> list[tuple[object, ...]]:
        """The replicas' PostgreSQL sessions: what each waits on and which sessions block it (a replica stuck behind
        the locks of one that was frozen mid-transaction would show here)."""
        engine = create_engine(self.db_url)
        try:
            with engine.connect() as conn:
                return [tuple(row) for row in conn.execute(text(
                    "SELECT pid, application_name, state, wait_event_type, wait_event, pg_blocking_pids(pid), "
                    "now() - xact_start, left(query, 100) FROM pg_stat_activity "
                    "WHERE application_name LIKE 'federation-server%' ORDER BY pid"))]
        finally:
            engine.dispose()

    def close(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        for server in self.servers:
            if server.proc.poll() is None:
                server.stop()


def spec(queue: str, pods: int, gpus: int, duration: str, priority_class: str = "", name: str = "job"
         ) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(
        name=name, queue=queue, priority_class_name=priority_class,
        annotations={"federation.dev/sim-duration": duration},
        tasks=[common_pb2.TaskSpec(name="worker", replicas=pods, resources={GPU: str(gpus), "cpu": "8"})])


def start(db_url: URL, tmp_path: Path, replicas: int = 1, *server_args: str, urls: list[URL] | None = None,
          envs: list[dict[str, str]] | None = None) -> Federation:
    fed = Federation(db_url, tmp_path, replicas, *server_args, urls=urls, envs=envs)
    try:
        wait_for("both clusters Ready", fed.ready)
    except BaseException:
        fed.close()
        raise
    return fed


@pytest.fixture
def federation(db_url: URL, tmp_path: Path) -> Iterator[Federation]:
    fed = start(db_url, tmp_path)
    try:
        yield fed
    finally:
        fed.close()


def test_weights_one_to_three_share_a_flooded_federation_one_to_three(federation: Federation) -> None:
    federation.tenant("light", weight=1)
    federation.tenant("heavy", weight=3)
    federation.queue("light-q", "light")
    federation.queue("heavy-q", "heavy")
    # Both at once, far more than fits: each tenant alone could fill the federation five times over.
    federation.submit_specs([spec(queue, 1, 4, "3s") for _ in range(80) for queue in ("light-q", "heavy-q")])
    wait_for("the federation to fill", lambda: federation.gpus("light-q") + federation.gpus("heavy-q") >= CAPACITY)
    light = heavy = 0
    for _ in range(40):  # ~10 s of steady state, several generations of 3 s jobs
        light += federation.gpus("light-q")
        heavy += federation.gpus("heavy-q")
        time.sleep(0.25)
    share = light / (light + heavy)
    assert abs(share - 0.25) <= 0.025, f"light tenant held {share:.3f} of the GPUs, deserves 0.25"
    assert light + heavy >= 0.85 * CAPACITY * 40  # and the federation stayed (nearly) full meanwhile


def test_a_guarantee_is_reclaimed_from_over_share_queues_as_whole_gangs(federation: Federation) -> None:
    for tenant in ("a", "b"):
        federation.tenant(tenant)
        federation.queue(f"{tenant}-q", tenant, reclaimable=True)
    federation.tenant("c", guarantee={GPU: "16"})
    federation.queue("c-q", "c")
    borrowers = federation.submit_specs([spec(q, 2, 4, "10m") for _ in range(6) for q in ("a-q", "b-q")])
    wait_for("a and b to hold every GPU, half each", lambda: [federation.gpus(q) for q in ("a-q", "b-q")] == [32, 32])

    # c's guarantee comes first (16), a and b deserve the rest equally (24 each): each holds 8 too many.
    (wanted,) = federation.submit("c-q", 1, 4, 4, "10m", name="guaranteed")
    wait_for("the guaranteed job to run", lambda: federation.job(wanted).status.phase == common_pb2.RUNNING, 30)
    # Only c's job takes anything back here; its victims' tenants read only that it was another tenant's.
    for_c = [job for job, _, _, _, message in federation.events("Preempted")
             if message == "reclaimed for a job of another tenant, below its deserved share"]
    assert len(for_c) == len(federation.events("Preempted"))
    assert len(for_c) * 8 == 16 and set(for_c) <= set(borrowers)  # two whole gangs: the fewest GPUs that make room
    for victim in for_c:  # each gang stopped as a whole and waits again, no pod left placed
        status = federation.job(victim).status
        assert status.phase in (common_pb2.PENDING, common_pb2.PREEMPTED) and not status.placements
    assert [federation.gpus(q) for q in ("a-q", "b-q", "c-q")] == [24, 24, 16]  # one gang from each
    preempted = federation.events("Preempted")
    time.sleep(3)
    assert federation.events("Preempted") == preempted  # and nothing more is taken back


def test_a_lending_limit_keeps_room_for_its_lender_that_it_takes_without_reclaim(federation: Federation) -> None:
    """Issue 46 (2): a tenant guaranteed 32 GPUs that lends at most 8 of them: a borrower flooding the federation
    holds 40 GPUs at most (64 less the 24 kept back) and its waiting jobs say why; the lender's gangs then start
    in the room kept for them, nothing preempted."""
    federation.tenant("lender", guarantee={GPU: "32"}, lending_limit={GPU: "8"})
    federation.queue("lender-q", "lender")
    federation.tenant("borrower")
    federation.queue("borrower-q", "borrower")
    federation.submit("borrower-q", 16, 1, 4, "10m", name="borrowed")
    wait_for("the borrower to hold what is lent", lambda: federation.gpus("borrower-q") == 40)
    time.sleep(3)  # cycles go on: it takes no more
    assert federation.held_gpus("borrower-q") == {"borrower-q": 40}
    waiting = federation.jobs.ListJobs(jobs_pb2.ListJobsRequest(queue="borrower-q", phases=[common_pb2.PENDING]))
    assert len(waiting.jobs) == 6 and all(
        j.status.reason == f"{GPU}=24 is kept back for another tenant by lending limits: too little of the rest is free"
        for j in waiting.jobs), [j.status.reason for j in waiting.jobs]

    lent = federation.submit("lender-q", 3, 2, 4, "10m", name="lender")
    wait_for("the lender's gangs to run",
             lambda: all(federation.job(j).status.phase == common_pb2.RUNNING for j in lent), 30)
    assert federation.events("Preempted") == []
    assert federation.held_gpus("borrower-q", "lender-q") == {"borrower-q": 40, "lender-q": 24}


def test_high_priority_preempts_only_preemptible_jobs_of_its_queue(federation: Federation) -> None:
    for name, value, preemptible in (("low", 10, True), ("keep", 10, False), ("high", 100, False)):
        federation.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(
            priority_class=admin_pb2.PriorityClass(name=name, value=value, preemptible=preemptible)))
    federation.tenant("t")
    federation.queue("q", "t")
    kept = federation.submit("q", 4, 2, 4, "10m", "keep", name="keep")
    low = federation.submit("q", 4, 2, 4, "10m", "low", name="low")
    wait_for("the low jobs to fill the federation", lambda: federation.gpus("q") == CAPACITY)

    (urgent,) = federation.submit("q", 1, 4, 4, "10m", "high", name="urgent")
    wait_for("the urgent job to run", lambda: federation.job(urgent).status.phase == common_pb2.RUNNING, 30)
    victims = [job for job, _, _, _, _ in federation.events("Preempted")]
    # 16 GPUs, from preemptible jobs only (said in full when not: what was decided and reported, in order, every
    # event of the run, as pytest would cut an assertion's message short)
    if not (len(victims) == 2 and set(victims) <= set(low)):
        pytest.fail(f"victims {victims}, of the low jobs {low}; every event:\n" + "\n".join(
            map(str, federation.events())))

    # Evicting every remaining preemptible job would still not make room: nothing is preempted.
    (huge,) = federation.submit("q", 1, 4, 8, "10m", "high", name="huge")
    time.sleep(4)
    assert [job for job, _, _, _, _ in federation.events("Preempted")] == victims
    assert federation.job(huge).status.phase == common_pb2.PENDING
    assert all(federation.job(k).status.phase == common_pb2.RUNNING for k in kept)


def test_limits_hold_under_a_flood(federation: Federation) -> None:
    federation.tenant("capped-tenant", limit={GPU: "24"})
    federation.queue("capped-a", "capped-tenant")
    federation.queue("capped-b", "capped-tenant")
    federation.tenant("other")
    federation.queue("capped-q", "other", limit={GPU: "16"})
    for queue in ("capped-a", "capped-b", "capped-q"):
        federation.submit(queue, 40, 1, 4, "2s")
    wait_for("the flood to start", lambda: federation.gpus("capped-q") > 0)
    tenant_peak = queue_peak = 0
    for _ in range(32):  # ~8 s: several generations of 2 s jobs
        held = federation.held_gpus("capped-a", "capped-b", "capped-q")
        tenant_peak = max(tenant_peak, held["capped-a"] + held["capped-b"])
        queue_peak = max(queue_peak, held["capped-q"])
        time.sleep(0.25)
    assert (tenant_peak, queue_peak) == (24, 16)  # reached, never passed, with 24 GPUs to spare
    waiting = federation.jobs.ListJobs(jobs_pb2.ListJobsRequest(queue="capped-q", phases=[common_pb2.PENDING]))
    assert waiting.jobs and all("limit" in j.status.reason for j in waiting.jobs)


# The replica tests below run servers of one process each (`--role all`): the lease and its fencing are the same
# code where a scheduler process of its own leads (`tests/test_e2e_roles.py` kills one of those).
ONE_PROCESS = ("--role", "all")


def test_a_second_replica_takes_over_scheduling_without_dispatching_twice(db_url: URL, tmp_path: Path) -> None:
    fed = start(db_url, tmp_path, 2, *ONE_PROCESS)
    try:
        leader, standby = fed.servers
        assert b"now the scheduling leader" in leader.log and b"now the scheduling leader" not in standby.log
        fed.connect(standby.address)  # submits on one replica wake the leader on the other
        fed.tenant("t")
        fed.queue("q", "t")
        before = fed.submit("q", 30, 1, 8, "2s", name="before")
        # west's agent is on the standby: the leader's orders reach it through the event log.
        wait_for("jobs to run in both clusters", lambda: {fed.job(j).status.cluster for j in before} >= set(CLUSTERS))
        leader.kill()
        wait_for("the standby to lead", lambda: b"now the scheduling leader" in standby.log, 15)
        after = fed.submit("q", 30, 1, 8, "2s", name="after")
        done = lambda: all(fed.job(j).status.phase == common_pb2.SUCCEEDED for j in before + after)  # noqa: E731
        wait_for("every job to succeed", done, 120)
        dispatched = Counter(job for job, _, _, _, _ in fed.events("Dispatched"))
        rejected = Counter(job for job, _, _, _, _ in fed.events("Rejected"))
        ran = Counter(job for job, _, _, _, _ in fed.events("Running"))
        for job in before + after:  # one dispatch per attempt, and every gang ran exactly once
            assert dispatched[job] == 1 + rejected[job] and ran[job] == 1, job
    finally:
        fed.close()


LEASE = 2.0


@pytest.mark.parametrize("fault", ["frozen", "partitioned from PostgreSQL"])
def test_a_stalled_leader_is_replaced_within_its_lease_and_nothing_is_dispatched_twice(
        db_url: URL, tmp_path: Path, fault: str) -> None:
    import signal

    proxy, through = proxied(db_url)
    fed = start(db_url, tmp_path, 2, *ONE_PROCESS, "--leader-lease", str(LEASE), urls=[through, db_url])
    try:
        leader, standby = fed.servers
        assert b"now the scheduling leader" in leader.log
        fed.connect(standby.address)
        fed.tenant("t")
        fed.queue("q", "t")
        before = fed.submit("q", 4, 1, 8, "1s", name="before")
        wait_for("the first jobs to run", lambda: all(fed.job(j).status.phase != common_pb2.PENDING for j in before))
        if fault == "frozen":
            leader.proc.send_signal(signal.SIGSTOP)
        else:
            proxy.partition()  # its sessions hang: renewals and every write go unanswered
        # Within about the lease (the faults benchmark times it); the bound here only says it happens at all.
        wait_for("the standby to lead", lambda: b"now the scheduling leader" in standby.log, 30)
        after = fed.submit("q", 6, 1, 8, "1s", name="after")
        wait_for("the standby to dispatch", lambda: any(fed.job(j).status.phase != common_pb2.PENDING for j in after))
        # east's agent was on the stalled replica, whose TCP stays open: it must notice that its heartbeats are
        # no longer acknowledged and move to the standby, else east's work waits for the stalled one to wake.
        spill = fed.submit("q", 12, 1, 8, "60s", name="spill")  # more than west holds
        wait_for("a job running in east, whose agent left the stalled replica", lambda: any(
            fed.job(j).status.phase == common_pb2.RUNNING and fed.job(j).status.cluster == "east" for j in spill), 120,
            state=lambda: fed.story("east", spill))
        for job in spill:
            fed.cancel(job)
        if fault == "frozen":
            leader.proc.send_signal(signal.SIGCONT)  # wakes with a cycle's worth of stale state
        else:
            proxy.heal()
        done = lambda: all(fed.job(j).status.phase == common_pb2.SUCCEEDED for j in before + after)  # noqa: E731
        wait_for("every job to succeed", done, 120)
        dispatched = Counter(job for job, _, _, _, _ in fed.events("Dispatched"))
        rejected = Counter(job for job, _, _, _, _ in fed.events("Rejected"))
        for job in before + after:  # one dispatch per attempt: the stale leader's decisions were fenced off
            assert dispatched[job] == 1 + rejected[job], job
    finally:
        proxy.heal()
        if fed.servers[0].proc.poll() is None:
            fed.servers[0].proc.send_signal(signal.SIGCONT)
        fed.close()
        proxy.close()


def _stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


@pytest.mark.parametrize("write", ["Submitted", "Cancelled", "Running", "Dispatched"])
def test_a_replica_frozen_inside_a_write_stalls_the_others_writes_no_longer_than_the_lease(
        db_url: URL, tmp_path: Path, write: str) -> None:
    """Issue 27 (3). A replica stops itself (failpoint, SIGSTOP) holding the event counter's row lock inside a
    submit, a cancel, an agent's report (unfenced writes) or a cycle's dispatch (fenced); the other replica's
    writes go on once PostgreSQL has ended the frozen one's transaction, a lease (2 s at least) later, not
    after a fixed 15 s. The bound asserted is generous (the stall it replaces was 15 s); `make bench` times it."""
    import signal

    frozen_index = 0 if write == "Dispatched" else 1  # the first replica started leads
    envs: list[dict[str, str]] = [{}, {}]
    envs[frozen_index] = {"FEDERATION_FAILPOINTS": f"events:{write}"}
    fed = start(db_url, tmp_path, 2, *ONE_PROCESS, "--leader-lease", str(LEASE), envs=envs)
    frozen, healthy = fed.servers[frozen_index], fed.servers[1 - frozen_index]
    frozen_api = jobs_pb2_grpc.JobServiceStub(grpc.insecure_channel(frozen.address))
    outcome: list[BaseException | object] = []

    def call(rpc: object, request: object) -> None:
        try:
            outcome.append(rpc(request, timeout=120))  # type: ignore[operator]
        except grpc.RpcError as err:
            outcome.append(err)

    try:
        fed.connect(healthy.address)
        fed.tenant("t")
        fed.queue("q", "t")
        first = fed.submit("q", 5, 1, 8, "5s", name="first")  # more than one cluster holds: west runs some
        if write == "Submitted":
            threading.Thread(target=call, args=(frozen_api.SubmitJob, jobs_pb2.SubmitJobRequest(
                spec=spec("q", 1, 8, "1s", name="frozen"))), daemon=True).start()
        elif write == "Cancelled":
            threading.Thread(target=call, args=(frozen_api.CancelJob, jobs_pb2.CancelJobRequest(
                id=first[0])), daemon=True).start()
        # Running: an agent reports to the frozen replica (west's first choice); Dispatched: the leader's cycle.
        wait_for(f"the replica to freeze inside a {write} write", lambda: _stopped(frozen.proc.pid), 60)
        frozen_at = time.monotonic()
        after = fed.submit("q", 1, 1, 8, "1s", name="after")  # a write on the healthy replica
        if write == "Dispatched":
            wait_for("the healthy replica to lead", lambda: b"now the scheduling leader" in healthy.log, 60)
        wait_for("the healthy replica's writes to go on",
                 lambda: fed.job(after[0]).status.phase != common_pb2.PENDING, 60)
        stalled = time.monotonic() - frozen_at
        print(f"{write}: the healthy replica's write and dispatch went on after {stalled:.1f} s")
        assert stalled < max(LEASE, 2.0) + 8, f"the others' writes waited {stalled:.1f} s"
        frozen.proc.send_signal(signal.SIGCONT)
        if write in ("Submitted", "Cancelled"):  # its transaction was ended: the caller learns it failed
            wait_for("the frozen replica's answer", lambda: bool(outcome), 60)
            assert isinstance(outcome[0], grpc.RpcError), outcome[0]
        if write == "Submitted":
            assert all(j.spec.name != "frozen" for j in fed.jobs.ListJobs(jobs_pb2.ListJobsRequest()).jobs)
        wanted = first[1:] + after if write == "Cancelled" else first + after
        wait_for("every job to succeed",
                 lambda: all(fed.job(j).status.phase == common_pb2.SUCCEEDED for j in wanted), 120)
    finally:
        if frozen.proc.poll() is None:
            frozen.proc.send_signal(signal.SIGCONT)
        fed.close()


def test_the_node_a_held_gang_needs_is_kept_from_smaller_jobs(federation: Federation) -> None:
    """Issue 42 (3): room held for a gang in a cluster is kept on nodes, not only in the cluster's total: a 4-GPU
    job that would take the one node about to hold the gang's 8-GPU pod is refused there (and says why), so the
    gang starts as soon as that node's last pod ends, not when the others' do."""
    federation.admin.CordonCluster(admin_pb2.CordonClusterRequest(name="west"))
    federation.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(
        priority_class=admin_pb2.PriorityClass(name="keep", value=10, preemptible=False)))
    for tenant in ("busy", "big", "small"):
        federation.tenant(tenant)
        # small's queue first: its job is sent to the cluster before the gang's room is held in each cycle, so the
        # node is kept by the agent (the federation's own count of free nodes would otherwise keep it back).
        federation.queue(f"{tenant}-q", tenant, priority=10 if tenant == "small" else 0)
    # One node left with 4 GPUs free, whose pod ends soon; three with 3 free, whose pods run on.
    # (long enough for the steps below on a loaded machine: if it ended first, there would be nothing to keep)
    (short,) = federation.submit_specs([spec("busy-q", 1, 4, "60s", "keep", name="short")])
    wait_for("the short job to run", lambda: federation.job(short).status.phase == common_pb2.RUNNING, 30)
    kept_node = federation.job(short).status.placements[0].node
    long = federation.submit("busy-q", 3, 1, 5, "10m", "keep", name="long")
    wait_for("the long jobs to run", lambda: all(federation.job(j).status.phase == common_pb2.RUNNING for j in long))
    assert kept_node not in {federation.job(j).status.placements[0].node for j in long}

    (gang,) = federation.submit("big-q", 1, 1, 8, "10m", name="gang")
    engine = create_engine(federation.db_url)
    try:
        def held() -> bool:
            with engine.connect() as conn:
                return conn.execute(text("SELECT holds FROM clusters WHERE name = 'east'")).scalar() == [[gang, 1, 8]]
        wait_for("east to hold room for the gang", held, 30)
        with engine.connect() as conn:  # its agent has the hold once a heartbeat recorded since was acknowledged
            written = conn.execute(text("SELECT now()")).scalar()
            wait_for("a heartbeat after it", lambda: conn.execute(text(
                "SELECT last_heartbeat > :t FROM clusters WHERE name = 'east'"), {"t": written}).scalar()
                or conn.rollback(), 30)
    finally:
        engine.dispose()
    # East has 13 GPUs free, 8 of them held: a 4-GPU job fits the rest in total, and only on the kept node.
    (small,) = federation.submit("small-q", 1, 1, 4, "10m", name="small")
    wait_for("the small job to be refused on the kept node",
             lambda: any("kept for a gang the federation holds room for here" in message
                         for job, _, _, _, message in federation.events("Rejected") if job == small), 30)
    assert federation.job(short).status.phase == common_pb2.RUNNING  # it was kept while the node was not free
    wait_for("the gang to run once the short job ends",
             lambda: federation.job(gang).status.phase == common_pb2.RUNNING, 120)
    assert federation.job(gang).status.placements[0].node == kept_node
    assert all(federation.job(j).status.phase == common_pb2.RUNNING for j in long)  # not waited for


def test_a_job_that_fits_at_once_is_dispatched_on_arrival_and_once(federation: Federation) -> None:
    """Jobs submitted one at a time into an idle federation: each fits the room the last cycle left, so the
    scheduler process sends it when the submission is announced, before any cycle (its reason says "on arrival";
    a periodic cycle may still take one now and then), each is dispatched once and runs."""
    federation.tenant("quick", weight=1)
    federation.queue("quick-q", "quick")
    ids = []
    for i in range(4):
        [job_id] = federation.submit_specs([spec("quick-q", 1, 2, "1s", name=f"quick-{i}")])
        ids.append(job_id)
        wait_for(f"{job_id} to be dispatched", lambda job_id=job_id: federation.job(job_id).status.phase
                 not in (common_pb2.PENDING,))
    for job_id in ids:
        wait_for(f"{job_id} to succeed", lambda job_id=job_id: federation.job(job_id).status.phase
                 == common_pb2.SUCCEEDED)
    dispatched = [(job, message) for job, _, _, _, message in federation.events("Dispatched")]
    assert Counter(job for job, _ in dispatched) == Counter(ids)  # once each
    assert any("(on arrival)" in message for _, message in dispatched), dispatched
