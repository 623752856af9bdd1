"""Nodes grouped by a key of their state, each group's names in order, brought up to date only for what changed.

A lone pod in a HyperNode of a thousand nodes should not look at a thousand nodes: nodes alike (the same free
resources and devices) score alike, so placement needs, per kind of node, the first by name that takes the pod;
and the nodes kept for held gangs are the most free first, which is an order, not a sort per pod. Both are groups
of nodes by a key read off the state. A change marks its node stale; a reader first moves the stale nodes to the
group their key now names, so each change costs one key and two ordered-set updates, however often it is read,
and a node changed and changed back (a placement's `ClusterState.lowered`) is looked at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

from sortedcontainers import SortedList


class NodeGroups:
    def __init__(self, key: Callable[[str], Hashable | None], nodes: Iterable[str]) -> None:
        """`key`: a node's group, None for a node in none (not ready, nothing to offer)."""
        self._key = key
        self._groups: dict[Hashable, SortedList] = {}
        self._of: dict[str, Hashable] = {}  # node -> the group it is in
        self._stale: set[str] = set(nodes)

    def changed(self, node: str) -> None:
        self._stale.add(node)

    def groups(self) -> dict[Hashable, SortedList]:
        """Each group's nodes, in name order, as the state is now."""
        for node in self._stale:
            old, new = self._of.pop(node, None), self._key(node)
            if old is not None:
                members = self._groups[old]
                members.remove(node)
                if not members:
                    del self._groups[old]
            if new is not None:
                self._of[node] = new
                self._groups.setdefault(new, SortedList()).add(node)
        self._stale.clear()
        return self._groups
