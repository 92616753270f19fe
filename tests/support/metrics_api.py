"""Metrics API tests' data: moto config, state and metrics tables written through the adapters with known windows
(the unit tests of the API and the web view's browser test read the same)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from moto import mock_aws

import srm.control.metrics
from srm.app import App
from srm.aws.config_table import DynamoDBConfig, create_config_table
from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.aws.state import DynamoDBState, create_state_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.metrics.model.series import MetricPoint, Series
from srm.state import TopicMappingRecord

NOW = int(time.time() * 1000) // 60_000 * 60_000  # the current minute's window start
W1, W2 = NOW - 3 * 60_000, NOW - 2 * 60_000  # two recent windows
OLD = NOW - 60 * 60_000  # an hour ago: in the 2-hour default range, not in the last 5 minutes
LATENCY_1 = {"count": 100, "min": 5, "max": 90, "avg": 20.5, "p50": 18, "p95": 60, "p99": 85}
LATENCY_2 = {"count": 50, "min": 4, "max": 120, "avg": 30.0, "p50": 25, "p95": 100, "p99": 110}


def window(record_count: int, lag: int, latency: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "record-count": record_count,
        "byte-count": record_count * 10,
        "record-rate": record_count / 60,
        "replication-latency-ms": latency,
        "replication-records-lag": lag,
        "oldest-unreplicated-age-ms": lag * 100,  # known from the lag: the charts' checks read it back
        "verified-records": record_count,  # continuous verification compared what was replicated
        "verification-differences": int(lag == 7),  # and found one difference in the windows of lag 7 (W1)
        **more,
    }


@contextmanager
def known_metrics(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Moto tables with known rows, the srm App on them, and the API's clock pinned inside NOW's minute.

    Config: flows a->b (active), a->c (disabled), b->a (no data), c->a (failing batches); rows for a->b: the flow's
    windows OLD, W1 and W2 (and one hourly), its topic ``orders`` (remote ``a.orders``, 2 partitions) at W1 and W2,
    partition 1 at W1.
    """
    # The API's clock stands inside NOW's minute: the windows below were chosen at import, and a long suite may run
    # this test many minutes later, when "the last 5 minutes" would no longer hold them.
    monkeypatch.setattr(srm.control.metrics, "_now", lambda now_ms: NOW + 30_000 if now_ms is None else now_ms)
    for name, value in {
        "SRM_CONFIG_TABLE": "config",
        "SRM_STATE_TABLE": "state",
        "SRM_METRICS_TABLE": "metrics",
        "SRM_CONFIG_CACHE_SECONDS": "0",
    }.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(db, "config")
        create_state_table(db, "state")
        create_metrics_table(db, "metrics")
        props = {
            "clusters": "a, b, c",
            **{f"{c}.bootstrap.servers": f"{c}:9092" for c in "abc"},
            "a->b.enabled": "true",
            "a->b.topics": "orders",
            "a->c.enabled": "false",
            "b->a.enabled": "true",
            "c->a.enabled": "true",
        }
        DynamoDBConfig(db, "config").replace_all(SrmConfig.from_properties(Properties.of(props)))
        state = DynamoDBState(db, "state")
        state.put_topic_mapping("a", "b", TopicMappingRecord("orders", "a.orders", 2))
        state.update_flow_status("a", "b", heartbeat_ms=NOW - 4_000, heartbeat_replicated_ms=NOW - 1_000)
        state.update_flow_status("a", "b", last_checkpoint_ms=NOW - 30_000)
        metrics = MetricsTable(db, "metrics")
        flow, topic = Series("1m", "flow", "a", "b"), Series("1m", "topic", "a", "b", "orders")
        metrics.write(
            [
                MetricPoint(flow, OLD, window(1000, 40, LATENCY_1)),
                MetricPoint(flow, W2, window(50, 3, LATENCY_2)),  # written out of order on purpose
                MetricPoint(flow, W1, window(100, 7, LATENCY_1, **{"heartbeat-age-ms": 900})),
                MetricPoint(topic, W1, window(100, 7, LATENCY_1)),
                MetricPoint(topic, W2, window(50, 3, LATENCY_2)),
                MetricPoint(Series("1m", "partition", "a", "b", "orders", 1), W1, window(60, 4, LATENCY_1)),
                MetricPoint(Series("1h", "flow", "a", "b"), NOW - 3_600_000, window(1150, 3, LATENCY_2)),
                MetricPoint(Series("1m", "flow", "c", "a"), W1, {"record-count": 5, "replication-failures": 2}),
            ]
        )
        App.reset()
        yield {"db": db}
        App.reset()
