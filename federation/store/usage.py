"""Usage history in PostgreSQL: each tenant's and queue's decayed past usage, so that a new scheduling leader, and
every API replica, has what the last leader counted."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import delete, func, select, text, tuple_
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine

from federation.control.leader import Fence
from federation.store.models import UsageHistory

Key = tuple[str, str]  # ("tenant" or "queue", its name)


class UsageStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def read(self) -> dict[Key, tuple[dict[str, float], float]]:
        """Every history, with its age in seconds by the database's clock (one clock for every replica)."""
        query = select(UsageHistory.kind, UsageHistory.name, UsageHistory.usage,
                       text("extract(epoch FROM now() - usage_history.updated_at) AS age"))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).mappings().all()
        return {(r["kind"], r["name"]): (dict(r["usage"]), max(float(r["age"]), 0.0)) for r in rows}

    async def write(self, histories: Mapping[Key, Mapping[str, float]], fence: Fence | None = None) -> None:
        """Replace every history with `histories`, as of now (those of deleted tenants and queues go), under the
        lease: a stale leader's history is not written."""
        async with self.engine.begin() as conn:
            if fence is not None:
                await fence.check(conn)
            if histories:
                values = [{"kind": k, "name": n, "usage": dict(u), "updated_at": func.now()}
                          for (k, n), u in sorted(histories.items())]
                upsert = insert(UsageHistory).values(values)
                await conn.execute(upsert.on_conflict_do_update(
                    index_elements=["kind", "name"], set_={"usage": upsert.excluded.usage,
                                                         "updated_at": upsert.excluded.updated_at}))
            await conn.execute(delete(UsageHistory).where(
                tuple_(UsageHistory.kind, UsageHistory.name).not_in(list(histories)) if histories else text("true")))
