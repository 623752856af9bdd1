"""The agent's core: assignments in, placements and pod events out, whatever runs the pods.

Every state change is fenced by (job id, attempt): a repeated Assign is answered with what was
already done, an older attempt is ignored, a newer one replaces the old pods. The latest report
of every job is kept, so a reconnecting agent can give the server its full state at once.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from federation.kernel.hyperjob import HOLD_SECONDS
from federation.kernel.versions import RELEASE
from federation.v1 import agent_pb2
from member_agent.fencing import Fencing
from member_agent.holds import Hold
from member_agent.jobloop import JobLoop
from member_agent.metrics import INVENTORY_AGE
from member_agent.migprep import MigPreparation
from member_agent.model import (
    MAX_IN_FLIGHT,
    MIG_WAIT,
    OUTBOX_LIMIT,
    PROVISION_TIMEOUT,
    AgentJob,
    Backend,
    Desired,
    Preparing,
)
from member_agent.moves import Moves
from member_agent.nodeasks import NodeAsks
from member_agent.nodeorders import NodeOrders
from member_agent.outbox import Outbox, Outgoing
from member_agent.podset import PodSet
from member_agent.policies import Policies
from member_agent.provisioning import Ask, NodeGroup
from member_agent.rooms import Room, Rooms
from member_agent.state import ClusterState


@dataclass
class Agent(Outbox, Fencing, JobLoop, PodSet, MigPreparation, Policies, Moves, NodeOrders, NodeAsks, Rooms):
    cluster: str
    labels: dict[str, str]
    backend: Backend
    version: str = RELEASE
    jobs: dict[str, AgentJob] = field(default_factory=dict)  # actual: the gangs this agent holds
    desired: dict[str, Desired] = field(default_factory=dict)  # the attempt the federation runs here, per job
    reports: dict[str, agent_pb2.JobUpdate] = field(default_factory=dict)
    outbox: Outgoing = field(default_factory=lambda: Outgoing(OUTBOX_LIMIT))
    overflowed: bool = False  # the outbox dropped a message: the next connection must resync
    _acting: set[asyncio.Task[Any]] = field(default_factory=set)  # lifecycle actions under way
    _action_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Gangs being bound: the phases their pods reported meanwhile, (task, index, phase, reason, pod name).
    _binding: dict[str, list[tuple[str, int, str, str, str]]] = field(default_factory=dict)
    _orders: dict[str, tuple[asyncio.Lock, int]] = field(default_factory=dict)  # job -> its lock, orders pending
    _in_flight: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(MAX_IN_FLIGHT))
    _pods_said: dict[str, tuple[int, list[bytes]]] = field(default_factory=dict)  # job -> its pods as last reported
    _log_streams: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # stream id -> its reader

    _inventory_due: asyncio.TimerHandle | None = None
    _inventory_sent: float = field(default_factory=time.monotonic)
    # This process, for the server's one-agent-per-cluster rule: a reconnect of ours replaces our own stream.
    instance: str = field(default_factory=lambda: uuid.uuid4().hex)
    fence_after: float | None = None  # seconds cut off before stopping the gangs; None: as the server says
    server_fence: float | None = None  # what the last server said at registration
    server_batches: bool = False  # whether it reads our messages in batches (`federation.kernel.batches`)
    last_contact: float = field(default_factory=time.monotonic)  # when a heartbeat the server recorded was sent
    fenced: bool = False  # the gangs were stopped for being cut off; contact again ends it
    _beats: deque[float] = field(default_factory=deque)  # heartbeats sent on this stream and not acknowledged
    holds: list[Hold] = field(default_factory=list)  # gangs the federation holds room for here, as it last said
    _round: int = 0
    _drains: dict[str, tuple[asyncio.TimerHandle, frozenset[str]]] = field(default_factory=dict)  # job -> its move
    # Gangs on degraded hardware with no healthy room here, and why: the federation moves them when it can.
    _move_wanted: dict[str, str] = field(default_factory=dict)
    draining: dict[str, float | None] = field(default_factory=dict)  # nodes an operator drains -> deadline
    _health_seen: tuple[int, int] = (0, 0)  # the state and its health version the drains were planned on
    _rounds: dict[int, list[agent_pb2.Attempt]] = field(default_factory=dict)  # reconcile round -> what it reported
    _preparing: dict[str, Preparing] = field(default_factory=dict)  # job -> the repartitioning it waits for
    mig_wait: float = MIG_WAIT
    node_groups: list[NodeGroup] = field(default_factory=list)  # what the cluster's autoscaler can grow
    provision_timeout: float = PROVISION_TIMEOUT
    _asks: dict[str, Ask] = field(default_factory=dict)  # job -> the nodes it waits for
    hold_seconds: float = HOLD_SECONDS  # how long a HyperJob's sub-job's room is held for its commit
    _rooms: dict[str, Room] = field(default_factory=dict)  # job -> the room held for its HyperJob's commit
    # What the gangs' pods hold, summed, kept as gangs come and go and their pods change (`_count_held`): every
    # inventory reports it, and a burst of bindings sends an inventory per gang (summing thousands of gangs each).
    _held_total: dict[str, int] = field(default_factory=dict)
    # Messages put in the outbox so far, and the last inventory put there with its number: while the stream has not
    # taken it (fewer taken than its number), a binding brings it up to date instead of queueing one more.
    _puts: int = 0
    _queued_inventory: tuple[int, agent_pb2.AgentMessage] | None = None
    _inventory_behind: bool = False  # bindings since that inventory was made: it is made again when taken
    # The inventory's HyperNodes, each message kept until what is free under it may have changed, for this state.
    _hypernodes_of: ClusterState | None = None
    _hypernodes: dict[str, agent_pb2.HyperNodeFree | None] = field(default_factory=dict)
    _hypernodes_changed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.backend.set_listener(self.pod_phase, self.node_ready, self.capacity_changed)
        self.outbox.taking = self._taking
        INVENTORY_AGE.set_function(lambda: time.monotonic() - self._inventory_sent)

    @property
    def state(self) -> ClusterState:
        return self.backend.state
