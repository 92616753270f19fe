"""srm.aws.state: topic mapping and event source mapping items (the topic control plane's records), on DynamoDB
(moto or LocalStack)."""

from __future__ import annotations

import pytest

from srm.state import EventSourceMappingRecord, StateStore, TopicMappingRecord

pytestmark = pytest.mark.aws_adapter


def test_topic_mapping_round_trips_per_flow_and_deletes(state: StateStore) -> None:
    record = TopicMappingRecord(
        "orders",
        "a.orders",
        3,
        created=True,
        synced_at_ms=42,
        configs={"retention.ms": "1"},
        acls=("x|y|*|READ|ALLOW",),
    )
    state.put_topic_mapping("a", "b", record)
    state.put_topic_mapping("a", "c", TopicMappingRecord("orders", "a.orders", 1))
    assert state.topic_mappings("a", "b") == {"orders": record}
    state.delete_topic_mapping("a", "b", "orders")
    assert state.topic_mappings("a", "b") == {}
    assert set(state.topic_mappings("a", "c")) == {"orders"}


def test_topic_mapping_empty_configs_and_acls_round_trip(state: StateStore) -> None:
    record = TopicMappingRecord("t", "t", 1)
    state.put_topic_mapping("a", "b", record)
    assert state.topic_mappings("a", "b")["t"] == record


def test_event_source_mapping_records_round_trip(state: StateStore) -> None:
    record = EventSourceMappingRecord(
        "orders", "uuid-1", enabled=False, batch_size=100, batching_window_ms=0, updated_at_ms=7
    )
    state.put_event_source_mapping("a", "b", record)
    assert state.event_source_mappings("a", "b") == {"orders": record}
    state.delete_event_source_mapping("a", "b", "orders")
    assert state.event_source_mappings("a", "b") == {}
