"""Monitoring end to end: three `srm run` nodes with metrics on replicate one topic between them, some records created
minutes ago; the node leading the aggregation writes the metrics table, counting every node's records exactly once;
the table and the API over HTTP say how many, how late, and that nothing is left behind."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import requests

from srm.control.nodes import nodes_status
from srm.flow import Flow
from srm.metrics.model.series import MetricPoint, Series
from srm.metrics.model.store import MetricsStore
from tests.support.kafka import Rec, create_topic, produce, unique, wait_for, wait_replicated
from tests.support.runtime import SrmRun, write_config
from tests.support.state import metrics_store, nodes_store

pytestmark = pytest.mark.e2e

MINUTES_AGO = 5


def minutes(table: MetricsStore, topic: str, since: int) -> list[MetricPoint]:
    return table.query(Series("1m", "topic", "a", "b", topic), since - 60_000, int(time.time() * 1000) + 60_000)


def test_three_nodes_metrics_count_every_record_once_with_its_latency_and_lag_reaches_zero(clusters, tmp_path: Path):
    # GIVEN three srm run nodes with metrics on sharing a flow, each holding some of a six-partition topic
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("nodes-metrics")
    create_topic(a, topic, partitions=6)
    config = write_config(
        tmp_path / "srm.yaml",
        {"a": a, "b": b},
        {"a->b": {"topics": topic}},
        **{
            "metrics.aggregation.interval.seconds": 3,
            "emit.checkpoints.interval.seconds": 2,
            "heartbeats.replication.enabled": "false",
        },
    )
    dirs = [tmp_path / f"node{i}" for i in (1, 2, 3)]
    runs: list[SrmRun] = []
    try:
        for d in dirs:
            d.mkdir()
            runs.append(SrmRun(config, d, metrics=True))

        def holders() -> dict[str, list[int]] | None:
            try:
                status = nodes_status(nodes_store(dirs[0]), [Flow("a", "b")])
            except Exception:  # not up yet
                return None
            held = {n.node_id: sorted(n.partitions.get("a->b", {}).get(topic, ())) for n in status.nodes if n.alive}
            return held if len(held) == 3 and all(held.values()) else None

        held = wait_for(holders, timeout=120, interval=1, message="three nodes each holding partitions")

        # WHEN records arrive on every partition and are replicated by the three of them: those of the odd partitions
        # created MINUTES_AGO minutes ago (CreateTime), the others now
        start = int(time.time() * 1000)
        old = start - MINUTES_AGO * 60_000
        n = 600
        produce(a, topic, [(i % 6, Rec(f"k{i}".encode(), b"v" * 50, (), old if i % 2 else start)) for i in range(n)])
        wait_replicated(a, topic, b, f"a.{topic}", timeout=90)
        table = metrics_store(dirs[0])

        def partition_counts() -> dict[int, int] | None:
            now = int(time.time() * 1000) + 60_000
            counts = {
                p: sum(
                    int(point.values.get("record-count", 0))
                    for point in table.query(Series("1m", "partition", "a", "b", topic, p), start - 60_000, now)
                )
                for p in range(6)
            }
            return counts if sum(counts.values()) >= n else None

        counts = wait_for(partition_counts, timeout=240, interval=2, message=f"{n} records in the metrics table")
        points = minutes(table, topic, start)

        def lag_zero() -> dict[str, Any] | None:
            laid = [p for p in minutes(table, topic, start) if "replication-records-lag" in p.values]
            return laid[-1].values if laid and laid[-1].values["replication-records-lag"] == 0 else None

        wait_for(lag_zero, timeout=120, interval=1, message="lag 0 in the metrics table")
        # … and the API srm run serves over HTTP says the same
        api = (dirs[0] / ".srm-local" / "api.url").read_text().strip()
        window = {"from": str(start - 60_000), "to": str(int(time.time() * 1000) + 60_000)}
        api_counts = requests.get(f"{api}/v2/topic-metrics/a/b/{topic}/record-count", params=window, timeout=10).json()
        latency = requests.get(
            f"{api}/v2/topic-metrics/a/b/{topic}/replication-latency-ms", params=window, timeout=10
        ).json()
        [flow] = requests.get(f"{api}/v2/replications", timeout=10).json()["replications"]
        topics = requests.get(f"{api}/v2/replications/a/b/topics", timeout=10).json()["topics"]
        assert all(r.alive() for r in runs), [r.output()[-2000:] for r in runs]
    finally:
        for r in runs:
            r.stop()

    # THEN every partition's records are counted exactly once, whichever node replicated them, and the topic's sum
    assert counts == {p: n // 6 for p in range(6)}, (counts, held)
    assert sum(p.values.get("record-count", 0) for p in points) == n
    # … with the latencies of the timestamps chosen: half about MINUTES_AGO minutes, half about now
    latencies = [p.values["replication-latency-ms"] for p in points if "replication-latency-ms" in p.values]
    assert sum(d["count"] for d in latencies) == n
    slowest = max(d["max"] for d in latencies)
    assert MINUTES_AGO * 60_000 <= slowest < MINUTES_AGO * 60_000 + 120_000
    assert min(d["min"] for d in latencies) < 60_000
    assert all(d["p99"] <= d["max"] for d in latencies)
    # the API: the same count and latencies, the flow active, the topic under both names with lag 0
    assert sum(p["value"] for p in api_counts["points"]) == n
    assert sum(p["count"] for p in latency["points"]) == n and max(p["max"] for p in latency["points"]) == slowest
    assert [p["timestamp"] for p in api_counts["points"]] == sorted(p["timestamp"] for p in api_counts["points"])
    assert (flow["source"], flow["target"], flow["status"]) == ("a", "b", "ACTIVE")
    [listed] = [t for t in topics if t["upstream_topic"] == topic]
    assert flow["topics"] == len(topics)
    assert (listed["upstream_topic"], listed["remote_topic"], listed["partitions"]) == (topic, f"a.{topic}", 6)
    assert listed["figures"]["records"] == n and listed["figures"]["lag"] == 0
