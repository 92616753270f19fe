"""Glue job (Glue 5, Spark 3.5): raw replication metrics in S3 → the metrics table, incrementally.

The work is :func:`srm.metrics.runner.run_once`, the same run the local runtime schedules; this entry point only
reads the job's arguments, takes Glue's SparkSession and reports. The ``srm`` package comes with the job
(``--extra-py-files``: the core layer's zip). Arguments: ``--raw_bucket``, ``--raw_prefix`` (the Firehose
destination prefix, e.g. ``metrics/raw/``), ``--manifest_key`` (where the run keeps what it has read),
``--metrics_table``. The manifest plays the job bookmark's part (see :mod:`srm.metrics.runner` for why a bookmark
alone cannot): ``job.init``/``job.commit`` still mark each run for Glue.
"""

from __future__ import annotations

import logging
import sys

ARGUMENTS = ["JOB_NAME", "raw_bucket", "raw_prefix", "manifest_key", "metrics_table"]


def main(argv: list[str] | None = None) -> None:
    # Glue-only modules are imported here, so tests and tools can import this file without awsglue.
    import boto3
    from awsglue.context import GlueContext  # type: ignore[import-not-found]
    from awsglue.job import Job  # type: ignore[import-not-found]
    from awsglue.utils import getResolvedOptions  # type: ignore[import-not-found]
    from pyspark.context import SparkContext

    from srm.aws.metrics_table import MetricsTable
    from srm.metrics.runner import S3RawStore, run_once

    args = getResolvedOptions(sys.argv if argv is None else argv, ARGUMENTS)
    glue = GlueContext(SparkContext.getOrCreate())
    job = Job(glue)
    job.init(args["JOB_NAME"], args)
    logging.basicConfig(level=logging.INFO)
    store = S3RawStore(boto3.client("s3"), args["raw_bucket"], args["raw_prefix"], args["manifest_key"])
    report = run_once(glue.spark_session, store, MetricsTable(boto3.client("dynamodb"), args["metrics_table"]))
    logging.getLogger("aggregate_metrics").info("metrics aggregation: %s", report)
    job.commit()


if __name__ == "__main__":
    main()
