"""One local SparkSession for the whole test session (the JVM starts once)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from srm.local.aggregator import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    # the one srm run uses, on two cores; 1 GB: aggregate() in one piece (the runner's runs are cut by their Parquet
    # writes) has a plan large enough that 768 MB ran out while it was planned, late in the suite
    session = spark_session("1g", cores=2, app_name="srm-tests")
    yield session
    session.stop()
