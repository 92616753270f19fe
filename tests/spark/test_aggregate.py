"""The aggregation on generated raw records with known answers, and bad raw lines counted, never fatal."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from srm.metrics import aggregate as aggregate_module
from srm.metrics.aggregate import OUTPUT_KEYS, aggregate, aggregate_partials, parse_lines, partials
from srm.metrics.model.names import TABLE_ATTRIBUTES
from srm.metrics.model.schema import (
    CheckpointRun,
    DeadLetterBatch,
    HeartbeatSample,
    LagSample,
    MirrorBatch,
    MirrorFailure,
    SketchData,
    TopicSyncRun,
    VerificationRun,
    encode,
)
from srm.metrics.model.series import RESOLUTIONS
from srm.metrics.model.sketch import ALPHA, Sketch
from tests.spark.rawdata import HOUR, MINUTE, T0, Batch, batches

# One worker runs them all (pytest-xdist --dist loadgroup), so the session has one SparkSession.
pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]

FLOW = {"source": "a", "target": "b"}
MIRRORED = batches(seed=7, count=150, start=T0, span_ms=3 * MINUTE)
OTHERS = [
    LagSample(ts=T0 + 10_000, **FLOW, topic="orders", partition=0, log_end=50, committed=45, lag=5),
    LagSample(ts=T0 + 50_000, **FLOW, topic="orders", partition=0, log_end=50, committed=47, lag=3),
    LagSample(ts=T0 + 20_000, **FLOW, topic="orders", partition=1, log_end=70, lag=7, oldest_age_ms=900),
    LagSample(ts=T0 + 70_000, **FLOW, topic="orders", partition=0, log_end=60, committed=60, lag=0),
    CheckpointRun(
        ts=T0 + 1_000,
        **FLOW,
        latency=SketchData.of(Sketch.of([100, 200])),
        groups_checkpointed=2,
        groups_skipped={"active": 1},
    ),
    CheckpointRun(
        ts=T0 + 31_000,
        **FLOW,
        latency=SketchData.of(Sketch.of([300])),
        groups_checkpointed=1,
        groups_skipped={"active": 1, "not-allowed": 2},
    ),
    HeartbeatSample(ts=T0 + 1_000, **FLOW, age_ms=500.0),
    HeartbeatSample(ts=T0 + 30_000, **FLOW, age_ms=20.0, latency_ms=5.0),
    TopicSyncRun(ts=T0 + 2_000, **FLOW, topics_created=2, partitions_created=6, failed={"acls": 1}),
    MirrorFailure(ts=T0 + 3_000, **FLOW, topic="orders", error="KafkaException", retries=4, records=12),
]


def lines_frame(spark: SparkSession, lines: list[str], file: str = "raw.jsonl") -> Any:
    rows = [(file, i + 1, line, False) for i, line in enumerate(lines)]
    return spark.createDataFrame(rows, "file string, line long, text string, last boolean")


@pytest.fixture(scope="session")
def result(spark: SparkSession) -> dict[tuple[Any, ...], dict[str, Any]]:
    lines = [encode(b.record()) for b in MIRRORED] + [encode(r) for r in OTHERS]
    records, bad = parse_lines(lines_frame(spark, lines))
    assert bad.count() == 0
    return table_of(aggregate(records).collect())


def table_of(rows: list[Any]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """Aggregated rows by (resolution, level, topic, partition, window_start)."""
    out = {}
    for row in rows:
        d = row.asDict(recursive=True)
        out[(d["resolution"], d["level"], d["topic"], d["partition"], d["window_start"])] = d
    return out


def expected_groups() -> dict[tuple[Any, ...], list[Batch]]:
    groups: dict[tuple[Any, ...], list[Batch]] = defaultdict(list)
    for b in MIRRORED:
        for resolution, width in RESOLUTIONS.items():
            start = b.ts - b.ts % width
            groups[(resolution, "partition", b.topic, b.partition, start)].append(b)
            groups[(resolution, "topic", b.topic, None, start)].append(b)
            groups[(resolution, "flow", None, None, start)].append(b)
    return groups


def check_distribution(got: dict[str, Any], samples: list[float]) -> None:
    assert got["count"] == len(samples)
    assert (got["min"], got["max"]) == (min(samples), max(samples))
    assert got["avg"] == pytest.approx(sum(samples) / len(samples))
    merged = Sketch.of(samples)
    for label, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        exact = float(np.quantile(np.array(samples), q, method="lower"))
        assert got[label] == pytest.approx(merged.quantile(q), rel=1e-12)  # Spark merges as the sketch does
        if exact >= 1:
            assert abs(got[label] - exact) <= ALPHA * exact * (1 + 1e-9), (label, got[label], exact)
        else:  # the zero bucket: values below 1 ms are reported as 0
            assert got[label] == min(max(0.0, got["min"]), got["max"])


def test_counts_rates_and_distributions_per_window_and_level(result: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    groups = expected_groups()
    assert len(groups) > 20
    for key, members in groups.items():
        row = result[key]
        seconds = RESOLUTIONS[key[0]] / 1000
        records = sum(len(b.latencies) for b in members)
        assert row["record_count"] == records, key
        assert row["byte_count"] == sum(b.bytes for b in members)
        assert row["record_rate"] == pytest.approx(records / seconds)
        check_distribution(row["replication_latency_ms"], [x for b in members for x in b.latencies])
        check_distribution(row["record_age_ms"], [x for b in members for x in b.ages])


def test_no_rows_beyond_the_windows_that_had_data(result: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    others = {("1m", "flow", None, None, T0 + m * MINUTE) for m in (0, 1)} | {
        (r, lvl, "orders", p, w)
        for r, w in (("1m", T0), ("1m", T0 + MINUTE), ("1h", T0))
        for lvl, p in (("topic", None), ("partition", 0), ("partition", 1))
    }
    assert set(result) - set(expected_groups()) <= others


def test_lag_is_the_last_sample_per_partition_summed_over_the_topic(
    result: dict[tuple[Any, ...], dict[str, Any]],
) -> None:
    def lag(resolution: str, level: str, partition: int | None, window: int) -> tuple[Any, Any]:
        row = result[(resolution, level, None if level == "flow" else "orders", partition, window)]
        return row["replication_records_lag"], row["oldest_unreplicated_age_ms"]

    assert lag("1m", "partition", 0, T0) == (3, None)
    assert lag("1m", "partition", 1, T0) == (7, 900)
    assert lag("1m", "topic", None, T0) == (10, 900)
    assert lag("1m", "flow", None, T0) == (10, 900)
    assert lag("1m", "topic", None, T0 + MINUTE) == (0, None)  # only partition 0 was sampled in that minute
    assert lag("1h", "partition", 0, T0) == (0, None)
    assert lag("1h", "topic", None, T0) == (7, 900)


def test_checkpoints_heartbeats_topic_sync_and_failures(result: dict[tuple[Any, ...], dict[str, Any]]) -> None:
    flow = result[("1h", "flow", None, None, T0)]
    assert flow["checkpoint_latency_ms"]["count"] == 3
    assert (flow["checkpoint_latency_ms"]["min"], flow["checkpoint_latency_ms"]["max"]) == (100.0, 300.0)
    assert (flow["groups_checkpointed"], flow["groups_skipped"]) == (3, 4)
    assert flow["groups_skipped_by_reason"] == {"active": 2, "not-allowed": 2}
    assert (flow["heartbeat_age_ms"], flow["heartbeat_latency_ms"]) == (20.0, 5.0)
    assert (flow["topics_created"], flow["partitions_created"], flow["topic_sync_failures"]) == (2, 6, 1)
    assert flow["topic_sync_failed_steps"] == {"acls": 1}
    assert (flow["replication_failures"], flow["replication_retries"], flow["replication_failed_records"]) == (1, 4, 12)
    assert flow["replication_failures_by_error"] == {"KafkaException": 1}
    assert result[("1m", "topic", "orders", None, T0)]["replication_failures"] == 1
    partition_rows = [v for k, v in result.items() if k[1] == "partition"]
    assert all(row["replication_failures"] is None for row in partition_rows)  # the failure had no partition
    assert all(row["checkpoint_latency_ms"] is None for row in partition_rows)


def test_bad_lines_are_counted_with_file_line_and_reason(spark: SparkSession) -> None:
    good = encode(MIRRORED[0].record())
    lines = [
        good,
        good[:50],
        good.replace('"v":1', '"v":9'),
        re.sub(r'"records":(\d+)', r'"records":"\1"', good, count=1),
        good.replace('"partition":', '"partition_":'),
        good.replace('"n":', '"n":1000', 1),
        '{"v":1,"kind":"what","ts":1,"source":"a","target":"b"}',
        "",
        encode(OTHERS[0]),
        re.sub(r'"b":\{"\d+"', '"b":{"99999999"', good, count=1),  # a bucket no value can reach
    ]
    records, bad = parse_lines(lines_frame(spark, lines, "dt=x/p-0.jsonl"))
    assert records.count() == 2
    reasons = {row["line"]: row["reason"] for row in bad.collect()}
    assert set(reasons) == {2, 3, 4, 5, 6, 7, 8, 10}
    assert "truncated" in reasons[2]
    assert reasons[3] == "unknown schema version 9 (this reader knows v=1)"
    assert "wrong type" in reasons[4]
    assert reasons[5] == "mirror record without partition"
    assert reasons[6] == "latency: inconsistent sketch"
    assert reasons[7] == "unknown kind what"
    assert reasons[8] == "empty line"
    assert reasons[10].endswith(": inconsistent sketch")
    assert {row["file"] for row in bad.collect()} == {"dt=x/p-0.jsonl"}


def test_window_boundaries_follow_record_time(spark: SparkSession) -> None:
    edge = [Batch(T0 + HOUR - 1, "orders", 0, [5.0], [5.0], 10), Batch(T0 + HOUR, "orders", 0, [7.0], [7.0], 10)]
    records, _ = parse_lines(lines_frame(spark, [encode(b.record()) for b in edge]))
    rows = {(r["resolution"], r["level"], r["window_start"]): r["record_count"] for r in aggregate(records).collect()}
    assert rows[("1h", "flow", T0)] == 1
    assert rows[("1h", "flow", T0 + HOUR)] == 1
    assert rows[("1m", "flow", T0 + HOUR - MINUTE)] == 1


def test_a_record_delivered_twice_counts_once(spark: SparkSession) -> None:
    first, second = (b.record().model_copy(update={"id": f"p:{i}"}) for i, b in enumerate(MIRRORED[:2]))
    no_id = MIRRORED[2].record()  # written before records had ids: never merged with another
    lines = [encode(first), encode(second), encode(first), encode(no_id), encode(no_id)]
    records, _ = parse_lines(lines_frame(spark, lines))
    rows = [r for r in aggregate(records).collect() if (r["resolution"], r["level"]) == ("1h", "flow")]
    assert [(r["window_start"], r["record_count"]) for r in rows] == [
        (T0, first.records + second.records + 2 * no_id.records)
    ]


def test_the_table_attributes_are_the_listed_names(spark: SparkSession) -> None:
    records, _ = parse_lines(lines_frame(spark, [encode(MIRRORED[0].record())]))
    columns = {c.replace("_", "-") for c in aggregate(records).columns if c not in OUTPUT_KEYS}
    assert columns == set(TABLE_ATTRIBUTES)


def test_dead_letters_are_summed_per_partition_topic_and_flow_with_their_error(spark: SparkSession) -> None:
    flow = {"source": "a", "target": "b"}
    letters = [
        DeadLetterBatch(ts=T0 + 1, **flow, topic="orders", partition=0, records=2, bytes=9, error="record_too_large"),
        DeadLetterBatch(ts=T0 + 2, **flow, topic="orders", partition=1, records=1, bytes=4, error="record_too_large"),
        DeadLetterBatch(ts=T0 + HOUR, **flow, topic="pay", partition=0, records=5, bytes=1, error="record_too_large"),
    ]
    records, _ = parse_lines(lines_frame(spark, [encode(r) for r in letters]))
    rows = {
        (r["resolution"], r["level"], r["topic"], r["partition"], r["window_start"]): r
        for r in aggregate(records).collect()
    }
    assert rows[("1h", "flow", None, None, T0)]["dead_lettered_records"] == 3
    assert rows[("1h", "flow", None, None, T0)]["dead_lettered_by_reason"] == {"record_too_large": 3}
    assert rows[("1m", "partition", "orders", 1, T0)]["dead_lettered_records"] == 1
    assert rows[("1h", "topic", "pay", None, T0 + HOUR)]["dead_lettered_records"] == 5


def test_records_the_transforms_dropped_are_summed_a_batch_dropped_whole_too(spark: SparkSession) -> None:
    flow = {"source": "a", "target": "b", "topic": "orders", "remote_topic": "a.orders"}
    batches = [
        MirrorBatch(ts=T0 + 1, **flow, partition=0, records=5, bytes=50, filtered=2),
        MirrorBatch(ts=T0 + 2, **flow, partition=1, records=0, bytes=0, filtered=4),  # every record dropped
        MirrorBatch(ts=T0 + 3, **flow, partition=1, records=3, bytes=30),  # before the field existed: none
    ]
    records, _ = parse_lines(lines_frame(spark, [encode(r) for r in batches]))
    rows = {
        (r["resolution"], r["level"], r["topic"], r["partition"], r["window_start"]): r
        for r in aggregate(records).collect()
    }
    assert rows[("1m", "flow", None, None, T0)]["filtered_records"] == 6
    assert rows[("1m", "flow", None, None, T0)]["record_count"] == 8
    assert rows[("1h", "partition", "orders", 1, T0)]["filtered_records"] == 4


def test_verification_runs_sum_records_compared_and_differences_found(spark: SparkSession) -> None:
    # GIVEN three runs of continuous verification: partition 1's first run found a difference, its next finds it again
    flow = {"source": "a", "target": "b", "topic": "orders"}
    runs = [
        VerificationRun(ts=T0 + 1, **flow, partition=0, compared=40, differences=0, verified_through=40),
        VerificationRun(ts=T0 + 2, **flow, partition=1, compared=25, differences=1, verified_through=10),
        VerificationRun(ts=T0 + MINUTE + 2, **flow, partition=1, compared=30, differences=1, verified_through=10),
    ]
    records, _ = parse_lines(lines_frame(spark, [encode(r) for r in runs]))
    rows = {
        (r["resolution"], r["level"], r["topic"], r["partition"], r["window_start"]): r
        for r in aggregate(records).collect()
    }
    # THEN each window sums what its runs compared and found, per partition, topic and flow
    figures = {k: (r["verified_records"], r["verification_differences"]) for k, r in rows.items()}
    assert figures[("1m", "partition", "orders", 1, T0)] == (25, 1)
    assert figures[("1m", "topic", "orders", None, T0)] == (65, 1)
    assert figures[("1m", "flow", None, None, T0 + MINUTE)] == (30, 1)
    assert figures[("1h", "flow", None, None, T0)] == (95, 2)
    assert rows[("1h", "flow", None, None, T0)]["record_count"] is None  # no mirror batch: no replication figures


def test_partials_stored_before_a_figure_existed_merge_with_new_ones(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN the partials of a batch stored by a version without the verification figures, and a verification run since
    flow = {"source": "a", "target": "b", "topic": "orders"}
    batch = [b for b in MIRRORED if b.ts < T0 + MINUTE][:5]
    old_records = parse_lines(lines_frame(spark, [encode(b.record()) for b in batch]))[0].localCheckpoint()
    partials(old_records).drop("verified_records", "verification_differences").write.parquet(str(tmp_path / "old"))
    stored = spark.read.parquet(str(tmp_path / "old"))  # as the runner reads them
    run = VerificationRun(ts=T0 + 1, **flow, partition=0, compared=40, differences=1, verified_through=40)
    new_records = parse_lines(lines_frame(spark, [encode(run)]))[0].localCheckpoint()  # as the runner stages them
    # WHEN they are merged
    rows = aggregate_partials(partials(new_records, stored)).where("resolution = '1h' AND level = 'flow'").collect()
    # THEN both count: the stored batch's records and the new run's figures
    [row] = rows
    assert (row["record_count"], row["verified_records"], row["verification_differences"]) == (
        sum(len(b.latencies) for b in batch),
        40,
        1,
    )


def as_map(dense: Any) -> Any:
    """A dense sketch column (``lo``, ``c``) as a map of index (a string) → count of its non-empty buckets."""
    index = F.transform(F.sequence(F.lit(0), F.size(dense.c) - 1), lambda k: (dense.lo + k).cast("string"))
    return F.when(dense.isNotNull(), F.map_filter(F.map_from_arrays(index, dense.c), lambda _, count: count > 0))


def test_more_series_than_are_broadcast_give_the_same_table(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch, result: dict[tuple[Any, ...], dict[str, Any]]
) -> None:
    # GIVEN a run covering more series than are sent whole to every task: the series are joined through a shuffle
    monkeypatch.setattr(aggregate_module, "_BROADCAST_SERIES", 0)
    lines = [encode(b.record()) for b in MIRRORED] + [encode(r) for r in OTHERS]
    records = parse_lines(lines_frame(spark, lines))[0].localCheckpoint()
    # WHEN the records are aggregated
    rows = aggregate(records).collect()
    # THEN the table is the one the broadcast gave
    assert table_of(rows) == result


def test_partials_stored_with_sketches_as_maps_merge_with_dense_ones(
    spark: SparkSession, tmp_path: Path, result: dict[tuple[Any, ...], dict[str, Any]]
) -> None:
    # GIVEN the partials of half the records stored as an earlier version stored them: each sketch a map index → count
    lines = [encode(b.record()) for b in MIRRORED] + [encode(r) for r in OTHERS]
    old = partials(parse_lines(lines_frame(spark, lines[::2]))[0].localCheckpoint())
    for prefix in ("lat", "age", "ckpt"):
        old = old.withColumn(f"_{prefix}_b", as_map(F.col(f"_{prefix}_d"))).drop(f"_{prefix}_d")
    old.write.parquet(str(tmp_path / "old"))
    stored = spark.read.parquet(str(tmp_path / "old"))
    assert "_lat_b" in stored.columns and "_lat_d" not in stored.columns
    # WHEN the other half is aggregated with them
    new = parse_lines(lines_frame(spark, lines[1::2]))[0].localCheckpoint()
    rows = aggregate_partials(partials(new, stored)).collect()
    # THEN the table is the one of all records aggregated at once
    assert table_of(rows) == result
    assert result[("1h", "flow", None, None, T0)]["replication_latency_ms"]["count"] > 0
