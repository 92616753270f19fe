"""Incremental runs over batches of raw files (late data included) equal one run over everything; re-runs change
nothing; bad lines are logged with file and line, once, and never fail a run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from pyspark.sql import SparkSession

from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.metrics.model.schema import LagSample, encode
from srm.metrics.runner import LocalRawStore, run_once
from tests.spark.rawdata import HOUR, MINUTE, T0, batches, encoded, write

# One worker runs them all (pytest-xdist --dist loadgroup), so the session has one SparkSession.
pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark")]


@pytest.fixture
def db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def table(db: Any, name: str) -> MetricsTable:
    create_metrics_table(db, name)
    return MetricsTable(db, name)


def contents(db: Any, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    items = db.get_paginator("scan").paginate(TableName=name).build_full_result()["Items"]
    return {(item["pk"]["S"], item["sk"]["N"]): item for item in items}


def lines(seed: int, count: int, start: int, span: int = 2 * MINUTE) -> list[str]:
    return encoded(b.record() for b in batches(seed, count, start, span))


def test_incremental_runs_with_late_data_equal_one_run_over_everything(
    spark: SparkSession, db: Any, tmp_path: Path
) -> None:
    raw = tmp_path / "raw"
    incremental = table(db, "incremental")
    store = LocalRawStore(raw, tmp_path / "manifest.json")
    # GIVEN a first batch of raw files in hour 0
    write(raw, "p1-0", lines(1, 30, T0), arrived_ms=T0)
    first = run_once(spark, store, incremental, settle_ms=0)
    assert (first.files_changed, first.hours) == (1, [T0])
    # WHEN more arrives: an append to the same file, a new file in hour 1, and late data for hour 0 in hour 1's folder
    write(raw, "p1-0", lines(2, 10, T0 + 2 * MINUTE), arrived_ms=T0, append=True)
    write(raw, "p2-0", lines(3, 20, T0 + HOUR), arrived_ms=T0 + HOUR)
    lag = [encode(LagSample(ts=T0 + HOUR + 5, source="a", target="b", topic="orders", partition=0, log_end=9, lag=2))]
    write(raw, "p3-0", lines(4, 5, T0 + MINUTE) + lag, arrived_ms=T0 + HOUR)
    second = run_once(spark, store, incremental, settle_ms=0)
    assert (second.files_changed, second.hours, second.files_read) == (3, [T0, T0 + HOUR], 3)
    write(raw, "p2-1", lines(5, 5, T0 + HOUR + 30 * MINUTE), arrived_ms=T0 + HOUR)
    third = run_once(spark, store, incremental, settle_ms=0)
    assert (third.files_changed, third.hours, third.files_read) == (1, [T0 + HOUR], 3)

    # THEN the table equals one run over all raw data from scratch
    scratch = table(db, "scratch")
    run_once(spark, LocalRawStore(raw, tmp_path / "scratch.json"), scratch, settle_ms=0)
    result = contents(db, "incremental")
    assert result == contents(db, "scratch")
    assert any(key[0] == "1h#topic#a#b#orders" and "replication-records-lag" in item for key, item in result.items())

    # AND running again changes nothing
    assert run_once(spark, store, incremental, settle_ms=0).files_changed == 0
    assert contents(db, "incremental") == result


def test_bad_lines_are_logged_once_and_a_torn_last_line_waits_until_settled(
    spark: SparkSession, db: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = tmp_path / "raw"
    metrics = table(db, "metrics")
    store = LocalRawStore(raw, tmp_path / "manifest.json")
    good = lines(1, 3, T0)
    path = write(raw, "p1-0", [good[0], '{"v":2,"kind":"mirror"}', good[1]], arrived_ms=T0)
    with path.open("a") as f:
        f.write(good[2][:30])  # a writer caught mid-line
    report = run_once(spark, store, metrics, settle_ms=3_600_000)
    assert (report.bad_lines, report.pending_files) == (1, 1)
    assert f"bad raw metric line skipped: {path}:2: unknown schema version 2" in caplog.text
    caplog.clear()

    # the writer completes the line: it is read, and the bad line is not reported again
    with path.open("a") as f:
        f.write(good[2][30:] + "\n")
    report = run_once(spark, store, metrics, settle_ms=3_600_000)
    assert (report.bad_lines, report.pending_files) == (0, 0)
    assert "bad raw metric line" not in caplog.text
    counts = {k: v for k, v in contents(db, "metrics").items() if k == ("1h#flow#a#b", str(T0))}
    assert counts[("1h#flow#a#b", str(T0))]["record-count"]["N"] == str(
        sum(b.record().records for b in batches(1, 3, T0, 2 * MINUTE))
    )

    # a torn line in a file that stopped changing is bad, not pending forever
    torn = write(raw, "p2-0", [good[0]], arrived_ms=T0)
    with torn.open("a") as f:
        f.write(good[1][:25])
    report = run_once(spark, store, metrics, settle_ms=0)
    assert (report.bad_lines, report.pending_files) == (1, 0)
    assert f"{torn}:2: not a JSON object" in caplog.text
