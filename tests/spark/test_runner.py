"""Incremental runs over batches of raw files (late data included) equal one run over everything; no raw byte is
read twice; re-runs change nothing; bad lines are logged with their file, once, and never fail a run; a second
concurrent run is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from pyspark.sql import SparkSession

from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.metrics import runner
from srm.metrics.model.schema import LagSample, encode
from srm.metrics.runner import ConcurrentRunError, LocalRawStore, run_once
from tests.spark.rawdata import HOUR, MINUTE, T0, batches, encoded, write

# One worker runs them all (pytest-xdist --dist loadgroup), so the session has one SparkSession.
pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-runs")]


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


def lines(seed: int, count: int, start: int, span: int = 2 * MINUTE, ids: str | None = None) -> list[str]:
    records = [b.record() for b in batches(seed, count, start, span)]
    if ids is not None:
        records = [r.model_copy(update={"id": f"{ids}:{i}"}) for i, r in enumerate(records)]
    return encoded(records)


def raw_bytes(raw: Path) -> int:
    return sum(p.stat().st_size for p in raw.rglob("*.jsonl"))


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
    # only the new file is read: hour 1's earlier data comes from its stored partials
    assert (third.files_changed, third.hours, third.files_read) == (1, [T0 + HOUR], 1)
    # AND no raw byte was read twice
    assert first.bytes_read + second.bytes_read + third.bytes_read == raw_bytes(raw)

    # THEN the table equals one run over all raw data from scratch
    scratch = table(db, "scratch")
    run_once(spark, LocalRawStore(raw, tmp_path / "scratch.json"), scratch, settle_ms=0)
    result = contents(db, "incremental")
    assert result == contents(db, "scratch")
    assert any(key[0] == "1h#topic#a#b#orders" and "replication-records-lag" in item for key, item in result.items())

    # AND running again changes nothing
    assert run_once(spark, store, incremental, settle_ms=0).files_changed == 0
    assert contents(db, "incremental") == result


# a run of a few records finds earlier copies with its ids in memory, a larger one by a join of both sides' ids
@pytest.mark.parametrize("ids_in_memory", [200_000, 0], ids=["ids-in-memory", "ids-joined"])
def test_a_record_redelivered_in_a_later_run_counts_once(
    spark: SparkSession, db: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ids_in_memory: int
) -> None:
    monkeypatch.setattr(runner, "_BROADCAST_IDS", ids_in_memory)
    raw = tmp_path / "raw"
    metrics = table(db, "metrics")
    store = LocalRawStore(raw, tmp_path / "manifest.json")
    delivered = lines(1, 6, T0, ids="p")
    write(raw, "first", delivered, arrived_ms=T0)
    run_once(spark, store, metrics, settle_ms=0)
    # GIVEN Firehose delivers three of the records again, in another object an hour later
    write(raw, "again", delivered[:3], arrived_ms=T0 + HOUR)
    report = run_once(spark, store, metrics, settle_ms=0)
    assert (report.duplicates, report.hours) == (3, [])
    item = contents(db, "metrics")[("1h#flow#a#b", str(T0))]
    assert item["record-count"]["N"] == str(sum(b.record().records for b in batches(1, 6, T0, 2 * MINUTE)))


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
    # the file, where the part read starts, and the line's start: enough to find it
    assert f"bad raw metric line skipped: {path} (from byte 0): unknown schema version 2" in caplog.text
    assert '\'{"v":2,"kind":"mirror"}\'' in caplog.text
    caplog.clear()

    # the writer completes the line: only the rest is read, and the bad line is not reported again
    with path.open("a") as f:
        f.write(good[2][30:] + "\n")
    report = run_once(spark, store, metrics, settle_ms=3_600_000)
    assert (report.bad_lines, report.pending_files, report.bytes_read) == (0, 0, len(good[2]) + 1)
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
    assert f"{torn}: not a JSON object" in caplog.text


def test_a_second_concurrent_run_is_refused_and_changes_nothing(spark: SparkSession, db: Any, tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    store = LocalRawStore(raw, tmp_path / "manifest.json")
    write(raw, "p1-0", lines(1, 3, T0), arrived_ms=T0)
    with store.lock("the first run"), pytest.raises(ConcurrentRunError, match="the first run"):
        run_once(spark, store, table(db, "metrics"), settle_ms=0)
    assert not (tmp_path / "manifest.json").exists()
    assert contents(db, "metrics") == {}


def test_a_manifest_without_partials_is_replaced_by_one_run_over_all_raw_data(
    spark: SparkSession, db: Any, tmp_path: Path
) -> None:
    raw = tmp_path / "raw"
    path = write(raw, "p1-0", lines(1, 3, T0), arrived_ms=T0)
    (tmp_path / "manifest.json").write_text(json.dumps({"v": 1, "files": {str(path): {"size": 1, "hours": [T0]}}}))
    report = run_once(spark, LocalRawStore(raw, tmp_path / "manifest.json"), table(db, "metrics"), settle_ms=0)
    assert (report.files_read, report.hours) == (1, [T0])
    assert json.loads((tmp_path / "manifest.json").read_text())["v"] == 2


def test_a_local_lock_left_by_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "manifest.lock").write_text(f"{dead.stdout.strip()} a killed run")
    store = LocalRawStore(tmp_path / "raw", tmp_path / "manifest.json")
    with store.lock("next run"):
        assert (tmp_path / "manifest.lock").read_text().endswith(" next run")
    assert not (tmp_path / "manifest.lock").exists()
