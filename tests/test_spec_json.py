"""A job spec is stored as protobuf's JSON with the fields' own names. `convert.spec_to_json` writes it without
`json_format`'s generic walk; on random specs (every field of every message in a JobSpec filled or not, strings of
any characters, integers at their bounds, Durations with nanos and of the most seconds, maps of messages) it must
write exactly what `json_format.MessageToDict` writes."""

from __future__ import annotations

import random

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import given, settings
from hypothesis import strategies as st

from federation.api import convert
from federation.v1 import common_pb2

TEXTS = ["", "a", "worker", "ümlaut", "😀", "x" * 300, "line\nbreak", "\x00", "nvidia.com/gpu", "8", "-1"]
INT32 = [0, 1, -1, 7, 2**31 - 1, -(2**31)]


def _value(rng: random.Random, field: FieldDescriptor, depth: int) -> object:
    if field.type == FieldDescriptor.TYPE_STRING:
        return rng.choice(TEXTS)
    return rng.choice(INT32)


def _fill(rng: random.Random, message: object, depth: int = 0) -> None:
    descriptor = message.DESCRIPTOR  # type: ignore[attr-defined]
    if descriptor.full_name == "google.protobuf.Duration":
        seconds = rng.choice([0, 1, 59, 3600, 315_576_000_000])
        message.seconds, message.nanos = seconds, rng.choice([0, 1, 500_000_000, 999_999_999])  # type: ignore
        return
    for field in descriptor.fields:
        if rng.random() < 0.4 or depth > 4:
            continue
        target = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name
            key_field, value_field = entry["key"], entry["value"]
            for _ in range(rng.randint(0, 3)):
                key = _value(rng, key_field, depth)
                if value_field.message_type is not None:
                    _fill(rng, target[key], depth + 1)
                else:
                    target[key] = _value(rng, value_field, depth)
        elif field.message_type is not None and field.is_repeated:
            for _ in range(rng.randint(0, 3)):
                _fill(rng, target.add(), depth + 1)
        elif field.message_type is not None:
            getattr(message, field.name).SetInParent()
            _fill(rng, target, depth + 1)
        elif field.is_repeated:
            target.extend(_value(rng, field, depth) for _ in range(rng.randint(0, 3)))
        else:
            setattr(message, field.name, _value(rng, field, depth))


@settings(max_examples=500, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_a_spec_is_written_as_json_format_writes_it(seed: int) -> None:
    spec = common_pb2.JobSpec()
    _fill(random.Random(seed), spec)
    assert convert.spec_to_json(spec) == json_format.MessageToDict(spec, preserving_proto_field_name=True)


def test_a_message_holding_a_kind_it_does_not_write_goes_to_json_format_whole() -> None:
    assert convert._plain(common_pb2.JobSpec.DESCRIPTOR)
    assert not convert._plain(common_pb2.Job.DESCRIPTOR)  # an enum and Timestamps: json_format's own rules
