"""Clusters' inventories are decoded once per change (issue 41: a submission, a cluster listing and a cycle each
decoded a hundred inventories of 1,000 HyperNodes). Real PostgreSQL: the version moves with the inventory however it
is written, and only then is it read and decoded again."""

from __future__ import annotations

from sqlalchemy import func, update
from sqlalchemy.engine import URL

from federation.store import database
from federation.store.admin import AdminStore
from federation.store.models import Cluster

GPU = "nvidia.com/gpu"


async def test_an_inventory_is_decoded_again_only_when_it_changed(db_url: URL) -> None:
    engine = database.async_engine(db_url)
    try:
        admin = AdminStore(engine)
        await admin.register_cluster("east", {}, "0.1.0")
        await admin.register_cluster("west", {}, "0.1.0")

        async def write(name: str, **values: object) -> None:
            async with engine.begin() as conn:
                await conn.execute(update(Cluster).where(Cluster.name == name).values(**values))

        await write("east", inventory={"allocatable": {GPU: 32}, "used": {GPU: 0}})
        first = {r["name"]: r for r in await admin.every_cluster()}
        assert first["east"]["inventory"] == {"allocatable": {GPU: 32}, "used": {GPU: 0}}
        assert first["west"]["inventory"] == {}

        # A heartbeat, a status, labels: the inventory stands, and what was decoded is what is given.
        await write("east", last_heartbeat=func.now(), labels={"zone": "a"})
        again = {r["name"]: r for r in await admin.every_cluster()}
        assert again["east"]["inventory_version"] == first["east"]["inventory_version"]
        assert again["east"]["inventory"] is first["east"]["inventory"]
        assert again["east"]["labels"] == {"zone": "a"}  # the rest of the row is read every time

        # Written by anyone (here straight in SQL, as an agent's report is): the version moves, the new one is read.
        await write("east", inventory={"allocatable": {GPU: 32}, "used": {GPU: 8}})
        moved = {r["name"]: r for r in await admin.every_cluster()}
        assert moved["east"]["inventory_version"] > first["east"]["inventory_version"]
        assert moved["east"]["inventory"]["used"] == {GPU: 8}
        assert moved["west"]["inventory"] is again["west"]["inventory"]  # the other one untouched

        # The scheduler's read and a submission's see the same.
        rows, _ = await admin.clusters(60)
        assert {r["name"]: r["inventory"]["used"] for r in rows if r["inventory"]} == {"east": {GPU: 8}}
        view = await admin.for_submission(60)
        assert [c["inventory"] for c in view.clusters if c["name"] == "east"] == [moved["east"]["inventory"]]
    finally:
        await engine.dispose()
