"""``GlueContext``: wraps the ``SparkContext``; ``spark_session`` is the job's session."""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession


class GlueContext:
    def __init__(self, spark_context: Any) -> None:
        self.spark_context = spark_context
        self.spark_session = SparkSession(spark_context)
