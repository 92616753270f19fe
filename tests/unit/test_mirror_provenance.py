"""srm.mirror with name-preserving policies: the provenance header, skipped records, heartbeat latency.

The producer is a fake that acknowledges in order; the state table is moto's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from srm.config import FlowSettings
from srm.events import EventBuilder
from srm.formats import Heartbeat
from srm.mirror import MirrorTarget, replicate_batch
from srm.offsets import Run
from srm.policy import DefaultReplicationPolicy, IdentityReplicationPolicy, ReplicationPolicy
from srm.state import StateStore, create_state_table

Header = tuple[str, bytes | None]


class AckingProducer:
    """Acknowledges every record at the next offset of its partition, on flush."""

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []
        self._pending: list[tuple[Any, Any]] = []
        self._next: dict[tuple[str, int], int] = {}

    def produce(  # confluent_kafka.Producer.produce's signature: the mirror passes its arguments by position
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        on_delivery = callback or on_delivery
        offset = self._next.get((topic, partition), 0)
        self._next[(topic, partition)] = offset + 1
        record = {"topic": topic, "partition": partition, "key": key, "value": value}
        self.written.append({**record, "timestamp": timestamp, "headers": headers})
        msg = type("Msg", (), {"offset": lambda _self, o=offset: o})()
        self._pending.append((on_delivery, msg))

    def flush(self, timeout: float = 0) -> int:
        while self._pending:
            callback, msg = self._pending.pop(0)
            callback(None, msg)
        return 0

    poll = flush


@pytest.fixture
def state() -> Iterator[StateStore]:
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_state_table(db, "state")
        yield StateStore(db, "state")


def target(policy: ReplicationPolicy, state: StateStore, producer: AckingProducer) -> MirrorTarget:
    return MirrorTarget(
        source="a",
        target="b",
        settings=FlowSettings.model_validate({"topics": "orders", "emit.offset-syncs.enabled": False}),
        policy=policy,
        producer=producer,  # type: ignore[arg-type]
        state=state,
        ensure_remote_topic=lambda *_: None,
    )


def event(topic: str, records: list[tuple[int, bytes | None, bytes | None, list[Header]]]) -> dict[str, Any]:
    builder = EventBuilder("arn:aws:kafka:us-east-1:000000000000:cluster/a/x", "a:9092", 6 * 1024 * 1024)
    for offset, key, value, headers in records:
        estimate = EventBuilder.estimate(key, value, headers)
        builder.add(topic, 0, offset, 1_000 + offset, "CREATE_TIME", key, value, headers, estimate)
    return json.loads(builder.to_bytes())


def test_default_policy_adds_no_header_records_stay_byte_identical(state: StateStore) -> None:
    producer = AckingProducer()
    replicate_batch(
        event("orders", [(0, b"k", b"v", [("h", b"1")])]), target(DefaultReplicationPolicy(), state, producer)
    )
    assert [(w["topic"], w["headers"]) for w in producer.written] == [("a.orders", [("h", b"1")])]


def test_identity_policy_stamps_source_and_skips_records_that_visited_target(state: StateStore) -> None:
    # GIVEN offsets 0..3 of orders on a: a's own record, one that came from b, one that went c->a, one from b again
    records = [
        (0, b"k0", b"own", [("h", b"1")]),
        (1, b"k1", b"from-b", [("srm-provenance", b"b")]),
        (2, b"k2", b"from-c", [("x", None), ("srm-provenance", b"c")]),
        (3, b"k3", b"from-c-via-b", [("srm-provenance", b"c,b")]),
    ]
    producer = AckingProducer()
    # WHEN a->b replicates the batch with the identity policy
    result = replicate_batch(
        event("orders", records), target(IdentityReplicationPolicy(source_alias="a"), state, producer)
    )
    # THEN records that visited b are skipped, the others carry their path plus a, other headers kept in order
    assert [(w["topic"], w["value"], w["headers"]) for w in producer.written] == [
        ("orders", b"own", [("h", b"1"), ("srm-provenance", b"a")]),
        ("orders", b"from-c", [("x", None), ("srm-provenance", b"c,a")]),
    ]
    assert (result.records, result.skipped) == (2, 2)
    # AND the offset runs leave the skipped upstream offsets as gaps
    assert state.runs("a", "b", "orders", 0) == [Run(0, 0, 1), Run(2, 1, 1)]


def test_identity_policy_batch_all_skipped_writes_nothing_and_succeeds(state: StateStore) -> None:
    producer = AckingProducer()
    batch = event("orders", [(5, None, b"x", [("srm-provenance", b"b")])])
    result = replicate_batch(batch, target(IdentityReplicationPolicy(source_alias="a"), state, producer))
    assert (producer.written, result.records, result.skipped) == ([], 0, 1)
    assert state.runs("a", "b", "orders", 0) == []


def test_heartbeats_batch_records_latency_in_flow_status(state: StateStore) -> None:
    # GIVEN heartbeats emitted on a a second ago (and one emitted elsewhere, newer)
    now = int(time.time() * 1000)
    beats = [Heartbeat("a", "b", now - 1000), Heartbeat("z", "b", now)]
    batch = event("heartbeats", [(i, h.key(), h.value(), []) for i, h in enumerate(beats)])
    # WHEN the mirror replicates the heartbeats batch (to a.heartbeats: no provenance header there)
    producer = AckingProducer()
    result = replicate_batch(batch, target(IdentityReplicationPolicy(source_alias="a"), state, producer))
    # THEN the newest heartbeat of a is recorded with its latency
    assert {w["topic"] for w in producer.written} == {"a.heartbeats"}
    assert all(not w["headers"] for w in producer.written)
    status = state.flow_status("a", "b")
    assert status["heartbeat_ms"] == now - 1000
    assert 1000 <= int(status["heartbeat_latency_ms"]) < 60_000
    assert result.heartbeat_latency_ms == status["heartbeat_latency_ms"]
