import datetime

from federation.v1 import common_pb2 as _common_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec", "reject_inadmissible", "allow_unknown_resources", "dry_run")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    REJECT_INADMISSIBLE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UNKNOWN_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    spec: _common_pb2.JobSpec
    reject_inadmissible: bool
    allow_unknown_resources: bool
    dry_run: bool
    def __init__(self, spec: _Optional[_Union[_common_pb2.JobSpec, _Mapping]] = ..., reject_inadmissible: _Optional[bool] = ..., allow_unknown_resources: _Optional[bool] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job", "duplicate", "inadmissible")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    INADMISSIBLE_FIELD_NUMBER: _ClassVar[int]
    job: _common_pb2.Job
    duplicate: bool
    inadmissible: str
    def __init__(self, job: _Optional[_Union[_common_pb2.Job, _Mapping]] = ..., duplicate: _Optional[bool] = ..., inadmissible: _Optional[str] = ...) -> None: ...

class SubmitJobsRequest(_message.Message):
    __slots__ = ("specs", "reject_inadmissible", "allow_unknown_resources", "dry_run")
    SPECS_FIELD_NUMBER: _ClassVar[int]
    REJECT_INADMISSIBLE_FIELD_NUMBER: _ClassVar[int]
    ALLOW_UNKNOWN_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    DRY_RUN_FIELD_NUMBER: _ClassVar[int]
    specs: _containers.RepeatedCompositeFieldContainer[_common_pb2.JobSpec]
    reject_inadmissible: bool
    allow_unknown_resources: bool
    dry_run: bool
    def __init__(self, specs: _Optional[_Iterable[_Union[_common_pb2.JobSpec, _Mapping]]] = ..., reject_inadmissible: _Optional[bool] = ..., allow_unknown_resources: _Optional[bool] = ..., dry_run: _Optional[bool] = ...) -> None: ...

class SubmitJobResult(_message.Message):
    __slots__ = ("job_id", "duplicate", "inadmissible")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    INADMISSIBLE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    duplicate: bool
    inadmissible: str
    def __init__(self, job_id: _Optional[str] = ..., duplicate: _Optional[bool] = ..., inadmissible: _Optional[str] = ...) -> None: ...

class SubmitJobsResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SubmitJobResult]
    def __init__(self, results: _Optional[_Iterable[_Union[SubmitJobResult, _Mapping]]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("tenant", "queue", "phases", "page_size", "page_token", "newest_first", "count_phases", "include_history", "cluster", "hyperjob")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    NEWEST_FIRST_FIELD_NUMBER: _ClassVar[int]
    COUNT_PHASES_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HISTORY_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    HYPERJOB_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    queue: str
    phases: _containers.RepeatedScalarFieldContainer[_common_pb2.JobPhase]
    page_size: int
    page_token: str
    newest_first: bool
    count_phases: bool
    include_history: bool
    cluster: str
    hyperjob: str
    def __init__(self, tenant: _Optional[str] = ..., queue: _Optional[str] = ..., phases: _Optional[_Iterable[_Union[_common_pb2.JobPhase, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., newest_first: _Optional[bool] = ..., count_phases: _Optional[bool] = ..., include_history: _Optional[bool] = ..., cluster: _Optional[str] = ..., hyperjob: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token", "phase_counts")
    class PhaseCountsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PHASE_COUNTS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_common_pb2.Job]
    next_page_token: str
    phase_counts: _containers.ScalarMap[str, int]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_common_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., phase_counts: _Optional[_Mapping[str, int]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("id", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: str
    reason: str
    def __init__(self, id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class WatchJobsRequest(_message.Message):
    __slots__ = ("after_sequence", "tenant", "queue", "job_id")
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    after_sequence: int
    tenant: str
    queue: str
    job_id: str
    def __init__(self, after_sequence: _Optional[int] = ..., tenant: _Optional[str] = ..., queue: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

class ExplainJobRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ClusterFit(_message.Message):
    __slots__ = ("cluster", "fits", "reason")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    FITS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    cluster: str
    fits: bool
    reason: str
    def __init__(self, cluster: _Optional[str] = ..., fits: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ExplainJobResponse(_message.Message):
    __slots__ = ("job_id", "phase", "reason", "queue_position", "clusters", "expected_start_time", "expected_cluster", "past_usage")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    QUEUE_POSITION_FIELD_NUMBER: _ClassVar[int]
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_START_TIME_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PAST_USAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase: _common_pb2.JobPhase
    reason: str
    queue_position: int
    clusters: _containers.RepeatedCompositeFieldContainer[ClusterFit]
    expected_start_time: _timestamp_pb2.Timestamp
    expected_cluster: str
    past_usage: str
    def __init__(self, job_id: _Optional[str] = ..., phase: _Optional[_Union[_common_pb2.JobPhase, str]] = ..., reason: _Optional[str] = ..., queue_position: _Optional[int] = ..., clusters: _Optional[_Iterable[_Union[ClusterFit, _Mapping]]] = ..., expected_start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expected_cluster: _Optional[str] = ..., past_usage: _Optional[str] = ...) -> None: ...

class GetJobLogsRequest(_message.Message):
    __slots__ = ("id", "task", "index", "follow", "previous", "tail_lines")
    ID_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    TAIL_LINES_FIELD_NUMBER: _ClassVar[int]
    id: str
    task: str
    index: int
    follow: bool
    previous: bool
    tail_lines: int
    def __init__(self, id: _Optional[str] = ..., task: _Optional[str] = ..., index: _Optional[int] = ..., follow: _Optional[bool] = ..., previous: _Optional[bool] = ..., tail_lines: _Optional[int] = ...) -> None: ...

class LogData(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class GetVersionRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Version(_message.Message):
    __slots__ = ("version", "api", "schema_revision")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    API_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_REVISION_FIELD_NUMBER: _ClassVar[int]
    version: str
    api: str
    schema_revision: str
    def __init__(self, version: _Optional[str] = ..., api: _Optional[str] = ..., schema_revision: _Optional[str] = ...) -> None: ...
