import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_PHASE_UNSPECIFIED: _ClassVar[JobPhase]
    PENDING: _ClassVar[JobPhase]
    DISPATCHED: _ClassVar[JobPhase]
    RUNNING: _ClassVar[JobPhase]
    SUCCEEDED: _ClassVar[JobPhase]
    FAILED: _ClassVar[JobPhase]
    CANCELLED: _ClassVar[JobPhase]
    PREEMPTED: _ClassVar[JobPhase]
    RESTARTING: _ClassVar[JobPhase]
JOB_PHASE_UNSPECIFIED: JobPhase
PENDING: JobPhase
DISPATCHED: JobPhase
RUNNING: JobPhase
SUCCEEDED: JobPhase
FAILED: JobPhase
CANCELLED: JobPhase
PREEMPTED: JobPhase
RESTARTING: JobPhase

class NetworkTopology(_message.Message):
    __slots__ = ("mode", "highest_tier_allowed", "highest_tier_name")
    MODE_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_TIER_ALLOWED_FIELD_NUMBER: _ClassVar[int]
    HIGHEST_TIER_NAME_FIELD_NUMBER: _ClassVar[int]
    mode: str
    highest_tier_allowed: int
    highest_tier_name: str
    def __init__(self, mode: _Optional[str] = ..., highest_tier_allowed: _Optional[int] = ..., highest_tier_name: _Optional[str] = ...) -> None: ...

class LifecyclePolicy(_message.Message):
    __slots__ = ("events", "action", "timeout")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedScalarFieldContainer[str]
    action: str
    timeout: _duration_pb2.Duration
    def __init__(self, events: _Optional[_Iterable[str]] = ..., action: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PartitionPolicy(_message.Message):
    __slots__ = ("total_partitions", "partition_size", "min_partitions", "network_topology")
    TOTAL_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_SIZE_FIELD_NUMBER: _ClassVar[int]
    MIN_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    NETWORK_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    total_partitions: int
    partition_size: int
    min_partitions: int
    network_topology: NetworkTopology
    def __init__(self, total_partitions: _Optional[int] = ..., partition_size: _Optional[int] = ..., min_partitions: _Optional[int] = ..., network_topology: _Optional[_Union[NetworkTopology, _Mapping]] = ...) -> None: ...

class Toleration(_message.Message):
    __slots__ = ("key", "operator", "value", "effect")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    EFFECT_FIELD_NUMBER: _ClassVar[int]
    key: str
    operator: str
    value: str
    effect: str
    def __init__(self, key: _Optional[str] = ..., operator: _Optional[str] = ..., value: _Optional[str] = ..., effect: _Optional[str] = ...) -> None: ...

class PluginArgs(_message.Message):
    __slots__ = ("args",)
    ARGS_FIELD_NUMBER: _ClassVar[int]
    args: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, args: _Optional[_Iterable[str]] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("name", "replicas", "min_available", "policies", "partition_policy", "resources", "node_selector", "tolerations", "pod_template_json")
    class ResourcesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class NodeSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    MIN_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    PARTITION_POLICY_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    NODE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TOLERATIONS_FIELD_NUMBER: _ClassVar[int]
    POD_TEMPLATE_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    replicas: int
    min_available: int
    policies: _containers.RepeatedCompositeFieldContainer[LifecyclePolicy]
    partition_policy: PartitionPolicy
    resources: _containers.ScalarMap[str, str]
    node_selector: _containers.ScalarMap[str, str]
    tolerations: _containers.RepeatedCompositeFieldContainer[Toleration]
    pod_template_json: str
    def __init__(self, name: _Optional[str] = ..., replicas: _Optional[int] = ..., min_available: _Optional[int] = ..., policies: _Optional[_Iterable[_Union[LifecyclePolicy, _Mapping]]] = ..., partition_policy: _Optional[_Union[PartitionPolicy, _Mapping]] = ..., resources: _Optional[_Mapping[str, str]] = ..., node_selector: _Optional[_Mapping[str, str]] = ..., tolerations: _Optional[_Iterable[_Union[Toleration, _Mapping]]] = ..., pod_template_json: _Optional[str] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("name", "queue", "priority_class_name", "min_available", "max_retry", "policies", "network_topology", "tasks", "cluster_selector", "labels", "annotations", "request_id", "plugins", "namespace", "resource_claim_templates_json", "hyperjob")
    class ClusterSelectorEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class AnnotationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class PluginsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: PluginArgs
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[PluginArgs, _Mapping]] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_CLASS_NAME_FIELD_NUMBER: _ClassVar[int]
    MIN_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRY_FIELD_NUMBER: _ClassVar[int]
    POLICIES_FIELD_NUMBER: _ClassVar[int]
    NETWORK_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ANNOTATIONS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PLUGINS_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_CLAIM_TEMPLATES_JSON_FIELD_NUMBER: _ClassVar[int]
    HYPERJOB_FIELD_NUMBER: _ClassVar[int]
    name: str
    queue: str
    priority_class_name: str
    min_available: int
    max_retry: int
    policies: _containers.RepeatedCompositeFieldContainer[LifecyclePolicy]
    network_topology: NetworkTopology
    tasks: _containers.RepeatedCompositeFieldContainer[TaskSpec]
    cluster_selector: _containers.ScalarMap[str, str]
    labels: _containers.ScalarMap[str, str]
    annotations: _containers.ScalarMap[str, str]
    request_id: str
    plugins: _containers.MessageMap[str, PluginArgs]
    namespace: str
    resource_claim_templates_json: _containers.RepeatedScalarFieldContainer[str]
    hyperjob: HyperJobPart
    def __init__(self, name: _Optional[str] = ..., queue: _Optional[str] = ..., priority_class_name: _Optional[str] = ..., min_available: _Optional[int] = ..., max_retry: _Optional[int] = ..., policies: _Optional[_Iterable[_Union[LifecyclePolicy, _Mapping]]] = ..., network_topology: _Optional[_Union[NetworkTopology, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskSpec, _Mapping]]] = ..., cluster_selector: _Optional[_Mapping[str, str]] = ..., labels: _Optional[_Mapping[str, str]] = ..., annotations: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ..., plugins: _Optional[_Mapping[str, PluginArgs]] = ..., namespace: _Optional[str] = ..., resource_claim_templates_json: _Optional[_Iterable[str]] = ..., hyperjob: _Optional[_Union[HyperJobPart, _Mapping]] = ...) -> None: ...

class HyperJobPart(_message.Message):
    __slots__ = ("id", "name", "replicated_job", "index", "parts", "min_available", "max_domains", "cluster_names", "cluster_topology", "restart")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    REPLICATED_JOB_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    MIN_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    MAX_DOMAINS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_NAMES_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_TOPOLOGY_FIELD_NUMBER: _ClassVar[int]
    RESTART_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    replicated_job: str
    index: int
    parts: int
    min_available: int
    max_domains: int
    cluster_names: _containers.RepeatedScalarFieldContainer[str]
    cluster_topology: str
    restart: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., replicated_job: _Optional[str] = ..., index: _Optional[int] = ..., parts: _Optional[int] = ..., min_available: _Optional[int] = ..., max_domains: _Optional[int] = ..., cluster_names: _Optional[_Iterable[str]] = ..., cluster_topology: _Optional[str] = ..., restart: _Optional[str] = ...) -> None: ...

class PodPlacement(_message.Message):
    __slots__ = ("task", "index", "node")
    TASK_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    task: str
    index: int
    node: str
    def __init__(self, task: _Optional[str] = ..., index: _Optional[int] = ..., node: _Optional[str] = ...) -> None: ...

class PodStatus(_message.Message):
    __slots__ = ("task", "index", "name", "namespace", "node", "phase", "restarts", "message")
    TASK_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    task: str
    index: int
    name: str
    namespace: str
    node: str
    phase: str
    restarts: int
    message: str
    def __init__(self, task: _Optional[str] = ..., index: _Optional[int] = ..., name: _Optional[str] = ..., namespace: _Optional[str] = ..., node: _Optional[str] = ..., phase: _Optional[str] = ..., restarts: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class JobStatus(_message.Message):
    __slots__ = ("phase", "reason", "queue_position", "cluster", "hypernode", "tier", "attempt", "placements", "retries", "create_time", "dispatch_time", "start_time", "finish_time", "update_time", "expected_start_time", "expected_cluster", "pods", "requeues", "requeue_time", "admission_checks")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    HYPERNODE_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    DISPATCH_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    FINISH_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PODS_FIELD_NUMBER: _ClassVar[int]
    REQUEUES_FIELD_NUMBER: _ClassVar[int]
    REQUEUE_TIME_FIELD_NUMBER: _ClassVar[int]
    ADMISSION_CHECKS_FIELD_NUMBER: _ClassVar[int]
    phase: JobPhase
    reason: str
    queue_position: int
    cluster: str
    hypernode: str
    tier: int
    attempt: int
    placements: _containers.RepeatedCompositeFieldContainer[PodPlacement]
    retries: int
    create_time: _timestamp_pb2.Timestamp
    dispatch_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    finish_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    expected_start_time: _timestamp_pb2.Timestamp
    expected_cluster: str
    pods: _containers.RepeatedCompositeFieldContainer[PodStatus]
    requeues: int
    requeue_time: _timestamp_pb2.Timestamp
    admission_checks: _containers.RepeatedCompositeFieldContainer[AdmissionCheckState]
    def __init__(self, phase: _Optional[_Union[JobPhase, str]] = ..., reason: _Optional[str] = ..., queue_position: _Optional[int] = ..., cluster: _Optional[str] = ..., hypernode: _Optional[str] = ..., tier: _Optional[int] = ..., attempt: _Optional[int] = ..., placements: _Optional[_Iterable[_Union[PodPlacement, _Mapping]]] = ..., retries: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., dispatch_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finish_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_cluster: _Optional[str] = ..., pods: _Optional[_Iterable[_Union[PodStatus, _Mapping]]] = ..., requeues: _Optional[int] = ..., requeue_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., admission_checks: _Optional[_Iterable[_Union[AdmissionCheckState, _Mapping]]] = ...) -> None: ...

class AdmissionCheckState(_message.Message):
    __slots__ = ("name", "state", "message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: str
    message: str
    def __init__(self, name: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("id", "tenant", "spec", "status", "priority")
    ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    id: str
    tenant: str
    spec: JobSpec
    status: JobStatus
    priority: int
    def __init__(self, id: _Optional[str] = ..., tenant: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., status: _Optional[_Union[JobStatus, _Mapping]] = ..., priority: _Optional[int] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("sequence", "job_id", "tenant", "queue", "type", "phase", "message", "attempt", "cluster", "time")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    job_id: str
    tenant: str
    queue: str
    type: str
    phase: JobPhase
    message: str
    attempt: int
    cluster: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, sequence: _Optional[int] = ..., job_id: _Optional[str] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ..., type: _Optional[str] = ..., phase: _Optional[_Union[JobPhase, str]] = ..., message: _Optional[str] = ..., attempt: _Optional[int] = ..., cluster: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
