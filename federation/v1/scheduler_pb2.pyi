import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from federation.v1 import admin_pb2 as _admin_pb2
from federation.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExplainClustersRequest(_message.Message):
    __slots__ = ("job_id", "name_holders")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_HOLDERS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name_holders: bool
    def __init__(self, job_id: _Optional[str] = ..., name_holders: _Optional[bool] = ...) -> None: ...

class ExplainClustersResponse(_message.Message):
    __slots__ = ("clusters",)
    CLUSTERS_FIELD_NUMBER: _ClassVar[int]
    clusters: _containers.RepeatedCompositeFieldContainer[_jobs_pb2.ClusterFit]
    def __init__(self, clusters: _Optional[_Iterable[_Union[_jobs_pb2.ClusterFit, _Mapping]]] = ...) -> None: ...

class ExpectedStartsRequest(_message.Message):
    __slots__ = ("job_ids",)
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ExpectedStart(_message.Message):
    __slots__ = ("time", "cluster")
    TIME_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    time: _timestamp_pb2.Timestamp
    cluster: str
    def __init__(self, time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cluster: _Optional[str] = ...) -> None: ...

class ExpectedStartsResponse(_message.Message):
    __slots__ = ("starts",)
    class StartsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ExpectedStart
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ExpectedStart, _Mapping]] = ...) -> None: ...
    STARTS_FIELD_NUMBER: _ClassVar[int]
    starts: _containers.MessageMap[str, ExpectedStart]
    def __init__(self, starts: _Optional[_Mapping[str, ExpectedStart]] = ...) -> None: ...
