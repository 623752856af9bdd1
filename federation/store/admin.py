"""Tenants, queues, priority classes and clusters in Postgres.

The three admin kinds share one create/update/get/list/delete path keyed by name; what differs
between them (which references must exist, what blocks a delete) is stated next to each.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from psycopg.rows import dict_row
from sqlalchemy import and_, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from federation.control.leader import Fence
from federation.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from federation.kernel.resources import FLAVOR
from federation.store.database import IDENTIFIERS, driver, json_text
from federation.store.events import LAST_EVENT_SEQ
from federation.store.inventories import WITHOUT_INVENTORY, Inventories
from federation.store.models import Base, Cluster, EventCounter, Flavor, Job, PriorityClass, Queue, Tenant
from federation.store.phases import TERMINAL_PHASES
from federation.store.tokens import audit
from federation.validation import DEFAULT_QUEUE, Violation

KIND_NAMES: dict[type[Base], str] = {
    Tenant: "tenant", Queue: "queue", PriorityClass: "priority class", Cluster: "cluster", Flavor: "flavor",
}


def _kind(model: type[Base]) -> str:
    return KIND_NAMES[model]


def _audit_kind(model: type[Base]) -> str:
    return KIND_NAMES[model].replace(" ", "_")


@dataclass(frozen=True)
class SubmissionView:
    """Rows of every queue, priority class and tenant, and every cluster with `live` (as `clusters`)."""

    queues: list[Any]
    classes: list[Any]
    tenants: list[Any]
    clusters: list[Any]


@dataclass(frozen=True)
class SchedulingView(SubmissionView):
    """And every flavor, and the number of the last job event as of the same snapshot (see `clusters`)."""

    flavors: list[Any]
    last_event: int


@functools.lru_cache(maxsize=8)
def _scheduling_reads(heartbeat_timeout: float) -> bytes:
    """`for_scheduling`'s reads: `for_submission`'s, then the flavors and the last event's number."""
    return _view_reads(heartbeat_timeout) + (f"; SELECT * FROM {Flavor.__tablename__} ORDER BY name; "
                                             f"SELECT last_seq FROM {EventCounter.__tablename__} WHERE id = 1").encode()


@functools.lru_cache(maxsize=8)
def _view_reads(heartbeat_timeout: float) -> bytes:
    """`for_submission`'s reads as one query of four statements (no parameters: PostgreSQL's simple protocol takes
    several), with `live` as `_live` says it; the timeout is a number, written as one."""
    columns = ", ".join(IDENTIFIERS.quote(c.name) for c in WITHOUT_INVENTORY)
    return (f"SELECT * FROM {Queue.__tablename__} ORDER BY name; "
            f"SELECT * FROM {PriorityClass.__tablename__} ORDER BY name; "
            f"SELECT * FROM {Tenant.__tablename__} ORDER BY name; "
            f"SELECT {columns}, (status = 'READY' AND last_heartbeat > now() - make_interval(secs => "
            f"{heartbeat_timeout!r})) AS live FROM {Cluster.__tablename__} ORDER BY name").encode()


def _live(heartbeat_timeout: float) -> Any:
    """Ready and heard from within the timeout, on whichever replica, by Postgres' clock (replicas agree)."""
    return and_(Cluster.status == "READY", Cluster.last_heartbeat > func.now() - timedelta(seconds=heartbeat_timeout))


class AdminStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.inventories = Inventories()

    async def _check_references(self, conn: AsyncConnection, model: type[Base], name: str, values: dict[str, Any],
                                path: str) -> None:
        if model is Queue and "tenant" in values:
            found = (await conn.execute(select(Tenant.name).where(Tenant.name == values["tenant"]))).first()
            if found is None:
                raise InvalidArgument([Violation(f"{path}.tenant", f"tenant {values['tenant']!r} not found")])
        if model is Queue and values.get("parent"):
            await self._check_parent(conn, name, values, path)
        flavors = {r["name"]: r["resource"] for r in (await conn.execute(select(Flavor))).mappings()}
        problems = []
        for i, name in enumerate(values.get("flavors") or []):
            if name not in flavors:
                problems.append(Violation(f"{path}.flavors[{i}]", f"flavor {name!r} not found"))
        for field in ("guarantee", "limit", "lending_limit"):
            for key in values.get(field) or {}:
                resource, at, flavor = key.partition(FLAVOR)
                if at and flavors.get(flavor) != resource:
                    what = "not found" if flavor not in flavors else f"is of {flavors[flavor]}, not {resource}"
                    problems.append(Violation(f"{path}.{field}[{key!r}]", f"flavor {flavor!r} {what}"))
        if problems:
            raise InvalidArgument(problems)

    async def _check_parent(self, conn: AsyncConnection, name: str, values: dict[str, Any], path: str) -> None:
        """A parent is a queue of the same tenant, not below the queue itself, holding no unfinished jobs
        (jobs go to leaf queues, as in Volcano's hierarchical queues)."""
        parent = values["parent"]
        rows = {r["name"]: r for r in (await conn.execute(select(Queue.name, Queue.tenant, Queue.parent))).mappings()}
        tenant = values.get("tenant") or rows[name]["tenant"]
        if parent not in rows:
            raise InvalidArgument([Violation(f"{path}.parent", f"queue {parent!r} not found")])
        if rows[parent]["tenant"] != tenant:
            raise InvalidArgument([Violation(f"{path}.parent", f"queue {parent!r} is of tenant "
                                                               f"{rows[parent]['tenant']!r}, not {tenant!r}")])
        above = parent
        while above is not None:
            if above == name:
                raise InvalidArgument([Violation(f"{path}.parent", f"queue {parent!r} is below {name!r}: "
                                                                   "the queues would make a loop")])
            above = rows[above]["parent"]
        active = (await conn.execute(select(func.count()).select_from(Job).where(
            Job.queue == parent, Job.phase.not_in(TERMINAL_PHASES)))).scalar_one()
        if active:
            raise FailedPrecondition(f"queue {parent!r} holds {active} unfinished jobs and cannot become a parent "
                                     "queue (jobs go to leaf queues); let them finish or cancel them first")

    async def _check_delete(self, conn: AsyncConnection, model: type[Base], name: str) -> None:
        if model is Tenant:
            queues = (await conn.execute(select(Queue.name).where(Queue.tenant == name).limit(3))).scalars().all()
            if queues:
                raise FailedPrecondition(f"tenant {name!r} still has queues ({', '.join(queues)}); delete them first")
        if model is Flavor:
            users = [r["name"] for r in (await conn.execute(select(Queue.name, Queue.flavors, Queue.guarantee,
                                                                   Queue.limit))).mappings()
                     if name in r["flavors"] or any(k.endswith(f"{FLAVOR}{name}") for k in
                                                    (*r["guarantee"], *r["limit"]))]
            users += [r["name"] for r in (await conn.execute(select(Tenant.name, Tenant.guarantee,
                                                                    Tenant.limit))).mappings()
                      if any(k.endswith(f"{FLAVOR}{name}") for k in (*r["guarantee"], *r["limit"]))]
            if users:
                raise FailedPrecondition(f"flavor {name!r} is still used by {', '.join(sorted(users)[:3])}")
        if model is Queue and name == DEFAULT_QUEUE:
            raise FailedPrecondition(f"queue {name!r} cannot be deleted: jobs naming no queue go there, as in "
                                     "Volcano; close it instead")
        if model is Queue:
            children = (await conn.execute(select(Queue.name).where(Queue.parent == name).order_by(Queue.name)
                                           .limit(3))).scalars().all()
            if children:
                raise FailedPrecondition(f"queue {name!r} is the parent of {', '.join(children)}; delete or move "
                                         "them first")
            active = (await conn.execute(select(func.count()).select_from(Job).where(
                Job.queue == name, Job.phase.not_in(TERMINAL_PHASES)))).scalar_one()
            if active:
                raise FailedPrecondition(f"queue {name!r} still has {active} unfinished jobs; cancel them or "
                                         "close the queue and let them finish")

    async def create(self, model: type[Base], values: dict[str, Any], path: str, actor: str) -> Any:
        async with self.engine.begin() as conn:
            await self._check_references(conn, model, values["name"], values, path)
            try:
                await conn.execute(model.__table__.insert().values(**values))
            except IntegrityError as err:
                raise self._conflict(model, values, err) from err
            row = await self._get(conn, model, values["name"])
            await audit(conn, actor, "create", _audit_kind(model), row["name"], None, row)
            return row

    async def update(self, model: type[Base], name: str, values: dict[str, Any], path: str, actor: str) -> Any:
        async with self.engine.begin() as conn:
            before = await self._get(conn, model, name, for_update=True)
            await self._check_references(conn, model, name, values, path)
            if values:
                try:
                    await conn.execute(update(model).where(model.name == name).values(**values))
                except IntegrityError as err:
                    raise self._conflict(model, {"name": name, **values}, err) from err
            row = await self._get(conn, model, name)
            await audit(conn, actor, "update", _audit_kind(model), name, before, row)
            return row

    async def get(self, model: type[Base], name: str) -> Any:
        async with self.engine.connect() as conn:
            return await self._get(conn, model, name)

    async def list(self, model: type[Base], **equal: Any) -> list[Any]:
        query = select(model).order_by(model.name)
        for column, value in equal.items():
            if value:
                query = query.where(getattr(model, column) == value)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def every_cluster(self) -> list[dict[str, Any]]:
        """Every cluster's row, its inventory decoded once per change (`Inventories`)."""
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                rows = (await conn.execute(select(*WITHOUT_INVENTORY).order_by(Cluster.name))).mappings().all()
                return await self.inventories.attach(conn, rows)

    async def delete(self, model: type[Base], name: str, actor: str) -> None:
        async with self.engine.begin() as conn:
            before = await self._get(conn, model, name, for_update=True)
            await self._check_delete(conn, model, name)
            await conn.execute(model.__table__.delete().where(model.name == name))
            await audit(conn, actor, "delete", _audit_kind(model), name, before, None)

    async def set_cordoned(self, name: str, cordoned: bool, actor: str) -> Any:
        async with self.engine.begin() as conn:
            before = await self._get(conn, Cluster, name, for_update=True)
            await conn.execute(update(Cluster).where(Cluster.name == name).values(cordoned=cordoned))
            row = await self._get(conn, Cluster, name)
            await audit(conn, actor, "cordon" if cordoned else "uncordon", "cluster", name,
                        {"cordoned": before["cordoned"]}, {"cordoned": row["cordoned"]})
            return row

    async def record_order(self, actor: str, cluster: str, action: str, kind: str, name: str, grace: float) -> None:
        """An operator's node order, in the audit log (the agent carries it out; its effects are the jobs' events)."""
        async with self.engine.begin() as conn:
            await audit(conn, actor, action, kind, f"{cluster}/{name}", None, {"cluster": cluster, "grace": grace})

    async def register_cluster(self, name: str, labels: dict[str, str], agent_version: str, instance: str = "",
                               heartbeat_timeout: float | None = None) -> Any:
        """Record a connecting agent's cluster; a returning cluster keeps its cordon.

        With `heartbeat_timeout`, one agent process holds a cluster at a time: another `instance` is
        refused while the cluster is Ready (the holder's stream is open, on whichever replica) and heard
        from within the timeout; two agents with one name would otherwise replace each other's stream.
        """
        values = {"name": name, "labels": labels, "agent_version": agent_version, "status": "READY",
                  "last_heartbeat": func.now(), "instance": instance}
        async with self.engine.begin() as conn:
            if heartbeat_timeout is not None:
                holder = (await conn.execute(
                    select(Cluster.instance, func.extract("epoch", func.now() - Cluster.last_heartbeat).label("age"))
                    .where(Cluster.name == name, Cluster.status == "READY", Cluster.instance != instance,
                           Cluster.last_heartbeat > func.now() - timedelta(seconds=heartbeat_timeout))
                    .with_for_update())).first()
                if holder is not None:
                    raise AlreadyExists(
                        f"cluster {name!r} already has a live agent (instance {holder.instance or 'unnamed'}, "
                        f"heard from {float(holder.age):.1f} s ago); a second agent with this name is refused until "
                        f"that one disconnects or is silent for {heartbeat_timeout:g} s")
            await conn.execute(insert(Cluster).values(**values).on_conflict_do_update(
                index_elements=[Cluster.name],
                set_={k: v for k, v in values.items() if k != "name"}))
            return await self._get(conn, Cluster, name)

    async def set_drift(self, drift: dict[str, dict[str, int]]) -> None:
        """Record each of these clusters' drift (the scheduling leader's drift alarm; {} when it ended)."""
        async with self.engine.begin() as conn:
            for name, amounts in sorted(drift.items()):
                await conn.execute(update(Cluster).where(Cluster.name == name).values(drift=amounts))

    async def set_holds(self, holds: Mapping[str, list[list[Any]]], fence: Fence | None = None) -> None:
        """Record the gangs the scheduling leader holds room for in each of these clusters ([job, pods, GPUs per
        pod] each), under the lease: the agents get them with their heartbeats' acknowledgements."""
        if not holds:
            return
        names = sorted(holds)
        async with self.engine.begin() as conn:
            if fence is not None:
                await fence.check(conn)
            # One statement, not one a cluster: a cycle moves the holds of tens of clusters at once.
            await conn.execute(text(
                "UPDATE clusters SET holds = v.holds "
                "FROM unnest(CAST(:names AS text[]), CAST(:holds AS jsonb[])) AS v(name, holds) "
                "WHERE clusters.name = v.name"), {"names": names, "holds": [json_text(holds[n]) for n in names]})

    async def for_submission(self, heartbeat_timeout: float) -> SubmissionView:
        """Everything a submission is checked against, read on one connection in one snapshot: a batch of jobs
        costs one round of reads however many tables it is checked against."""
        queues, classes, tenants, clusters = await self._read_view(_view_reads(float(heartbeat_timeout)))
        return SubmissionView(queues, classes, tenants, clusters)

    async def for_scheduling(self, heartbeat_timeout: float) -> SchedulingView:
        """What a scheduling cycle reads of the federation's objects, in one snapshot and one round trip (five
        reads through SQLAlchemy's execution path each cycle before): `for_submission`'s, the flavors, and the last
        job event's number, which the clusters' inventories are as of (see `clusters`)."""
        queues, classes, tenants, clusters, flavors, last = await self._read_view(
            _scheduling_reads(float(heartbeat_timeout)))
        return SchedulingView(queues, classes, tenants, clusters, flavors, last[0]["last_seq"] if last else 0)

    async def _read_view(self, statements: bytes) -> list[list[dict[str, Any]]]:
        """Every result of these statements (`_view_reads` first), in one round trip by the driver (`database.driver`),
        not one each through SQLAlchemy's execution path, and in one snapshot; the clusters with their inventories."""
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin(), (await driver(conn)).cursor(row_factory=dict_row) as cur:
                await cur.execute(statements)
                results = [await cur.fetchall()]
                while cur.nextset():
                    results.append(await cur.fetchall())
                results[3] = await self.inventories.attach(conn, results[3])  # `_view_reads`' fourth: the clusters
        return results

    async def clusters(self, heartbeat_timeout: float) -> tuple[list[Any], int]:
        """Every cluster, with `live`: Ready and heard from within the timeout, on whichever replica;
        and the sequence number of the last job event at the same moment.

        Liveness is read from Postgres rather than from this replica's streams, because the agent
        may be connected to another replica; the clock is Postgres', so replicas agree. The event
        number lets the scheduler see jobs as they were when these inventories were: read at
        different moments, a job could look held while the inventory already reports its resources
        free, and they would go to whoever comes first rather than to the tenant that lost them.
        """
        live = and_(Cluster.status == "READY",
                    Cluster.last_heartbeat > func.now() - timedelta(seconds=heartbeat_timeout)).label("live")
        async with self.engine.connect() as conn:
            await conn.execution_options(isolation_level="REPEATABLE READ")
            async with conn.begin():
                rows = await self.inventories.attach(conn, (await conn.execute(
                    select(*WITHOUT_INVENTORY, live).order_by(Cluster.name))).mappings().all())
                seq = (await conn.execute(LAST_EVENT_SEQ)).scalar_one()
        return rows, seq

    async def usable(self, heartbeat_timeout: float) -> set[str]:
        """The clusters jobs may be sent to now: live (as `clusters` says), not cordoned, no problem reported."""
        async with self.engine.connect() as conn:
            return set((await conn.execute(select(Cluster.name).where(
                _live(heartbeat_timeout), Cluster.cordoned.is_(False), Cluster.problem == ""))).scalars())

    async def _get(self, conn: AsyncConnection, model: type[Base], name: str, for_update: bool = False) -> Any:
        query = select(model).where(model.name == name)
        if for_update:
            query = query.with_for_update()
        row = (await conn.execute(query)).mappings().first()
        if row is None:
            raise NotFound(f"{_kind(model)} {name!r} not found")
        return row

    @staticmethod
    def _conflict(model: type[Base], values: dict[str, Any], err: IntegrityError) -> Exception:
        if "uq_priority_classes_global_default" in str(err.orig):
            return FailedPrecondition("another priority class is already the global default; unset it first")
        return AlreadyExists(f"{_kind(model)} {values['name']!r} already exists")
