"""``srm run --connectors DIR``: a flow defined by MirrorMaker 2 connector definitions as Kafka Connect-based
replication deploys them (KafkaConnector YAML, Connect REST JSON) replicates as a configuration file's would, its
source connector's Single Message Transforms applied, and ``srm-control --local`` reaches it with those
definitions."""

from __future__ import annotations

import gzip
import os
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions

from srm.mm2.formats import Heartbeat
from tests.support.kafka import (
    Rec,
    admin,
    assert_identical,
    create_topic,
    numbered_records,
    produce,
    read_partition,
    rewind,
    unique,
    wait_for,
    wait_replicated,
)
from tests.support.runtime import SrmRun, status_text
from tests.unit.test_connectors import kafka_connector, rest_body

CONNECT = "org.apache.kafka.connect.transforms."
# the source connector drops tombstones on their way, as Connect-based replication configures it
DROP_TOMBSTONES = {
    "transforms": "dropTombstones",
    "transforms.dropTombstones.type": CONNECT + "Filter",
    "transforms.dropTombstones.predicate": "isTombstone",
    "predicates": "isTombstone",
    "predicates.isTombstone.type": CONNECT + "predicates.RecordIsTombstone",
}


def target_group_offset(bootstrap: str, group: str, topic: str) -> int | None:
    request = ConsumerGroupTopicPartitions(group)
    found = admin(bootstrap).list_consumer_group_offsets([request])[group].result(30)
    offsets = [tp.offset for tp in found.topic_partitions if tp.topic == topic and tp.partition == 0]
    return offsets[0] if offsets and offsets[0] >= 0 else None


def test_a_flow_from_connector_definitions_replicates_identically(clusters, tmp_path: Path):
    # GIVEN a topic with records on a, and the source, checkpoint and heartbeat connectors of a->b in a folder
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("conn")
    topic = f"{prefix}.orders"
    create_topic(a, topic, 3)
    produce(a, topic, numbered_records(300, 3, topic))
    # … and a topic with tombstones (offsets 2 and 4), a group of a's committed at the first of them
    users, group = f"{prefix}.users", f"{prefix}.consumers"
    create_topic(a, users, 1)
    now = int(time.time() * 1000)
    produce(a, users, [(0, Rec(b"k%d" % i, None if i in (2, 4) else b"v%d" % i, (), now + i)) for i in range(5)])
    rewind(a, group, users, 1, 2)
    aliases = {"source.cluster.alias": "a", "target.cluster.alias": "b"}
    clusters_of = {**aliases, "source.cluster.bootstrap.servers": a, "target.cluster.bootstrap.servers": b}
    folder = tmp_path / "connectors"
    folder.mkdir()
    kafka_connector(
        folder / "source.yaml",
        "source",
        "MirrorSourceConnector",
        {**clusters_of, "topics": f"{prefix}.*", **DROP_TOMBSTONES},
    )
    rest_body(
        folder / "checkpoint.json",
        "checkpoint",
        "MirrorCheckpointConnector",
        {
            **clusters_of,
            "topics": f"{prefix}.*",
            "groups": f"{prefix}.*",
            "emit.checkpoints.interval.seconds": 5,
            "sync.group.offsets.interval.seconds": 5,
        },
    )
    kafka_connector(
        folder / "heartbeat.yaml",
        "heartbeat",
        "MirrorHeartbeatConnector",
        {**aliases, "target.cluster.bootstrap.servers": a, "producer.override.bootstrap.servers": a},
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    # WHEN srm run is given the folder
    with SrmRun(folder, run_dir) as run:
        # THEN the topic is replicated identically, with records written meanwhile
        wait_replicated(a, topic, b, f"a.{topic}", timeout=90)
        produce(a, topic, numbered_records(60, 3, topic, start=300))
        wait_replicated(a, topic, b, f"a.{topic}", timeout=60)
        assert assert_identical(a, topic, b, f"a.{topic}") == {0: 120, 1: 120, 2: 120}
        # … the tombstones are dropped, the other records identical and in order
        remote = f"a.{users}"
        wait_for(lambda: len(read_partition(b, remote, 0)) >= 3, 60, message="the users topic replicated")
        kept = [r for r in read_partition(a, users, 0) if r.value is not None]
        assert [r.content() for r in read_partition(b, remote, 0)] == [r.content() for r in kept]
        # … and the group whose next record was dropped resumes on b at the next replicated one (v3, offset 2 there)
        wait_for(lambda: target_group_offset(b, group, remote) is not None, 60, message="the group's offsets synced")
        assert target_group_offset(b, group, remote) == 2
        # … and srm-control --local in its directory reads the state with the definitions' settings
        assert "a->b" in status_text(run_dir), run.output()[-2000:]


def _batches(segment: Path) -> Iterator[tuple[int, bytes]]:
    """Each record batch of a log segment file: its compression codec (0 none, 1 gzip …) and its records, inflated.
    (Kafka's v2 batch layout: baseOffset 8, batchLength 4, then 9 bytes to attributes, 61 bytes of header.)"""
    data = segment.read_bytes()
    pos = 0
    while pos + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + 12 + length
        if length <= 0 or end > len(data):
            return  # the active segment's preallocated or half-written tail
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        codec = attributes & 0x7
        records = data[pos + 61 : end]
        yield codec, gzip.decompress(records) if codec == 1 else records
        pos = end


@pytest.mark.skipif(bool(os.environ.get("SRM_TEST_BOOTSTRAP_A")), reason="reads the source broker's log files")
def test_the_heartbeat_connectors_overrides_apply_to_the_heartbeats_srm_writes_to_the_source(clusters, tmp_path):
    # GIVEN the seed's three connectors: source, checkpoint, and heartbeat writing to the source cluster, whose
    # producer override compresses (srm's producers do not by default: the override shows in the source's log)
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("hbo")
    # aliases of this test's own, to tell its heartbeats apart, and long: librdkafka sends a batch uncompressed when
    # compressing does not make it smaller, as with a heartbeat of short aliases
    west, east = f"w{prefix[-8:]}-{'x' * 80}", f"e{prefix[-8:]}-{'x' * 80}"
    aliases = {"source.cluster.alias": west, "target.cluster.alias": east}
    clusters_of = {**aliases, "source.cluster.bootstrap.servers": a, "target.cluster.bootstrap.servers": b}
    folder = tmp_path / "connectors"
    folder.mkdir()
    # (topic sync looks again soon: the heartbeats topic may be created after its first look)
    source = {**clusters_of, "topics": f"{prefix}.*", "refresh.topics.interval.seconds": 2}
    kafka_connector(folder / "source.yaml", "src", "MirrorSourceConnector", source)
    rest_body(folder / "checkpoint.json", "cp", "MirrorCheckpointConnector", {**clusters_of, "groups": f"{prefix}.*"})
    kafka_connector(
        folder / "heartbeat.yaml",
        "hb",
        "MirrorHeartbeatConnector",
        {
            **aliases,
            "target.cluster.bootstrap.servers": a,
            "producer.override.bootstrap.servers": a,
            "producer.override.compression.type": "gzip",
            "emit.heartbeats.interval.seconds": 1,
        },
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()

    def mine(bootstrap: str, topic: str) -> list[Heartbeat]:
        found = [Heartbeat.decode(r.key, r.value) for r in read_partition(bootstrap, topic, 0)]
        return [h for h in found if h.source_alias == west]

    # WHEN srm run is given the folder
    with SrmRun(folder, run_dir) as run:
        # THEN the flow's heartbeats are written to the source's heartbeats topic, recent, from west to east …
        beats = wait_for(lambda: len(mine(a, "heartbeats")) >= 3 and mine(a, "heartbeats"), 90, message="heartbeats")
        assert {(h.source_alias, h.target_alias) for h in beats} == {(west, east)}
        assert all(abs(h.timestamp - time.time() * 1000) < 120_000 for h in beats)
        # … replicated to the target as <source>.heartbeats, each one as written
        remote = f"{west}.heartbeats"
        wait_for(lambda: len(mine(b, remote)) >= 3, 90, message=f"{remote} on b")
        assert mine(b, remote)[:3] == beats[:3]
        assert run.alive(), run.output()[-3000:]
    # … and every batch holding them was compressed by the heartbeat connector's producer override
    assert clusters["a"].local is not None
    segments = sorted(clusters["a"].local.data_dir.glob("**/heartbeats-0/*.log"))
    codecs = {codec for s in segments for codec, records in _batches(s) if west.encode() in records}
    assert codecs == {1}, codecs
