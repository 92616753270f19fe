"""The local runtime's metrics aggregation: ``python -m srm.local.aggregator``, a process of its own started by
``srm run`` (unless ``--no-metrics``), running the Glue job's work (:func:`srm.metrics.runner.run_once`) every
``metrics.aggregation.interval.seconds`` over the raw files the workers write, into the store's metrics table.

One SparkSession lives as long as the process, so the JVM starts once. It is bounded: ``local[1]`` (one core of the
machine's, the workers keep the rest), driver memory ``SRM_SPARK_DRIVER_MEMORY`` (default 512m: a minute of raw
files of a busy local flow is a few MB; the job reads files whole, so a file must fit — FileSink caps them at
16 MiB), no UI. Environment: ``SRM_METRICS_DIR`` (raw files under ``raw/``, the manifest beside them),
``SRM_METRICS_TABLE``, ``SRM_METRICS_INTERVAL_SECONDS``, ``AWS_ENDPOINT_URL`` (the local store).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import boto3

from srm.aws.metrics_table import MetricsTable, create_metrics_table

__all__ = ["aggregate_once", "main", "spark_session"]

log = logging.getLogger("srm.aggregator")


def spark_session(driver_memory: str = "512m", *, cores: int = 1, app_name: str = "srm-metrics") -> Any:
    """A local SparkSession bound to loopback: nothing outside this machine needs to reach its driver."""
    # Read by the JVM pyspark launches: without it Spark looks up the host's address and warns when that is loopback.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.sql.session.timeZone", "UTC")
        # Small inputs, new plans every run: compiling whole-stage code costs more than it saves.
        .config("spark.sql.codegen.wholeStage", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session


def metrics_table(table: str, endpoint_url: str | None, region: str = "us-east-1") -> MetricsTable:
    client = boto3.client(
        "dynamodb",
        region_name=region,
        endpoint_url=endpoint_url,
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID", "local"),
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY", "local"),
    )
    create_metrics_table(client, table)
    return MetricsTable(client, table)


def aggregate_once(spark: Any, metrics_dir: Path, table: MetricsTable) -> Any:
    """One incremental run over ``<metrics_dir>/raw`` (see :mod:`srm.metrics.runner`)."""
    from srm.metrics.runner import LocalRawStore, run_once

    store = LocalRawStore(metrics_dir / "raw", metrics_dir / "manifest.json")
    return run_once(spark, store, table, settle_ms=5_000)


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    metrics_dir = Path(os.environ["SRM_METRICS_DIR"])
    interval = float(os.environ.get("SRM_METRICS_INTERVAL_SECONDS", "60"))
    table = metrics_table(os.environ.get("SRM_METRICS_TABLE", "srm-metrics"), os.environ.get("AWS_ENDPOINT_URL"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    spark = spark_session(os.environ.get("SRM_SPARK_DRIVER_MEMORY", "512m"))
    try:
        while not stop.wait(interval):
            try:
                report = aggregate_once(spark, metrics_dir, table)
            except Exception as e:  # the next run tries again; the manifest is saved only after a good run
                log.error("metrics aggregation failed: %s", e)
                continue
            if report.files_changed:
                log.info("metrics aggregated: %s", report)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
