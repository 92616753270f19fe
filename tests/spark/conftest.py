"""One local SparkSession for the whole test session (the JVM starts once)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from srm.local.aggregator import spark_session


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.path):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.xdist_group("spark"))  # one worker, so one SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("768m", cores=2, app_name="srm-tests")  # the one srm run uses, on two cores
    yield session
    session.stop()
