"""The Kubernetes backend's view of nodes: the topology from Nodes and HyperNodes (and HyperNodes it writes when
it discovers them from labels), node health from conditions and DCGM, cordons and MIG layouts, and the DRA devices
nodes offer (a part of `kube.KubernetesBackend`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import aiohttp

from federation.kernel.dra import DeviceRequest
from federation.kernel.resources import Resources
from member_agent import discovery, mig
from member_agent.dcgm import DEFAULT_THRESHOLDS, dcgm_health
from member_agent.discovery import OWNER
from member_agent.errors import BindError
from member_agent.kube_binding import _explain, _permanent
from member_agent.kubeapi import KubeError, Obj
from member_agent.metrics import CACHED
from member_agent.nodehealth import DEGRADED, FAILED, HEALTHY, NodeHealth, hypernode_degraded, node_health
from member_agent.pods import (
    node_ready,
    placeable,
)
from member_agent.state import ClusterState
from member_agent.topology import (
    Topology,
    TopologyError,
    build,
    discover_from_labels,
    label_hypernodes,
    parse_hypernode,
    parse_node,
)

log = logging.getLogger(__name__)

HYPERNODES = "/apis/topology.volcano.sh/v1alpha1/hypernodes"


REBUILD_DELAY = 0.2  # a burst of node or HyperNode changes rebuilds the topology once


SYNC_DELAY = 1.0  # a burst of changes writes the discovered HyperNodes (and their status) once


class NodeView:
    """Nodes, HyperNodes and their health (a part of `KubernetesBackend`)."""

    def _count_cached(self) -> None:
        for informer in (self.nodes, self.hypernodes, self.pods):
            CACHED.labels(informer.resource).set(len(informer.store))

    def _foreign(self) -> list[Obj]:
        """HyperNodes in the cluster this agent did not write."""
        return [o for o in self.hypernodes.items()
                if ((o.get("metadata") or {}).get("labels") or {}).get(OWNER) != self.cluster]

    def _topology(self) -> Topology:
        nodes = [parse_node(o) for o in self.nodes.items()]
        offered = self.dra.offered()  # DRA devices, as their classes' resources
        if offered:
            nodes = [replace(n, allocatable={**n.allocatable, **offered[n.name]}) if n.name in offered else n
                     for n in nodes]
        if self.write_hypernodes and self.topology_labels and not self._foreign():
            # The tree the labels describe now; the HyperNode objects follow it (sync_hypernodes).
            return build(nodes, label_hypernodes(nodes, self.topology_labels))
        hypernodes = [parse_hypernode(o) for o in self.hypernodes.items()]
        if hypernodes or not self.topology_labels:
            topology = build(nodes, hypernodes)
            for note in topology.notes:
                log.info("%s", note)
            return topology
        return discover_from_labels(nodes, self.topology_labels)

    def _build_state(self, previous: ClusterState | None = None) -> ClusterState:
        state = ClusterState(self._topology())
        if previous is not None:  # what was booked on each node stays booked
            state.take_over(previous)
        for obj in self.nodes.items():
            name = obj["metadata"]["name"]
            self._note_health(name, obj)
            health = self._health.get(name)
            self._ready[name] = node_ready(obj) and (health is None or health.state != FAILED)
            state.set_ready(name, self._ready[name] and placeable(obj))
        self._apply_health(state)
        return state

    def _note_health(self, name: str, obj: Obj | None) -> bool:
        """Read a node's health from its conditions and taints (and DCGM's metrics); whether it changed."""
        health = node_health(((obj or {}).get("status") or {}).get("conditions") or [],
                             ((obj or {}).get("spec") or {}).get("taints") or [], self.rules) if obj else None
        if health is not None and name in self._dcgm:
            health = health.worst(self._dcgm[name])
        before = self._health.get(name)
        if health is None or health.state == HEALTHY:
            self._health.pop(name, None)
            return before is not None
        self._health[name] = health
        return before != health

    def _failed(self) -> dict[str, NodeHealth]:
        return {n: h for n, h in self._health.items() if h.state == FAILED}

    def _apply_health(self, state: ClusterState) -> bool:
        """The state's degraded nodes and links from the caches; whether anything changed."""
        links = {}
        for obj in self.hypernodes.items():
            why = hypernode_degraded((obj.get("status") or {}).get("conditions") or [], self.rules)
            if why:
                links[obj["metadata"]["name"]] = why
        state.failed = self._failed()
        return state.set_health({n: h for n, h in self._health.items() if h.state == DEGRADED}, links)

    def _schedule_sync(self) -> None:
        if self.write_hypernodes and self.started and self._sync_due is None:
            self._sync_due = asyncio.get_running_loop().call_later(SYNC_DELAY, self._start_sync)

    def _start_sync(self) -> None:
        self._sync_due = None
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.create_task(self._sync_logged())
        else:  # one at a time; what changed meanwhile is synced after it
            self._schedule_sync()

    async def _sync_logged(self) -> None:
        try:
            await self.sync_hypernodes()
        except (KubeError, OSError) as err:
            log.warning("could not write the discovered HyperNodes: %s (tried again on the next change)", err)

    async def sync_hypernodes(self) -> int:
        """Make the cluster's HyperNode objects the discovered tree: create, change or delete this agent's own,
        and set each one's status (node count, Ready, DegradedMembers) when it changed. Level-triggered and
        idempotent; how many calls it made."""
        if not self.topology_labels:
            return 0
        foreign = self._foreign()
        if foreign:
            log.info("%d HyperNodes this agent did not write are in the cluster (e.g. %s): using them, writing "
                     "none", len(foreign), foreign[0]["metadata"]["name"])
            return 0
        nodes = [parse_node(o) for o in self.nodes.items()]
        desired = {h.name: discovery.manifest(h, self.cluster) for h in label_hypernodes(nodes, self.topology_labels)}
        actual = {o["metadata"]["name"]: o for o in self.hypernodes.items()}
        calls = 0
        for name, obj in desired.items():
            have = actual.get(name)
            if have is None:
                await self.kube.create(HYPERNODES, obj)
            elif have.get("spec") != obj["spec"]:
                await self.kube.patch(f"{HYPERNODES}/{name}", {"spec": obj["spec"]})
            else:
                continue
            calls += 1
        for name in actual.keys() - desired.keys():
            await self.kube.delete(f"{HYPERNODES}/{name}")
            calls += 1
        state, now = self.state, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        degraded = {n: h.reasons for n, h in state.degraded.items()}
        for name in desired:
            if name not in state.topology.domains:
                continue
            status = discovery.status(state.nodes_under(name), state.ready, degraded,
                                      (actual.get(name) or {}).get("status"), now)
            if not discovery.same_status((actual.get(name) or {}).get("status"), status):
                await self.kube.patch(f"{HYPERNODES}/{name}/status", {"status": status})
                calls += 1
        return calls

    def _rebuild(self) -> None:
        self._rebuild_pending = None
        try:
            self.state = self._build_state(self.state)
        except TopologyError as err:  # keep placing on the last good tree; say why it was not changed
            log.error("the cluster's topology changed to one that cannot be used, keeping the previous one: %s", err)
            return
        log.info("topology rebuilt: %d nodes, tiers %s", len(self.state.topology.nodes), self.state.topology.tiers())
        self._schedule_sync()
        self._on_change()

    def _schedule_rebuild(self) -> None:
        if self.started and self._rebuild_pending is None:
            self._rebuild_pending = asyncio.get_running_loop().call_later(REBUILD_DELAY, self._rebuild)

    def _node_event(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        if not self.started:
            return
        self._count_cached()
        name = (new or old or {}).get("metadata", {}).get("name", "")
        if kind == "DELETED" or old is None or new is None:
            if kind == "DELETED" and name in self.state.free:
                self._on_node(name, False)  # its pods are lost with it
            self._schedule_rebuild()
            return
        before, after = parse_node(old), parse_node(new)
        if (before.labels, before.allocatable) != (after.labels, after.allocatable):
            self._schedule_rebuild()
        elif before.taints != after.taints and name in self.state.free:
            self.state.replace_node(after)
            self._on_change()
        self._follow(name, new)

    def _follow(self, name: str, obj: Obj) -> None:
        """A node's health, readiness and cordon, as now known, into the state (and its pods' fate)."""
        if self._note_health(name, obj) and self._apply_health(self.state):
            log.info("node %s: %s", name, self._health.get(name, NodeHealth()).state)
            self._schedule_sync()
            self._on_change()
        failed = self._health.get(name)
        ready = node_ready(obj) and (failed is None or failed.state != FAILED)
        if ready != self._ready.get(name, True):
            self._ready[name] = ready
            why = f"node {name} failed ({', '.join(failed.reasons)})" if failed and failed.state == FAILED else ""
            self._on_node(name, ready, why)
        if name in self.state.free and (ready and placeable(obj)) != (name in self.state.ready):
            self.state.set_ready(name, ready and placeable(obj))
            self._schedule_sync()
            self._on_change()

    async def _poll_dcgm(self) -> None:
        """Read the DCGM exporter's metrics every period; nodes whose GPUs cross a threshold turn degraded or
        failed (with their conditions' health, the worse wins). An endpoint that does not answer keeps the
        last reading, and says so."""
        thresholds = self.rules.dcgm_thresholds or DEFAULT_THRESHOLDS
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            while True:
                try:
                    async with session.get(self.dcgm_url) as response:
                        response.raise_for_status()
                        text = await response.text()
                    skipped: list[str] = []
                    found = dcgm_health(text, thresholds, self.rules.failed_xids, self.rules.default_failure_rate,
                                        skipped)
                except asyncio.CancelledError:
                    raise
                except Exception as err:  # whatever the endpoint sends, the polling goes on
                    log.warning("cannot read DCGM metrics from %s: %s (keeping the last reading)", self.dcgm_url,
                                str(err)[:200])
                else:
                    if skipped:
                        log.warning("DCGM metrics from %s: %d samples passed over, e.g. %s", self.dcgm_url,
                                    len(skipped), skipped[0])
                    changed = {n for n in found.keys() | self._dcgm.keys() if found.get(n) != self._dcgm.get(n)}
                    self._dcgm = found
                    for name in sorted(changed):
                        obj = self.nodes.store.get(f"/{name}")
                        if obj is not None and self.started:
                            self._follow(name, obj)
                await asyncio.sleep(self.dcgm_period)

    def _hypernode_event(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        self._count_cached()
        if old is not None and new is not None and old.get("spec") == new.get("spec"):
            if self.started and self._apply_health(self.state):  # only its status changed: its links' health
                self._on_change()
            return
        self._schedule_rebuild()

    async def repartition(self, layouts: Mapping[str, str]) -> None:
        """Label each node with the MIG manager configuration to apply, and its state pending at once (the MIG
        manager says so itself soon after): the node is left out of placement from this write on, whoever reads
        it, until the MIG manager reports success or failure."""
        for name, config in sorted(layouts.items()):
            try:
                await self.kube.patch(f"/api/v1/nodes/{name}", {"metadata": {"labels": {
                    mig.CONFIG_LABEL: config, mig.STATE_LABEL: "pending"}}})
            except KubeError as err:
                raise BindError(f"labelling node {name} {mig.CONFIG_LABEL}={config}: {_explain(err)}",
                                permanent=_permanent(err)) from None

    async def cordon(self, nodes: Sequence[str], cordon: bool) -> None:
        """`kubectl cordon` (or uncordon) each node: spec.unschedulable, which the node informer then reports."""
        for name in nodes:
            await self.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": cordon or None}})

    def narrowing(self, requests: Sequence[DeviceRequest]
                  ) -> Callable[[], tuple[dict[str, Resources], list[str]]] | None:
        return self.dra.matching(requests)
