"""The mirror Lambda handler in-process: real Kafka (the shared clusters), DynamoDB emulated by moto."""

from __future__ import annotations

import time
from typing import Any

import pytest

from srm.app import App
from srm.core.events import MalformedEventError
from srm.handlers.mirror import lambda_handler
from tests.support.handler import CONTEXT, HandlerFlow, decoded_event, kafka_event
from tests.support.kafka import (
    Rec,
    assert_no_loss,
    create_topic,
    create_topic_with_records,
    list_topic_names,
    produce,
    read_topic,
    unique,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def flow(handler_flow: HandlerFlow) -> dict[str, Any]:
    """A flow a->b selecting ``<prefix>.*``, its config in a moto config table, the handler's env set."""
    prefix = unique("hdl")
    handler_flow.configure(prefix)
    return {"a": handler_flow.a, "b": handler_flow.b, "prefix": prefix}


def _record(topic: str, offset: int, **fields: Any) -> dict[str, Any]:
    return {"topic": topic, "partition": 0, "offset": offset, "timestamp": 1, "timestampType": "CREATE_TIME", **fields}


MALFORMED = {
    "not-an-object": lambda t: ["records"],
    "no-event-source": lambda t: {"records": {f"{t}-0": [_record(t, 0)]}},
    "foreign-event-source": lambda t: {"eventSource": "aws:sqs", "records": {f"{t}-0": [_record(t, 0)]}},
    "records-not-an-object": lambda t: {"eventSource": "aws:kafka", "records": [_record(t, 0)]},
    "bad-base64-value": lambda t: {"eventSource": "aws:kafka", "records": {f"{t}-0": [_record(t, 0, value="@@@")]}},
    "offsets-not-increasing": lambda t: {
        "eventSource": "aws:kafka",
        "records": {f"{t}-0": [_record(t, 5), _record(t, 5)]},
    },
    "missing-timestamp": lambda t: {
        "eventSource": "aws:kafka",
        "records": {f"{t}-0": [{"topic": t, "partition": 0, "offset": 0}]},
    },
    "group-of-another-partition": lambda t: {"eventSource": "aws:kafka", "records": {f"{t}-3": [_record(t, 0)]}},
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_mirror_handler_malformed_event_raises_one_line_error_and_produces_nothing(flow, case: str):
    # GIVEN a malformed event about a topic the flow selects
    topic = f"{flow['prefix']}.bad"
    event = MALFORMED[case](topic)

    # WHEN the handler is invoked with it
    with pytest.raises(MalformedEventError) as raised:
        lambda_handler(event, CONTEXT)

    # THEN the invocation fails (so the event source retries it) with a one-line message, and nothing is produced
    message = str(raised.value)
    assert message and "\n" not in message, message
    assert not {t for t in list_topic_names(flow["b"]) if flow["prefix"] in t}


def test_mirror_handler_valid_event_replicates_and_records_exact_offset_runs(flow):
    # GIVEN records on a 2-partition source topic, and two events as the event source sends them: offsets 0-19 of
    # each partition, then a redelivery of 10-19 with the next 10 records
    a, b = flow["a"], flow["b"]
    topic = f"{flow['prefix']}.orders"
    create_topic_with_records(a, topic, 2, 60)
    source = read_topic(a, topic)
    first = kafka_event(a, topic, {p: recs[:20] for p, recs in source.items()})
    redelivery = kafka_event(a, topic, {p: recs[10:30] for p, recs in source.items()})

    # WHEN the handler replicates both, in-process, against the real target
    results = [lambda_handler(first, CONTEXT), lambda_handler(redelivery, CONTEXT)]

    # THEN the remote topic holds the records in the same partitions, the redelivered ones re-sent and nothing lost
    assert [r["records"] for r in results] == [40, 40]
    remote = read_topic(b, f"a.{topic}")
    assert sorted(remote) == [0, 1]
    for p, recs in source.items():
        assert assert_no_loss(recs[:30], remote[p]) == 10
        # … and the state table's offset runs map every upstream offset to where its latest copy landed
        runs = App.current().state.runs("a", "b", topic, p)
        mapped = {r.upstream + i: r.downstream + i for r in runs for i in range(r.length)}
        assert sorted(mapped) == [rec.offset for rec in recs[:30]]
        by_offset = {rec.offset: rec for rec in remote[p]}
        for rec in recs[:30]:
            landed = by_offset[mapped[rec.offset]]
            assert landed.content() == rec.content(), f"{topic}-{p}@{rec.offset} maps to a different record"
            copies = [r.offset for r in remote[p] if r.content() == rec.content()]
            assert mapped[rec.offset] == copies[-1], f"{topic}-{p}@{rec.offset} does not map to its latest copy"


def test_mirror_handler_decoded_event_replicates_exactly_as_the_json_event(flow):
    # GIVEN the same records (null and empty keys and values, signed header bytes, duplicate header names) on two
    # source topics: one is handed to the handler as the MSK JSON event Lambda sends, the other decoded, as
    # `srm run` hands it over — a first delivery, then a redelivery overlapping it
    a, b = flow["a"], flow["b"]
    records = [
        (p, Rec(k, v, h, int(time.time() * 1000) - 1000 + i))
        for i, (p, k, v, h) in enumerate(
            [
                (0, b"k0", b"v0", (("h", b"\x80\xff\x7f"), ("h", None))),
                (1, None, None, ()),
                (0, b"", b"", (("z", b""),)),
                (1, b"k3", b"\x00" * 3000, (("trace", b"\x01\x02"),)),
            ]
            * 15
        )
    ]
    topics = {form: f"{flow['prefix']}.{form}" for form in ("json", "decoded")}
    results: dict[str, list[dict[str, Any]]] = {}
    for form, topic in topics.items():
        create_topic(a, topic, 2)
        produce(a, topic, records)
        source = read_topic(a, topic)
        build = kafka_event if form == "json" else decoded_event
        first = build(a, topic, {p: recs[:20] for p, recs in source.items()})
        redelivery = build(a, topic, {p: recs[10:] for p, recs in source.items()})

        # WHEN the handler replicates both events
        results[form] = [lambda_handler(first, CONTEXT), lambda_handler(redelivery, CONTEXT)]

    # THEN it reports the same, writes the same records to the same partitions at the same offsets, and records the
    # same offset runs
    json_results, decoded_results = (
        [{**r, "partitions": {k.replace(topics[form], "T"): n for k, n in r["partitions"].items()}} for r in rs]
        for form, rs in results.items()
    )
    for r in (*json_results, *decoded_results):
        r.pop("maxLatencyMs")
    assert decoded_results == json_results
    assert [r["records"] for r in json_results] == [40, 40]
    remote = {form: read_topic(b, f"a.{topic}") for form, topic in topics.items()}
    assert sorted(remote["json"]) == [0, 1]
    for p in (0, 1):
        assert [(r.offset, r.content()) for r in remote["decoded"][p]] == [
            (r.offset, r.content()) for r in remote["json"][p]
        ]
        assert len(remote["json"][p]) == 40  # 30 records, 10 of them written again by the redelivery
        runs = {form: App.current().state.runs("a", "b", topic, p) for form, topic in topics.items()}
        assert runs["decoded"] == runs["json"]
