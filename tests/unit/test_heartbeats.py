"""srm.replication.heartbeat: the emitted record is MM2's heartbeat byte for byte; the mirror finds the newest one."""

from __future__ import annotations

import struct
from typing import Any

import pytest

from srm.replication.heartbeat import HeartbeatContext, HeartbeatError, emit_heartbeat, latest_heartbeat

# Built by hand from MM2's Heartbeat schemas: key = sourceClusterAlias STRING, targetClusterAlias STRING;
# value = version INT16 (0), timestamp INT64; STRING = INT16 length + UTF-8; big-endian.
TS = 1_718_000_000_123
GOLDEN_KEY = b"\x00\x07us-west" + b"\x00\x07us-east"
GOLDEN_VALUE = b"\x00\x00" + struct.pack(">q", TS)


class RecordingProducer:
    def __init__(self, fail: str | None = None) -> None:
        self.produced: list[dict[str, Any]] = []
        self.fail = fail

    def produce(self, topic: str, value: bytes, key: bytes, **kwargs: Any) -> None:
        self.produced.append({"topic": topic, "value": value, "key": key, **kwargs})

    def flush(self, timeout: float) -> int:
        for record in self.produced:
            error = None if self.fail is None else type("Err", (), {"str": lambda _s: self.fail})()
            record["on_delivery"](error, None)
        return 0


def test_emit_heartbeat_writes_mm2_golden_bytes_to_partition_0_with_its_timestamp() -> None:
    producer = RecordingProducer()
    heartbeat = emit_heartbeat(HeartbeatContext("us-west", "us-east", "heartbeats", producer), now_ms=TS)
    (record,) = producer.produced
    assert (record["topic"], record["key"], record["value"]) == ("heartbeats", GOLDEN_KEY, GOLDEN_VALUE)
    assert (record["partition"], record["timestamp"], heartbeat.timestamp) == (0, TS, TS)


def test_emit_heartbeat_not_acknowledged_raises_naming_topic() -> None:
    with pytest.raises(HeartbeatError, match="heartbeats: broker down") as e:
        emit_heartbeat(HeartbeatContext("a", "b", "heartbeats", RecordingProducer(fail="broker down")), now_ms=1)
    assert e.value.topic == "heartbeats"


def test_latest_heartbeat_newest_of_this_source_ignoring_garbage_and_other_sources() -> None:
    from srm.mm2.formats import Heartbeat

    records = [Heartbeat("a", "b", 5), Heartbeat("a", "c", 9), Heartbeat("x", "b", 99), Heartbeat("a", "b", 7)]
    keys = [h.key() for h in records] + [b"garbage", None]
    values = [h.value() for h in records] + [b"\x00", None]
    assert latest_heartbeat(keys, values, "a") == Heartbeat("a", "c", 9)
    assert latest_heartbeat([b"junk"], [b"junk"], "a") is None
