import datetime

from federation.v1 import common_pb2 as _common_pb2
from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf import field_mask_pb2 as _field_mask_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueueState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUEUE_STATE_UNSPECIFIED: _ClassVar[QueueState]
    OPEN: _ClassVar[QueueState]
    CLOSED: _ClassVar[QueueState]
    DRAINING: _ClassVar[QueueState]

class ClusterStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CLUSTER_STATUS_UNSPECIFIED: _ClassVar[ClusterStatus]
    READY: _ClassVar[ClusterStatus]
    NOT_READY: _ClassVar[ClusterStatus]
QUEUE_STATE_UNSPECIFIED: QueueState
OPEN: QueueState
CLOSED: QueueState
DRAINING: QueueState
CLUSTER_STATUS_UNSPECIFIED: ClusterStatus
READY: ClusterStatus
NOT_READY: ClusterStatus

class Tenant(_message.Message):
    __slots__ = ("name", "weight", "guarantee", "limit", "disabled", "create_time", "max_run_time", "lending_limit", "past_usage")
    class GuaranteeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LimitEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LendingLimitEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PastUsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    DISABLED_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    MAX_RUN_TIME_FIELD_NUMBER: _ClassVar[int]
    LENDING_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAST_USAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    weight: int
    guarantee: _containers.ScalarMap[str, str]
    limit: _containers.ScalarMap[str, str]
    disabled: bool
    create_time: _timestamp_pb2.Timestamp
    max_run_time: str
    lending_limit: _containers.ScalarMap[str, str]
    past_usage: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., weight: _Optional[int] = ..., guarantee: _Optional[_Mapping[str, str]] = ..., limit: _Optional[_Mapping[str, str]] = ..., disabled: _Optional[bool] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., max_run_time: _Optional[str] = ..., lending_limit: _Optional[_Mapping[str, str]] = ..., past_usage: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Queue(_message.Message):
    __slots__ = ("name", "tenant", "weight", "priority", "guarantee", "limit", "reclaimable", "state", "create_time", "flavors", "parent", "max_run_time", "lending_limit", "past_usage", "admission_checks")
    class GuaranteeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LimitEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LendingLimitEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PastUsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    GUARANTEE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    RECLAIMABLE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FLAVORS_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    MAX_RUN_TIME_FIELD_NUMBER: _ClassVar[int]
    LENDING_LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAST_USAGE_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_CHECKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    weight: int
    priority: int
    guarantee: _containers.ScalarMap[str, str]
    limit: _containers.ScalarMap[str, str]
    reclaimable: bool
    state: QueueState
    create_time: _timestamp_pb2.Timestamp
    flavors: _containers.RepeatedScalarFieldContainer[str]
    parent: str
    max_run_time: str
    lending_limit: _containers.ScalarMap[str, str]
    past_usage: _containers.ScalarMap[str, str]
    admission_checks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., weight: _Optional[int] = ..., priority: _Optional[int] = ..., guarantee: _Optional[_Mapping[str, str]] = ..., limit: _Optional[_Mapping[str, str]] = ..., reclaimable: _Optional[bool] = ..., state: _Optional[_Union[QueueState, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., flavors: _Optional[_Iterable[str]] = ..., parent: _Optional[str] = ..., max_run_time: _Optional[str] = ..., lending_limit: _Optional[_Mapping[str, str]] = ..., past_usage: _Optional[_Mapping[str, str]] = ..., admission_checks: _Optional[_Iterable[str]] = ...) -> None: ...

class Flavor(_message.Message):
    __slots__ = ("name", "resource", "cluster_selector", "create_time", "admission_checks")
    class ClusterSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_CHECKS_FIELD_NUMBER: _ClassVar[int]
    name: str
    resource: str
    cluster_selector: _containers.ScalarMap[str, str]
    create_time: _timestamp_pb2.Timestamp
    admission_checks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., resource: _Optional[str] = ..., cluster_selector: _Optional[_Mapping[str, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., admission_checks: _Optional[_Iterable[str]] = ...) -> None: ...

class PriorityClass(_message.Message):
    __slots__ = ("name", "value", "preemptible", "global_default", "description", "create_time", "protected_run_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIBLE_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_RUN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: int
    preemptible: bool
    global_default: bool
    description: str
    create_time: _timestamp_pb2.Timestamp
    protected_run_seconds: int
    def __init__(self, name: _Optional[str] = ..., value: _Optional[int] = ..., preemptible: _Optional[bool] = ..., global_default: _Optional[bool] = ..., description: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., protected_run_seconds: _Optional[int] = ...) -> None: ...

class TierSummary(_message.Message):
    __slots__ = ("tier", "tier_name", "max_free", "max_capacity")
    class MaxFreeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class MaxCapacityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TIER_FIELD_NUMBER: _ClassVar[int]
    TIER_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_FREE_FIELD_NUMBER: _ClassVar[int]
    MAX_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    tier: int
    tier_name: str
    max_free: _containers.ScalarMap[str, str]
    max_capacity: _containers.ScalarMap[str, str]
    def __init__(self, tier: _Optional[int] = ..., tier_name: _Optional[str] = ..., max_free: _Optional[_Mapping[str, str]] = ..., max_capacity: _Optional[_Mapping[str, str]] = ...) -> None: ...

class HyperNodeStatus(_message.Message):
    __slots__ = ("name", "tier", "parent", "free", "allocatable")
    class FreeEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AllocatableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    name: str
    tier: int
    parent: str
    free: _containers.ScalarMap[str, str]
    allocatable: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., tier: _Optional[int] = ..., parent: _Optional[str] = ..., free: _Optional[_Mapping[str, str]] = ..., allocatable: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Cluster(_message.Message):
    __slots__ = ("name", "labels", "status", "cordoned", "agent_version", "last_heartbeat", "capacity", "allocatable", "used", "topology", "nodes", "problem", "hypernodes", "drift", "health", "degraded_nodes", "failed_nodes", "degraded_hypernodes", "partitionable", "gpu_free_nodes")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class CapacityEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AllocatableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class UsedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class DriftEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PartitionableEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CORDONED_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    HYPERNODES_FIELD_NUMBER: _ClassVar[int]
    DRIFT_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_NODES_FIELD_NUMBER: _ClassVar[int]
    FAILED_NODES_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_HYPERNODES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONABLE_FIELD_NUMBER: _ClassVar[int]
    GPU_FREE_NODES_FIELD_NUMBER: _ClassVar[int]
    name: str
    labels: _containers.ScalarMap[str, str]
    status: ClusterStatus
    cordoned: bool
    agent_version: str
    last_heartbeat: _timestamp_pb2.Timestamp
    capacity: _containers.ScalarMap[str, str]
    allocatable: _containers.ScalarMap[str, str]
    used: _containers.ScalarMap[str, str]
    topology: _containers.RepeatedCompositeFieldContainer[TierSummary]
    nodes: int
    problem: str
    hypernodes: _containers.RepeatedCompositeFieldContainer[HyperNodeStatus]
    drift: _containers.ScalarMap[str, str]
    health: _containers.RepeatedScalarFieldContainer[str]
    degraded_nodes: int
    failed_nodes: int
    degraded_hypernodes: _containers.RepeatedScalarFieldContainer[str]
    partitionable: _containers.ScalarMap[str, str]
    gpu_free_nodes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, name: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., status: _Optional[_Union[ClusterStatus, str]] = ..., cordoned: _Optional[bool] = ..., agent_version: _Optional[str] = ..., last_heartbeat: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., capacity: _Optional[_Mapping[str, str]] = ..., allocatable: _Optional[_Mapping[str, str]] = ..., used: _Optional[_Mapping[str, str]] = ..., topology: _Optional[_Iterable[_Union[TierSummary, _Mapping]]] = ..., nodes: _Optional[int] = ..., problem: _Optional[str] = ..., hypernodes: _Optional[_Iterable[_Union[HyperNodeStatus, _Mapping]]] = ..., drift: _Optional[_Mapping[str, str]] = ..., health: _Optional[_Iterable[str]] = ..., degraded_nodes: _Optional[int] = ..., failed_nodes: _Optional[int] = ..., degraded_hypernodes: _Optional[_Iterable[str]] = ..., partitionable: _Optional[_Mapping[str, str]] = ..., gpu_free_nodes: _Optional[_Iterable[int]] = ...) -> None: ...

class QueueStatus(_message.Message):
    __slots__ = ("queue", "tenant", "usage", "deserved", "dominant_share", "pending", "running", "history")
    class UsageEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class DeservedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    DESERVED_FIELD_NUMBER: _ClassVar[int]
    DOMINANT_SHARE_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    queue: str
    tenant: str
    usage: _containers.ScalarMap[str, str]
    deserved: _containers.ScalarMap[str, str]
    dominant_share: float
    pending: int
    running: int
    history: _containers.RepeatedCompositeFieldContainer[ShareSample]
    def __init__(self, queue: _Optional[str] = ..., tenant: _Optional[str] = ..., usage: _Optional[_Mapping[str, str]] = ..., deserved: _Optional[_Mapping[str, str]] = ..., dominant_share: _Optional[float] = ..., pending: _Optional[int] = ..., running: _Optional[int] = ..., history: _Optional[_Iterable[_Union[ShareSample, _Mapping]]] = ...) -> None: ...

class ShareSample(_message.Message):
    __slots__ = ("time", "dominant_share")
    TIME_FIELD_NUMBER: _ClassVar[int]
    DOMINANT_SHARE_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    dominant_share: float
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dominant_share: _Optional[float] = ...) -> None: ...

class CreateTenantRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ...) -> None: ...

class UpdateTenantRequest(_message.Message):
    __slots__ = ("tenant", "update_mask")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    tenant: Tenant
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, tenant: _Optional[_Union[Tenant, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetTenantRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListTenantsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListTenantsResponse(_message.Message):
    __slots__ = ("tenants",)
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    tenants: _containers.RepeatedCompositeFieldContainer[Tenant]
    def __init__(self, tenants: _Optional[_Iterable[_Union[Tenant, _Mapping]]] = ...) -> None: ...

class DeleteTenantRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateQueueRequest(_message.Message):
    __slots__ = ("queue",)
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ...) -> None: ...

class UpdateQueueRequest(_message.Message):
    __slots__ = ("queue", "update_mask")
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    queue: Queue
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, queue: _Optional[_Union[Queue, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListQueuesRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListQueuesResponse(_message.Message):
    __slots__ = ("queues",)
    QUEUES_FIELD_NUMBER: _ClassVar[int]
    queues: _containers.RepeatedCompositeFieldContainer[Queue]
    def __init__(self, queues: _Optional[_Iterable[_Union[Queue, _Mapping]]] = ...) -> None: ...

class DeleteQueueRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetQueueStatusRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreatePriorityClassRequest(_message.Message):
    __slots__ = ("priority_class",)
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    priority_class: PriorityClass
    def __init__(self, priority_class: _Optional[_Union[PriorityClass, _Mapping]] = ...) -> None: ...

class UpdatePriorityClassRequest(_message.Message):
    __slots__ = ("priority_class", "update_mask")
    PRIORITY_CLASS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    priority_class: PriorityClass
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, priority_class: _Optional[_Union[PriorityClass, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetPriorityClassRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListPriorityClassesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListPriorityClassesResponse(_message.Message):
    __slots__ = ("priority_classes",)
    PRIORITY_CLASSES_FIELD_NUMBER: _ClassVar[int]
    priority_classes: _containers.RepeatedCompositeFieldContainer[PriorityClass]
    def __init__(self, priority_classes: _Optional[_Iterable[_Union[PriorityClass, _Mapping]]] = ...) -> None: ...

class DeletePriorityClassRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CreateFlavorRequest(_message.Message):
    __slots__ = ("flavor",)
    FLAVOR_FIELD_NUMBER: _ClassVar[int]
    flavor: Flavor
    def __init__(self, flavor: _Optional[_Union[Flavor, _Mapping]] = ...) -> None: ...

class UpdateFlavorRequest(_message.Message):
    __slots__ = ("flavor", "update_mask")
    FLAVOR_FIELD_NUMBER: _ClassVar[int]
    UPDATE_MASK_FIELD_NUMBER: _ClassVar[int]
    flavor: Flavor
    update_mask: _field_mask_pb2.FieldMask
    def __init__(self, flavor: _Optional[_Union[Flavor, _Mapping]] = ..., update_mask: _Optional[_Union[_field_mask_pb2.FieldMask, _Mapping]] = ...) -> None: ...

class GetFlavorRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ListFlavorsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListFlavorsResponse(_message.Message):
    __slots__ = ("flavors",)
    FLAVORS_FIELD_NUMBER: _ClassVar[int]
    flavors: _containers.RepeatedCompositeFieldContainer[Flavor]
    def __init__(self, flavors: _Optional[_Iterable[_Union[Flavor, _Mapping]]] = ...) -> None: ...

class DeleteFlavorRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class SetAdmissionCheckRequest(_message.Message):
    __slots__ = ("job_id", "name", "state", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    state: str
    message: str
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class SetAdmissionCheckResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _common_pb2.JobStatus
    def __init__(self, status: _Optional[_Union[_common_pb2.JobStatus, _Mapping]] = ...) -> None: ...

class ListClustersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListClustersResponse(_message.Message):
    __slots__ = ("clusters",)
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[Cluster]
    def __init__(self, clusters: _Optional[_Iterable[_Union[Cluster, _Mapping]]] = ...) -> None: ...

class GetClusterRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class CordonClusterRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class UncordonClusterRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class OrderNodeRequest(_message.Message):
    __slots__ = ("cluster", "action", "kind", "name", "grace")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    GRACE_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    action: str
    kind: str
    name: str
    grace: _duration_pb2.Duration
    def __init__(self, cluster: _Optional[str] = ..., action: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., grace: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class OrderNodeResponse(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ("id", "name", "tenant", "admin", "created_by", "create_time", "expire_time", "revoke_time")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPIRE_TIME_FIELD_NUMBER: _ClassVar[int]
    REVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    tenant: str
    admin: bool
    created_by: str
    create_time: _timestamp_pb2.Timestamp
    expire_time: _timestamp_pb2.Timestamp
    revoke_time: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., tenant: _Optional[str] = ..., admin: _Optional[bool] = ..., created_by: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expire_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., revoke_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CreateTokenRequest(_message.Message):
    __slots__ = ("name", "tenant", "admin", "ttl")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    name: str
    tenant: str
    admin: bool
    ttl: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., tenant: _Optional[str] = ..., admin: _Optional[bool] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "bearer_token")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BEARER_TOKEN_FIELD_NUMBER: _ClassVar[int]
    token: Token
    bearer_token: str
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ..., bearer_token: _Optional[str] = ...) -> None: ...

class ListTokensRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ListTokensResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedCompositeFieldContainer[Token]
    def __init__(self, tokens: _Optional[_Iterable[_Union[Token, _Mapping]]] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class AuditEvent(_message.Message):
    __slots__ = ("id", "time", "actor", "action", "kind", "name", "before_json", "after_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    BEFORE_JSON_FIELD_NUMBER: _ClassVar[int]
    AFTER_JSON_FIELD_NUMBER: _ClassVar[int]
    id: int
    time: _timestamp_pb2.Timestamp
    actor: str
    action: str
    kind: str
    name: str
    before_json: str
    after_json: str
    def __init__(self, id: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., actor: _Optional[str] = ..., action: _Optional[str] = ..., kind: _Optional[str] = ..., name: _Optional[str] = ..., before_json: _Optional[str] = ..., after_json: _Optional[str] = ...) -> None: ...

class ListAuditEventsRequest(_message.Message):
    __slots__ = ("kind", "limit")
    KIND_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    kind: str
    limit: int
    def __init__(self, kind: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListAuditEventsResponse(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[AuditEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[AuditEvent, _Mapping]]] = ...) -> None: ...
