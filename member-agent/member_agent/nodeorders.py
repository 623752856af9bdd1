"""What an operator or a test asks of nodes directly (a part of `agent.Agent`): cordon and drain orders relayed
by the federation, and simulated hardware faults."""

from __future__ import annotations

import time

from federation.v1 import agent_pb2
from member_agent.faults import Fault
from member_agent.nodehealth import DEFAULT_FAILURE_RATE, DEGRADED, FAILED, NodeHealth
from member_agent.topology import ROOT


class NodeOrders:
    """Node orders and injected faults (a part of `agent.Agent`)."""

    def inject(self, fault: Fault) -> bool:
        """A hardware fault, injected (a simulated cluster's fault schedule or admin port): the node or HyperNode
        turns degraded, failed or healthy as a health monitor would report it. False: no such node here."""
        state = self.state
        if fault.kind == "hypernode":
            if fault.name not in state.topology.domains or fault.name == ROOT:
                return False
            links = dict(state.link_faults)
            links.pop(fault.name, None)
            if fault.state == DEGRADED:
                links[fault.name] = fault.reason or "LinkDegraded"
            state.set_health(dict(state.degraded), links)
        else:
            if fault.name not in state.free:
                return False
            degraded = {n: h for n, h in state.degraded.items() if n != fault.name}
            was_failed = state.failed.pop(fault.name, None) is not None
            reason = fault.reason or fault.state
            if fault.state == DEGRADED:
                rate = DEFAULT_FAILURE_RATE if fault.rate is None else fault.rate
                degraded[fault.name] = NodeHealth(DEGRADED, (reason,), failure_rate=rate)
            elif fault.state == FAILED:
                state.failed[fault.name] = NodeHealth(FAILED, (reason,))
            state.set_health(degraded, dict(state.link_faults))
            if fault.state == FAILED and not was_failed:
                self.node_ready(fault.name, False, f"node {fault.name} failed ({reason})")
            elif was_failed and fault.state != FAILED:
                self.node_ready(fault.name, fault.name not in self.draining)
        self.health_changed()
        self._send_inventory()
        return True

    async def order_node(self, order: agent_pb2.NodeOrder) -> agent_pb2.NodeOrderDone:
        """An operator's cordon, drain or uncordon of a node or HyperNode: what was done, or why nothing was.
        The inventory follows once for a burst of orders, as for any change of the cluster."""
        try:
            nodes = [order.name] if order.kind == "node" else self.state.nodes_under(order.name)
        except KeyError:
            nodes = []
        if not nodes or any(n not in self.state.free for n in nodes):
            return agent_pb2.NodeOrderDone(order_id=order.order_id, done=False,
                                           message=f"{order.kind} {order.name} is not in cluster {self.cluster}")
        await self.backend.cordon(nodes, order.action != "uncordon")
        if order.action == "drain":
            deadline = time.monotonic() + order.grace_seconds if order.grace_seconds > 0 else None
            self.draining.update(dict.fromkeys(nodes, deadline))
        elif order.action == "uncordon":
            for node in nodes:
                self.draining.pop(node, None)
        self.health_changed()
        self.capacity_changed()
        return agent_pb2.NodeOrderDone(order_id=order.order_id, done=True, message=(
            f"{order.action} of {order.kind} {order.name} ({len(nodes)} node{'s' if len(nodes) > 1 else ''})"))
