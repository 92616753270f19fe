"""The metrics table is the same whatever order the raw data arrives in, however many runs read it, and whether a
record is delivered once or twice: late data for an hour already aggregated included (a property of mergeable
partials, checked against one aggregation of everything)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from moto import mock_aws
from pyspark.sql import SparkSession

from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.metrics.model.schema import CheckpointRun, HeartbeatSample, LagSample, MirrorFailure, SketchData, encode
from srm.metrics.model.sketch import Sketch
from srm.metrics.runner import LocalRawStore, run_once
from tests.spark.rawdata import HOUR, MINUTE, T0, batches, write

pytestmark = [pytest.mark.spark, pytest.mark.xdist_group("spark-runs")]

FLOW = {"source": "a", "target": "b"}
# Two hours of every kind that merges differently: sums, sketches, last samples, maxes and counts by key.
RECORDS = [
    *(b.record() for b in batches(3, 8, T0, 3 * MINUTE)),
    *(b.record() for b in batches(4, 4, T0 + HOUR, 2 * MINUTE)),
    LagSample(ts=T0 + 10_000, **FLOW, topic="orders", partition=0, log_end=50, lag=5),
    LagSample(ts=T0 + 50_000, **FLOW, topic="orders", partition=0, log_end=50, lag=3, oldest_age_ms=700),
    LagSample(ts=T0 + HOUR + 5, **FLOW, topic="orders", partition=1, log_end=9, lag=2),
    HeartbeatSample(ts=T0 + 1_000, **FLOW, age_ms=500.0),
    HeartbeatSample(ts=T0 + 30_000, **FLOW, age_ms=20.0, latency_ms=5.0),
    CheckpointRun(ts=T0 + 2_000, **FLOW, latency=SketchData.of(Sketch.of([1, 300])), groups_checkpointed=2),
    MirrorFailure(ts=T0 + HOUR + 3_000, **FLOW, topic="orders", error="KafkaException", retries=4, records=12),
]
LINES = [encode(r.model_copy(update={"id": f"p:{i}"})) for i, r in enumerate(RECORDS)]
RUNS = 3


@pytest.fixture(scope="module")
def db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def contents(db: Any, name: str) -> dict[tuple[str, str], dict[str, Any]]:
    items = db.get_paginator("scan").paginate(TableName=name).build_full_result()["Items"]
    return {(item["pk"]["S"], item["sk"]["N"]): item for item in items}


@pytest.fixture(scope="module")
def everything(spark: SparkSession, db: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[Any, Any]:
    """The table of one run over all lines, each delivered once."""
    tmp = tmp_path_factory.mktemp("everything")
    write(tmp / "raw", "all", LINES, arrived_ms=T0)
    create_metrics_table(db, "everything")
    run_once(spark, LocalRawStore(tmp / "raw", tmp / "manifest.json"), MetricsTable(db, "everything"), settle_ms=0)
    return contents(db, "everything")


# Each line: the run it arrives in, and the run a second copy arrives in (RUNS: delivered once).
arrivals = st.lists(st.tuples(st.integers(0, RUNS - 1), st.integers(0, RUNS)), min_size=len(LINES), max_size=len(LINES))
# Hour 1 first, then hour 0 in the last run: late data for an hour closed and aggregated before.
HOUR_0_LATE = [(RUNS - 1 if r.ts < T0 + HOUR else 0, RUNS) for r in RECORDS]


@pytest.mark.timeout(1200)  # a few examples of three runs each, each run a few Spark jobs
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(plan=HOUR_0_LATE)
@given(plan=arrivals)
def test_any_arrival_order_and_split_into_runs_gives_the_same_table(
    spark: SparkSession, db: Any, tmp_path_factory: pytest.TempPathFactory, everything: dict[Any, Any], plan: Any
) -> None:
    tmp = tmp_path_factory.mktemp("runs")
    name = tmp.name
    create_metrics_table(db, name)
    store, metrics = LocalRawStore(tmp / "raw", tmp / "manifest.json"), MetricsTable(db, name)
    for run in range(RUNS):
        # GIVEN the lines (and second copies) arriving in this run, in two files of different arrival hours
        arriving = [line for line, (first, again) in zip(LINES, plan, strict=True) if run in (first, again)]
        if arriving:
            write(tmp / "raw", f"run{run}-a", arriving[::2], arrived_ms=T0 + HOUR)
            write(tmp / "raw", f"run{run}-b", arriving[1::2], arrived_ms=T0)
        # WHEN a run aggregates them
        run_once(spark, store, metrics, settle_ms=0)
    # THEN the table is the one of a single run over everything
    assert contents(db, name) == everything
