"""The raw metric record: every kind round-trips; bad lines raise one clear error naming file and line."""

from __future__ import annotations

import re

import pytest

from srm.metrics.model import schema
from srm.metrics.model.schema import (
    CheckpointRun,
    DataLoss,
    DeadLetterBatch,
    HeartbeatSample,
    LagSample,
    MetricRecordError,
    MirrorBatch,
    MirrorFailure,
    SketchData,
    TopicReset,
    TopicSyncRun,
    VerificationRun,
    decode,
    encode,
)
from srm.metrics.model.sketch import Sketch

FLOW = {"ts": 1_700_000_000_000, "source": "a", "target": "b"}
RECORDS = [
    MirrorBatch(
        **FLOW,
        topic="t",
        remote_topic="a.t",
        partition=1,
        records=3,
        bytes=30,
        latency=SketchData.of(Sketch.of([3, 4, 900])),
        age=SketchData.of(Sketch.of([0, 2, 5])),
    ),
    MirrorFailure(**FLOW, topic="t", partition=1, error="KafkaException", retries=3, records=10),
    DeadLetterBatch(**FLOW, topic="t", partition=1, records=2, bytes=3_000_000, error="record_too_large"),
    LagSample(**FLOW, topic="t", partition=1, log_end=100, committed=90, lag=10, oldest_age_ms=1200),
    CheckpointRun(**FLOW, latency=SketchData.of(Sketch.of([50])), groups_checkpointed=2, groups_skipped={"active": 1}),
    HeartbeatSample(**FLOW, age_ms=1500.0, latency_ms=20.0),
    TopicSyncRun(**FLOW, topics_created=1, partitions_created=4, failed={"acls": 1}),
    DataLoss(**FLOW, topic="t", partition=1, start_offset=10, end_offset=25, lost=15),
    TopicReset(**FLOW, topic="t", partition=1, replicated_end=30),
    VerificationRun(**FLOW, topic="t", partition=1, compared=40, differences=1, verified_through=60),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.kind)
def test_record_round_trips_through_one_json_line(record: schema.MetricRecord) -> None:
    line = encode(record)
    assert "\n" not in line
    assert decode(line) == record


def test_kinds_and_field_types_cover_every_model() -> None:
    assert set(schema.KINDS) == {r.kind for r in RECORDS}
    for record in RECORDS:
        assert set(type(record).model_fields) <= set(schema.FIELD_TYPES)
    assert schema.FIELD_TYPES["latency"] == "sketch"
    assert schema.FIELD_TYPES["groups_skipped"] == "counts"


GOOD = encode(RECORDS[0])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (GOOD[:40], "not a JSON object (truncated line?)"),
        (GOOD.replace('"v":1', '"v":7'), "unknown schema version 7"),
        (GOOD.replace('"records":3', '"records":"3"'), "mirror.records: Input should be a valid integer"),
        (GOOD.replace('"records":3', '"records":1.5'), "mirror.records"),
        (GOOD.replace('"kind":"mirror"', '"kind":"nope"'), "does not match any of the expected tags"),
        (GOOD.replace('"partition":1,', ""), "mirror.partition: Field required"),
        (GOOD.replace('"n":3', '"n":4', 1), "n=4 but the buckets hold 3"),
        (re.sub(r'"b":\{"\d+"', '"b":{"99999999"', GOOD, count=1), "bucket indices must be within 0..17743"),
        ("[1, 2]", "not a JSON object"),
    ],
)
def test_bad_line_raises_an_error_naming_file_line_and_problem(line: str, message: str) -> None:
    with pytest.raises(MetricRecordError, match=r"^raw/x\.jsonl:7: ") as error:
        decode(line, origin="raw/x.jsonl", line_no=7)
    assert message in str(error.value)


def test_empty_sketch_has_no_json_form() -> None:
    with pytest.raises(ValueError, match="empty sketch"):
        Sketch().to_json()
