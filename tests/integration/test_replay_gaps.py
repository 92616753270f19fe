"""What cannot be replayed, on real brokers: records purged on the source before they were replicated (DeleteRecords)
and a source topic deleted and recreated — through the emulated event source mapping and the mirror handler, state
on moto."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicCollection, TopicPartition

from srm.app import App
from srm.control.status import flow_status
from srm.core.checkpoints import CachedRuns, translate_group
from srm.core.offsets import Run
from srm.handlers.mirror import lambda_handler
from srm.local.event_source import EmulatedMapping, MappingSettings
from srm.mm2.policy import load_policy
from tests.support.handler import HandlerFlow
from tests.support.kafka import (
    admin,
    create_topic,
    create_topic_with_records,
    numbered_records,
    produce,
    read_partition,
    unique,
    wait_for,
)

pytestmark = pytest.mark.integration

POLICY = load_policy("org.apache.kafka.connect.mirror.DefaultReplicationPolicy")


@pytest.fixture
def flow(handler_flow: HandlerFlow) -> dict[str, Any]:
    """A flow a->b selecting ``<prefix>.*``, config and state on moto, the handler's env set; ``configure(**keys)``
    sets extra flow keys."""
    prefix = unique("gap")

    def configure(**extra: str) -> None:
        handler_flow.configure(prefix, extra)

    configure()
    return {
        "a": handler_flow.a,
        "b": handler_flow.b,
        "prefix": prefix,
        "state": handler_flow.state,
        "configure": configure,
    }


@contextlib.contextmanager
def event_source(bootstrap: str, topic: str) -> Iterator[EmulatedMapping]:
    """The emulated MSK event source mapping of ``topic`` invoking the mirror handler (group ``esm-<topic>``)."""
    mapping = EmulatedMapping(
        name=topic,
        topic=topic,
        consumer_config={
            "bootstrap.servers": bootstrap,
            "group.id": f"esm-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
        },
        handler=lambda_handler,
        function_name="srm-a-b-mirror",
        source_arn="arn:aws:kafka:us-east-1:000000000000:cluster/a/local",
        bootstrap_servers=bootstrap,
        settings=MappingSettings(batch_size=100, batching_window_ms=50),
    )
    mapping.start()
    try:
        yield mapping
    finally:
        mapping.stop()
        mapping.join(10)


def committed(bootstrap: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"esm-{topic}"})
    try:
        return int(consumer.committed([TopicPartition(topic, 0)], timeout=10)[0].offset)
    finally:
        consumer.close()


def topic_id(bootstrap: str, topic: str) -> str:
    client = admin(bootstrap)  # the client must outlive its future
    return str(client.describe_topics(TopicCollection([topic]))[topic].result(30).topic_id)


def values(bootstrap: str, topic: str) -> list[bytes | None]:
    return [r.value for r in read_partition(bootstrap, topic, 0)]


def replicate_until(flow: dict[str, Any], topic: str, count: int) -> None:
    """Run the event source until the remote topic holds ``count`` records."""
    with event_source(flow["a"], topic) as mapping:
        try:
            wait_for(lambda: len(values(flow["b"], f"a.{topic}")) >= count, 60, message=f"{count} records replicated")
        except AssertionError as e:
            raise AssertionError(f"{e}; the event source: {mapping.stats}") from None


def purge(bootstrap: str, topic: str, before: int) -> None:
    client = admin(bootstrap)
    for future in client.delete_records([TopicPartition(topic, 0, before)]).values():
        future.result(30)


def purged_before_replication(flow: dict[str, Any], name: str) -> str:
    """The topic ``<prefix>.<name>``: its first 10 records replicated, then 20 more written while the mirror was
    stopped, and offsets 10..24 purged (DeleteRecords) before they were replicated."""
    a, topic = flow["a"], f"{flow['prefix']}.{name}"
    create_topic_with_records(a, topic, 1, 10)
    replicate_until(flow, topic, 10)
    produce(a, topic, numbered_records(20, 1, topic, start=10))
    purge(a, topic, 25)
    return topic


def translated(flow: dict[str, Any], topic: str, offset: int) -> tuple[int | None, str]:
    (t,) = translate_group(
        "g",
        {(topic, 0): (offset, "")},
        source="a",
        target="b",
        replicate=lambda _: True,
        policy=POLICY,
        state=CachedRuns(flow["state"]),
    )
    return t.downstream_offset, t.note


def test_records_purged_before_replication_are_counted_reported_and_never_translated_into(flow, caplog):
    # GIVEN a topic whose first 10 records were replicated, then 20 more written while the mirror was stopped, and
    # offsets 10..24 purged on the source (DeleteRecords) before they were replicated
    a, b, state = flow["a"], flow["b"], flow["state"]
    topic = purged_before_replication(flow, "orders")

    # WHEN the event source runs again (it silently resets to the log start, 25)
    with caplog.at_level(logging.ERROR), event_source(a, topic):
        wait_for(lambda: len(values(b, f"a.{topic}")) >= 15, 60, message="the records after the gap replicated")

    # THEN the records left are replicated (0..9 and 25..29, nothing else), the 15 lost offsets are recorded once,
    sent = [r.value for _, r in numbered_records(30, 1, topic)]
    assert values(b, f"a.{topic}") == sent[:10] + sent[25:]
    losses = state.losses("a", "b")
    assert [(r.topic, r.partition, r.start, r.end) for r in losses] == [(topic, 0, 10, 25)]
    # a log line names the topic-partition and the range,
    lines = [r.getMessage() for r in caplog.records if "data loss" in r.getMessage()]
    assert len(lines) == 1 and f"{topic}-0 offsets 10..24 (15 offsets)" in lines[0], lines
    # the status shows it,
    status = flow_status(App.current().config(), _NoProbe(), state, "a", "b")
    assert status.to_dict()["dataLoss"][0] | {"detected": None} == {
        "topic": topic,
        "partition": 0,
        "startOffset": 10,
        "endOffset": 25,
        "lostOffsets": 15,
        "detected": None,
    }
    # and offset translation maps nothing into the gap: a group inside it gets no checkpoint, around it exact ones
    assert state.runs("a", "b", topic, 0) == [Run(0, 0, 10), Run(25, 10, 5)]
    for inside in (10, 17, 24):
        downstream, note = translated(flow, topic, inside)
        assert downstream is None and "purged on the source" in note
    assert translated(flow, topic, 5) == (5, "")
    assert translated(flow, topic, 25) == (10, "")
    assert translated(flow, topic, 27) == (12, "")


def test_fail_on_data_loss_stops_the_partition_until_turned_off(flow):
    # GIVEN fail.on.data.loss = true, and records purged on the source before they were replicated
    a, b, state = flow["a"], flow["b"], flow["state"]
    flow["configure"](**{"fail.on.data.loss": "true"})
    topic = purged_before_replication(flow, "pay")

    # WHEN the event source runs
    with event_source(a, topic) as mapping:
        wait_for(lambda: mapping.stats.failures >= 2, 60, message="the batch failing and retried")
        # THEN the batch fails again and again, naming the loss; nothing after the gap is written, nothing committed
        assert "DataLossError" in (mapping.stats.last_error or "") and "10..24" in (mapping.stats.last_error or "")
        assert len(values(b, f"a.{topic}")) == 10
        assert committed(a, topic) == 10
    # AND the loss is recorded once, however often the batch was retried
    assert [(r.start, r.end) for r in state.losses("a", "b")] == [(10, 25)]

    # WHEN the option is turned off THEN the partition goes on after the gap
    flow["configure"](**{"fail.on.data.loss": "false"})
    replicate_until(flow, topic, 15)
    assert len(values(b, f"a.{topic}")) == 15
    assert [(r.start, r.end) for r in state.losses("a", "b")] == [(10, 25)]


def test_a_recreated_topic_starts_its_own_offset_runs(flow, caplog):
    # GIVEN 30 records replicated from a topic, which is then deleted and recreated with 10 new records
    a, b, state = flow["a"], flow["b"], flow["state"]
    topic = f"{flow['prefix']}.reset"
    create_topic_with_records(a, topic, 1, 30)
    replicate_until(flow, topic, 30)
    old_id = topic_id(a, topic)
    client = admin(a)  # the client must outlive its future
    client.delete_topics([topic])[topic].result(30)
    wait_for(lambda: topic not in admin(a).list_topics(timeout=10).topics, 30, message="topic deleted")
    create_topic(a, topic)
    new = numbered_records(10, 1, f"{topic}-new")
    produce(a, topic, new)
    # Apache Kafka drops a deleted topic's committed offsets with it: the new topic is read from its log start, as
    # Lambda's mapping starts it at TRIM_HORIZON, and its first batch starts below the 30 offsets replicated
    wait_for(lambda: committed(a, topic) < 0, 30, message="the event source's committed offset dropped")

    # WHEN the event source runs again
    with caplog.at_level(logging.ERROR):
        replicate_until(flow, topic, 40)

    # THEN the new records are replicated after the old ones, once
    assert values(b, f"a.{topic}")[30:] == [r.value for _, r in new]
    # AND the reset is told by the topic id that changed, recorded and logged, the old incarnation's runs archived,
    # the new one has its own
    (reset,) = state.resets("a", "b")
    assert (reset.topic, reset.partition, reset.replicated_end) == (topic, 0, 30)
    assert reset.reason == f"topic id {old_id} is now {topic_id(a, topic)}"
    assert any("topic reset" in r.getMessage() and f"{topic}-0" in r.getMessage() for r in caplog.records)
    assert state.runs("a", "b", topic, 0) == [Run(0, 30, 10)]
    origin = state.origin("a", "b", topic, 0)
    assert origin is not None and (origin.offset, origin.fresh) == (0, True)
    # AND groups on the new topic translate against the new runs only
    assert translated(flow, topic, 0) == (30, "")
    assert translated(flow, topic, 4) == (34, "")
    assert translated(flow, topic, 10) == (40, "")
    status = flow_status(App.current().config(), _NoProbe(), state, "a", "b").to_dict()
    assert [(r["topic"], r["replicatedEnd"]) for r in status["topicResets"]] == [(topic, 30)]


class _NoProbe:
    """The status's cluster probe, unused here beyond what the state answers (the tests look at the state's part)."""

    def topics(self, config, alias):
        return {}

    def lag(self, config, source, target, topics):
        return {}

    def oldest_unreplicated(self, config, source, target):
        return {}

    def last_heartbeat(self, config, source, target):
        return None

    def last_checkpoint(self, config, source, target):
        return None
