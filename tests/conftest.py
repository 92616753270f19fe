"""Fixtures shared by every tier: dummy AWS credentials, real Kafka clusters, a moto-backed srm App."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from srm.aws.state import DynamoDBState, create_state_table
from srm.local.kafka import kafka_version
from srm.state import StateStore
from tests.support.aws import aws
from tests.support.clusters import Cluster, SharedClusters, log_tails, running_clusters, using_external_clusters
from tests.support.kafka import close_clients
from tests.support.runtime import STARTED, run_log_tails
from tests.support.state import close_states

# AWS code reads region and endpoints from the environment; tests never reach AWS.
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
os.environ["AWS_ACCESS_KEY_ID"] = "testing"
os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
os.environ.pop("AWS_ENDPOINT_URL", None)
os.environ.setdefault("POWERTOOLS_METRICS_DISABLED", "true")
os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "WARNING")
# The suite's brokers start often and carry little traffic: the JIT's quick tier only (half the CPU of a start).
os.environ.setdefault("SRM_KAFKA_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")


def pytest_report_header(config: pytest.Config) -> str:
    if using_external_clusters():
        return "kafka: the clusters of SRM_TEST_BOOTSTRAP_A/_B/_C"
    return f"kafka: Apache Kafka {kafka_version()}, local KRaft clusters (srm.local.clusters)"


def pytest_runtest_setup(item: pytest.Item) -> None:
    STARTED[:] = [run for run in STARTED if run.alive()]  # a module's run outlives its first test


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """The record helpers' clients live as long as a test: closed before its fixtures stop its clusters."""
    yield
    close_clients()
    close_states()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    yield
    close_clients()  # those a fixture's teardown opened


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A failing test's report carries the tails of the Kafka clusters' logs and of its ``srm run`` logs."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name, tail in {**log_tails(), **run_log_tails()}.items():
            report.sections.append((f"{name} log", tail))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``--dist loadgroup`` sends a group's tests to one worker by a suffix of their node ids (``…@group``), which
    pytest-xdist 3.8 writes where pytest 9 no longer reads node ids: write it where pytest 9 keeps them (the Spark
    tests would otherwise start a SparkSession on every worker)."""
    if not getattr(config.option, "loadgroup", False):
        return
    from _pytest.nodeid import NodeId

    for item in items:
        groups = {
            str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")
        }
        if groups and "@" not in item.nodeid and hasattr(item, "_id"):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(sorted(groups))}")


@pytest.fixture(scope="session")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Cluster]]:
    """Three clusters shared by the session (tests use unique topic names): ``a`` and ``b``, and ``c`` started when a
    test first asks for it (few do: a worker whose tests do not runs one broker less)."""
    base = tmp_path_factory.mktemp("kafka")
    eager = ("a", "b", "c") if using_external_clusters() else ("a", "b")
    with running_clusters(base, eager) as started, contextlib.ExitStack() as later:
        yield SharedClusters(started, lambda name: later.enter_context(running_clusters(base, (name,)))[name])


@pytest.fixture
def fresh_clusters(tmp_path: Path, clusters: dict[str, Cluster]) -> Iterator[dict[str, Cluster]]:
    """Two empty clusters of this test's own (restartable), or the shared ones when external clusters are used."""
    if using_external_clusters():
        yield clusters
        return
    with running_clusters(tmp_path / "kafka", ("a", "b")) as started:
        yield started


@pytest.fixture(scope="module")
def module_clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Cluster]]:
    """Two clusters of the module's own, shared by its tests (each with topics and groups of its own): tests that
    read what every flow of a cluster writes (a checkpoints topic, the groups) see only their module's."""
    with running_clusters(tmp_path_factory.mktemp("kafka"), ("a", "b")) as started:
        yield started


@pytest.fixture
def restartable(fresh_clusters: dict[str, Cluster]) -> dict[str, Cluster]:
    if any(c.local is None for c in fresh_clusters.values()):
        pytest.skip("broker restarts need clusters this suite starts (SRM_TEST_BOOTSTRAP_* is set)")
    return fresh_clusters


@pytest.fixture
def state() -> Iterator[StateStore]:
    """An empty state table on moto (or the emulator at SRM_TEST_AWS_ENDPOINT: tests/support/aws.py)."""
    with aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_state_table(db, "state")
        yield DynamoDBState(db, "state")
