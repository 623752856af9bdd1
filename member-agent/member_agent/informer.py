"""client-go's informer, for the agent: list, then watch from the list's resourceVersion, and keep one
cache that every reader shares.

No maintained Python Kubernetes client ships an informer (kubernetes-client/python#868 has been open
since 2019), so this is the small part of one the agent needs:
- a paginated LIST fills the cache; a WATCH resumes from the last resourceVersion seen, bookmarks
  included, and reconnects after the server ends it or the connection drops;
- `410 Gone` (the version has been compacted away) re-lists, and the difference between the cache
  and the new list is delivered as adds, updates and deletes, so handlers never miss a change;
- a transform drops what no reader needs (at least managedFields) before anything is cached;
- an index finds objects by a key (the job a pod belongs to) without a scan.
Handlers run on the event loop, in order, after the cache has changed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from member_agent.kubeapi import Kube, KubeError, Obj
from member_agent.metrics import WATCH_RESTARTS

log = logging.getLogger(__name__)

Handler = Callable[[str, Obj | None, Obj | None], None]  # (ADDED | MODIFIED | DELETED, old, new)
WATCH_SECONDS = 300
PAGE = 500


class Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


def key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def drop_managed_fields(obj: Obj) -> Obj:
    (obj.get("metadata") or {}).pop("managedFields", None)
    return obj


class Informer:
    def __init__(self, kube: Kube, path: str, resource: str, handler: Handler, *,
                 missing_ok: bool = False, index: Callable[[Obj], str | None] | None = None,
                 transform: Callable[[Obj], Obj] = drop_managed_fields) -> None:
        """`path` lists the objects (e.g. /api/v1/pods); `missing_ok`: a 404 (the CRD is not installed)
        is an empty list, looked at again later, instead of an error; `index`: a key to find objects by
        (client-go's indexer), e.g. the job a pod belongs to; `transform`: what of each object is kept
        (client-go's SetTransform), so a cache of every pod in a large cluster stays small."""
        self.kube, self.path, self.resource, self.handler = kube, path, resource, handler
        self.missing_ok = missing_ok
        self.transform = transform
        self.index = index
        self.store: dict[str, Obj] = {}
        self.indexed: dict[str, dict[str, Obj]] = {}  # index value -> key -> object
        self.synced = asyncio.Event()
        self.resource_version = ""
        self.error: Exception | None = None  # why the first list failed, for a clear message at start

    def items(self) -> list[Obj]:
        return list(self.store.values())

    def by_index(self, value: str) -> list[Obj]:
        return list(self.indexed.get(value, {}).values())

    def _put(self, k: str, obj: Obj) -> Obj | None:
        old = self.store.get(k)
        self.store[k] = obj
        if self.index is not None:
            if old is not None:
                self._unindex(k, old)
            value = self.index(obj)
            if value is not None:
                self.indexed.setdefault(value, {})[k] = obj
        return old

    def _pop(self, k: str) -> Obj | None:
        old = self.store.pop(k, None)
        if old is not None and self.index is not None:
            self._unindex(k, old)
        return old

    def _unindex(self, k: str, obj: Obj) -> None:
        value = self.index(obj) if self.index is not None else None
        bucket = self.indexed.get(value) if value is not None else None
        if bucket is not None:
            bucket.pop(k, None)
            if not bucket:
                del self.indexed[value]  # type: ignore[arg-type]

    async def _list(self) -> None:
        items: list[Obj] = []
        query = [("limit", str(PAGE))]
        while True:
            try:
                page = await self.kube.get(self.path, query)
            except KubeError as err:
                if err.status == 404 and self.missing_ok:
                    page = {"items": [], "metadata": {}}
                else:
                    raise
            items += [self.transform(o) for o in page.get("items") or []]
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                self.resource_version = str(meta.get("resourceVersion", ""))
                break
            query = [("limit", str(PAGE)), ("continue", meta["continue"])]
        fresh = {key(o): o for o in items}
        gone = [k for k in self.store if k not in fresh]
        for k in gone:
            self._deliver("DELETED", self._pop(k), None)
        for k, obj in fresh.items():
            old = self._put(k, obj)
            if old is None:
                self._deliver("ADDED", None, obj)
            elif (old.get("metadata") or {}).get("resourceVersion") != (obj.get("metadata") or {}).get(
                    "resourceVersion"):
                self._deliver("MODIFIED", old, obj)
        self.synced.set()

    def _deliver(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        try:
            self.handler(kind, old, new)
        except Exception:  # one bad object must not stop the cache
            log.exception("handling %s %s", kind, self.resource)

    async def _watch(self) -> None:
        if not self.resource_version:  # the resource does not exist (yet): look again in a while
            await asyncio.sleep(30)
            raise Gone()
        query = {"watch": "1", "resourceVersion": self.resource_version, "allowWatchBookmarks": "true",
                 "timeoutSeconds": str(WATCH_SECONDS)}
        async for event in self.kube.stream(self.path, query, timeout=WATCH_SECONDS + 30):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise Gone()
                raise KubeError(int(obj.get("code") or 500), str(obj.get("reason", "")), str(obj.get("message", "")))
            self.resource_version = str((obj.get("metadata") or {}).get("resourceVersion", self.resource_version))
            if kind == "BOOKMARK":
                continue
            obj = self.transform(obj)
            k = key(obj)
            if kind == "DELETED":
                self._deliver("DELETED", self._pop(k), None)
            elif kind in ("ADDED", "MODIFIED"):
                old = self._put(k, obj)
                self._deliver("MODIFIED" if old is not None else "ADDED", old, obj)

    async def run(self) -> None:
        """List and watch until cancelled. A watch that ends or drops resumes from the last version seen;
        only an expired version (or a failed list) lists again."""
        backoff, listed = 0.5, False
        while True:
            try:
                if not listed:
                    await self._list()
                    listed = True
                await self._watch()
                WATCH_RESTARTS.labels(self.resource, "ended").inc()
                backoff = 0.5
            except asyncio.CancelledError:
                raise
            except Gone:
                listed = False
                WATCH_RESTARTS.labels(self.resource, "expired").inc()
                log.info("%s: resourceVersion %s expired; listing again", self.resource, self.resource_version)
            except Exception as err:  # the API server went away or refused: try again after a pause
                if not self.synced.is_set():
                    self.error = err
                WATCH_RESTARTS.labels(self.resource, "error").inc()
                log.warning("%s: %s failed (%s); retrying in %.1f s", self.resource,
                            "watch" if listed else "list", err, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 10)
