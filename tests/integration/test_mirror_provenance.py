"""srm.replication.mirror with name-preserving policies against a real target broker: the provenance header, skipped
records, heartbeat latency. The state table is moto's."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from confluent_kafka import Producer

from srm.config.settings import FlowSettings
from srm.core.events import EventBuilder, parse_event
from srm.core.offsets import Run
from srm.mm2.formats import Heartbeat
from srm.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy, ReplicationPolicy
from srm.replication.context import MirrorContext
from srm.replication.mirror import replicate_batch
from srm.state import StateStore
from tests.support.kafka import create_topic, read_partition, unique

pytestmark = pytest.mark.integration

Header = tuple[str, bytes | None]


def target(policy: ReplicationPolicy, state: StateStore, bootstrap: str, source: str = "a") -> MirrorContext:
    return MirrorContext(
        source=source,
        target="b",
        settings=FlowSettings.model_validate({"emit.offset-syncs.enabled": False}),
        policy=policy,
        producer=Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True}),
        state=state,
        ensure_remote_topic=lambda _source_topic, remote, partitions: create_topic(bootstrap, remote, partitions),
    )


def event(topic: str, records: list[tuple[int, bytes | None, bytes | None, list[Header]]]) -> dict[str, Any]:
    builder = EventBuilder("arn:aws:kafka:us-east-1:000000000000:cluster/a/x", "a:9092", 6 * 1024 * 1024)
    for offset, key, value, headers in records:
        estimate = EventBuilder.estimate(key, value, headers)
        builder.add(topic, 0, offset, 1_000 + offset, "CREATE_TIME", key, value, headers, estimate)
    return json.loads(builder.to_bytes())


def written(bootstrap: str, topic: str) -> list[tuple[bytes | None, list[Header]]]:
    return [(r.value, list(r.headers)) for r in read_partition(bootstrap, topic, 0)]


def test_default_policy_adds_no_header_records_stay_byte_identical(clusters, state: StateStore) -> None:
    b, topic = clusters["b"].bootstrap, unique("orders")
    replicate_batch(
        parse_event(event(topic, [(0, b"k", b"v", [("h", b"1")])]))[1], target(DefaultReplicationPolicy(), state, b)
    )
    assert written(b, f"a.{topic}") == [(b"v", [("h", b"1")])]


def test_identity_policy_stamps_source_and_skips_records_that_visited_target(clusters, state: StateStore) -> None:
    b, topic = clusters["b"].bootstrap, unique("orders")
    # GIVEN offsets 0..3 of a topic on a: a's own record, one that came from b, one that went c->a, one from b again
    records = [
        (0, b"k0", b"own", [("h", b"1")]),
        (1, b"k1", b"from-b", [("srm-provenance", b"b")]),
        (2, b"k2", b"from-c", [("x", None), ("srm-provenance", b"c")]),
        (3, b"k3", b"from-c-via-b", [("srm-provenance", b"c,b")]),
    ]
    # WHEN a->b replicates the batch with the identity policy
    result = replicate_batch(
        parse_event(event(topic, records))[1], target(IdentityReplicationPolicy(source_alias="a"), state, b)
    )
    # THEN records that visited b are skipped, the others carry their path plus a, other headers kept in order
    assert written(b, topic) == [
        (b"own", [("h", b"1"), ("srm-provenance", b"a")]),
        (b"from-c", [("x", None), ("srm-provenance", b"c,a")]),
    ]
    assert (result.records, result.skipped) == (2, 2)
    # AND the offset runs leave the skipped upstream offsets as gaps
    assert state.runs("a", "b", topic, 0) == [Run(0, 0, 1), Run(2, 1, 1)]


def test_identity_policy_batch_all_skipped_writes_nothing_and_succeeds(clusters, state: StateStore) -> None:
    b, topic = clusters["b"].bootstrap, unique("orders")
    batch = event(topic, [(5, None, b"x", [("srm-provenance", b"b")])])
    result = replicate_batch(parse_event(batch)[1], target(IdentityReplicationPolicy(source_alias="a"), state, b))
    assert (result.records, result.skipped) == (0, 1)
    assert written(b, topic) == []
    assert state.runs("a", "b", topic, 0) == []


def test_heartbeats_batch_records_latency_in_flow_status(clusters, state: StateStore) -> None:
    b, source = clusters["b"].bootstrap, unique("hb").replace("-", "")  # an alias of its own: its remote topic too
    # GIVEN heartbeats emitted on the source a second ago (and one emitted elsewhere, newer)
    now = int(time.time() * 1000)
    beats = [Heartbeat(source, "b", now - 1000), Heartbeat("z", "b", now)]
    batch = event("heartbeats", [(i, h.key(), h.value(), []) for i, h in enumerate(beats)])
    # WHEN the mirror replicates the heartbeats batch (to <source>.heartbeats: no provenance header there)
    result = replicate_batch(
        parse_event(batch)[1], target(IdentityReplicationPolicy(source_alias=source), state, b, source)
    )
    # THEN both are written without headers, and the newest heartbeat of the source is recorded with its latency
    assert written(b, f"{source}.heartbeats") == [(h.value(), []) for h in beats]
    status = state.flow_status(source, "b")
    assert status["heartbeat_ms"] == now - 1000
    assert 1000 <= int(status["heartbeat_latency_ms"]) < 60_000
    assert result.heartbeat_latency_ms == status["heartbeat_latency_ms"]
