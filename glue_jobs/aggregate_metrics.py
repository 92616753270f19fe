"""Glue job (Glue 5, Spark 3.5): raw replication metrics in S3 → the metrics table, incrementally.

The work is :func:`srm.metrics.runner.run_once`, the same run the local runtime schedules; this entry point only
reads the job's arguments, takes Glue's SparkSession and reports. The ``srm`` package comes with the job
(``--extra-py-files``: the core layer's zip). Arguments: ``--raw_bucket``, ``--raw_prefix`` (the Firehose
destination prefix, e.g. ``metrics/raw/``), ``--manifest_key`` (where the run keeps what it has read; its partials
and lock beside it), ``--metrics_table``. The manifest plays the job bookmark's part (see :mod:`srm.metrics.runner`
for why a bookmark alone cannot): ``job.init``/``job.commit`` still mark each run for Glue. A run that finds
another one running (the lock) does nothing and succeeds: the running one reads the same data.

``--raw_bucket`` may be a ``file://`` directory instead of a bucket name: the same job over local files (the suite
runs it so with ``spark-submit``; Spark outside Glue has no S3 file system).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ARGUMENTS = ["JOB_NAME", "raw_bucket", "raw_prefix", "manifest_key", "metrics_table"]


def raw_store(args: dict[str, str]) -> Any:
    """The raw store the arguments name: S3 (on Glue), or a local directory (``file://``)."""
    import boto3

    from srm.metrics.runner import LocalRawStore, S3RawStore

    bucket = args["raw_bucket"]
    if bucket.startswith("file://"):
        root = Path(urlparse(bucket).path)
        return LocalRawStore(root / args["raw_prefix"], root / args["manifest_key"])
    return S3RawStore(boto3.client("s3"), bucket, args["raw_prefix"], args["manifest_key"])


def main(argv: list[str] | None = None) -> None:
    # Glue-only modules are imported here, so tests and tools can import this file without awsglue.
    import boto3
    from awsglue.context import GlueContext  # type: ignore[import-not-found]
    from awsglue.job import Job  # type: ignore[import-not-found]
    from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]
    from pyspark.context import SparkContext

    from srm.aws.metrics_table import MetricsTable
    from srm.metrics.runner import ConcurrentRunError, run_once

    args = getResolvedOptions(sys.argv if argv is None else argv, ARGUMENTS)
    glue = GlueContext(SparkContext.getOrCreate())
    job = Job(glue)
    job.init(args["JOB_NAME"], args)
    logging.basicConfig(level=logging.INFO)
    log = logging.getLogger("aggregate_metrics")
    try:
        report = run_once(
            glue.spark_session, raw_store(args), MetricsTable(boto3.client("dynamodb"), args["metrics_table"])
        )
        log.info("metrics aggregation: %s", report)
    except ConcurrentRunError as e:
        log.warning("%s", e)
    job.commit()


if __name__ == "__main__":
    main()
