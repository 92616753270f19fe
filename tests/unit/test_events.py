"""srm.core.events: parsing the MSK event Lambda delivers, and building the same bytes for the local event source."""

from __future__ import annotations

import base64
import copy
import itertools
import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from srm.core.events import (
    DecodedEventBuilder,
    EventBuilder,
    MalformedEventError,
    RecordColumns,
    decode_header_value,
    parse_event,
    record_json,
    record_json_size,
    run_json_size,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def msk_event() -> dict[str, Any]:
    """An MSK event as Lambda sends it (shape of the AWS documentation's sample), two partitions of one topic."""
    return {
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:123456789012:cluster/demo-cluster-1/"
        "fc2f5bdf-fd1b-45ad-85dd-15b4a5a6247e-2",
        "bootstrapServers": "b-2.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092,"
        "b-1.demo-cluster-1.a1bcde.c1.kafka.us-east-1.amazonaws.com:9092",
        "records": {
            "my-orders-0": [
                {
                    "topic": "my-orders",
                    "partition": 0,
                    "offset": 15,
                    "timestamp": 1545084650987,
                    "timestampType": "CREATE_TIME",
                    "key": b64(b"order-1"),
                    "value": b64(b"\x00\xff binary"),
                    "headers": [
                        {"trace": [104, 105]},  # "hi", Java signed bytes (all < 128)
                        {"signed": [-1, -128, 0, 127]},
                        {"unsigned": [255, 128]},
                        {"legacy": b64(b"\xfe\x01")},  # older producers of the format: base64 strings
                        {"nothing": None},
                        {"trace": [-61, -87]},  # duplicate key, kept in order ("é" in UTF-8)
                    ],
                },
                {
                    "topic": "my-orders",
                    "partition": 0,
                    "offset": 17,  # 16 was compacted away
                    "timestamp": 1545084650990,
                    "timestampType": "CREATE_TIME",
                    "headers": [],
                },
            ],
            "my-orders-1": [
                {
                    "topic": "my-orders",
                    "partition": 1,
                    "offset": 0,
                    "timestamp": 1545084650991,
                    "timestampType": "LOG_APPEND_TIME",
                    "key": None,
                    "value": b64(b""),
                    "headers": [],
                }
            ],
        },
    }


# ---------------------------------------------------------------------------------------------------------------
# parse_event
# ---------------------------------------------------------------------------------------------------------------
def test_parse_event_msk_event_gives_one_batch_per_partition_in_offset_order():
    kafka_event, batches = parse_event(msk_event())

    assert kafka_event.event_source == "aws:kafka"
    assert [(b.topic, b.partition, b.offsets) for b in batches] == [("my-orders", 0, [15, 17]), ("my-orders", 1, [0])]
    first, second = batches
    assert first.keys == [b"order-1", None]  # absent key is null
    assert first.values == [b"\x00\xff binary", None]  # absent value is null
    assert first.timestamps == [1545084650987, 1545084650990]
    assert second.keys == [None]  # explicit null
    assert second.values == [b""]  # empty is not null
    assert len(first) == 2


def test_parse_event_headers_decode_every_encoding_and_keep_order_and_duplicates():
    _, batches = parse_event(msk_event())

    assert batches[0].headers[0] == [
        ("trace", b"hi"),
        ("signed", b"\xff\x80\x00\x7f"),
        ("unsigned", b"\xff\x80"),
        ("legacy", b"\xfe\x01"),
        ("nothing", None),
        ("trace", "é".encode()),
    ]
    assert not batches[0].headers[1]  # no headers


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [([], b""), ([0, -1, 1], b"\x00\xff\x01"), ([200], b"\xc8"), ("", b""), ("AAE=", b"\x00\x01"), (None, None)],
)
def test_decode_header_value_accepts_signed_unsigned_base64_and_null(raw, decoded):
    assert decode_header_value(raw) == decoded


@pytest.mark.parametrize("raw", [[256], [-129], [1, 1000], "not base64!", 12, {"a": 1}])
def test_decode_header_value_rejects_what_is_no_byte_encoding(raw):
    with pytest.raises((ValueError, TypeError)):
        decode_header_value(raw)


def _set(path: list[Any], value: Any):
    def mutate(event: dict[str, Any]) -> Any:
        target = event
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value
        return event

    return mutate


def _delete(path: list[Any]):
    def mutate(event: dict[str, Any]) -> Any:
        target = event
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]
        return event

    return mutate


def _rename_group(old: str, new: str):
    def mutate(event: dict[str, Any]) -> Any:
        event["records"][new] = event["records"].pop(old)
        return event

    return mutate


REC0 = ["records", "my-orders-0", 0]
REC1 = ["records", "my-orders-0", 1]


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        pytest.param(lambda e: [e], "got list", id="not-a-dict"),
        pytest.param(lambda e: None, "got NoneType", id="none"),
        pytest.param(_set(["eventSource"], "aws:sqs"), "eventSource is 'aws:sqs'", id="wrong-source"),
        pytest.param(_delete(["eventSource"]), "no 'eventSource'", id="no-source"),
        pytest.param(_delete(["records"]), "'records'", id="no-records"),
        pytest.param(_set(["records"], []), "'records'", id="records-not-object"),
        pytest.param(_set(["records", "my-orders-0"], []), "non-empty list", id="empty-group"),
        pytest.param(_rename_group("my-orders-1", "my-orders-2"), "holds records of my-orders-1", id="wrong-partition"),
        pytest.param(_rename_group("my-orders-1", "orders-1"), "holds records of my-orders-1", id="wrong-topic"),
        pytest.param(_set([*REC1, "topic"], "other"), "belongs to other-0", id="foreign-record"),
        pytest.param(_set([*REC1, "partition"], 3), "belongs to my-orders-3", id="foreign-partition"),
        pytest.param(_set([*REC1, "offset"], 15), "offset 15 is not above 15", id="repeated-offset"),
        pytest.param(_set([*REC1, "offset"], 3), "offset 3 is not above 15", id="decreasing-offset"),
        pytest.param(_set([*REC1, "offset"], "17"), "offset '17'", id="offset-not-int"),
        pytest.param(_set([*REC0, "key"], "b3JkZXI*"), "record 0 (offset 15): cannot decode", id="bad-base64-key"),
        pytest.param(_set([*REC0, "value"], "YWJ"), "cannot decode", id="bad-base64-padding"),
        pytest.param(_set([*REC0, "headers"], [{"h": "@@"}]), "cannot decode", id="bad-base64-header"),
        pytest.param(_set([*REC0, "headers"], [{"h": [300]}]), "cannot decode", id="header-byte-out-of-range"),
        pytest.param(_set([*REC0, "headers"], ["h"]), "cannot decode", id="header-not-object"),
        pytest.param(_delete([*REC1, "offset"]), "record 1: missing field 'offset'", id="no-offset"),
        pytest.param(_delete([*REC1, "timestamp"]), "missing field 'timestamp'", id="no-timestamp"),
        pytest.param(_delete([*REC1, "topic"]), "missing field 'topic'", id="no-topic"),
        pytest.param(_delete([*REC0, "partition"]), "has no topic/partition", id="first-without-partition"),
    ],
)
def test_parse_event_malformed_raises_one_line_error(mutate, fragment):
    event = mutate(copy.deepcopy(msk_event()))

    with pytest.raises(MalformedEventError) as info:
        parse_event(event)

    message = str(info.value)
    assert fragment in message
    assert "\n" not in message


def test_parse_event_self_managed_kafka_source_is_accepted():
    event = msk_event()
    event["eventSource"] = "SelfManagedKafka"

    assert len(parse_event(event)[1]) == 2


# ---------------------------------------------------------------------------------------------------------------
# EventBuilder
# ---------------------------------------------------------------------------------------------------------------
RECORDS = [
    ("orders", 0, 5, 1_700_000_000_000, "CREATE_TIME", b"k", b"\xff\x00v", [("h", b"\x80\xff\x7f"), ("h", None)]),
    ("orders", 0, 6, 1_700_000_000_001, "CREATE_TIME", None, None, None),
    ("orders", 1, 0, 1_700_000_000_002, "LOG_APPEND_TIME", b"", b"", [("z", b""), ("a", b"\x01")]),
    ("orders", 0, 9, 1_700_000_000_003, "CREATE_TIME", b"k2", b"v2", []),
]


def built(records) -> EventBuilder:
    builder = EventBuilder("arn:aws:kafka:us-east-1:000000000000:cluster/a/local", "127.0.0.1:9092", 6 << 20)
    for topic, partition, offset, ts, ts_type, key, value, headers in records:
        builder.add(topic, partition, offset, ts, ts_type, key, value, headers, 0)
    return builder


def test_event_builder_to_bytes_round_trips_through_parse_event():
    # GIVEN records of two partitions with null and empty keys/values, high bytes and duplicate header names
    builder = built(RECORDS)

    # WHEN the event is serialized and parsed as the handler would
    event = json.loads(builder.to_bytes())
    _, batches = parse_event(event)

    # THEN every field comes back exactly
    by_partition = {b.partition: b for b in batches}
    assert by_partition[0].offsets == [5, 6, 9]
    assert by_partition[0].keys == [b"k", None, b"k2"]
    assert by_partition[0].values == [b"\xff\x00v", None, b"v2"]
    assert by_partition[0].timestamps == [1_700_000_000_000, 1_700_000_000_001, 1_700_000_000_003]
    assert by_partition[0].headers[0] == [("h", b"\x80\xff\x7f"), ("h", None)]
    assert not by_partition[0].headers[1]
    assert by_partition[1].headers == [[("z", b""), ("a", b"\x01")]]
    assert event["records"]["orders-1"][0]["timestampType"] == "LOG_APPEND_TIME"
    assert "key" not in event["records"]["orders-0"][1]  # null key absent, as Lambda sends it
    assert list(builder.last_offsets()) == [("orders", 0, 9), ("orders", 1, 0)]
    assert builder.count == 4


def test_event_builder_header_values_are_signed_java_bytes():
    event = json.loads(built(RECORDS[:1]).to_bytes())

    assert event["records"]["orders-0"][0]["headers"] == [{"h": [-128, -1, 127]}, {"h": None}]
    assert event["eventSource"] == "aws:kafka"


def test_event_builder_fits_counts_envelope_and_added_estimates():
    builder = EventBuilder("arn", "bs", 1_000)
    start = builder.size

    builder.add("t", 0, 0, 0, "CREATE_TIME", None, None, None, 300)

    assert builder.size == start + 300
    assert builder.fits(1_000 - builder.size)
    assert not builder.fits(1_000 - builder.size + 1)


topic_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-", min_size=1, max_size=249
)
headers_st = st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=40)), max_size=6)
records_st = st.tuples(
    topic_names,
    st.integers(0, 2**31 - 1),  # partition
    st.integers(0, 2**63 - 1),  # offset
    st.integers(-1, 2**63 - 1),  # timestamp (-1: none)
    st.sampled_from(["CREATE_TIME", "LOG_APPEND_TIME"]),
    st.none() | st.binary(max_size=300),
    st.none() | st.binary(max_size=300),
    st.none() | headers_st,
)


WIDEST = (2**31 - 1, 2**63 - 1, 2**63 - 1, "LOG_APPEND_TIME")  # partition, offset, timestamp, type


@settings(max_examples=200, deadline=None)
@given(record=records_st)
@example(record=("t" * 249, *WIDEST, b"", b"", []))
@example(record=("t", *WIDEST, b"", b"", [('\x01"\\' * 7, None), ("é東😀", b"\x80" * 3)]))
def test_event_builder_estimate_is_an_upper_bound_of_a_records_json(record):
    topic, _, _, _, _, key, value, headers = record
    empty = len(built([]).to_bytes())

    real = len(built([record]).to_bytes()) - empty

    assert EventBuilder.estimate(key, value, headers, topic=topic) >= real


@settings(max_examples=100, deadline=None)
@given(records=st.lists(records_st, min_size=1, max_size=8))
def test_event_builder_size_bounds_the_whole_event(records):
    builder = EventBuilder("arn:aws:kafka:us-east-1:000000000000:cluster/a/local", "127.0.0.1:9092", 6 << 20)
    for topic, partition, offset, ts, ts_type, key, value, headers in records:
        estimate = EventBuilder.estimate(key, value, headers, topic=topic)
        builder.add(topic, partition, offset, ts, ts_type, key, value, headers, estimate)

    assert builder.size >= len(builder.to_bytes())


# ---------------------------------------------------------------------------------------------------------------
# The per-record fast paths give exactly what the plain ones give
# ---------------------------------------------------------------------------------------------------------------
def reference_event(records) -> dict[str, Any]:
    """The event object as the MSK event format defines it, built the plain way."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset, ts, ts_type, key, value, headers in records:
        record: dict[str, Any] = {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "timestamp": ts,
            "timestampType": ts_type,
        }
        if key is not None:
            record["key"] = b64(key)
        if value is not None:
            record["value"] = b64(value)
        record["headers"] = [
            {n: None if v is None else [b - 256 if b > 127 else b for b in v]} for n, v in headers or ()
        ]
        groups.setdefault(f"{topic}-{partition}", []).append(record)
    return {
        "eventSource": "aws:kafka",
        "eventSourceArn": "arn:aws:kafka:us-east-1:000000000000:cluster/a/local",
        "bootstrapServers": "127.0.0.1:9092",
        "records": groups,
    }


@settings(max_examples=200, deadline=None)
@given(records=st.lists(records_st, min_size=1, max_size=8))
def test_event_builder_bytes_are_json_dumps_of_the_event_object(records):
    # GIVEN any records, WHEN the builder writes the payload, THEN it is byte for byte the compact JSON of the event
    expected = json.dumps(reference_event(records), separators=(",", ":")).encode()

    assert built(records).to_bytes() == expected


@settings(max_examples=100, deadline=None)
@given(records=st.lists(records_st, min_size=1, max_size=8))
def test_event_builder_cost_charges_at_least_each_records_bytes(records):
    builder = EventBuilder("arn:aws:kafka:us-east-1:000000000000:cluster/a/local", "127.0.0.1:9092", 6 << 20)
    for topic, partition, offset, ts, ts_type, key, value, headers in records:
        text = builder.record(topic, partition, offset, ts, ts_type, key, value, headers)
        builder.append(topic, partition, offset, text, builder.cost(topic, partition, text))

    assert 0 <= builder.size - len(builder.to_bytes()) <= EventBuilder._ENVELOPE + len(records)


partition_records = st.lists(
    st.tuples(
        st.none() | st.binary(max_size=40),
        st.none() | st.binary(max_size=40),
        st.none() | headers_st,
        st.integers(-1, 2**63 - 1),
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(records=partition_records, signed=st.booleans())
def test_parse_event_fast_path_equals_the_record_by_record_walk(records, signed):
    # GIVEN a partition's records with null and empty keys/values, null/binary header values, as signed byte arrays
    # (Java, Lambda) or unsigned ones
    group = []
    for offset, (key, value, headers, ts) in enumerate(records):
        record: dict[str, Any] = {"topic": "t", "partition": 3, "offset": offset * 2, "timestamp": ts}
        if key is not None:
            record["key"] = b64(key)
        if value is not None:
            record["value"] = b64(value)
        record["headers"] = [
            {n: None if v is None else [b - 256 if signed and b > 127 else b for b in v]} for n, v in headers or ()
        ]
        group.append(record)

    # WHEN parsed
    _, (batch,) = parse_event({"eventSource": "aws:kafka", "records": {"t-3": group}})

    # THEN the result is what the checked walk gives, and the records' bytes
    from srm.core.events import _checked_group

    assert batch == _checked_group("t", 3, group)
    assert batch.keys == [k for k, _, _, _ in records]
    assert batch.values == [v for _, v, _, _ in records]
    assert batch.headers == [list(h) if h else None for _, _, h, _ in records]


# ---------------------------------------------------------------------------------------------------------------
# The decoded event of the local event source: the same records per event as the JSON one, the same batches
# ---------------------------------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(records=st.lists(records_st, min_size=1, max_size=12), max_bytes=st.integers(300, 6000))
@example(records=[RECORDS[0]] * 3, max_bytes=900)
def test_decoded_event_builder_cuts_where_the_json_event_does_and_parses_alike(records, max_bytes):
    # GIVEN the same records (offsets rising per partition, as consumed) offered to both builders, with a payload
    # limit that cuts them into several events
    arn, bootstrap = "arn:aws:kafka:us-east-1:000000000000:cluster/a/local", "127.0.0.1:9092"
    records = [(t, p % 3, i, *rest) for i, (t, p, _o, *rest) in enumerate(records)]
    json_events: list[list[Any]] = []
    decoded_events: list[list[Any]] = []
    for make, events in ((EventBuilder, json_events), (DecodedEventBuilder, decoded_events)):
        builder, needs = make(arn, bootstrap, max_bytes), []
        for record in records:
            need = builder.offer(*record)
            if need and builder.count:  # full: the event goes, the record starts the next one
                events.append(_sent(builder))
                builder = make(arn, bootstrap, max_bytes)
                need = builder.offer(*record)
            needs.append(need)
            if need:  # alone too big for one event: held back (as the event source holds the partition)
                break
        if builder.count:
            events.append(_sent(builder))
        events.append(needs)

    # THEN both cut the records into the same events, refuse the same record needing the same bytes, and the
    # handler finds the same batches in both
    assert decoded_events == json_events


def _sent(builder: EventBuilder | DecodedEventBuilder) -> list[Any]:
    """The batches the handler finds in the builder's event: the JSON one (within the payload limit) after the
    runtime's ``json.loads``, or the decoded one as it is."""
    payload = builder.payload()
    if isinstance(payload, bytes):
        assert len(payload) <= builder.max_bytes
        return parse_event(json.loads(payload))[1]
    return parse_event(payload)[1]


@settings(max_examples=300, deadline=None)
@given(record=records_st)
@example(record=("t" * 249, *WIDEST, b"", b"", []))
@example(record=("t", *WIDEST, b"", b"", [('\x01"\\' * 7, None), ("é東😀", b"\x80" * 3)]))
def test_record_json_size_is_the_length_of_the_records_json(record):
    assert record_json_size(*record) == len(record_json(*record))


def _run_columns(records: list[Any]) -> RecordColumns:
    """A partition's run of records as the event source reads it from a fetch: one list per field."""
    return RecordColumns(*(list(column) for column in zip(*(r[2:] for r in records), strict=True)))


@settings(max_examples=300, deadline=None)
@given(records=st.lists(records_st, min_size=1, max_size=10))
@example(records=[("t", 0, 9, -1, "CREATE_TIME", b"", None, [("h", b"\x00\x80\xff"), ("h", None), ("", b"")])] * 2)
def test_run_json_size_is_the_sum_of_its_records_sizes(records):
    # GIVEN records of one partition (numbers of any widths, null and empty keys, values and headers)
    topic, partition = records[0][0], records[0][1]
    records = [(topic, partition, *rest) for _t, _p, *rest in records]

    # WHEN their sizes are counted as columns
    counted = run_json_size(topic, partition, _run_columns(records))

    # THEN it is what counting each record gives
    assert counted == sum(record_json_size(*record) for record in records)


@settings(max_examples=200, deadline=None)
@given(
    records=st.lists(records_st, min_size=1, max_size=12),
    runs=st.lists(st.integers(1, 4), min_size=12, max_size=12),
    max_bytes=st.integers(300, 6000),
)
def test_offer_run_takes_exactly_what_offering_record_by_record_takes(records, runs, max_bytes):
    # GIVEN records in runs of one partition each (as a fetch hands them over), offered to a builder run by run,
    # and the same records to another record by record, with a payload limit that may cut them anywhere
    arn, bootstrap = "arn:aws:kafka:us-east-1:000000000000:cluster/a/local", "127.0.0.1:9092"
    partitions = [p for i, n in enumerate(runs) for p in [i % 3] * n][: len(records)]
    records = [(t, p, i, *rest) for i, ((t, _p, _o, *rest), p) in enumerate(zip(records, partitions, strict=False))]
    topic = records[0][0]
    records = [(topic, *rest) for _t, *rest in records]
    for make in (EventBuilder, DecodedEventBuilder):
        by_run, by_record = make(arn, bootstrap, max_bytes), make(arn, bootstrap, max_bytes)

        # WHEN both take what fits, in order
        taken = 0
        for partition, run in itertools.groupby(records, lambda r: r[1]):
            group = list(run)
            added = by_run.offer_run(topic, partition, _run_columns(group))
            taken += added
            if added < len(group):
                break
        offered = 0
        for record in records:
            if by_record.offer(*record):
                break
            offered += 1

        # THEN they took the same records into the same event, charged the same bytes
        assert taken == offered == by_run.count == by_record.count
        assert by_run.size == by_record.size
        assert by_run.newest_timestamp == by_record.newest_timestamp
        assert _sent(by_run) == _sent(by_record) if taken else not by_record.count
