"""The sample events in ``events/`` are what Lambda delivers, and ``srm`` reads them as Kafka wrote them."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from srm.core.events import EventBuilder, PartitionBatch, parse_event
from tests.support.events import EVENTS, load_event


@pytest.fixture
def msk_batch() -> dict[str, Any]:
    return load_event("msk_batch.json")


def batches_by_partition(event: dict[str, Any]) -> dict[tuple[str, int], PartitionBatch]:
    _, batches = parse_event(event)
    return {(b.topic, b.partition): b for b in batches}


def test_parse_event_msk_batch_splits_by_partition_in_offset_order(msk_batch: dict[str, Any]) -> None:
    # WHEN
    kafka_event, batches = parse_event(msk_batch)
    # THEN
    assert kafka_event.event_source == "aws:kafka"
    assert kafka_event.event_source_arn.startswith("arn:aws:kafka:us-west-2:")
    assert [(b.topic, b.partition, b.offsets) for b in batches] == [("orders", 0, [41, 42, 44]), ("orders", 1, [7])]
    assert batches[0].timestamps == [1718000000123, 1718000000456, 1718000000789]


def test_parse_event_headers_keep_order_duplicates_and_signed_bytes(msk_batch: dict[str, Any]) -> None:
    orders0 = batches_by_partition(msk_batch)[("orders", 0)]
    assert orders0.headers[0] == [("trace", b"hi"), ("bin", b"\xff\x00\x80"), ("trace", b"bye"), ("empty", b"")]
    assert not orders0.headers[1] and not orders0.headers[2]  # "headers": [] is no headers
    assert batches_by_partition(msk_batch)[("orders", 1)].headers[0] == [("content-type", b"application/json")]


def test_parse_event_absent_key_and_value_are_null(msk_batch: dict[str, Any]) -> None:
    orders0 = batches_by_partition(msk_batch)[("orders", 0)]
    assert orders0.keys == [b"order-1001", None, b"order-1001"]
    assert orders0.values[0] == b'{"id":1001,"status":"created"}'
    assert orders0.values[1] == b'{"id":null,"status":"anonymous"}'
    assert orders0.values[2] is None  # the tombstone stays a tombstone


def test_parse_event_base64_header_values_decode_the_same(msk_batch: dict[str, Any]) -> None:
    # GIVEN the same event from an older producer of the format: header values as base64 strings
    legacy = json.loads(json.dumps(msk_batch))
    for records in legacy["records"].values():
        for rec in records:
            rec["headers"] = [
                {k: base64.b64encode(bytes(b & 0xFF for b in v)).decode() for k, v in h.items()} for h in rec["headers"]
            ]
    # THEN both decode alike
    assert batches_by_partition(legacy) == batches_by_partition(msk_batch)


def test_event_builder_msk_batch_rebuilds_the_lambda_event(msk_batch: dict[str, Any]) -> None:
    # GIVEN the decoded sample WHEN the local event source builds an event from the same records
    builder = EventBuilder(msk_batch["eventSourceArn"], msk_batch["bootstrapServers"], 6 * 1024 * 1024)
    for b in batches_by_partition(msk_batch).values():
        for i, offset in enumerate(b.offsets):
            key, value, headers = b.keys[i], b.values[i], b.headers[i]
            estimate = EventBuilder.estimate(key, value, headers)
            builder.add(b.topic, b.partition, offset, b.timestamps[i], "CREATE_TIME", key, value, headers, estimate)
    # THEN it is the event Lambda delivers, field for field
    assert json.loads(builder.to_bytes()) == msk_batch


def test_schedule_event_is_an_eventbridge_scheduled_event() -> None:
    event = load_event("schedule.json")
    assert (event["source"], event["detail-type"], event["detail"]) == ("aws.events", "Scheduled Event", {})
    assert event["resources"][0].startswith("arn:aws:events:")


def test_events_readme_lists_every_sample() -> None:
    readme = (EVENTS / "README.md").read_text()
    samples = sorted(p.name for p in EVENTS.glob("*.json"))
    assert samples and [s for s in samples if f"`{s}`" not in readme] == []
