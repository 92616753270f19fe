"""The raw metric record: what every function emits, one JSON object per line (schema version ``v`` = 1).

Every record carries ``v`` (schema version), ``id`` (unique: ``<producer>:<sequence>``; Firehose may deliver a record
twice and the aggregation keeps one per id), ``kind``, ``ts`` (epoch ms when it was measured; it decides the
aggregation window), ``source`` and ``target`` (the flow). Per kind:

================  ====================================================================================================
kind              fields
================  ====================================================================================================
``mirror``        one batch of one source partition written to its remote partition: ``topic`` (upstream),
                  ``remote_topic``, ``partition``, ``records``, ``bytes`` (key + value + headers), ``latency``
                  (sketch of ack time − record timestamp, MM2's ``replication-latency-ms``), ``age`` (sketch of
                  the time the batch reached the handler − record timestamp, ``record-age-ms``), ``filtered``
                  (records of the batch the flow's transforms dropped; a batch they dropped whole has ``records`` 0)
``mirror_failure`` a failed batch: ``topic``, ``partition`` (optional), ``error`` (exception class), ``retries``,
                  ``records`` (in the failed batch)
``dead_letter``   records of one source partition sent to the dead-letter destination instead of the target
                  (``errors.tolerance = all``): ``topic``, ``partition``, ``records``, ``bytes`` (key + value),
                  ``error`` (why the target refused them, e.g. ``record_too_large``)
``lag``           a sample of one source partition: ``topic``, ``partition``, ``log_end`` (source log-end offset),
                  ``committed`` (the event source's committed offset, absent when none), ``lag`` (``log_end`` −
                  ``committed``, SRM's ``replication-records-lag``), ``oldest_age_ms`` (age of the oldest
                  unreplicated record, when read)
``checkpoint``    one checkpoint run: ``latency`` (sketch of checkpoint time − the group's commit, absent when none
                  was written), ``groups_checkpointed``, ``groups_skipped`` (reason → count)
``heartbeat``     ``age_ms`` (now − the newest replicated heartbeat's timestamp), ``latency_ms`` (its replication
                  latency, when known)
``topic_sync``    one topic-sync run: ``topics_created``, ``partitions_created``, ``configs_changed``,
                  ``acls_changed``, ``failed`` (step → count), ``mapping_problems`` (event source mappings Lambda
                  reports a problem of: authentication, network, permissions, the function failing)
``data_loss``     source offsets purged before they were replicated: ``topic``, ``partition``, ``start_offset``,
                  ``end_offset`` (the range, end exclusive), ``lost`` (offsets of it not reported before)
``topic_reset``   a source partition that started over (topic deleted and recreated): ``topic``, ``partition``,
                  ``replicated_end`` (what its old incarnation had replicated)
``verification``  one partition verified by a run of continuous verification: ``topic``, ``partition``,
                  ``compared`` (records compared), ``differences`` (missing, extra and different records found),
                  ``verified_through`` (the next source offset not verified identical)
================  ====================================================================================================

A sketch is :class:`srm.metrics.model.sketch.Sketch`'s JSON form (:class:`SketchData`). Unknown fields are ignored (so
a reader keeps working when a field is added); a change of meaning or type is a new version. Types are strict
(no "5" for 5, no 1.5 for an int), the same rules Spark's JSON reader applies in :mod:`srm.metrics.aggregate`,
which builds its schema from :data:`FIELD_TYPES` and its checks from :data:`REQUIRED`.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from srm.metrics.model.sketch import MAX_INDEX, Sketch

__all__ = [
    "FIELD_TYPES",
    "KINDS",
    "REQUIRED",
    "SCHEMA_VERSION",
    "CheckpointRun",
    "DataLoss",
    "DeadLetterBatch",
    "HeartbeatSample",
    "LagSample",
    "MetricRecord",
    "MetricRecordError",
    "MirrorBatch",
    "MirrorFailure",
    "SketchData",
    "TopicReset",
    "TopicSyncRun",
    "VerificationRun",
    "decode",
    "encode",
]

SCHEMA_VERSION = 1

_STRICT = ConfigDict(strict=True, extra="ignore", frozen=True)


class MetricRecordError(ValueError):
    """A raw metric line that cannot be read; ``origin`` and ``line`` say where it came from when known."""

    def __init__(self, message: str, *, origin: str | None = None, line: int | None = None) -> None:
        where = f"{origin}:{line}: " if origin is not None and line is not None else ""
        super().__init__(f"{where}{message}")
        self.origin = origin
        self.line = line


class SketchData(BaseModel):
    """The JSON form of a :class:`Sketch`."""

    model_config = _STRICT

    n: int = Field(ge=1)
    min: float
    max: float
    sum: float
    z: int = Field(default=0, ge=0)
    b: dict[str, int]

    @model_validator(mode="after")
    def _consistent(self) -> SketchData:
        try:
            indices = [int(index) for index in self.b]
        except ValueError:
            raise ValueError("bucket indices must be integers") from None
        if any(not 0 <= index <= MAX_INDEX for index in indices) or any(count < 1 for count in self.b.values()):
            raise ValueError(f"bucket indices must be within 0..{MAX_INDEX} and counts >= 1")
        if self.z + sum(self.b.values()) != self.n:
            raise ValueError(f"n={self.n} but the buckets hold {self.z + sum(self.b.values())}")
        if self.min > self.max:
            raise ValueError("min > max")
        return self

    @classmethod
    def of(cls, sketch: Sketch) -> SketchData:
        return cls.model_validate(sketch.to_json())

    def sketch(self) -> Sketch:
        return Sketch.from_json(self.model_dump())


class _Record(BaseModel):
    model_config = _STRICT

    v: int = SCHEMA_VERSION
    # Unique per record (``<producer>:<sequence>``, set by the emitter): a record delivered twice is counted once.
    id: str | None = None
    ts: int = Field(ge=0)
    source: str = Field(min_length=1)
    target: str = Field(min_length=1)
    kind: str  # each kind's model fixes it (a Literal with that default)


class _PartitionRecord(_Record):
    """A record about one source partition."""

    topic: str
    partition: int = Field(ge=0)


class MirrorBatch(_Record):
    kind: Literal["mirror"] = "mirror"
    topic: str
    remote_topic: str
    partition: int = Field(ge=0)
    records: int = Field(ge=0)
    bytes: int = Field(ge=0)
    latency: SketchData | None = None
    age: SketchData | None = None
    filtered: int = Field(default=0, ge=0)


class MirrorFailure(_Record):
    kind: Literal["mirror_failure"] = "mirror_failure"
    topic: str
    partition: int | None = Field(default=None, ge=0)
    error: str
    retries: int = Field(default=0, ge=0)
    records: int = Field(default=0, ge=0)


class DeadLetterBatch(_PartitionRecord):
    kind: Literal["dead_letter"] = "dead_letter"
    records: int = Field(ge=0)
    bytes: int = Field(ge=0)
    error: str


class LagSample(_PartitionRecord):
    kind: Literal["lag"] = "lag"
    log_end: int = Field(ge=0)
    committed: int | None = Field(default=None, ge=0)
    lag: int = Field(ge=0)
    oldest_age_ms: int | None = Field(default=None, ge=0)


class CheckpointRun(_Record):
    kind: Literal["checkpoint"] = "checkpoint"
    latency: SketchData | None = None
    groups_checkpointed: int = Field(ge=0)
    groups_skipped: dict[str, int] = Field(default_factory=dict)


class HeartbeatSample(_Record):
    kind: Literal["heartbeat"] = "heartbeat"
    age_ms: float
    latency_ms: float | None = None


class TopicSyncRun(_Record):
    kind: Literal["topic_sync"] = "topic_sync"
    topics_created: int = Field(default=0, ge=0)
    partitions_created: int = Field(default=0, ge=0)
    configs_changed: int = Field(default=0, ge=0)
    acls_changed: int = Field(default=0, ge=0)
    failed: dict[str, int] = Field(default_factory=dict)
    mapping_problems: int = Field(default=0, ge=0)


class DataLoss(_PartitionRecord):
    kind: Literal["data_loss"] = "data_loss"
    start_offset: int = Field(ge=0)
    end_offset: int = Field(ge=0)
    lost: int = Field(ge=0)


class TopicReset(_PartitionRecord):
    kind: Literal["topic_reset"] = "topic_reset"
    replicated_end: int = Field(ge=0)


class VerificationRun(_PartitionRecord):
    kind: Literal["verification"] = "verification"
    compared: int = Field(ge=0)
    differences: int = Field(ge=0)
    verified_through: int = Field(ge=0)


MetricRecord = Annotated[
    Union[  # noqa: UP007
        MirrorBatch,
        MirrorFailure,
        DeadLetterBatch,
        LagSample,
        CheckpointRun,
        HeartbeatSample,
        TopicSyncRun,
        DataLoss,
        TopicReset,
        VerificationRun,
    ],
    Field(discriminator="kind"),
]
_KIND_MODELS: tuple[type[_Record], ...] = typing.get_args(typing.get_args(MetricRecord)[0])
_ADAPTER: TypeAdapter[Any] = TypeAdapter(MetricRecord)

KINDS: tuple[str, ...] = tuple(model.model_fields["kind"].default for model in _KIND_MODELS)
# Per kind, the fields a record must have (Spark checks the same; see srm.metrics.aggregate).
REQUIRED: Mapping[str, tuple[str, ...]] = {
    model.model_fields["kind"].default: tuple(
        ["v", "kind", *(name for name, info in model.model_fields.items() if info.is_required())]
    )
    for model in _KIND_MODELS
}


def encode(record: _Record) -> str:
    """One JSON line (without the newline); absent optional fields are left out."""
    return record.model_dump_json(exclude_none=True)


def decode(line: str | bytes, *, origin: str | None = None, line_no: int | None = None) -> MetricRecord:
    """The record of one JSON line, or :class:`MetricRecordError` saying what is wrong with it."""
    try:
        data = json.loads(line)
    except ValueError as e:
        raise MetricRecordError(f"not a JSON object (truncated line?): {e}", origin=origin, line=line_no) from None
    if not isinstance(data, dict):
        raise MetricRecordError("not a JSON object", origin=origin, line=line_no)
    version = data.get("v")
    if version != SCHEMA_VERSION:
        raise MetricRecordError(
            f"unknown schema version {version!r} (this reader knows v={SCHEMA_VERSION})", origin=origin, line=line_no
        )
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "record"
        raise MetricRecordError(f"{where}: {first['msg']}", origin=origin, line=line_no) from None


def _type_tag(annotation: Any) -> str:
    args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    if typing.get_origin(annotation) in (Union, types.UnionType) and len(args) == 1:
        return _type_tag(args[0])
    if typing.get_origin(annotation) is Literal:
        return _type_tag(type(args[0]))
    if typing.get_origin(annotation) is dict:
        return "counts"
    tags = {int: "long", float: "double", str: "string", SketchData: "sketch"}
    return tags[annotation]


def _field_types() -> dict[str, str]:
    found: dict[str, str] = {}
    for model in _KIND_MODELS:
        for name, info in model.model_fields.items():
            tag = _type_tag(info.annotation)
            if found.setdefault(name, tag) != tag:
                raise TypeError(f"field {name} has two types in the raw schema: {found[name]} and {tag}")
    return found


# Every field of every kind and its type: long, double, string, sketch (SketchData) or counts (name → count).
FIELD_TYPES: Mapping[str, str] = _field_types()
