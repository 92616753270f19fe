"""Records the target refuses (larger than the remote topic's max.message.bytes) and a remote topic deleted while
replicated: the mirror handler in-process against the real shared clusters, DynamoDB and S3 on moto."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path
from typing import Any

import boto3
import pytest
from confluent_kafka import Producer
from moto import mock_aws

from srm.app import App
from srm.aws.dead_letters import S3DeadLetters
from srm.core.dead_letters import DeadLetter, record_batch_size
from srm.core.offsets import Run
from srm.handlers.mirror import lambda_handler
from srm.metrics.model.schema import decode
from srm.replication.context import MirrorError, RecordTooLargeError
from tests.support.handler import CONTEXT, HandlerFlow, kafka_event
from tests.support.kafka import admin, create_topic, read_partition, read_topic, topic_partitions, unique, wait_for

pytestmark = pytest.mark.integration

LIMIT = 20_000  # the remote topic's max.message.bytes


@pytest.fixture
def mirror(handler_flow: HandlerFlow, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """A builder of flow a->b with extra flow settings (config in a moto table, the handler's env set, raw metrics
    and dead letters under tmp_path)."""
    monkeypatch.setenv("SRM_METRICS_DIR", str(tmp_path / "metrics"))
    monkeypatch.setenv("SRM_DEAD_LETTER_DIR", str(tmp_path / "dead-letters"))

    def build(prefix: str, **settings: str) -> dict[str, Any]:
        handler_flow.configure(prefix, settings)
        return {
            "a": handler_flow.a,
            "b": handler_flow.b,
            "dead_letters": tmp_path / "dead-letters",
            "metrics": tmp_path / "metrics",
        }

    return build


def raw_metrics(root: Path) -> list[Any]:
    App.current().metrics.flush(5)
    return [decode(line) for path in sorted(root.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def produce_records(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 10_000_000})
    for i, value in enumerate(values):
        producer.produce(topic, value, f"k{i}".encode(), partition=0, headers=[("h", b"\x00\xff")])
        producer.flush(10)  # one record per batch on the source
    assert producer.flush(30) == 0


def poison_setup(env: dict[str, Any], prefix: str) -> tuple[str, str, dict[int, list[Any]]]:
    """9 records on a source topic, offset 5 of them 50 kB; the remote topic exists with a 20 kB limit."""
    topic = f"{prefix}.orders"
    create_topic(env["a"], topic, 1)
    create_topic(env["b"], f"a.{topic}", 1, {"max.message.bytes": str(LIMIT)})
    produce_records(env["a"], topic, [b"x" * (50_000 if i == 5 else 100) for i in range(9)])
    return topic, f"a.{topic}", read_topic(env["a"], topic)


def test_record_batch_size_is_what_the_broker_compares_with_max_message_bytes(clusters):
    # GIVEN a record with key, value and headers, and two topics whose limit is its size and one byte less
    b = clusters["b"].bootstrap
    key, value, headers = b"key", b"v" * 5000, [("trace", b"\x01\x02"), ("empty", None)]
    size = record_batch_size(key, value, headers)
    fits, too_small = unique("fits"), unique("small")
    create_topic(b, fits, 1, {"max.message.bytes": str(size)})
    create_topic(b, too_small, 1, {"max.message.bytes": str(size - 1)})
    errors: dict[str, Any] = {}
    producer = Producer({"bootstrap.servers": b, "enable.idempotence": "true", "acks": "all"})
    for topic in (fits, too_small):
        producer.produce(topic, value, key, headers=headers, on_delivery=lambda e, m: errors.__setitem__(m.topic(), e))
        producer.flush(30)
    # THEN the first accepts it and the second refuses it as too large
    assert errors[fits] is None
    assert errors[too_small] is not None and "too large" in errors[too_small].str()


def test_too_large_record_by_default_fails_the_batch_naming_offset_size_and_limit(mirror):
    # GIVEN the default errors.tolerance and a batch holding one record over the remote topic's limit
    env = mirror(prefix := unique("big"))
    topic, remote, source = poison_setup(env, prefix)
    event = kafka_event(env["a"], topic, {0: source[0]})

    # WHEN the batch is delivered, and delivered again (as the event source retries it)
    errors = []
    for _ in range(2):
        with pytest.raises(RecordTooLargeError) as raised:
            lambda_handler(event, CONTEXT)
        errors.append(str(raised.value))

    # THEN both attempts fail with one line naming the topic-partition, the offset, the size and the limit
    size = record_batch_size(source[0][5].key, source[0][5].value, source[0][5].headers)
    for message in errors:
        assert "\n" not in message
        assert f"{topic}-0@5" in message and f"{size} bytes" in message and f"max.message.bytes={LIMIT}" in message
    # … the remote topic never gets the big record nor anything after it, no dead letter is written
    assert [r.offset for r in read_partition(env["b"], remote, 0) if len(r.value) > 1000] == []
    assert not env["dead_letters"].exists()
    # … and each failure is a raw metric record (what the failed-batch alarm counts)
    failures = [m for m in raw_metrics(env["metrics"]) if m.kind == "mirror_failure"]
    assert [(f.topic, f.partition, f.error, f.records) for f in failures] == [(topic, 0, "RecordTooLargeError", 9)] * 2


def test_too_large_record_with_tolerance_all_goes_to_dead_letters_and_replication_goes_on(mirror):
    # GIVEN errors.tolerance=all and a batch holding one record over the remote topic's limit
    env = mirror(prefix := unique("dlq"), **{"errors.tolerance": "all"})
    topic, remote, source = poison_setup(env, prefix)
    records = source[0]
    event = kafka_event(env["a"], topic, {0: records})

    # WHEN the batch is delivered, then delivered again (a redelivery after a timeout)
    results = [lambda_handler(event, CONTEXT), lambda_handler(event, CONTEXT)]

    # THEN every other record is replicated, in order; the big one is not
    assert [r["records"] for r in results] == [8, 8] and [r["deadLettered"] for r in results] == [1, 1]
    replicated = read_partition(env["b"], remote, 0)
    expected = [r.content() for r in records if r.offset != 5]
    assert [r.content() for r in replicated] == expected * 2  # the redelivery re-sent them (at-least-once)
    # … the dead letter holds the raw record (base64), where it came from and why, once however often delivered
    letters = list(env["dead_letters"].rglob("*.json"))
    assert [p.relative_to(env["dead_letters"]).as_posix() for p in letters] == [f"a->b/{topic}/0/{5:020d}.json"]
    letter = json.loads(letters[0].read_text())
    big = records[5]
    assert base64.b64decode(letter["value"]) == big.value and base64.b64decode(letter["key"]) == big.key
    assert [[n, base64.b64decode(v)] for n, v in letter["headers"]] == [["h", b"\x00\xff"]]
    assert (letter["topic"], letter["partition"], letter["offset"], letter["timestamp"]) == (topic, 0, 5, big.timestamp)
    assert letter["reason"].startswith("record_too_large") and f"at most {LIMIT}" in letter["reason"]
    assert letter["size"] == record_batch_size(big.key, big.value, big.headers)
    # … offset translation has a gap at 5: upstream 0-4 and 6-8 are two runs (the redelivery's, written last), the
    # downstream side contiguous — no downstream record stands for offset 5
    runs = App.current().state.runs("a", "b", topic, 0)
    assert runs == [Run(0, 8, 5), Run(6, 13, 3)]
    # … and each delivery counted its dead letter
    counted = [m for m in raw_metrics(env["metrics"]) if m.kind == "dead_letter"]
    assert [(m.topic, m.partition, m.records, m.error) for m in counted] == [(topic, 0, 1, "record_too_large")] * 2


def test_s3_dead_letters_hold_the_raw_record_under_the_flow_topic_partition_and_offset():
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="dlq")
        letter = DeadLetter("a", "b", "orders", 3, 42, 1700, None, b"\x00big", [("h", None)], "a.orders", "why", 99)
        S3DeadLetters(s3, "dlq").write([letter])
        body = json.loads(s3.get_object(Bucket="dlq", Key=f"dead-letters/a->b/orders/3/{42:020d}.json")["Body"].read())
    assert body["key"] is None and base64.b64decode(body["value"]) == b"\x00big"
    assert body["headers"] == [["h", None]] and (body["offset"], body["reason"], body["size"]) == (42, "why", 99)


def test_remote_topic_deleted_while_replicating_is_recreated_with_the_source_partitions(mirror, caplog):
    # GIVEN a 3-partition topic replicated once, then its remote topic deleted on the target (whose broker
    # auto-creates topics a producer writes to, as Kafka does by default)
    env = mirror(prefix := unique("del"), **{"mirror.delivery.timeout.ms": "3000"})
    topic = f"{prefix}.orders"
    create_topic(env["a"], topic, 3)
    producer = Producer({"bootstrap.servers": env["a"]})
    for i in range(30):
        producer.produce(topic, f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    source = read_topic(env["a"], topic)
    lambda_handler(kafka_event(env["a"], topic, {p: recs[:5] for p, recs in source.items()}), CONTEXT)
    target_admin = admin(env["b"])
    for future in target_admin.delete_topics([f"a.{topic}"]).values():
        future.result()
    wait_for(lambda: topic_partitions(env["b"], f"a.{topic}") is None, timeout=30, message="remote topic deleted")

    # WHEN the next batch comes, and is retried until it goes through (as the event source does)
    event = kafka_event(env["a"], topic, {p: recs[5:] for p, recs in source.items()})
    attempts = 0
    with caplog.at_level(logging.ERROR, logger="srm.kafka.admin"):
        while True:
            attempts += 1
            try:
                result = lambda_handler(event, CONTEXT)
                break
            except MirrorError:
                # never an auto-created remote topic with the broker's default partition count meanwhile
                assert topic_partitions(env["b"], f"a.{topic}") in (None, 3)
                # … and nothing of the failed attempt left in the producer, to be written after the retry's copy
                assert len(App.current().mirror_context().producer) == 0
                assert attempts < 6, "the batch never went through"

    # THEN the remote topic is back with the source's 3 partitions, holding the batch's records in order
    print(f"deleted remote topic: the batch went through at attempt {attempts}")
    assert result["records"] == 15 and attempts >= 2
    assert topic_partitions(env["b"], f"a.{topic}") == 3
    remote = read_topic(env["b"], f"a.{topic}")
    for p, recs in source.items():
        assert [r.value for r in remote[p]] == [r.value for r in recs[5:]]
    # … and it was said loudly
    assert any("was deleted on the target while replicated" in r.getMessage() for r in caplog.records)
