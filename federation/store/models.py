"""The Postgres schema as SQLAlchemy 2 declarative models.

Resource amounts are stored as canonical integers in JSONB (see `federation.kernel.resources`) so the
scheduler never re-parses quantity strings. Job specs are stored whole as protobuf JSON; only the
columns the scheduler filters and orders on are broken out and indexed.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Sequence,
    String,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAME = String(63)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSONB, list[Any]: JSONB}


def _created() -> Mapped[datetime]:
    return mapped_column(DateTime(timezone=True), server_default=func.now(), nullable=False)


class Tenant(Base):
    __tablename__ = "tenants"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    weight: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    guarantee: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    limit: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    # The most of its unused guarantee others may use (Kueue's lendingLimit); a resource absent: all of it.
    lending_limit: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict, server_default="{}")
    disabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    max_run_time: Mapped[str | None] = mapped_column(String(32))  # a duration; the cap of its jobs' run times
    created_at: Mapped[datetime] = _created()


class Queue(Base):
    __tablename__ = "queues"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    tenant: Mapped[str] = mapped_column(NAME, ForeignKey("tenants.name", ondelete="RESTRICT"), index=True)
    weight: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    guarantee: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    limit: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    lending_limit: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict, server_default="{}")
    reclaimable: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    state: Mapped[str] = mapped_column(String(16), nullable=False, default="OPEN")
    flavors: Mapped[list[Any]] = mapped_column(nullable=False, default=list)  # preference order; [] = any
    # Volcano's hierarchical queues: a parent queue of the same tenant, whose deserved share this one shares.
    parent: Mapped[str | None] = mapped_column(NAME, ForeignKey("queues.name", ondelete="RESTRICT"), index=True)
    max_run_time: Mapped[str | None] = mapped_column(String(32))  # a duration: its jobs' default maximum run time
    # Checks its jobs pass before their cluster runs them (names; `provisioning` is the agents' own).
    admission_checks: Mapped[list[Any]] = mapped_column(nullable=False, default=list, server_default="[]")
    created_at: Mapped[datetime] = _created()


class UsageHistory(Base):
    """A tenant's or queue's past usage, decayed with the configured half-life (resource -> resource-seconds), as
    of `updated_at`: written by the scheduling leader, read by the next one and by the admin API."""

    __tablename__ = "usage_history"

    kind: Mapped[str] = mapped_column(String(8), primary_key=True)  # "tenant" or "queue"
    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    usage: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class Flavor(Base):
    """Kueue's ResourceFlavor: one resource on the member clusters a label selector picks (h100 GPUs)."""

    __tablename__ = "flavors"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    resource: Mapped[str] = mapped_column(String(253), nullable=False)
    cluster_selector: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    admission_checks: Mapped[list[Any]] = mapped_column(nullable=False, default=list, server_default="[]")
    created_at: Mapped[datetime] = _created()


class PriorityClass(Base):
    __tablename__ = "priority_classes"
    __table_args__ = (
        Index("uq_priority_classes_global_default", "global_default", unique=True,
              postgresql_where=text("global_default")),
    )

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    value: Mapped[int] = mapped_column(Integer, nullable=False)
    preemptible: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    global_default: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="")
    created_at: Mapped[datetime] = _created()
    protected_run_seconds: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")


INVENTORY_VERSIONS = Sequence("clusters_inventory_version_seq", metadata=Base.metadata)


class Cluster(Base):
    __tablename__ = "clusters"

    name: Mapped[str] = mapped_column(NAME, primary_key=True)
    labels: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    status: Mapped[str] = mapped_column(String(16), nullable=False, default="NOT_READY")
    cordoned: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    agent_version: Mapped[str] = mapped_column(String(64), nullable=False, default="")
    last_heartbeat: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    inventory: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    problem: Mapped[str] = mapped_column(Text, nullable=False, default="")  # why its agent's report is not used
    # The agent process holding the cluster's stream (Register.instance): another is refused while it lives.
    instance: Mapped[str] = mapped_column(String(64), nullable=False, default="", server_default="")
    # What its agent reports its gangs hold minus what the federation believes runs there, once lasting.
    drift: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict, server_default="{}")
    # Gangs the scheduling leader holds room for here ([job id, pods, GPUs per pod]), sent to the agent with each
    # heartbeat's acknowledgement so it keeps nodes for them.
    holds: Mapped[list[Any]] = mapped_column(nullable=False, default=list, server_default="[]")
    created_at: Mapped[datetime] = _created()
    # Moved by a trigger (migration 0014) whenever `inventory` changes, whoever writes it: readers keep what
    # they decoded until it moves (`store.inventories`).
    inventory_version: Mapped[int] = mapped_column(
        BigInteger, INVENTORY_VERSIONS, nullable=False, server_default=INVENTORY_VERSIONS.next_value())


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        # The scheduler's scan: pending jobs of a queue by priority, then submission order.
        Index("ix_jobs_queue_phase_order", "queue", "phase", text("priority DESC"), "seq"),
        Index("ix_jobs_tenant_seq", "tenant", "seq"),
        Index("ix_jobs_phase_seq", "phase", "seq"),
        Index("ix_jobs_cluster_active", "cluster",
              postgresql_where=text("phase IN ('DISPATCHED', 'RUNNING', 'RESTARTING')")),
        Index("ix_jobs_move_wanted", "id", postgresql_where=text("move_wanted <> ''")),
        Index("ix_jobs_hyperjob", "hyperjob", postgresql_where=text("hyperjob <> ''")),
        {"postgresql_with": {"fillfactor": 70}},  # room for HOT updates of reasons (migration 0003)
    )

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    # Submission order: the tie-break among equal priorities and the key of list pagination.
    seq: Mapped[int] = mapped_column(BigInteger, Identity(), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(NAME, nullable=False)
    tenant: Mapped[str] = mapped_column(NAME, nullable=False)
    queue: Mapped[str] = mapped_column(NAME, nullable=False)
    priority_class: Mapped[str] = mapped_column(NAME, nullable=False, default="")
    priority: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    phase: Mapped[str] = mapped_column(String(16), nullable=False)
    reason: Mapped[str] = mapped_column(Text, nullable=False, default="")
    cluster: Mapped[str] = mapped_column(NAME, nullable=False, default="")
    hypernode: Mapped[str] = mapped_column(String(253), nullable=False, default="")
    tier: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    attempt: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    retries: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    preemptions: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    # Times its pods were not all running within its ready timeout and it was requeued; it waits in no queue until
    # `requeue_at` (the backoff that followed), and the scheduler's job cache holds it back until then.
    requeues: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")
    requeue_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # What the job needs or holds, canonical: its gang's minimum while it waits or is placed, what its bound
    # pods hold once it runs (federation.store.transitions.minimum_of, federation.kernel.gangs.bound).
    request: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict)
    placements: Mapped[list[Any]] = mapped_column(nullable=False, default=list)
    # The current attempt's pods as its cluster last reported them (names, phases, restarts, messages).
    pods: Mapped[list[Any]] = mapped_column(nullable=False, default=list, server_default="[]")
    # cluster -> what it said when it refused the job for good: the job is never sent there again.
    refusals: Mapped[dict[str, Any]] = mapped_column(nullable=False, default=dict, server_default="{}")
    # Why its agent wants the running gang off degraded hardware it has no healthy room to replace ('' when it does
    # not): the scheduler moves it when another cluster has healthy room, never to hardware no better.
    move_wanted: Mapped[str] = mapped_column(Text, nullable=False, default="", server_default="")
    # The current attempt's admission checks, as [{name, state, message}]: written at dispatch, its cluster told to
    # run it once all but `provisioning` are READY (`federation.relay.orders`).
    admission_checks: Mapped[list[Any]] = mapped_column(nullable=False, default=list, server_default="[]")
    # The HyperJob it is a sub-job of ('' for an ordinary job): its siblings are the jobs of the same value.
    hyperjob: Mapped[str] = mapped_column(String(80), nullable=False, default="", server_default="")
    spec: Mapped[dict[str, Any]] = mapped_column(nullable=False)  # JobSpec as protobuf JSON
    created_at: Mapped[datetime] = _created()
    updated_at: Mapped[datetime] = _created()
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


# Jobs that ended more than `--archive-after` ago (`federation.control.history`): the same columns as `jobs`, out of the
# tables the submit path and the scheduler read; GetJob and ListJobs read both. Deleted after `--retention`.
finished_jobs = Table(
    "finished_jobs", Base.metadata,
    *(Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable) for c in Job.__table__.columns),
    Index("ix_finished_jobs_seq", "seq", unique=True),
    Index("ix_finished_jobs_tenant_seq", "tenant", "seq"),
    Index("ix_finished_jobs_finished_at", "finished_at"),
)


class JobEvent(Base):
    """Append-only; `seq` comes from `EventCounter` so it has no gaps and commits in order. `tenant_seq`
    numbers the tenant's own events the same way (`TenantEventCounter`): what a tenant's watch shows and
    resumes from, so that no tenant can count the rest of the federation's activity."""

    __tablename__ = "job_events"
    __table_args__ = (Index("ix_job_events_tenant_seq", "tenant", "tenant_seq", unique=True),)

    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    tenant_seq: Mapped[int] = mapped_column(BigInteger, nullable=False)
    job_id: Mapped[str] = mapped_column(String(80), nullable=False, index=True)
    tenant: Mapped[str] = mapped_column(NAME, nullable=False)
    queue: Mapped[str] = mapped_column(NAME, nullable=False)
    type: Mapped[str] = mapped_column(String(32), nullable=False)
    phase: Mapped[str] = mapped_column(String(16), nullable=False)
    message: Mapped[str] = mapped_column(Text, nullable=False, default="")
    attempt: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    cluster: Mapped[str] = mapped_column(NAME, nullable=False, default="")
    created_at: Mapped[datetime] = _created()


class LeaderLease(Base):
    """One row: which replica schedules, under which epoch, until when (federation.control.leader)."""

    __tablename__ = "leader_lease"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    holder: Mapped[str] = mapped_column(String(64), nullable=False)
    epoch: Mapped[int] = mapped_column(BigInteger, nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    # Where the leader answers the API front ends (SchedulerService), and what they present there ('': nowhere).
    address: Mapped[str] = mapped_column(String(255), nullable=False, server_default="")
    secret: Mapped[str] = mapped_column(String(64), nullable=False, server_default="")


class EventCounter(Base):
    """One row. Writers take its row lock to number events, so sequence order is commit order."""

    __tablename__ = "event_counter"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger, nullable=False)


class TenantEventCounter(Base):
    """One row per tenant that ever had an event; kept when the tenant is deleted, so that a tenant made
    again under the same name continues the numbering rather than repeating it."""

    __tablename__ = "tenant_event_counters"

    tenant: Mapped[str] = mapped_column(NAME, primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger, nullable=False)


class SubmitKey(Base):
    """Client request ids already seen, per tenant: the basis of idempotent submit."""

    __tablename__ = "submit_keys"

    tenant: Mapped[str] = mapped_column(NAME, primary_key=True)
    request_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    job_id: Mapped[str] = mapped_column(String(80), nullable=False)
    created_at: Mapped[datetime] = _created()


class ApiToken(Base):
    """A bearer token: only the SHA-256 of its secret is kept, so a leaked table grants nothing."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(NAME, nullable=False, default="")
    tenant: Mapped[str | None] = mapped_column(NAME, ForeignKey("tenants.name", ondelete="CASCADE"), index=True)
    admin: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    secret_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    created_by: Mapped[str] = mapped_column(String(128), nullable=False, default="")
    created_at: Mapped[datetime] = _created()
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AuditEvent(Base):
    """One admin change: who, what, when, and the object before and after (null when absent)."""

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    at: Mapped[datetime] = _created()
    actor: Mapped[str] = mapped_column(String(128), nullable=False)
    action: Mapped[str] = mapped_column(String(32), nullable=False)
    kind: Mapped[str] = mapped_column(String(32), nullable=False, index=True)
    name: Mapped[str] = mapped_column(String(128), nullable=False)
    before: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
