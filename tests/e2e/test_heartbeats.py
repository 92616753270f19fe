"""Heartbeats through `srm run`: MM2's bytes on the source's `heartbeats`, replicated to `<source>.heartbeats` on
the target, with their replication latency recorded in the flow status."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from tests.support.kafka import read_partition, topic_partitions, unique, wait_for
from tests.support.runtime import SrmRun, write_config
from tests.support.state import state_store

pytestmark = [pytest.mark.e2e, pytest.mark.compat]  # also run on the compatibility tier's Kafka


def golden_key(source: str, target: str) -> bytes:
    """MM2's heartbeat key built by hand: sourceClusterAlias STRING, targetClusterAlias STRING (INT16 length)."""
    return struct.pack(">h", len(source)) + source.encode() + struct.pack(">h", len(target)) + target.encode()


def golden_value(timestamp: int) -> bytes:
    """MM2's heartbeat value: version INT16 = 0, timestamp INT64, big-endian."""
    return struct.pack(">hq", 0, timestamp)


def test_heartbeats_emitted_on_source_arrive_on_target_in_mm2_format_with_latency(clusters, tmp_path: Path):
    # GIVEN a flow a->b replicating no data topic, heartbeats every second
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    start = int(time.time() * 1000)
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": unique("none")}})

    def ours(bootstrap: str, topic: str) -> list:
        if not topic_partitions(bootstrap, topic):
            return []
        records = read_partition(bootstrap, topic, 0)
        return [r for r in records if r.key == golden_key("a", "b") and r.timestamp >= start]

    # WHEN srm run runs for a few heartbeats
    with SrmRun(config, tmp_path) as run:
        arrived = wait_for(lambda: ours(b, "a.heartbeats"), timeout=90, message="a heartbeat on b's a.heartbeats")
        state = state_store(tmp_path)
        status = wait_for(
            lambda: (s := state.flow_status("a", "b")).get("heartbeat_ms", 0) >= start and s,
            timeout=30,
            message="heartbeat latency in the flow status",
        )
        assert run.alive(), run.output()[-2000:]

    # THEN each heartbeat on the target is MM2's record, byte for byte, as emitted on the source
    emitted = {r.timestamp: r for r in ours(a, "heartbeats")}
    for record in arrived:
        assert record.value == golden_value(record.timestamp)
        assert (emitted[record.timestamp].key, emitted[record.timestamp].value) == (record.key, record.value)
    # AND the mirror recorded when the newest arrived and how long it took
    assert 0 <= int(status["heartbeat_latency_ms"]) < 60_000
    assert int(status["heartbeat_replicated_ms"]) >= int(status["heartbeat_ms"])
