"""The metrics table on DynamoDB (moto or LocalStack): series × time range queries, idempotent overwrites, TTL on
1-minute items only."""

from __future__ import annotations

from collections.abc import Iterator

import boto3
import pytest

from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.metrics.model.series import MetricPoint, Series
from tests.support.aws import aws

pytestmark = pytest.mark.aws_adapter


@pytest.fixture
def table() -> Iterator[MetricsTable]:
    with aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_metrics_table(db, "metrics")
        create_metrics_table(db, "metrics")  # a second create is a no-op
        yield MetricsTable(db, "metrics", minute_retention_s=100)


def test_series_key_names_resolution_level_flow_topic_and_partition() -> None:
    series = Series("1m", "partition", "a", "b", "orders", 3)
    assert series.key == "1m#partition#a#b#orders#3"
    assert Series.parse(series.key) == series
    assert Series("1h", "flow", "a", "b").key == "1h#flow#a#b"
    with pytest.raises(ValueError, match="needs exactly the fields of its level"):
        Series("1m", "topic", "a", "b")


def test_query_returns_the_points_of_one_series_in_a_time_range_oldest_first(table: MetricsTable) -> None:
    topic = Series("1m", "topic", "a", "b", "orders")
    other = Series("1m", "topic", "a", "b", "payments")
    latency = {"count": 3, "min": 1.0, "max": 9.5, "avg": 4.0, "p50": 2.0, "p95": 9.5, "p99": 9.5}
    points = [MetricPoint(topic, w * 60_000, {"record-count": w, "replication-latency-ms": latency}) for w in range(30)]
    assert table.write([*points, MetricPoint(other, 0, {"record-count": 99})]) == 31
    got = table.query(topic, 10 * 60_000, 12 * 60_000)
    assert got == points[10:13]


def test_writing_the_same_window_again_overwrites_it(table: MetricsTable) -> None:
    series = Series("1h", "flow", "a", "b")
    table.write([MetricPoint(series, 0, {"record-count": 1, "byte-rate": 0.5})])
    table.write([MetricPoint(series, 0, {"record-count": 2, "byte-rate": 0.25})])
    assert table.query(series, 0, 0) == [MetricPoint(series, 0, {"record-count": 2, "byte-rate": 0.25})]


def test_only_one_minute_items_expire(table: MetricsTable) -> None:
    minute = MetricPoint(Series("1m", "flow", "a", "b"), 120_000, {"record-count": 1})
    hour = MetricPoint(Series("1h", "flow", "a", "b"), 0, {"record-count": 1})
    assert table.item(minute)["expires_at"] == {"N": str(120 + 100)}
    assert "expires_at" not in table.item(hour)
