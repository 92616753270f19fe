"""The state port's contract, held by both adapters: DynamoDB (moto) and the Kafka log (a real cluster). Every
operation, its conditions, and what survives a restart (a new adapter over the same table or topic)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from confluent_kafka import Producer

from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.aws.state import DynamoDBState, create_state_table
from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.core.offsets import Origin, Run
from srm.kafka.metrics_store import KafkaMetrics
from srm.kafka.state import KafkaState
from srm.local.state_upgrade import UpgradeError, read_legacy_store, state_items_records, upgrade_store
from srm.metrics.model.series import MetricPoint, Series
from srm.state import (
    EventSourceMappingRecord,
    LossRecord,
    ResetRecord,
    StateError,
    StateFencedError,
    StateStore,
    TopicMappingRecord,
)
from tests.support.aws import aws
from tests.support.clusters import Cluster
from tests.support.kafka import create_topic, unique

Opener = Callable[[], StateStore]


def state_topic_on(clusters: dict[str, Cluster]) -> tuple[str, str]:
    """A new compacted state topic on cluster a: its bootstrap and name."""
    bootstrap, topic = clusters["a"].bootstrap, unique("srm-state")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    return bootstrap, topic


def kafka_state(bootstrap: str, topic: str) -> KafkaState:
    conf = {"bootstrap.servers": bootstrap}
    return KafkaState(topic, conf, dict(conf), timeout_s=10.0).start()


@pytest.fixture(params=["dynamodb", "kafka"])
def opener(request: pytest.FixtureRequest, clusters: dict[str, Cluster]) -> Iterator[Opener]:
    """Opens the same state again each time it is called (a restart in between)."""
    if request.param == "dynamodb":
        with aws():
            db = boto3.client("dynamodb", region_name="us-east-1")
            create_state_table(db, "state")
            yield lambda: DynamoDBState(db, "state")
        return
    bootstrap = clusters["a"].bootstrap
    topic = unique("srm-state")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    opened: list[KafkaState] = []

    def open_() -> StateStore:
        opened.append(kafka_state(bootstrap, topic))
        return opened[-1]

    yield open_
    for state in opened:
        state.stop()


def test_offset_runs_merge_and_survive_a_restart(opener: Opener) -> None:
    state = opener()
    state.claim_partitions("a", "b", "t", [0])
    asked: list[int] = []

    def origin() -> Origin:
        asked.append(1)
        return Origin(10, True, "id-1")

    assert state.replicated_end("a", "b", "t", 0, 10) is None
    state.record_runs("a", "b", "t", 0, [Run(10, 0, 5)], origin=origin)
    state.record_runs("a", "b", "t", 0, [Run(15, 5, 5)], origin=origin)  # continues: one run
    state.record_runs("a", "b", "t", 0, [Run(22, 10, 3)], origin=origin)  # a gap: a new run
    assert asked == [1]  # the origin is looked up once, with the first run
    assert state.runs("a", "b", "t", 0) == [Run(10, 0, 10), Run(22, 10, 3)]
    assert state.replicated_end("a", "b", "t", 0, 25) == 25
    # a re-delivered batch replaces what it overlaps (at-least-once retries)
    state.record_runs("a", "b", "t", 0, [Run(22, 13, 2)])
    assert state.runs("a", "b", "t", 0) == [Run(10, 0, 10), Run(22, 13, 2)]

    again = opener()
    assert again.runs("a", "b", "t", 0) == [Run(10, 0, 10), Run(22, 13, 2)]
    assert again.origin("a", "b", "t", 0) == Origin(10, True, "id-1")
    assert again.runs_around("a", "b", "t", 0, 15) == [Run(10, 0, 10), Run(22, 13, 2)]
    assert again.runs_around("a", "b", "t", 0, 5) == [Run(10, 0, 10)]
    assert again.runs_around("a", "b", "t", 0, 30) == [Run(22, 13, 2)]
    assert again.runs("a", "b", "t", 1) == []
    assert again.replicated_end("a", "b", "t", 0, 24) == 24


def test_origin_failure_fails_the_write(opener: Opener) -> None:
    state = opener()

    def broken() -> Origin:
        raise RuntimeError("no broker")

    with pytest.raises(StateError, match="where the offset runs of t-3 begin"):
        state.record_runs("a", "b", "t", 3, [Run(0, 0, 1)], origin=broken)
    assert state.runs("a", "b", "t", 3) == []


def test_losses_processed_and_resets(opener: Opener) -> None:
    state = opener()
    assert state.record_loss("a", "b", "t", 0, 100, 150) == 50
    assert state.record_loss("a", "b", "t", 0, 100, 150) == 0  # a retried batch reports it again
    assert state.record_loss("a", "b", "t", 0, 100, 170) == 20  # it grew
    assert state.record_loss("a", "b", "t", 1, 5, 6) == 1
    state.mark_processed("a", "b", "t", 0, 40)
    state.mark_processed("a", "b", "t", 0, 30)  # never moves back
    state.record_runs("a", "b", "t", 0, [Run(170, 0, 10)], origin=lambda: Origin(170, False))

    again = opener()
    assert again.processed("a", "b", "t", 0) == 40
    assert again.lost_ranges("a", "b", "t", 0) == [(100, 170)]
    assert again.flow_lost_ranges("a", "b") == {("t", 0): [(100, 170)], ("t", 1): [(5, 6)]}
    assert [(r.topic, r.partition, r.start, r.end) for r in again.losses("a", "b")] == [
        ("t", 0, 100, 170),
        ("t", 1, 5, 6),
    ]
    assert all(isinstance(r, LossRecord) and r.at_ms > 0 for r in again.losses("a", "b"))

    # a topic reset sets the partition's state aside: runs, origin, lost ranges, what was skipped
    again.claim_partitions("a", "b", "t", [0])
    again.archive_partition("a", "b", "t", 0, "1700000000000")
    again.record_reset("a", "b", ResetRecord("t", 0, 1700000000000, 180, "topic recreated", "1700000000000"))
    for view in (again, opener()):
        assert view.runs("a", "b", "t", 0) == []
        assert view.origin("a", "b", "t", 0) is None
        assert view.processed("a", "b", "t", 0) is None
        assert view.lost_ranges("a", "b", "t", 0) == []
        assert view.lost_ranges("a", "b", "t", 1) == [(5, 6)]  # another partition's are kept
        assert view.replicated_end("a", "b", "t", 0, 0) is None
        assert view.resets("a", "b") == [ResetRecord("t", 0, 1700000000000, 180, "topic recreated", "1700000000000")]


def test_checkpoints_and_untranslated(opener: Opener) -> None:
    state = opener()
    state.claim_leadership("a", "b")
    checkpoint = StoredCheckpoint(upstream_offset=50, downstream_offset=40, remote_topic="a.t", metadata="m", at_ms=7)
    state.put_checkpoints("a", "b", "g", {("t", 0): checkpoint, ("t", 1): checkpoint})
    state.set_untranslated("a", "b", "g", {("t", 1): Untranslated(60, "beyond the runs", 8), ("t", 2): None})
    again = opener()
    found = again.checkpoints("a", "b", "g")
    assert found.emitted == {("t", 0): checkpoint, ("t", 1): checkpoint}
    assert found.untranslated == {("t", 1): Untranslated(60, "beyond the runs", 8)}
    again.set_untranslated("a", "b", "g", {("t", 1): None})  # cleared: the checkpoint stays
    assert opener().checkpoints("a", "b", "g").untranslated == {}
    assert opener().checkpoints("a", "b", "g").emitted[("t", 1)] == checkpoint
    assert opener().checkpoints("a", "b", "other").emitted == {}


def test_flow_status_topic_and_event_source_mappings(opener: Opener) -> None:
    state = opener()
    state.update_flow_status("a", "b", heartbeat_ms=5, stalled="{}")
    state.update_flow_status("a", "b", heartbeat_ms=9, topic_acls_synced_ms=3)
    mapping = TopicMappingRecord("t", "a.t", 6, True, 11, {"retention.ms": "1000"}, ("acl-1",))
    state.put_topic_mapping("a", "b", mapping)
    state.put_topic_mapping("a", "b", TopicMappingRecord("u", "a.u", 1))
    esm = EventSourceMappingRecord("t", "uuid-1", True, 10_000, 0, 12, "", 1024)
    state.put_event_source_mapping("a", "b", esm)
    state.put_event_source_mapping("a", "b", EventSourceMappingRecord("u", "uuid-2", False, 100, 500, 1, "denied"))
    again = opener()
    assert again.flow_status("a", "b") == {"heartbeat_ms": 9, "stalled": "{}", "topic_acls_synced_ms": 3}
    assert again.flow_status("b", "a") == {}
    assert again.topic_mappings("a", "b") == {"t": mapping, "u": TopicMappingRecord("u", "a.u", 1)}
    assert again.event_source_mappings("a", "b")["t"] == esm
    assert again.event_source_mappings("a", "b")["u"].problem == "denied"
    again.delete_topic_mapping("a", "b", "u")
    again.delete_event_source_mapping("a", "b", "u")
    assert set(opener().topic_mappings("a", "b")) == {"t"}
    assert set(opener().event_source_mappings("a", "b")) == {"t"}


def test_kafka_a_stale_partition_owner_is_fenced_by_the_broker(clusters: dict[str, Cluster]) -> None:
    """Two processes' views of one state: the partition moves from the first to the second without the first
    knowing. The first's write fails at the broker, whatever its own view says, and lands nowhere."""
    bootstrap, topic = state_topic_on(clusters)
    with contextlib.ExitStack() as stack:
        zombie = kafka_state(bootstrap, topic)
        stack.callback(zombie.stop)
        zombie.claim_partitions("a", "b", "t", [0])
        zombie.record_runs("a", "b", "t", 0, [Run(0, 0, 10)], origin=lambda: Origin(0, True))
        owner = kafka_state(bootstrap, topic)
        stack.callback(owner.stop)
        owner.claim_partitions("a", "b", "t", [0])  # the partition moved: its earlier holder is fenced
        assert owner.runs("a", "b", "t", 0) == [Run(0, 0, 10)]
        owner.record_runs("a", "b", "t", 0, [Run(10, 10, 5)])
        with pytest.raises(StateFencedError):
            zombie.record_runs("a", "b", "t", 0, [Run(10, 99, 20)])
        with pytest.raises(StateFencedError):  # and stays fenced until it is given the partition again
            zombie.mark_processed("a", "b", "t", 0, 500)
        reader = kafka_state(bootstrap, topic)
        stack.callback(reader.stop)
        assert reader.runs("a", "b", "t", 0) == [Run(0, 0, 15)]
        assert reader.processed("a", "b", "t", 0) is None
        assert zombie.runs("a", "b", "t", 0) == [Run(0, 0, 15)]  # its view caught up with the log


def test_kafka_a_stale_leader_is_fenced_by_the_broker(clusters: dict[str, Cluster]) -> None:
    bootstrap, topic = state_topic_on(clusters)
    with contextlib.ExitStack() as stack:
        old = kafka_state(bootstrap, topic)
        stack.callback(old.stop)
        old.claim_leadership("a", "b")
        old.put_topic_mapping("a", "b", TopicMappingRecord("t", "a.t", 1))
        new = kafka_state(bootstrap, topic)
        stack.callback(new.stop)
        new.claim_leadership("a", "b")
        with pytest.raises(StateFencedError):
            old.delete_topic_mapping("a", "b", "t")
        assert set(new.topic_mappings("a", "b")) == {"t"}


def legacy_store_topic(bootstrap: str, db: Any, tables: list[str], *, transaction_at_end: bool = True) -> str:
    """The store topic of the layout before the state topic, as its DynamoDB emulation wrote it: every item of these
    tables under ``i`` + ``[table, key]`` (DynamoDB JSON), with a superseded value and a deleted item before them, and
    a transaction's marker at the log's end (its config writes were transactions)."""
    topic = unique("srm-store")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("legacy")})
    producer.init_transactions(10)

    def key(table: str, item: dict[str, Any]) -> bytes:
        item_key = {k: item[k] for k in ("pk", "sk") if k in item}
        return b"i" + json.dumps([table, item_key], sort_keys=True, separators=(",", ":")).encode()

    producer.begin_transaction()
    producer.produce(topic, b'{"TableName": "srm-state"}', b"tsrm-state")  # a table's definition: not an item
    gone = {"pk": {"S": "runs#a#b#gone#0"}, "sk": {"S": "0"}, "d": {"N": "0"}, "n": {"N": "1"}}
    producer.produce(topic, json.dumps(gone).encode(), key("state", gone))
    producer.produce(topic, None, key("state", gone))  # deleted since
    for table in tables:
        for page in db.get_paginator("scan").paginate(TableName=table):
            for item in page["Items"]:
                stale = {**item, "stale": {"S": "an older value of the same key"}}
                producer.produce(topic, json.dumps(stale).encode(), key(table, item))
                producer.produce(topic, json.dumps(item).encode(), key(table, item))
    producer.commit_transaction(10)
    return topic


def test_a_store_topic_of_the_old_layout_is_carried_over_whole(clusters: dict[str, Cluster]) -> None:
    """An srm run cluster from before the state topic: every item of the state table its store topic holds reads the
    same through the Kafka adapter afterwards, the metrics table's points too; once, and the nodes' own items stay
    behind."""
    bootstrap = clusters["a"].bootstrap
    topic = unique("srm-state")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    points_topic = unique("srm-metrics-points")
    create_topic(bootstrap, points_topic, 1, {"cleanup.policy": "compact"})
    conf = {"bootstrap.servers": bootstrap}
    with aws(), contextlib.ExitStack() as stack:
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_state_table(db, "state")
        create_metrics_table(db, "metrics")
        old = DynamoDBState(db, "state")
        old.record_runs("a", "b", "t.x", 0, [Run(0, 0, 10)], origin=lambda: Origin(0, True, "tid"))
        old.record_runs("a", "b", "t.x", 0, [Run(12, 10, 3)])
        old.record_runs("a", "b", "t.x", 1, [Run(5, 0, 1)], origin=lambda: Origin(5, False))
        old.mark_processed("a", "b", "t.x", 0, 20)
        old.record_loss("a", "b", "t.x", 1, 0, 5)
        old.record_runs("a", "b", "u", 0, [Run(0, 0, 4)], origin=lambda: Origin(0, True))
        old.archive_partition("a", "b", "u", 0, "17")
        old.record_reset("a", "b", ResetRecord("u", 0, 17, 4, "recreated", "17"))
        checkpoint = StoredCheckpoint(
            upstream_offset=9, downstream_offset=9, remote_topic="a.t.x", metadata="", at_ms=1
        )
        old.put_checkpoints("a", "b", "g#1", {("t.x", 0): checkpoint})
        old.set_untranslated("a", "b", "g#1", {("t.x", 1): Untranslated(5, "why", 2)})
        old.update_flow_status("a", "b", heartbeat_ms=4, stalled="{}")
        old.put_topic_mapping("a", "b", TopicMappingRecord("t.x", "a.t.x", 2, True, 3, {"k": "v"}, ("acl",)))
        old.put_event_source_mapping("a", "b", EventSourceMappingRecord("t.x", "id", True, 100, 500, 3, "p", 99))
        db.put_item(TableName="state", Item={"pk": {"S": "nodes#g"}, "sk": {"S": "n1"}, "h": {"S": "host"}})
        now = int(time.time() * 1000) // 60_000 * 60_000
        minute = MetricPoint(Series("1m", "topic", "a", "b", "t.x"), now, {"record-count": 7, "latency": {"p50": 1.5}})
        hour = MetricPoint(Series("1h", "flow", "a", "b"), now // 3_600_000 * 3_600_000, {"record-rate": 0.25})
        MetricsTable(db, "metrics").write([minute, hour])
        legacy = legacy_store_topic(bootstrap, db, ["state", "metrics"])

        def upgrade() -> tuple[int, int]:
            state = kafka_state(bootstrap, topic)
            try:
                return upgrade_store(
                    state,
                    legacy,
                    lambda: read_legacy_store(conf, legacy),
                    lambda: KafkaMetrics(points_topic, conf, dict(conf)).start(),
                    state_table="state",
                    metrics_table="metrics",
                )
            finally:
                state.stop()

        records, points = upgrade()
        assert records > 0 and points == 2
        assert upgrade() == (0, 0)  # once
        new = kafka_state(bootstrap, topic)
        stack.callback(new.stop)
        for state in (old, new):
            assert state.runs("a", "b", "t.x", 0) == [Run(0, 0, 10), Run(12, 10, 3)]
            assert state.runs("a", "b", "gone", 0) == []
            assert state.origin("a", "b", "t.x", 0) == Origin(0, True, "tid")
            assert state.origin("a", "b", "t.x", 1) == Origin(5, False)
            assert state.processed("a", "b", "t.x", 0) == 20
            assert state.flow_lost_ranges("a", "b") == {("t.x", 1): [(0, 5)]}
            assert state.runs("a", "b", "u", 0) == []
            assert state.resets("a", "b") == [ResetRecord("u", 0, 17, 4, "recreated", "17")]
            assert state.checkpoints("a", "b", "g#1").emitted == {("t.x", 0): checkpoint}
            assert state.checkpoints("a", "b", "g#1").untranslated == {("t.x", 1): Untranslated(5, "why", 2)}
            assert state.flow_status("a", "b") == {"heartbeat_ms": 4, "stalled": "{}"}
            assert state.topic_mappings("a", "b") == old.topic_mappings("a", "b")
            assert state.event_source_mappings("a", "b") == old.event_source_mappings("a", "b")
        assert new.items("node") == []  # the nodes note themselves again
        metrics = KafkaMetrics(points_topic, conf, dict(conf)).start()
        stack.callback(metrics.stop)
        assert metrics.query(minute.series, now, now) == [minute]
        assert metrics.query(hour.series, 0, now) == [hour]
        archived = {k for k, _ in state_items_records(read_legacy_store(conf, legacy)["state"])}
        assert ("old", "17", "runs", "a", "b", "u", 0, 0) in archived


def test_a_store_topic_whose_state_an_earlier_version_carried_over_brings_only_its_metrics(
    clusters: dict[str, Cluster],
) -> None:
    """The layout in between: the state was moved to the state topic (marked so in the state table), the metrics
    stayed in the store topic. The state topic is not written over."""
    bootstrap = clusters["a"].bootstrap
    topic = unique("srm-state")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    points_topic = unique("srm-metrics-points")
    create_topic(bootstrap, points_topic, 1, {"cleanup.policy": "compact"})
    conf = {"bootstrap.servers": bootstrap}
    with aws(), contextlib.ExitStack() as stack:
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_state_table(db, "state")
        create_metrics_table(db, "metrics")
        DynamoDBState(db, "state").record_runs("a", "b", "stale", 0, [Run(0, 0, 3)])
        db.put_item(TableName="state", Item={"pk": {"S": "upgraded#state"}, "sk": {"S": "topic"}, "n": {"N": "1"}})
        point = MetricPoint(Series("1h", "flow", "a", "b"), 3_600_000, {"record-count": 3})
        MetricsTable(db, "metrics").write([point])
        legacy = legacy_store_topic(bootstrap, db, ["state", "metrics"])
        state = kafka_state(bootstrap, topic)
        stack.callback(state.stop)
        state.claim_partitions("a", "b", "t", [0])
        state.record_runs("a", "b", "t", 0, [Run(0, 0, 5)])
        written = upgrade_store(
            state,
            legacy,
            lambda: read_legacy_store(conf, legacy),
            lambda: KafkaMetrics(points_topic, conf, dict(conf)).start(),
            state_table="state",
            metrics_table="metrics",
        )
        assert written == (0, 1)
        assert state.runs("a", "b", "stale", 0) == [] and state.runs("a", "b", "t", 0) == [Run(0, 0, 5)]


def test_an_item_the_upgrade_cannot_read_stops_it_and_nothing_is_written(clusters: dict[str, Cluster]) -> None:
    bootstrap = clusters["a"].bootstrap
    topic = unique("srm-state")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    conf = {"bootstrap.servers": bootstrap}
    with aws(), contextlib.ExitStack() as stack:
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_state_table(db, "state")
        db.put_item(TableName="state", Item={"pk": {"S": "future#x"}, "sk": {"S": "1"}})
        legacy = legacy_store_topic(bootstrap, db, ["state"])
        state = kafka_state(bootstrap, topic)
        stack.callback(state.stop)
        with pytest.raises(UpgradeError, match=r"cannot carry over.*future#x"):
            upgrade_store(
                state,
                legacy,
                lambda: read_legacy_store(conf, legacy),
                lambda: pytest.fail("nothing is written"),
                state_table="state",
            )
        assert state.get("upgrade", "store") is None and state.is_empty()


def test_kafka_a_released_partition_is_taken_over_without_fencing_its_holder(clusters: dict[str, Cluster]) -> None:
    """A clean hand-over (the group revoked the partition first): the process that gave one partition up keeps
    writing the others it holds."""
    bootstrap, topic = state_topic_on(clusters)
    with contextlib.ExitStack() as stack:
        first = kafka_state(bootstrap, topic)
        stack.callback(first.stop)
        first.claim_partitions("a", "b", "t", [0, 1])
        first.record_runs("a", "b", "t", 0, [Run(0, 0, 5)])
        first.release_partitions("a", "b", "t", [0])
        second = kafka_state(bootstrap, topic)
        stack.callback(second.stop)
        second.claim_partitions("a", "b", "t", [0])
        second.record_runs("a", "b", "t", 0, [Run(5, 5, 5)])
        first.record_runs("a", "b", "t", 1, [Run(0, 0, 3)])  # not fenced
        with pytest.raises(StateFencedError):  # but what it released is no longer its own
            first.record_runs("a", "b", "t", 0, [Run(5, 50, 5)])
        reader = kafka_state(bootstrap, topic)
        stack.callback(reader.stop)
        assert reader.runs("a", "b", "t", 0) == [Run(0, 0, 10)]
