"""Usage history in fair share with real processes (issue 46 (1)): past usage orders queue heads, and a new
leader goes on from the history the last one wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL

from federation.v1 import common_pb2, jobs_pb2
from tests.processes import fedctl
from tests.test_e2e_agents import GPU, wait_for
from tests.test_e2e_scheduling import ONE_PROCESS, spec, start

pytestmark = pytest.mark.e2e
HISTORY = ("--usage-half-life", "60", "--usage-history-weight", "1")


def stored(db_url: URL, kind: str, name: str) -> float:
    """The GPU-seconds of a history as last written to PostgreSQL (0 when none is)."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text("SELECT usage->>:gpu FROM usage_history WHERE kind = :kind AND name = :name"),
                                 {"gpu": GPU, "kind": kind, "name": name}).scalar()
            return float(found or 0)
    finally:
        engine.dispose()


def test_past_usage_puts_a_tenant_behind_and_a_new_leader_goes_on_from_it(db_url: URL, tmp_path: Path) -> None:
    fed = start(db_url, tmp_path, 2, *ONE_PROCESS, *HISTORY)
    try:
        leader, standby = fed.servers
        for tenant in ("a-ten", "b-ten", "c-ten"):
            fed.tenant(tenant)
            fed.queue(f"{tenant[0]}-q", tenant)
        # a-ten uses the whole federation for a few seconds; b-ten nothing
        ran = fed.submit("a-q", 8, 1, 8, "5s", name="past")
        wait_for("a-ten's jobs to end",
                 lambda: all(fed.job(j).status.phase == common_pb2.SUCCEEDED for j in ran), 60)
        # c-ten takes one of the two clusters: the other is for whichever of a and b comes first
        (blocker,) = fed.submit("c-q", 1, 4, 8, "10m", name="blocker")
        wait_for("c-ten's job to run", lambda: fed.job(blocker).status.phase == common_pb2.RUNNING, 30)
        # Both at once, equal in every way but their past: by name alone a-q would come first.
        a_job, b_job = fed.submit_specs([spec("a-q", 4, 8, "10m", name="a-now"), spec("b-q", 4, 8, "10m",
                                                                                     name="b-now")])
        wait_for("b-ten's job to run", lambda: fed.job(b_job).status.phase == common_pb2.RUNNING, 30)
        assert fed.job(a_job).status.phase == common_pb2.PENDING
        # Written under the lease every few seconds: shown to users, in resource-hours
        note = "past usage counts in its turn (half-life 1m, weight 1): its tenant a-ten used "
        wait_for("a's explanation to say why", lambda: fed.jobs.ExplainJob(
            jobs_pb2.ExplainJobRequest(id=a_job)).past_usage.startswith(note), 30)
        wait_for("c-ten's history to be written", lambda: stored(db_url, "tenant", "c-ten") > 0, 30)
        listed = fedctl(leader.address, "get", "tenants", "-o", "wide")
        assert listed.returncode == 0, listed.stderr
        header = listed.stdout.splitlines()[0].split()
        row = next(r for r in listed.stdout.splitlines() if r.startswith("a-ten")).split()
        assert header[-1] == "PAST-USAGE" and row[-1].startswith("cpu="), listed.stdout
        # In GPU-hours: what the leader last wrote (GPU-seconds), decayed by the few seconds since (half-life 60 s),
        # to two places. How many it is depends on how long the jobs took, which load stretches.
        shown = float(dict(p.split("=") for p in row[-1].split(","))[GPU].removesuffix("h"))
        hours = stored(db_url, "tenant", "a-ten") / 3600
        assert shown > 0 and 0.8 * hours - 0.005 <= shown <= hours / 0.8 + 0.005, (listed.stdout, hours)

        # The leader goes; the standby leads on from the history written, not from nothing
        wait_for("c-ten's 32 GPUs to be counted for 10 s", lambda: stored(db_url, "tenant", "c-ten") >= 320, 60)
        before = stored(db_url, "tenant", "c-ten")
        leader.kill()
        wait_for("the standby to lead", lambda: b"now the scheduling leader" in standby.log, 15)
        fed.connect(standby.address)
        wait_for("the new leader to write", lambda: stored(db_url, "tenant", "c-ten") != before, 30)
        # From nothing, the new leader's first write would count nothing of c-ten's past; going on, it keeps what
        # was written, decayed by the seconds the takeover took (half-life 60 s: 20 s leave 79 %).
        after = stored(db_url, "tenant", "c-ten")
        assert after > 0.7 * before, (before, after)
    finally:
        fed.close()
