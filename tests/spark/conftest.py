"""One local SparkSession for the whole test session (the JVM starts once)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from srm.local.aggregator import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("768m", cores=2, app_name="srm-tests")  # the one srm run uses, on two cores
    yield session
    session.stop()
