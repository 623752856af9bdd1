"""Clusters' inventories decoded once per change, not once per read.

An inventory lists up to 1,000 HyperNodes; every submission, cluster listing and scheduling cycle reads every
cluster's. Decoding a hundred of them each time costs a serving loop tens of milliseconds, and a worker thread
as much of the interpreter. Each row carries `inventory_version`, moved by a trigger whenever the inventory
changes (whoever writes it), so a reader fetches and decodes only the inventories whose version moved since it
last read them, and shares the decoded value: callers read it and never change it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from sqlalchemy import Text, select
from sqlalchemy.ext.asyncio import AsyncConnection

from federation.store.models import Cluster

# Every column of a cluster's row but its inventory: what is read every time.
WITHOUT_INVENTORY = tuple(c for c in Cluster.__table__.c if c.name != "inventory")
OFF_LOOP_BYTES = 64 * 1024  # inventories' JSON text from which decoding goes to a worker thread
T = TypeVar("T")


class Inventories:
    """Cluster name -> (inventory version, the inventory decoded), as last read by this process."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[int, dict[str, Any]]] = {}
        # Cluster name -> (what it was built from, a value built from its row): see `derived`.
        self._derived: dict[str, tuple[tuple[int, tuple[tuple[str, str], ...]], Any]] = {}

    def derived(self, row: Mapping[str, Any], build: Callable[[Mapping[str, Any]], T]) -> T:
        """`build(row)`, built again only when the cluster's inventory or labels changed: a cluster's view of
        1,000 HyperNodes is not rebuilt for every submission. One `build` per instance; safe from any thread
        (a race builds twice)."""
        key = (row["inventory_version"], tuple(sorted(row["labels"].items())))
        held = self._derived.get(row["name"])
        if held is None or held[0] != key:
            held = (key, build(row))
            self._derived[row["name"]] = held
        return held[1]  # type: ignore[no-any-return]

    async def attach(self, conn: AsyncConnection, rows: Sequence[Any]) -> list[dict[str, Any]]:
        """`rows`, every cluster's (read with `WITHOUT_INVENTORY`, on `conn`, in the same snapshot), with their
        inventories: those whose version moved are read and decoded now, the rest are what was decoded before."""
        moved = [r["name"] for r in rows if self._held.get(r["name"], (None,))[0] != r["inventory_version"]]
        # What this read gives, taken before any wait: another read meanwhile may forget or replace entries.
        held = {r["name"]: self._held[r["name"]][1] for r in rows if r["name"] in self._held and r["name"] not in moved}
        if moved:
            texts = (await conn.execute(select(Cluster.name, Cluster.inventory_version,
                                               Cluster.inventory.cast(Text)).where(Cluster.name.in_(moved)))).all()
            size = sum(len(t or "") for _, _, t in texts)
            fresh = _decode(texts) if size < OFF_LOOP_BYTES else await asyncio.to_thread(_decode, texts)
            self._held.update(fresh)
            held.update({name: inventory for name, (_, inventory) in fresh.items()})
        names = {r["name"] for r in rows}
        for gone in [n for n in self._held if n not in names]:
            del self._held[gone]
        return [{**r, "inventory": held.get(r["name"], {})} for r in rows]


def _decode(texts: Sequence[Any]) -> dict[str, tuple[int, dict[str, Any]]]:
    return {name: (version, orjson.loads(text) if text is not None else {}) for name, version, text in texts}
