"""Consumer group failover and failback through `srm run`: exact translation, checkpoints, group offset sync."""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition

from srm.mm2.formats import Checkpoint, OffsetSync
from tests.support.kafka import admin, create_topic, read_partition, unique, wait_for, wait_replicated
from tests.support.runtime import srm_run

pytestmark = pytest.mark.e2e

FAST = {
    "emit.checkpoints.interval.seconds": 1,
    "sync.group.offsets.interval.seconds": 1,
}
# The delivery guarantee of the flows: translation must be exact in both (exactly-once adds a commit marker on the
# target after every batch's records).
MODES = pytest.mark.parametrize(
    "mode", [{}, {"exactly.once.source.support": "enabled"}], ids=["at-least-once", "exactly-once"]
)


# -- helpers -----------------------------------------------------------------------------------------------------
def values_of(records) -> list[bytes]:
    return [r.value for r in records]


def produce_values(bootstrap: str, topic: str, partition: int, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for v in values:
        producer.produce(topic, v, partition=partition)
    assert producer.flush(30) == 0


def produce_transactions(bootstrap: str, topic: str, partition: int, batches: list[tuple[list[bytes], bool]]) -> None:
    """Each batch is one transaction, committed or aborted: markers (and aborted records) sit between records."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("txn")})
    producer.init_transactions(30)
    for values, commit in batches:
        producer.begin_transaction()
        for v in values:
            producer.produce(topic, v, partition=partition)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)


def plain_and_transactional(a: str, partitions: int, plain: int, transactions: list[bool]) -> tuple[str, str]:
    """A topic on a, kept forever (retention.ms=-1), whose partition 0 holds ``plain`` records and partition 1 a
    transaction of 10 records per entry of ``transactions``, committed where true; and a group of its own."""
    topic, group = unique("orders"), unique("app")
    create_topic(a, topic, partitions, {"retention.ms": "-1"})
    produce_values(a, topic, 0, [f"p0-{i}".encode() for i in range(plain)])
    produce_transactions(
        a, topic, 1, [([f"p1-{t}-{i}".encode() for i in range(10)], c) for t, c in enumerate(transactions)]
    )
    return topic, group


def group_consumer(bootstrap: str, group: str) -> Consumer:
    """A member of ``group`` reading committed records, from the log start where the group has no offset, committing
    only when told."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )


def consume_and_commit(
    bootstrap: str, group: str, topic: str, how_many: dict[int, int], resume: bool = False
) -> dict[int, list[bytes]]:
    """A consumer of ``group`` reads ``how_many[p]`` records of each partition — from the log start, or from the
    group's committed offsets when ``resume`` — commits its position, and leaves. Returns what it read."""
    consumer = group_consumer(bootstrap, group)
    read: dict[int, list[bytes]] = {p: [] for p in how_many}
    try:
        for p, n in how_many.items():
            if n == 0:
                continue
            start = consumer.committed([TopicPartition(topic, p)], timeout=10)[0].offset if resume else -2
            assert start != -1001, f"{group} has no committed offset on {topic}-{p} to resume from"
            consumer.assign([TopicPartition(topic, p, start)])  # -2: from the log start
            while len(read[p]) < n:
                for m in consumer.consume(1, timeout=1.0):
                    if m.error() is None:
                        read[p].append(m.value())
            # Commit the position, as a real consumer does: it may sit past trailing transaction markers.
            position = consumer.position([TopicPartition(topic, p)])[0]
            consumer.commit(offsets=[position], asynchronous=False)
    finally:
        consumer.close()
    return read


def consume_rest(bootstrap: str, group: str, topic: str, partitions: int, expected: dict[int, int]) -> dict[int, list]:
    """A consumer of ``group`` resumes from the group's committed offsets and reads to the end."""
    consumer = group_consumer(bootstrap, group)
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        assert all(tp.offset >= 0 for tp in committed), f"group {group} has no offsets on {topic}: {committed}"
        consumer.assign(committed)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(len(got[p]) < n for p, n in expected.items()):
            for m in consumer.consume(500, timeout=0.5):
                if m.error() is None:
                    got[m.partition()].append(m.value())
        time.sleep(1.0)  # anything beyond the expected count would be a duplicate: read it too
        for m in consumer.consume(500, timeout=1.0):
            if m.error() is None:
                got[m.partition()].append(m.value())
    finally:
        consumer.close()
    return got


def committed_on(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    result = admin(bootstrap).list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions if tp.topic == topic and tp.offset >= 0}


def wait_group_synced(bootstrap: str, group: str, topic: str, partitions: int, timeout: float = 60) -> dict[int, int]:
    return wait_for(
        lambda: (c := committed_on(bootstrap, group, topic, partitions)) and len(c) == partitions and c,
        timeout,
        message=f"{group} offsets on {topic}",
    )


def assert_exactly_the_rest(
    source_records: dict[int, list[bytes]],
    read_before: dict[int, list[bytes]],
    read_after: dict[int, list[bytes]],
    context: str = "",
) -> None:
    """What the group read after failing over is exactly what it had not read: 0 duplicates, 0 skipped, in order.
    A failure names the records (and ``context``, what the test saw on the way)."""
    for p, everything in source_records.items():
        before, after = read_before.get(p, []), read_after.get(p, [])
        twice = sorted(set(before) & set(after)) + [v for i, v in enumerate(after) if v in after[:i]]
        skipped = [v for v in everything if v not in set(before) | set(after)]
        assert not twice, f"partition {p}: {len(twice)} records read twice: {twice[:10]} {context}"
        assert not skipped, f"partition {p}: {len(skipped)} records never read: {skipped[:10]} {context}"
        assert before + after == everything, f"partition {p}: order differs {context}"


def sync_group_to_target(
    workdir: Path, a: str, b: str, topic: str, group: str, partitions: int, mode: dict[str, str], **settings: Any
) -> None:
    """srm run in ``mode`` replicates ``topic`` a->b and checkpoints ``group`` until b holds the group's offsets on
    every partition of the remote topic (the group may fail over), then stops."""
    flows = {"a->b": {"topics": topic, "groups": group, **mode}}
    with srm_run(workdir, {"a": a, "b": b}, flows, **FAST, **settings):
        wait_replicated(a, topic, b, f"a.{topic}")
        wait_group_synced(b, group, f"a.{topic}", partitions)


# -- tests -------------------------------------------------------------------------------------------------------
@MODES
@pytest.mark.compat  # also run on the compatibility tier's Kafka
def test_failover_group_resumes_on_target_exactly_across_truncation_transactions_and_plain(
    module_clusters, tmp_path: Path, mode: dict[str, str]
):
    # GIVEN three partitions: p0 truncated by DeleteRecords, p1 holding committed and aborted transactions, p2 plain
    a, b = module_clusters["a"].bootstrap, module_clusters["b"].bootstrap
    topic, group = plain_and_transactional(a, 3, plain=100, transactions=[t != 3 for t in range(8)])
    admin(a).delete_records([TopicPartition(topic, 0, 30)])[TopicPartition(topic, 0, 30)].result(30)
    produce_values(a, topic, 2, [f"p2-{i}".encode() for i in range(100)])
    source = {p: values_of(read_partition(a, topic, p)) for p in range(3)}
    assert len(source[0]) == 70 and len(source[1]) == 70 and len(source[2]) == 100
    # ... and a group that has consumed part of each (p1 stops at the end of a transaction, before its marker)
    read_before = consume_and_commit(a, group, topic, {0: 25, 1: 30, 2: 41})

    # WHEN the flow replicates and checkpoints, and the group then consumes on the target
    sync_group_to_target(tmp_path, a, b, topic, group, 3, mode)
    read_after = consume_rest(b, group, f"a.{topic}", 3, {p: len(source[p]) - len(read_before[p]) for p in range(3)})

    # THEN it reads exactly the records it had not read, on every partition
    assert_exactly_the_rest(source, read_before, read_after)


@MODES
def test_failover_lagging_group_near_the_start_translates_exactly(
    module_clusters, tmp_path: Path, mode: dict[str, str]
):
    # GIVEN a long partition and a group that has read only its first record
    a, b = module_clusters["a"].bootstrap, module_clusters["b"].bootstrap
    topic, group = unique("events"), unique("slow")
    create_topic(a, topic, 1, {"retention.ms": "-1"})
    produce_transactions(a, topic, 0, [([f"e-{t}-{i}".encode() for i in range(50)], True) for t in range(6)])
    source = {0: values_of(read_partition(a, topic, 0))}
    read_before = consume_and_commit(a, group, topic, {0: 1})

    # WHEN replicated with small batches (many runs, since markers break contiguity) and checkpointed
    sync_group_to_target(tmp_path, a, b, topic, group, 1, mode, **{"event.source.batch.size": 20})
    read_after = consume_rest(b, group, f"a.{topic}", 1, {0: len(source[0]) - 1})

    # THEN it resumes right after the one record it read
    assert_exactly_the_rest(source, read_before, read_after)


def test_group_sync_active_target_group_is_never_overwritten_and_ahead_group_not_moved_back(
    module_clusters, tmp_path: Path
):
    a, b = module_clusters["a"].bootstrap, module_clusters["b"].bootstrap
    topic = unique("orders")
    active, ahead, idle = unique("active"), unique("ahead"), unique("idle")
    create_topic(a, topic, 1)
    produce_values(a, topic, 0, [f"v{i}".encode() for i in range(100)])
    for group in (active, ahead, idle):
        consume_and_commit(a, group, topic, {0: 40})
    remote = f"a.{topic}"
    # GIVEN on the target: `active` has a live member before srm starts; `ahead` already committed further than
    # any translation will say (the remote topic exists up front so the member can join its group)
    create_topic(b, remote, 1)
    member = Consumer(
        {
            "bootstrap.servers": b,
            "group.id": active,
            "enable.auto.commit": False,
            "auto.offset.reset": "latest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    member.subscribe([remote])
    wait_for(
        lambda: member.poll(0.2) is None and admin(b).describe_consumer_groups([active])[active].result().members,
        30,
        message="active member joined",
    )
    holder = Consumer({"bootstrap.servers": b, "group.id": ahead, "enable.auto.commit": False})
    holder.commit(offsets=[TopicPartition(remote, 0, 90)], asynchronous=False)
    holder.close()
    flows = {"a->b": {"topics": topic, "groups": f"{active}|{ahead}|{idle}"}}
    try:
        with srm_run(tmp_path, {"a": a, "b": b}, flows, **FAST):
            # WHEN replication and several sync intervals pass (the idle group gets synced: proof the sync ran)
            wait_replicated(a, topic, b, remote)
            wait_group_synced(b, idle, remote, 1)
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                member.poll(0.2)
            # THEN the active group has nothing committed by srm, and the ahead group still sits at 90
            assert committed_on(b, active, remote, 1) == {}
    finally:
        member.close()
    assert committed_on(b, ahead, remote, 1) == {0: 90}
    assert committed_on(b, idle, remote, 1) == {0: 40}


@MODES
def test_failback_round_trip_with_bidirectional_flows_reads_every_record_once(
    module_clusters, tmp_path: Path, mode: dict[str, str]
):
    a, b = module_clusters["a"].bootstrap, module_clusters["b"].bootstrap
    topic, group = plain_and_transactional(a, 2, plain=60, transactions=[True] * 6)
    read_on_a = consume_and_commit(a, group, topic, {0: 20, 1: 15})
    both_ways = {"a->b": {"topics": ".*", "groups": group, **mode}, "b->a": {"topics": ".*", "groups": group, **mode}}
    with srm_run(tmp_path, {"a": a, "b": b}, both_ways, **FAST):
        wait_replicated(a, topic, b, f"a.{topic}")
        # failover: the group moves to b and consumes some more there
        synced = wait_group_synced(b, group, f"a.{topic}", 2)
        read_on_b = consume_and_commit(b, group, f"a.{topic}", {0: 30, 1: 30}, resume=True)
        on_b = committed_on(b, group, f"a.{topic}", 2)
        # failback: the checkpoint of flow b->a translates its progress on a.<topic> back to <topic> on a
        expected = {p: len(read_on_a[p]) + len(read_on_b[p]) for p in range(2)}
        wait_for(
            lambda: (
                committed_on(a, group, topic, 2)
                and all(committed_on(a, group, topic, 2).get(p, -1) >= 0 for p in range(2))
                and _positions_reached(a, group, topic, expected)
            ),
            60,
            message="failback offsets on a",
        )
    source = {p: values_of(read_partition(a, topic, p)) for p in range(2)}
    read_back_on_a = consume_rest(a, group, topic, 2, {p: len(source[p]) - expected[p] for p in range(2)})
    before = {p: read_on_a[p] + read_on_b[p] for p in range(2)}
    back_on_a = committed_on(a, group, topic, 2)
    copies = [(r.offset, r.value) for r in read_partition(b, f"a.{topic}", 1)]
    syncs = [(s.upstream_offset, s.downstream_offset) for s in offset_syncs(a, "mm2-offset-syncs.b.internal", topic, 1)]
    seen = (
        f"(offsets on b: synced {synced}, after reading there {on_b}; on a after failback {back_on_a}; "
        f"a.{topic}-1 on b: {copies}; its offset syncs: {syncs})"
    )
    assert_exactly_the_rest(source, before, read_back_on_a, seen)


def offset_syncs(bootstrap: str, syncs_topic: str, topic: str, partition: int) -> list[OffsetSync]:
    syncs = (OffsetSync.decode(r.key, r.value) for r in read_partition(bootstrap, syncs_topic, 0))
    return [s for s in syncs if (s.topic, s.partition) == (topic, partition)]


def _positions_reached(bootstrap: str, group: str, topic: str, records_read: dict[int, int]) -> bool:
    """The group's committed offsets on ``topic`` are past at least ``records_read`` records per partition."""
    committed = committed_on(bootstrap, group, topic, len(records_read))
    return all(
        p in committed and len([r for r in read_partition(bootstrap, topic, p) if r.offset < committed[p]]) >= n
        for p, n in records_read.items()
    )


def test_checkpoint_records_equal_golden_bytes_of_mm2_schema(module_clusters, tmp_path: Path):
    a, b = module_clusters["a"].bootstrap, module_clusters["b"].bootstrap
    topic, group = unique("orders"), unique("app")
    create_topic(a, topic, 1)
    produce_values(a, topic, 0, [f"v{i}".encode() for i in range(50)])
    consume_and_commit(a, group, topic, {0: 17})
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": {"topics": topic, "groups": group}}, **FAST):
        wait_replicated(a, topic, b, f"a.{topic}")
        records = wait_for(
            lambda: [
                r
                for r in read_partition(b, "a.checkpoints.internal", 0, isolation="read_uncommitted")
                if r.key is not None and r.key.startswith(struct.pack(">h", len(group)) + group.encode())
            ],
            60,
            message="a checkpoint record of the group",
        )

    def string(s: str) -> bytes:
        return struct.pack(">h", len(s.encode())) + s.encode()

    # MM2's Checkpoint: key = group STRING, topic STRING, partition INT32;
    # value = version INT16 (0), upstreamOffset INT64, offset INT64, metadata STRING
    golden_key = string(group) + string(f"a.{topic}") + struct.pack(">i", 0)
    golden_value = struct.pack(">h", 0) + struct.pack(">q", 17) + struct.pack(">q", 17) + string("")
    mine = [r for r in records if r.key == golden_key]
    assert mine, f"no checkpoint keyed {golden_key!r} among {[r.key for r in records]}"
    assert mine[-1].value == golden_value
    assert Checkpoint.decode(mine[-1].key, mine[-1].value) == Checkpoint(group, f"a.{topic}", 0, 17, 17, "")
