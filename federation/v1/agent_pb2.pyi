import datetime

from federation.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobUpdateType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_UPDATE_TYPE_UNSPECIFIED: _ClassVar[JobUpdateType]
    ACCEPTED: _ClassVar[JobUpdateType]
    REJECTED: _ClassVar[JobUpdateType]
    BOUND: _ClassVar[JobUpdateType]
    POD_FAILED: _ClassVar[JobUpdateType]
    POD_RESTARTED: _ClassVar[JobUpdateType]
    JOB_SUCCEEDED: _ClassVar[JobUpdateType]
    JOB_FAILED: _ClassVar[JobUpdateType]
    PODS_ADDED: _ClassVar[JobUpdateType]
    ORPHANS_DELETED: _ClassVar[JobUpdateType]
    FENCED: _ClassVar[JobUpdateType]
    POD_STATUS: _ClassVar[JobUpdateType]
    DRAIN_PLANNED: _ClassVar[JobUpdateType]
    DRAINED: _ClassVar[JobUpdateType]
    EVACUATED: _ClassVar[JobUpdateType]
    PREPARING: _ClassVar[JobUpdateType]
    MOVE_WANTED: _ClassVar[JobUpdateType]
    PODS_NOT_READY: _ClassVar[JobUpdateType]
    RUN_TIME_EXCEEDED: _ClassVar[JobUpdateType]
    HELD: _ClassVar[JobUpdateType]
JOB_UPDATE_TYPE_UNSPECIFIED: JobUpdateType
ACCEPTED: JobUpdateType
REJECTED: JobUpdateType
BOUND: JobUpdateType
POD_FAILED: JobUpdateType
POD_RESTARTED: JobUpdateType
JOB_SUCCEEDED: JobUpdateType
JOB_FAILED: JobUpdateType
PODS_ADDED: JobUpdateType
ORPHANS_DELETED: JobUpdateType
FENCED: JobUpdateType
POD_STATUS: JobUpdateType
DRAIN_PLANNED: JobUpdateType
DRAINED: JobUpdateType
EVACUATED: JobUpdateType
PREPARING: JobUpdateType
MOVE_WANTED: JobUpdateType
PODS_NOT_READY: JobUpdateType
RUN_TIME_EXCEEDED: JobUpdateType
HELD: JobUpdateType

class AgentMessage(_message.Message):
    __slots__ = ("register", "inventory", "heartbeat", "job_update", "reconcile", "log_chunk", "node_order_done", "batch")
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    INVENTORY_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    JOB_UPDATE_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_FIELD_NUMBER: _ClassVar[int]
    LOG_CHUNK_FIELD_NUMBER: _ClassVar[int]
    NODE_ORDER_DONE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    register: Register
    inventory: Inventory
    heartbeat: Heartbeat
    job_update: JobUpdate
    reconcile: Reconcile
    log_chunk: LogChunk
    node_order_done: NodeOrderDone
    batch: AgentMessages
    def __init__(self, register: _Optional[_Union[Register, _Mapping]] = ..., inventory: _Optional[_Union[Inventory, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., job_update: _Optional[_Union[JobUpdate, _Mapping]] = ..., reconcile: _Optional[_Union[Reconcile, _Mapping]] = ..., log_chunk: _Optional[_Union[LogChunk, _Mapping]] = ..., node_order_done: _Optional[_Union[NodeOrderDone, _Mapping]] = ..., batch: _Optional[_Union[AgentMessages, _Mapping]] = ...) -> None: ...

class AgentMessages(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[AgentMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[AgentMessage, _Mapping]]] = ...) -> None: ...

class NodeOrderDone(_message.Message):
    __slots__ = ("order_id", "done", "message")
    ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    order_id: str
    done: bool
    message: str
    def __init__(self, order_id: _Optional[str] = ..., done: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class Register(_message.Message):
    __slots__ = ("cluster", "labels", "agent_version", "jobs", "instance", "running", "batches")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    labels: _containers.ScalarMap[str, str]
    agent_version: str
    jobs: _containers.RepeatedCompositeFieldContainer[JobUpdate]
    instance: str
    running: _containers.RepeatedCompositeFieldContainer[Attempt]
    batches: bool
    def __init__(self, cluster: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., agent_version: _Optional[str] = ..., jobs: _Optional[_Iterable[_Union[JobUpdate, _Mapping]]] = ..., instance: _Optional[str] = ..., running: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., batches: _Optional[bool] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("job_id", "attempt", "pods")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    pods: int
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., pods: _Optional[int] = ...) -> None: ...

class Reconcile(_message.Message):
    __slots__ = ("round", "running")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    round: int
    running: _containers.RepeatedCompositeFieldContainer[Attempt]
    def __init__(self, round: _Optional[int] = ..., running: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ...) -> None: ...

class ResourceAmounts(_message.Message):
    __slots__ = ("amounts",)
    class AmountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    AMOUNTS_FIELD_NUMBER: _ClassVar[int]
    amounts: _containers.ScalarMap[str, int]
    def __init__(self, amounts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TierFree(_message.Message):
    __slots__ = ("tier", "tier_name", "max_free", "max_capacity")
    TIER_FIELD_NUMBER: _ClassVar[int]
    TIER_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_FREE_FIELD_NUMBER: _ClassVar[int]
    MAX_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    tier: int
    tier_name: str
    max_free: ResourceAmounts
    max_capacity: ResourceAmounts
    def __init__(self, tier: _Optional[int] = ..., tier_name: _Optional[str] = ..., max_free: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., max_capacity: _Optional[_Union[ResourceAmounts, _Mapping]] = ...) -> None: ...

class HyperNodeFree(_message.Message):
    __slots__ = ("name", "tier", "parent", "free", "allocatable")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    tier: int
    parent: str
    free: ResourceAmounts
    allocatable: ResourceAmounts
    def __init__(self, name: _Optional[str] = ..., tier: _Optional[int] = ..., parent: _Optional[str] = ..., free: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., allocatable: _Optional[_Union[ResourceAmounts, _Mapping]] = ...) -> None: ...

class Inventory(_message.Message):
    __slots__ = ("capacity", "allocatable", "used", "healthy", "nodes", "ready_nodes", "topology", "hypernodes", "managed", "health", "partitionable", "node_labels", "gpu_free_nodes", "gpu_device_memory", "node_groups", "held")
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    READY_NODES_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    HYPERNODES_FIELD_NUMBER: _ClassVar[int]
    MANAGED_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    PARTITIONABLE_FIELD_NUMBER: _ClassVar[int]
    NODE_LABELS_FIELD_NUMBER: _ClassVar[int]
    GPU_FREE_NODES_FIELD_NUMBER: _ClassVar[int]
    GPU_DEVICE_MEMORY_FIELD_NUMBER: _ClassVar[int]
    NODE_GROUPS_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    capacity: ResourceAmounts
    allocatable: ResourceAmounts
    used: ResourceAmounts
    healthy: bool
    nodes: int
    ready_nodes: int
    topology: _containers.RepeatedCompositeFieldContainer[TierFree]
    hypernodes: _containers.RepeatedCompositeFieldContainer[HyperNodeFree]
    managed: ResourceAmounts
    health: ClusterHealth
    partitionable: _containers.RepeatedCompositeFieldContainer[TierFree]
    node_labels: NodeLabels
    gpu_free_nodes: _containers.RepeatedScalarFieldContainer[int]
    gpu_device_memory: int
    node_groups: _containers.RepeatedCompositeFieldContainer[NodeGroup]
    held: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, capacity: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., allocatable: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., used: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., healthy: _Optional[bool] = ..., nodes: _Optional[int] = ..., ready_nodes: _Optional[int] = ..., topology: _Optional[_Iterable[_Union[TierFree, _Mapping]]] = ..., hypernodes: _Optional[_Iterable[_Union[HyperNodeFree, _Mapping]]] = ..., managed: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., health: _Optional[_Union[ClusterHealth, _Mapping]] = ..., partitionable: _Optional[_Iterable[_Union[TierFree, _Mapping]]] = ..., node_labels: _Optional[_Union[NodeLabels, _Mapping]] = ..., gpu_free_nodes: _Optional[_Iterable[int]] = ..., gpu_device_memory: _Optional[int] = ..., node_groups: _Optional[_Iterable[_Union[NodeGroup, _Mapping]]] = ..., held: _Optional[_Iterable[str]] = ...) -> None: ...

class NodeGroup(_message.Message):
    __slots__ = ("name", "per_node", "can_add")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PER_NODE_FIELD_NUMBER: _ClassVar[int]
    CAN_ADD_FIELD_NUMBER: _ClassVar[int]
    name: str
    per_node: ResourceAmounts
    can_add: int
    def __init__(self, name: _Optional[str] = ..., per_node: _Optional[_Union[ResourceAmounts, _Mapping]] = ..., can_add: _Optional[int] = ...) -> None: ...

class NodeLabels(_message.Message):
    __slots__ = ("pairs",)
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    pairs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, pairs: _Optional[_Iterable[str]] = ...) -> None: ...

class ClusterHealth(_message.Message):
    __slots__ = ("degraded_nodes", "failed_nodes", "summary", "degraded_hypernodes", "healthy_topology")
    DEGRADED_NODES_FIELD_NUMBER: _ClassVar[int]
    FAILED_NODES_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_HYPERNODES_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    degraded_nodes: int
    failed_nodes: int
    summary: _containers.RepeatedScalarFieldContainer[str]
    degraded_hypernodes: _containers.RepeatedScalarFieldContainer[str]
    healthy_topology: _containers.RepeatedCompositeFieldContainer[TierFree]
    def __init__(self, degraded_nodes: _Optional[int] = ..., failed_nodes: _Optional[int] = ..., summary: _Optional[_Iterable[str]] = ..., degraded_hypernodes: _Optional[_Iterable[str]] = ..., healthy_topology: _Optional[_Iterable[_Union[TierFree, _Mapping]]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("time",)
    TIME_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class JobUpdate(_message.Message):
    __slots__ = ("job_id", "attempt", "type", "reason", "hypernode", "tier", "placements", "retries", "permanent", "pods", "pod_statuses")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HYPERNODE_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    PERMANENT_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    POD_STATUSES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    type: JobUpdateType
    reason: str
    hypernode: str
    tier: int
    placements: _containers.RepeatedCompositeFieldContainer[_common_pb2.PodPlacement]
    retries: int
    permanent: bool
    pods: int
    pod_statuses: _containers.RepeatedCompositeFieldContainer[_common_pb2.PodStatus]
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., type: _Optional[_Union[JobUpdateType, str]] = ..., reason: _Optional[str] = ..., hypernode: _Optional[str] = ..., tier: _Optional[int] = ..., placements: _Optional[_Iterable[_Union[_common_pb2.PodPlacement, _Mapping]]] = ..., retries: _Optional[int] = ..., permanent: _Optional[bool] = ..., pods: _Optional[int] = ..., pod_statuses: _Optional[_Iterable[_Union[_common_pb2.PodStatus, _Mapping]]] = ...) -> None: ...

class LogsRequest(_message.Message):
    __slots__ = ("stream_id", "job_id", "attempt", "task", "index", "follow", "previous", "tail_lines")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    stream_id: str
    job_id: str
    attempt: int
    task: str
    index: int
    follow: bool
    previous: bool
    tail_lines: int
    def __init__(self, stream_id: _Optional[str] = ..., job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., task: _Optional[str] = ..., index: _Optional[int] = ..., follow: _Optional[bool] = ..., previous: _Optional[bool] = ..., tail_lines: _Optional[int] = ...) -> None: ...

class LogsCancel(_message.Message):
    __slots__ = ("stream_id",)
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    stream_id: str
    def __init__(self, stream_id: _Optional[str] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("stream_id", "data", "end", "error")
    STREAM_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    stream_id: str
    data: bytes
    end: bool
    error: str
    def __init__(self, stream_id: _Optional[str] = ..., data: _Optional[bytes] = ..., end: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class Assign(_message.Message):
    __slots__ = ("job", "attempt")
    JOB_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    attempt: int
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., attempt: _Optional[int] = ...) -> None: ...

class Cancel(_message.Message):
    __slots__ = ("job_id", "attempt", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Preempt(_message.Message):
    __slots__ = ("job_id", "attempt", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt: int
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., attempt: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class Registered(_message.Message):
    __slots__ = ("cluster", "reconciled", "fence_seconds", "batches")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    RECONCILED_FIELD_NUMBER: _ClassVar[int]
    FENCE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    reconciled: Reconciled
    fence_seconds: float
    batches: bool
    def __init__(self, cluster: _Optional[str] = ..., reconciled: _Optional[_Union[Reconciled, _Mapping]] = ..., fence_seconds: _Optional[float] = ..., batches: _Optional[bool] = ...) -> None: ...

class Reconciled(_message.Message):
    __slots__ = ("round", "live")
    ROUND_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    round: int
    live: _containers.RepeatedCompositeFieldContainer[Attempt]
    def __init__(self, round: _Optional[int] = ..., live: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ("holds",)
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    holds: _containers.RepeatedCompositeFieldContainer[Hold]
    def __init__(self, holds: _Optional[_Iterable[_Union[Hold, _Mapping]]] = ...) -> None: ...

class Hold(_message.Message):
    __slots__ = ("job_id", "pods", "gpus_per_pod")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    GPUS_PER_POD_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    pods: int
    gpus_per_pod: int
    def __init__(self, job_id: _Optional[str] = ..., pods: _Optional[int] = ..., gpus_per_pod: _Optional[int] = ...) -> None: ...

class NodeOrder(_message.Message):
    __slots__ = ("action", "kind", "name", "grace_seconds", "order_id")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRACE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    ORDER_ID_FIELD_NUMBER: _ClassVar[int]
    action: str
    kind: str
    name: str
    grace_seconds: float
    order_id: str
    def __init__(self, action: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., grace_seconds: _Optional[float] = ..., order_id: _Optional[str] = ...) -> None: ...

class ControlMessage(_message.Message):
    __slots__ = ("assign", "cancel", "preempt", "registered", "reconciled", "heartbeat_ack", "logs", "logs_cancel", "node_order", "batch")
    ASSIGN_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    PREEMPT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_FIELD_NUMBER: _ClassVar[int]
    RECONCILED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    LOGS_FIELD_NUMBER: _ClassVar[int]
    LOGS_CANCEL_FIELD_NUMBER: _ClassVar[int]
    NODE_ORDER_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    assign: Assign
    cancel: Cancel
    preempt: Preempt
    registered: Registered
    reconciled: Reconciled
    heartbeat_ack: HeartbeatAck
    logs: LogsRequest
    logs_cancel: LogsCancel
    node_order: NodeOrder
    batch: ControlMessages
    def __init__(self, assign: _Optional[_Union[Assign, _Mapping]] = ..., cancel: _Optional[_Union[Cancel, _Mapping]] = ..., preempt: _Optional[_Union[Preempt, _Mapping]] = ..., registered: _Optional[_Union[Registered, _Mapping]] = ..., reconciled: _Optional[_Union[Reconciled, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., logs: _Optional[_Union[LogsRequest, _Mapping]] = ..., logs_cancel: _Optional[_Union[LogsCancel, _Mapping]] = ..., node_order: _Optional[_Union[NodeOrder, _Mapping]] = ..., batch: _Optional[_Union[ControlMessages, _Mapping]] = ...) -> None: ...

class ControlMessages(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[ControlMessage]
    def __init__(self, messages: _Optional[_Iterable[_Union[ControlMessage, _Mapping]]] = ...) -> None: ...
