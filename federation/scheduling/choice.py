"""Cluster choice for one cycle: every Ready cluster's free resources and tier maxima as arrays.

A cycle asks "which cluster is best for this gang?" tens of thousands of times over a hundred or
more clusters; asked one cluster at a time in Python, that alone takes seconds. Here the question
is one set of array operations over all clusters at once, with the same rule as `fit.check`
(selector, free totals, largest pod on one node, hard tier limit) and the preference of
docs/architecture.md, Cluster choice (lowest fitting tier, then least left over, then name). Reasons for
a job that fits nowhere are still worded by `fit.check`, cluster by cluster: that path runs once per distinct
gang shape, because within a cycle free resources only shrink and a shape that fits nowhere stays so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from federation.kernel.resources import GPU as GPU_RESOURCE
from federation.scheduling import native
from federation.scheduling.fit import (
    NO_NODE_HOLDS,
    NOT_ENOUGH_FREE,
    TOO_SMALL,
    ClusterView,
    JobView,
    Shape,
    TierFree,
    Why,
    fits_healthy,
    gpu_pods,
    labels_unmatched,
    pods_room,
    pods_unheld,
    said,
    sized,
    tier_short,
    whole,
    why_not,
)

NO_TIER = 1 << 20  # the "fit tier" of a cluster where no HyperNode covers the gang
ROWS_ONE_BY_ONE = 4  # clusters changed since a shape was last scored, up to which they are rescored in Python
UNBOUNDED = np.iinfo(np.int64).max // 4  # a missing tier-0 summary: no per-node limit is known
UNHEALTHY = 4.0 * NO_TIER  # a cluster where the gang fits only on degraded hardware comes after every other
_UNSEEN = object()  # a labelling not met yet (`ClusterTable._ruled_out`)


@dataclass
class _Unreserved:
    """Per shape, where it would fit but for room held for others (see `ClusterTable.fits_without_reservations`)."""
    seen: int  # how many of the cycle's changes `mask` includes
    mask: np.ndarray  # per cluster: room is held there, and its free plus held room covers the gang
    first: int  # the first cluster of `mask` (-1: none)
    request: np.ndarray  # the gang's request as a row
    amounts: list[tuple[int, int]]  # the same as (column, amount)


@dataclass
class _Asks:
    """A gang shape's asks as rows of the table: the same all cycle, and read at each of thousands of scorings."""
    request: np.ndarray
    largest: np.ndarray  # its largest pod
    columns: np.ndarray  # the columns it asks some of
    amounts: np.ndarray  # what it asks there
    weights: np.ndarray  # the federation's weight per unit there
    lists: tuple[list[int], list[int], list[int], list[int], list[float]]  # the same, as the compiled scores take them


def compiled_table() -> tuple[Callable[..., None], Callable[..., None]] | None:
    """The compiled scores and reservations (native/table.rs), when `make` built them and the switch in `native` is
    on: (table_scores, table_reserve)."""
    found = native.compiled
    return (found.table_scores, found.table_reserve) if found is not None and hasattr(found, "table_scores") else None


@dataclass
class _Scores:
    scores: np.ndarray  # per cluster, as `ClusterTable._scores`
    seen: int  # how many of the cycle's changes they include


class ClusterTable:
    def __init__(self, clusters: Sequence[ClusterView], capacity: Mapping[str, int]) -> None:
        self.names = sorted(c.name for c in clusters)
        self.index = {name: i for i, name in enumerate(self.names)}
        by_name = {c.name: c for c in clusters}
        self._views = by_name  # as reported (health included), for the choice by tier names
        self.labels = [by_name[n].labels for n in self.names]
        self.node_labels = [by_name[n].node_labels for n in self.names]
        self.gpu_memory = [by_name[n].gpu_memory for n in self.names]
        # [c, f] = cluster c's nodes with f whole GPUs free, where its agent reports them (`gpu_known`): a gang's
        # pods are checked against them node by node; a reserved gang takes its pods from them best fit first.
        hists = [by_name[n].gpu_free_nodes for n in self.names]
        self.gpu_known = np.array([h is not None for h in hists], dtype=bool)
        self.gpu_hist = np.zeros((len(self.names), max((len(h) for h in hists if h), default=1)), dtype=np.int64)
        for i, h in enumerate(hists):
            if h:
                self.gpu_hist[i, :len(h)] = h
        self._rooms: dict[int, np.ndarray] = {}  # pod size -> per cluster, how many such pods its nodes hold
        self.tier_names = [{t.tier: t.tier_name for t in by_name[n].tiers} for n in self.names]
        resources = sorted({r for c in clusters for r in c.free} | {r for c in clusters for t in c.tiers
                                                                    for r in t.max_free} | set(capacity))
        self.resource = {r: k for k, r in enumerate(resources)}
        self.top = max((t.tier for c in clusters for t in c.tiers), default=0)
        n, k = len(self.names), len(resources)
        self.free = np.zeros((n, k), dtype=np.int64)
        # tiers[c, t, r]: the most of r free in one HyperNode of tier t (t = 0: one node); -1 where
        # the cluster has no such tier, so it never covers anything.
        self.tiers = np.full((n, self.top + 1, k), -1, dtype=np.int64)
        self.tiers[:, 0, :] = UNBOUNDED
        for i, name in enumerate(self.names):
            c = by_name[name]
            for r, a in c.free.items():
                self.free[i, self.resource[r]] = a
            self._fill(self.tiers, i, c.tiers)
        # The same over healthy hardware only, where some cluster has degraded hardware: a gang that fits a
        # cluster only on degraded nodes (or behind degraded links) goes there only when no cluster fits it healthy.
        self.healthy: np.ndarray | None = None
        if any(c.healthy_tiers is not None for c in clusters):
            self.healthy = self.tiers.copy()
            for i, name in enumerate(self.names):
                healthy = by_name[name].healthy_tiers
                if healthy is not None:
                    self.healthy[i, 1:, :] = -1
                    self._fill(self.healthy, i, healthy)
        self.capacity = np.array([capacity.get(r, 0) for r in resources], dtype=np.float64)
        self.per_capacity = np.divide(1.0, self.capacity, out=np.zeros_like(self.capacity), where=self.capacity > 0)
        self._per_capacity: list[float] = self.per_capacity.tolist()
        self._selectors: dict[tuple[object, ...], np.ndarray] = {}
        self._selects_of: dict[Shape, np.ndarray] = {}  # the same by shape: no key to build at each of many asks
        # Shapes found to fit nowhere in this cycle: each cluster's reason, and the waiting reason.
        self._nowhere: dict[Shape, ClusterReasons] = {}
        self.nowhere: dict[Shape, str] = {}
        self.held = np.zeros((n, k), dtype=np.int64)  # room reserved for waiting gangs, per cluster
        self._by_shape: dict[Shape, _Scores] = {}
        self._asked: dict[Shape, _Asks | None] = {}
        self.changed: list[int] = []  # clusters in the order they took work this cycle (free only shrinks)
        # shape -> where it would fit but for reservations, kept between asks: see fits_without_reservations
        self._unreserved: dict[Shape, _Unreserved] = {}
        self.holding = False  # whether room is held for a waiting gang anywhere (`hold`)
        # Each cluster's view as `view` last built it, with how often the cluster had taken work then: a shape that
        # fits nowhere has every cluster's reason worked out from its view, and between two such shapes most
        # clusters took nothing (a thousand views built per shape were a quarter of a cycle on 1,000 clusters).
        self._touched = [0] * n
        self._built: dict[int, tuple[int, ClusterView]] = {}
        # What a cluster's reason reads that does not change within a cycle, made when first asked (`_whys`).
        self._tiers_present: np.ndarray | None = None
        self._wholes: tuple[np.ndarray, np.ndarray] | None = None
        self._unmatching: dict[tuple[object, ...], tuple[np.ndarray, list[str | None]]] = {}
        # Bumped whenever room is given back (`restore`): answers kept by shape (`_Cycle.judge`) are good while it
        # stands, but for the shapes found to fit nowhere since, those waiting behind room held in a cluster that took
        # work since, and those that would fit but for room held in a cluster that held none before. Free room alone is
        # not read otherwise: a shape found to fit nowhere fits nowhere as gangs take room, and one not found so is
        # decided, not settled.
        self.version = 0
        self.found_nowhere: list[Shape] = []  # in the order found
        self.holding_since: list[int] = []  # clusters in the order they first held room for a waiting gang
        self._free_bytes: tuple[tuple[int, int], bytes] | None = None  # see `free_bytes`
        # Scores and reservations in one compiled pass each (numpy's per-call cost was a third of a steady cycle at
        # 1,000 clusters); None: the numpy code, which they must equal (tests/test_native_table.py). A table of no
        # resource at all (clusters that report none) is left to numpy, whose empty rows cover every ask of nothing.
        self.compiled = compiled_table() if n and k else None

    def _fill(self, table: np.ndarray, i: int, tiers: Sequence[TierFree]) -> None:
        for t in tiers:
            if t.tier > self.top:
                continue
            table[i, t.tier, :] = 0
            for r, a in t.max_free.items():
                k = self.resource.get(r)
                if k is not None:
                    table[i, t.tier, k] = a

    def __contains__(self, name: object) -> bool:
        return name in self.index

    def __bool__(self) -> bool:
        return bool(self.names)

    def view(self, name: str) -> ClusterView:
        """The cluster as it stands in this cycle (its free room less what the cycle sent or held there)."""
        i = self.index[name]
        built = self._built.get(i)
        if built is not None and built[0] == self._touched[i]:
            return built[1]
        free = self.free_dict(name)
        tiers = [TierFree(t, self.tier_names[i].get(t, ""),
                          {r: int(self.tiers[i, t, k]) for r, k in self.resource.items()})
                 for t in range(self.top + 1) if t in self.tier_names[i]]
        hist = tuple(int(n) for n in self.gpu_hist[i]) if self.gpu_known[i] else None
        reported = self._views[name]
        view = ClusterView(name, self.labels[i], free, tiers, capacity=reported.capacity,
                           partitionable=reported.partitionable, node_labels=self.node_labels[i], gpu_free_nodes=hist,
                           gpu_memory=self.gpu_memory[i])
        self._built[i] = (self._touched[i], view)
        return view

    def free_of(self, name: str, resource: str) -> int:
        k = self.resource.get(resource)
        return 0 if k is None else int(self.free[self.index[name], k])

    def free_dict(self, name: str) -> dict[str, int]:
        i = self.index[name]
        return {r: int(self.free[i, k]) for r, k in self.resource.items()}

    def rooms(self, pod_gpus: int) -> np.ndarray:
        """Per cluster, how many pods of `pod_gpus` whole GPUs its nodes hold (unbounded where not reported)."""
        room = self._rooms.get(pod_gpus)
        if room is None:
            per_node = np.arange(self.gpu_hist.shape[1]) // pod_gpus
            room = self._rooms[pod_gpus] = np.where(self.gpu_known, self.gpu_hist @ per_node, UNBOUNDED)
        return room

    def _take_pods(self, i: int, job: JobView) -> None:
        """A gang reserved in cluster i: its pods off the free-GPU histogram, each on the node with the fewest
        free GPUs that holds it (as the agent packs them); a gang of pods of several sizes: no longer known."""
        if not self.gpu_known[i] or not job.request.get(GPU_RESOURCE, 0):
            return
        if not (pods := gpu_pods(job)):
            self.gpu_known[i] = False
        else:
            hist, size = self.gpu_hist[i], job.pod_gpus
            for _ in range(pods):
                fitting = np.flatnonzero(hist[size:] > 0)
                if not len(fitting):
                    break
                at = size + int(fitting[0])
                hist[at] -= 1
                hist[at - size] += 1
        for pod_gpus, room in self._rooms.items():
            room[i] = pods_room(self.gpu_hist[i].tolist(), pod_gpus) if self.gpu_known[i] else UNBOUNDED

    def selects(self, job: JobView) -> np.ndarray:
        """Per cluster, whether it matches the gang's cluster selector and has nodes with its pods' labels."""
        mask = self._selects_of.get(job.shape)
        if mask is not None:
            return mask
        key = (tuple(sorted(job.cluster_selector.items())), job.node_selector)
        mask = self._selectors.get(key)
        if mask is None:
            mask = self._selectors[key] = ~self._ruled_out(job)[0]
        self._selects_of[job.shape] = mask
        return mask

    def vector(self, amounts: Mapping[str, int]) -> np.ndarray | None:
        """The amounts as a row over this table's resources; None if one is unknown to every cluster."""
        found = self._columns(amounts)
        if found is None:
            return None
        row = np.zeros(len(self.resource), dtype=np.int64)
        row[found[0]] = found[1]
        return row

    def best(self, job: JobView, refused: Mapping[str, str]) -> str | None:
        """The cluster the gang fits best now, or None.

        Each gang shape keeps its score per cluster (lowest fitting tier, then least left over) from
        one cycle-long computation; a later ask of the same shape rescores only the clusters that
        took work since, so a cycle costs one pass per shape plus one row per placed gang, not one
        pass over every cluster per job.
        """
        if not refused and job.shape in self._nowhere:
            return None
        if not self.names or job.highest_tier_name or job.memory_asks:  # memory asks: sized cluster by cluster
            return self._best_slowly(job, refused)
        if refused:
            scores = self._scored(job)
            if scores is None:
                return None
            for name in refused:
                if name in self.index:
                    scores[self.index[name]] = np.inf
        else:
            entry = self._by_shape.get(job.shape)
            if entry is None:
                scores = self._scored(job)
                if scores is None:
                    return None
                entry = self._by_shape[job.shape] = _Scores(scores, len(self.changed))
            elif entry.seen < len(self.changed):
                self._rescore(job, entry.scores, set(self.changed[entry.seen:]))
                entry.seen = len(self.changed)
            scores = entry.scores
        i = int(scores.argmin())
        return self.names[i] if scores[i] != np.inf else None

    def _scored(self, job: JobView) -> np.ndarray | None:
        """Every cluster's score for the gang (`_scores`); None when it asks for a resource no cluster has."""
        if self.compiled is None:
            return self._scores(job, slice(None))
        asks = self._asks(job)
        if asks is None:
            return None
        scores = np.empty(len(self.names), dtype=np.float64)
        self._score_natively(job, asks, scores, None)
        return scores

    def _rescore(self, job: JobView, scores: np.ndarray, rows: set[int]) -> None:
        """The gang's `scores` worked out again in `rows`, the clusters that took work since they were."""
        if self.compiled is not None:
            asks = self._asks(job)
            assert asks is not None  # scores are kept only for a shape whose asks are known
            self._score_natively(job, asks, scores, list(rows))
        elif len(rows) <= ROWS_ONE_BY_ONE:
            for i in rows:
                scores[i] = self._score(job, i)
        else:
            at = np.fromiter(rows, dtype=np.intp) if len(rows) < len(self.names) // 4 else slice(None)
            scores[at] = self._scores(job, at)

    def _score_natively(self, job: JobView, asks: _Asks, out: np.ndarray, rows: list[int] | None) -> None:
        """`_scores` by the compiled pass, written into `out` at `rows` (None: every cluster)."""
        assert self.compiled is not None
        pods = gpu_pods(job)
        hard = job.mode == "hard"
        self.compiled[0](out, rows, self.free, self.tiers, self.healthy, self.selects(job).view(np.uint8),
                         self.rooms(job.pod_gpus) if pods else None, pods, *asks.lists,
                         job.highest_tier if hard else None, job.highest_tier if hard else self.top)

    def _score(self, job: JobView, i: int) -> float:
        """`_scores` for one cluster, in plain Python: for a row or two, numpy's per-call cost is most of it."""
        if not self.selects(job)[i]:
            return np.inf
        free, tiers = self.free[i].tolist(), self.tiers[i].tolist()
        request = [(self.resource[r], a) for r, a in job.request.items() if a > 0]
        if any(free[k] < a for k, a in request) or any(
                tiers[0][self.resource[r]] < a for r, a in job.largest_pod.items() if a > 0):
            return np.inf
        if (pods := gpu_pods(job)) and self.rooms(job.pod_gpus)[i] < pods:
            return np.inf
        fit_tier = next((t for t in range(1, self.top + 1) if all(tiers[t][k] >= a for k, a in request)), NO_TIER)
        if job.mode == "hard" and fit_tier > job.highest_tier:
            return np.inf
        left = max(((free[k] - a) * self._per_capacity[k] for k, a in request), default=0.0)
        unhealthy = 0.0
        if self.healthy is not None:
            healthy = self.healthy[i].tolist()
            limit = job.highest_tier if job.mode == "hard" else self.top
            fits = all(healthy[0][self.resource[r]] >= a for r, a in job.largest_pod.items() if a > 0) and any(
                all(healthy[t][k] >= a for k, a in request) for t in range(1, limit + 1))
            unhealthy = 0.0 if fits else UNHEALTHY
        return fit_tier * 2.0 + left + unhealthy

    def _scores(self, job: JobView, rows: slice | np.ndarray) -> np.ndarray | None:
        """Per cluster of `rows`, the preference of docs/architecture.md (Cluster choice) as one number
        (fitting tier, then the largest share of a federation-wide resource left over); infinite where the gang
        does not fit. None when it asks for a resource no cluster has."""
        asks = self._asks(job)
        if asks is None:
            return None
        request, largest, columns, amounts, weights = asks.request, asks.largest, asks.columns, asks.amounts, \
            asks.weights
        free, tiers = self.free[rows], self.tiers[rows]
        mask = self.selects(job)[rows] & (free >= request).all(1) & (
            tiers[:, 0, :] >= largest).all(1)
        if pods := gpu_pods(job):
            mask &= self.rooms(job.pod_gpus)[rows] >= pods
        covers = (tiers[:, 1:, :] >= request).all(2)  # [c, t - 1]
        if job.mode == "hard":
            mask &= covers[:, :job.highest_tier].any(1)
        fit_tier = np.full(len(mask), NO_TIER, dtype=np.float64)
        if self.top:  # no cluster reports a HyperNode tier: none covers the gang (argmax needs a tier)
            fit_tier = np.where(covers.any(1), covers.argmax(1) + 1, NO_TIER).astype(np.float64)
        # every fitting cluster has some of each resource asked, so capacity > 0 there
        left = ((free[:, columns] - amounts) * weights).max(1) if len(columns) else 0.0
        # left is in [0, 1] where the gang fits: a tier outweighs any amount left over.
        score = fit_tier * 2.0 + left
        if self.healthy is not None:
            healthy = self.healthy[rows]
            limit = job.highest_tier if job.mode == "hard" else self.top
            fits = (healthy[:, 0, :] >= largest).all(1) & (healthy[:, 1:limit + 1, :] >= request).all(2).any(1)
            score = score + np.where(fits, 0.0, UNHEALTHY)
        return np.where(mask, score, np.inf)

    def _asks(self, job: JobView) -> _Asks | None:
        """The gang's asks as rows of the table (None: it asks for a resource no cluster has). The same all cycle for
        a shape, whose scores are worked out again thousands of times a cycle at 1,000 clusters."""
        if job.shape in self._asked:
            return self._asked[job.shape]
        request, largest = self.vector(job.request), self.vector(job.largest_pod)
        found = None
        if request is not None and largest is not None:
            columns = np.flatnonzero(request > 0)
            amounts, weights = request[columns], self.per_capacity[columns]
            found = _Asks(request, largest, columns, amounts, weights, (
                request.tolist(), largest.tolist(), columns.tolist(), amounts.tolist(), weights.tolist()))
        self._asked[job.shape] = found
        return found

    def passed_over(self, job: JobView, chosen: str) -> str:
        """When the gang goes to `chosen` on healthy hardware while other clusters fit it only on degraded
        hardware, those clusters and what is degraded there ("" otherwise): said on its Dispatched event."""
        if self.healthy is None or job.highest_tier_name:
            return ""
        entry = self._by_shape.get(job.shape)  # as `best` just scored them, when it kept them
        scores = entry.scores if entry is not None and entry.seen == len(self.changed) else self._scored(job)
        if scores is None or scores[self.index[chosen]] >= UNHEALTHY:
            return ""
        degraded = [self.names[i] for i in np.flatnonzero((scores >= UNHEALTHY) & (scores != np.inf))]
        if not degraded:
            return ""
        said = "; ".join(f"{n}: {', '.join(self._views[n].health) or 'degraded hardware'}" for n in degraded[:3])
        more = f" and {len(degraded) - 3} more" if len(degraded) > 3 else ""
        return f"on healthy hardware; passed over {said}{more} (the gang fits there only on degraded hardware)"

    def _best_slowly(self, job: JobView, refused: Mapping[str, str]) -> str | None:
        """The same choice, one cluster at a time, for what the arrays do not express (tiers by name, a gang's
        size depending on the cluster)."""
        fitting = []
        for name in self.names:
            if name in refused:
                continue
            view = self.view(name)
            if why_not(job, view) is None:
                request = sized(job, view)[0]
                fit = next((t.tier for t in view.tiers if t.tier > 0 and all(
                    t.max_free.get(r, 0) >= a for r, a in request.items())), NO_TIER)
                left = max(((view.free.get(r, 0) - a) / c for r, a in request.items()
                            if a > 0 and (c := self.capacity[self.resource[r]]) > 0), default=0.0)
                fitting.append((not fits_healthy(job, self._views[name]), fit, left, name))
        return min(fitting)[3] if fitting else None

    def reasons(self, job: JobView, refused: Mapping[str, str]) -> ClusterReasons:
        """Why the gang fits none of the clusters, one "cluster: reason" each."""
        key = job.shape
        if not refused and key in self._nowhere:
            return self._nowhere[key]
        whys = self._whys(job, refused)
        out = ClusterReasons(self.names, whys if whys is not None else [
            (why, None) if (why := refused.get(name)) else why_not(job, self.view(name)) for name in self.names])
        if not refused:
            self._nowhere[key] = out
            self.nowhere[key] = "no ready cluster fits: " + summary(out)
            self.found_nowhere.append(key)
        return out

    def _whys(self, job: JobView, refused: Mapping[str, str]) -> _Whys | None:
        """`fit.why_not` for every cluster at once, over the arrays (None: the gang asks what only a cluster at a
        time answers: a tier by name, a partition, GPU memory, a resource no cluster has). A shape that fits nowhere
        is asked of every cluster once a cycle: one cluster at a time, 35 shapes on 1,000 clusters were a seventh
        of a steady cycle."""
        if job.memory_asks or job.partition or job.highest_tier_name or not self.names:
            return None
        asked, largest = self._columns(job.request), self._columns(job.largest_pod)
        if asked is None or largest is None:
            return None
        (cols, amounts), (lcols, lamounts) = asked, largest
        present, (everything, said_all) = self._present(), self._whole()
        # Each check's failures written over the later checks', so what stays is the first that fails, as there.
        codes = np.full(len(self.names), _FITS, dtype=np.int8)
        within = None
        if job.mode == "hard":
            limit = job.highest_tier
            there = present[:, 1:limit + 1]
            codes[~(((self.tiers[:, 1:limit + 1][:, :, cols] >= amounts).all(2) & there).any(1))] = _TIERS
            highest = np.where(there.any(1), there.shape[1] - there[:, ::-1].argmax(1), 0) if there.shape[1] else \
                np.zeros(len(self.names), dtype=np.intp)  # 0: no such tier
            within = (highest, self.tiers[np.arange(len(self.names)), highest])
        rooms = None
        if pods := gpu_pods(job):
            rooms = self.rooms(job.pod_gpus).copy()
            codes[rooms < pods] = _PODS  # unbounded where the nodes are not reported
        nodes = self.tiers[:, 0, :].copy()
        codes[present[:, 0] & ~(nodes[:, lcols] >= lamounts).all(1)] = _NO_NODE
        free = self.free.copy()
        short = ~(free[:, cols] >= amounts).all(1)
        codes[short] = _NOT_FREE
        codes[short & said_all & ~(everything[:, cols] >= amounts).all(1)] = _TOO_SMALL
        unmatched = self._unmatched(job)
        if unmatched is not None:
            codes[unmatched[0]] = _UNMATCHED
        for name, why in refused.items():
            if why and (i := self.index.get(name)) is not None:  # an empty refusal is no refusal, as there
                codes[i] = _REFUSED
        return _Whys(self, job, refused, codes, free, nodes, rooms, within, unmatched)

    def _columns(self, amounts: Mapping[str, int]) -> tuple[list[int], np.ndarray] | None:
        """The table's columns of the resources `amounts` names, and the amounts (None: it asks for one no cluster
        has). A resource named at 0 is checked as `fit.covers` checks it."""
        cols, values = [], []
        for r, a in amounts.items():
            k = self.resource.get(r)
            if k is None:
                if a > 0:
                    return None
                continue
            cols.append(k)
            values.append(a)
        return cols, np.array(values, dtype=np.int64)

    def _present(self) -> np.ndarray:
        """[c, t]: whether cluster c reports a summary of tier t."""
        if self._tiers_present is None:
            self._tiers_present = np.array([[t in names for t in range(self.top + 1)] for names in self.tier_names],
                                           dtype=bool).reshape(len(self.names), self.top + 1)
        return self._tiers_present

    def _whole(self) -> tuple[np.ndarray, np.ndarray]:
        """Per cluster, everything it has (`fit.whole`) as a row, and whether it says so at all."""
        if self._wholes is None:
            rows = np.zeros_like(self.free)
            said = np.zeros(len(self.names), dtype=bool)
            for i, name in enumerate(self.names):
                amounts = whole(self._views[name])
                said[i] = bool(amounts)
                for r, a in amounts.items():
                    if (k := self.resource.get(r)) is not None:
                        rows[i, k] = a
            self._wholes = (rows, said)
        return self._wholes

    def _unmatched(self, job: JobView) -> tuple[np.ndarray, list[str | None]] | None:
        """Per cluster, whether its labels or its nodes' rule the gang out whatever is free, and why (None: the gang
        selects by neither). Labels do not change within a cycle: worked out once per selector."""
        if not job.cluster_selector and not job.node_selector:
            return None
        return self._ruled_out(job)

    def _ruled_out(self, job: JobView) -> tuple[np.ndarray, list[str | None]]:
        """`_unmatched` of any gang, one that selects by nothing included (no cluster ruled out). Worked out once per
        selector, and within it once per distinct labelling: clusters whose labels agree on the selector's keys and
        whose nodes carry the same labels are ruled out alike (at 1,000 clusters, a few selectors asked of every
        cluster were most of a cycle's cluster table)."""
        key = (tuple(sorted(job.cluster_selector.items())), job.node_selector)
        found = self._unmatching.get(key)
        if found is None:
            names = [k for k, _ in key[0]]
            alike: dict[tuple[tuple[str | None, ...], frozenset[str] | None], str | None] = {}
            said = []
            for labels, nodes in zip(self.labels, self.node_labels, strict=True):
                labelling = (tuple([labels.get(k) for k in names]), nodes)
                why = alike.get(labelling, _UNSEEN)
                if why is _UNSEEN:
                    why = alike[labelling] = labels_unmatched(job, labels, nodes)
                said.append(why)
            found = self._unmatching[key] = (np.array([s is not None for s in said], dtype=bool), said)
        return found

    def free_bytes(self) -> bytes:
        """The free table as the compiled search reads it (row-major int64): copied once per change, not at each of
        the thousand asks of a cycle. Free room changes only as clusters take work (`changed`) or room is given back
        (`restore`, which bumps `version`)."""
        key = (self.version, len(self.changed))
        if self._free_bytes is None or self._free_bytes[0] != key:
            self._free_bytes = (key, self.free.tobytes())
        return self._free_bytes[1]

    def fits_nowhere(self, job: JobView) -> str | None:
        """The waiting reason, when a gang of this shape was already found to fit nowhere in this
        cycle (free resources only shrink during a cycle, so it still fits nowhere)."""
        return self.nowhere.get(job.shape)

    def hold(self, job: JobView, name: str) -> None:
        """Reserve the gang's room for it while it waits (as `reserve`), remembering that it is held."""
        self.reserve(job, name)
        i = self.index[name]
        # More room held where some was already leaves free plus held there, and its first holder, as they were.
        if not self.held[i].any():
            self.holding_since.append(i)
        self.held[i] += self._request_in(job, name)
        self.holding = True

    def fits_without_reservations(self, job: JobView) -> str | None:
        """A cluster whose free totals would cover the gang if nothing were held there for others."""
        # Free plus held, and where room is held, change only in clusters that took work (`changed`): per shape,
        # the clusters it would fit so are kept and only those rows worked out again.
        if not self.holding:
            return None
        seen = len(self.changed)
        known = self._unreserved.get(job.shape)
        if known is None:
            request = self.vector(job.request)
            if request is None:
                return None
            mask = self.selects(job) & self.held.any(1) & ((self.free + self.held) >= request).all(1)
            hits = np.flatnonzero(mask)
            known = self._unreserved[job.shape] = _Unreserved(seen, mask, int(hits[0]) if len(hits) else -1,
                                                              request, list(enumerate(request.tolist())))
        elif known.seen < seen:
            self._unreserved_since(job, known, set(self.changed[known.seen:]))
            known.seen = seen
        return None if known.first < 0 else self.names[known.first]

    def fit_but_for_holds_at(self, jobs: Iterable[JobView], i: int) -> list[Shape]:
        """The shapes of `jobs` that cluster `i` may take and whose request its free plus held room covers: one row of
        what `fits_without_reservations` looks through, for many shapes at once (a cycle on 1,000 clusters asks for
        each cluster that first holds room, a hundred a cycle, about the 35 shapes it kept verdicts for)."""
        room = (self.free[i] + self.held[i]).tolist()
        found = []
        for job in jobs:
            asks = self._asks(job)
            request = asks.lists[0] if asks is not None else self.vector(job.request)
            if request is not None and self.selects(job)[i] and all(r >= a for r, a in zip(room, request, strict=True)):
                found.append(job.shape)
        return found

    def _unreserved_since(self, job: JobView, known: _Unreserved, rows: set[int]) -> None:
        """Bring the shape's `fits_without_reservations` mask up to date in `rows`, the clusters that took work
        since: a row or a few in Python (numpy's per-call cost is most of it for so few), more as arrays."""
        mask = known.mask
        if len(rows) <= ROWS_ONE_BY_ONE:
            selected = self.selects(job)
            for i in rows:
                free, held = self.free[i].tolist(), self.held[i].tolist()
                mask[i] = bool(selected[i]) and any(held) and all(free[k] + held[k] >= a for k, a in known.amounts)
        else:
            at = list(rows)
            mask[at] = self.selects(job)[at] & self.held[at].any(1) & (
                (self.free[at] + self.held[at]) >= known.request).all(1)
        first = known.first
        if first >= 0 and first in rows and not mask[first]:
            hits = np.flatnonzero(mask)
            known.first = int(hits[0]) if len(hits) else -1
        else:  # the first is still one, or there was none: only a changed row before it can take its place
            earlier = [i for i in rows if mask[i] and (first < 0 or i < first)]
            if earlier:
                known.first = min(earlier)

    def _request_in(self, job: JobView, name: str) -> np.ndarray:
        """The gang's request as a row, as the cluster holds it (`fit.sized`); the shape's own row when it asks no
        GPU memory (never written to)."""
        asks = None if job.memory_asks else self._asks(job)
        request = asks.request if asks is not None else self.vector(
            sized(job, self.view(name))[0] if job.memory_asks else job.request)
        assert request is not None
        return request

    def save(self) -> tuple[object, ...]:
        """What `restore` puts back: the free room as it is, before a trial of reservations that may be undone (a
        HyperJob's sub-jobs, placed all or none)."""
        return (self.free.copy(), self.tiers.copy(), None if self.healthy is None else self.healthy.copy(),
                self.gpu_hist.copy(), self.gpu_known.copy(), {k: v.copy() for k, v in self._rooms.items()},
                dict(self._nowhere), dict(self.nowhere))

    def restore(self, saved: tuple[object, ...]) -> None:
        """Undo the reservations made since `save`; scores kept per shape are worked out again."""
        (self.free, self.tiers, self.healthy, self.gpu_hist, self.gpu_known, self._rooms, self._nowhere,
         self.nowhere) = saved  # type: ignore[assignment]
        self._by_shape.clear()
        self._unreserved.clear()
        self._built.clear()
        self.version += 1

    def reserve(self, job: JobView, name: str) -> None:
        """Take the gang's resources out of the cluster for the rest of the cycle.

        No HyperNode can have more free than the whole cluster has left, so each tier's maximum is
        capped at that. Where the gang lands inside the cluster is not known here; a later job sent
        on a stale maximum is rejected by the agent and comes back with the reason.
        """
        i = self.index[name]
        request = self._request_in(job, name)
        self.changed.append(i)
        self._touched[i] += 1
        self._take_pods(i, job)
        if self.compiled is not None:
            self.compiled[1](i, request, self.free, self.tiers, self.healthy)
            return
        self.free[i] -= request
        asked = request > 0
        self.tiers[i][:, asked] = np.maximum(np.minimum(self.tiers[i][:, asked], self.free[i, asked]), 0)
        if self.healthy is not None:
            self.healthy[i][:, asked] = np.maximum(np.minimum(self.healthy[i][:, asked], self.free[i, asked]), 0)



SHOWN_REASONS = 3  # up to this many clusters, a waiting job's reason names each; ExplainJob always does


# What `fit.why_not` finds first in a cluster, as `ClusterTable._whys` finds it for every cluster at once.
_FITS, _REFUSED, _UNMATCHED, _TOO_SMALL, _NOT_FREE, _NO_NODE, _PODS, _TIERS = range(8)
_SAID = {_TOO_SMALL: TOO_SMALL, _NOT_FREE: NOT_ENOUGH_FREE, _NO_NODE: NO_NODE_HOLDS}


class _Whys:
    """Each cluster's `fit.why_not` for one gang, as the arrays found it: which check failed first there, and the
    amounts its detail names as they stood then (the cycle goes on taking room; a reason is read later, if ever).
    It holds the table's names, views and columns, not the table: the table keeps it, and a reference cycle would
    keep both, and the snapshot, until a full collection."""

    def __init__(self, table: ClusterTable, job: JobView, refused: Mapping[str, str], codes: np.ndarray,
                 free: np.ndarray, nodes: np.ndarray, rooms: np.ndarray | None,
                 within: tuple[np.ndarray, np.ndarray] | None,
                 unmatched: tuple[np.ndarray, list[str | None]] | None) -> None:
        self.names, self.views, self.resource = table.names, table._views, table.resource
        self.job, self.refused, self.codes = job, refused, codes
        self.free, self.nodes, self.rooms, self.within, self.unmatched = free, nodes, rooms, within, unmatched

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, i: int) -> Why | None:
        code, job = self.codes[i], self.job
        if code == _FITS:
            return None
        if code == _REFUSED:
            return self.refused[self.names[i]], None
        if code == _UNMATCHED:
            assert self.unmatched is not None
            return self.unmatched[1][i], None
        if code == _TOO_SMALL:
            return TOO_SMALL, (whole(self.views[self.names[i]]), job.request, "in all")
        if code == _NOT_FREE:
            return NOT_ENOUGH_FREE, (self._amounts(self.free[i]), job.request, "free")
        if code == _NO_NODE:
            return NO_NODE_HOLDS, (self._amounts(self.nodes[i]), job.largest_pod, "free")
        if code == _PODS:
            assert self.rooms is not None
            return pods_unheld(job, int(self.rooms[i])), None
        assert self.within is not None
        highest, rows = self.within
        return tier_short(job.highest_tier), (self._amounts(rows[i]) if highest[i] else {}, job.request, "free")

    def _amounts(self, row: np.ndarray) -> dict[str, int]:
        return {r: int(row[k]) for r, k in self.resource.items()}

    def kinds(self) -> set[str]:
        """`ClusterReasons.kinds`, each kind read once however many clusters give it."""
        found: set[str] = set()
        for code in np.unique(self.codes).tolist():
            rows = np.flatnonzero(self.codes == code)
            if code == _REFUSED:
                found.update(str(self[int(i)][0]) for i in rows)  # type: ignore[index]
            elif code == _UNMATCHED:
                assert self.unmatched is not None
                found.update(str(self.unmatched[1][i]) for i in rows)
            elif code == _PODS:
                assert self.rooms is not None
                found.update(pods_unheld(self.job, room) for room in set(self.rooms[rows].tolist()))
            elif code == _TIERS:
                found.add(tier_short(self.job.highest_tier))
            else:
                found.add(_SAID.get(code, "None"))
        return {kind.partition(": ")[0] for kind in found}


class ClusterReasons(Sequence[str]):
    """Each cluster's reason ("cluster: kind: detail"), its detail formatted when the entry is first read: the
    summary of many clusters reads only their kinds."""

    def __init__(self, names: Sequence[str], whys: list[Why | None] | _Whys) -> None:
        self._names, self._whys = names, whys
        self._said: list[str | None] = [None] * len(names)

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, at: int) -> str: ...

    @overload
    def __getitem__(self, at: slice) -> list[str]: ...

    def __getitem__(self, at: int | slice) -> str | list[str]:
        if isinstance(at, slice):
            return [self[i] for i in range(*at.indices(len(self)))]
        found = self._said[at]
        if found is None:
            why = self._whys[at]
            found = self._said[at] = f"{self._names[at]}: {None if why is None else said(why)}"
        return found

    def kinds(self) -> set[str]:
        """What `summary` names of each reason: the part after the cluster, up to the next ": "."""
        if isinstance(self._whys, _Whys):
            return self._whys.kinds()
        return {str(None if why is None else why[0]).partition(": ")[0] for why in self._whys}


def summary(reasons: Sequence[str]) -> str:
    """The clusters' reasons ("name: why: detail") as one line for a waiting job.

    A few clusters are named with their details. Many are listed by kind of reason, in a fixed order,
    without free amounts or counts of clusters: those change whenever any gang starts or ends somewhere
    or a cluster joins or falls silent, and a reason that changed for every waiting job then would have
    to be written for all of them each time (a hundred thousand rows for one cluster joining).
    """
    if len(reasons) <= SHOWN_REASONS:
        return "; ".join(reasons)
    kinds = sorted(reasons.kinds() if isinstance(reasons, ClusterReasons) else {r.split(": ", 2)[1] for r in reasons})
    return "; ".join(kinds) + " (each cluster's reason: fedctl explain)"


class PreemptiblePool:
    """Per cluster and queue, the resources of running gangs that preemption could free.

    Finding victims means, for each cluster, greedily evicting gangs until the waiting gang fits;
    most clusters cannot make room however many eligible gangs they evict, and one array sum over
    the eligible queues says so for all clusters at once, before any greedy search.
    """

    def __init__(self, table: ClusterTable, queues: Sequence[str]) -> None:
        self.table = table
        self.queue = {q: j for j, q in enumerate(queues)}
        # [queue, cluster, resource]: a sum over queues adds whole contiguous blocks, one per queue.
        self.amounts = np.zeros((len(queues), len(table.names), len(table.resource)), dtype=np.int64)
        # The last sum over queues asked for, kept up to date: the heads of one cycle ask about nearly the same
        # queues (those over their share, and their own), so each sum is the last one give or take a few queues.
        self._last: tuple[frozenset[int], np.ndarray] | None = None

    def add(self, cluster: str, queue: str, request: Mapping[str, int], sign: int = 1) -> None:
        i, j = self.table.index.get(cluster), self.queue.get(queue)
        if i is None or j is None:
            return
        for r, a in request.items():
            k = self.table.resource.get(r)
            if k is not None:
                self.amounts[j, i, k] += sign * a
                if self._last is not None and j in self._last[0]:
                    self._last[1][i, k] += sign * a

    def _summed(self, rows: frozenset[int]) -> np.ndarray:
        """Per cluster, what the gangs of the queues `rows` hold."""
        if self._last is not None:
            had, total = self._last
            gone, new = had - rows, rows - had
            if len(gone) + len(new) < len(rows):
                total = total.copy()
                for j in gone:
                    total -= self.amounts[j]
                for j in new:
                    total += self.amounts[j]
                self._last = (rows, total)
                return total
        total = self.amounts[sorted(rows)].sum(0)
        self._last = (rows, total)
        return total

    def could_make_room(self, request: Mapping[str, int], queues: Sequence[str]) -> np.ndarray:
        """Per cluster, whether free resources plus every eligible gang of `queues` would cover `request`."""
        need = self.table.vector(request)
        rows = frozenset(self.queue[q] for q in queues if q in self.queue)
        if need is None or not rows:
            return np.zeros(len(self.table.names), dtype=bool)
        pool = self.table.free + self._summed(rows)
        return (pool >= need).all(1)
