"""srm.replication.heartbeat against a real broker: the emitted record is MM2's heartbeat byte for byte, read back
from the topic; a heartbeat nobody acknowledges raises, naming the topic."""

from __future__ import annotations

import struct

import pytest
from confluent_kafka import Producer

from srm.replication.heartbeat import HeartbeatContext, HeartbeatError, emit_heartbeat
from tests.support.clusters import Cluster
from tests.support.kafka import create_topic, read_partition, unique

pytestmark = pytest.mark.integration

# Built by hand from MM2's Heartbeat schemas: key = sourceClusterAlias STRING, targetClusterAlias STRING;
# value = version INT16 (0), timestamp INT64; STRING = INT16 length + UTF-8; big-endian.
TS = 1_718_000_000_123
GOLDEN_KEY = b"\x00\x07us-west" + b"\x00\x07us-east"
GOLDEN_VALUE = b"\x00\x00" + struct.pack(">q", TS)


def test_emit_heartbeat_writes_mm2_golden_bytes_to_partition_0_with_its_timestamp(clusters: dict[str, Cluster]) -> None:
    # GIVEN a heartbeats topic with two partitions on a real broker
    bootstrap = clusters["a"].bootstrap
    topic = unique("heartbeats")
    create_topic(bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": bootstrap})
    # WHEN one heartbeat is emitted
    heartbeat = emit_heartbeat(HeartbeatContext("us-west", "us-east", topic, producer), now_ms=TS)
    # THEN partition 0 holds exactly MM2's bytes with the heartbeat's timestamp
    (record,) = read_partition(bootstrap, topic, 0)
    assert (record.key, record.value) == (GOLDEN_KEY, GOLDEN_VALUE)
    assert (record.timestamp, heartbeat.timestamp) == (TS, TS)
    assert read_partition(bootstrap, topic, 1) == []


def test_emit_heartbeat_not_acknowledged_raises_naming_topic() -> None:
    # GIVEN a producer to a port no broker listens on, which gives up on a record after a second
    producer = Producer({"bootstrap.servers": "127.0.0.1:1", "message.timeout.ms": 1000, "log_level": 0})
    # WHEN a heartbeat is emitted THEN it fails, naming the topic
    with pytest.raises(HeartbeatError, match="heartbeats: ") as e:
        emit_heartbeat(HeartbeatContext("a", "b", "heartbeats", producer, timeout_s=10), now_ms=1)
    assert e.value.topic == "heartbeats"
