"""The other ports' contracts, held by both adapters: the configuration (versioned scopes, conditional commits), the
nodes, and the aggregated metrics — DynamoDB (moto) and ``srm run``'s topics (a real cluster). Each test opens the
store again (a restart in between) where what it checks must survive one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import boto3
import pytest

from srm.aws.config_table import DynamoDBConfig, create_config_table
from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.aws.nodes import DynamoDBNodes
from srm.aws.state import create_state_table
from srm.config.parsing import Properties
from srm.config.scopes import scope_key
from srm.config.settings import SrmConfig
from srm.config.store import ConfigConflictError, ConfigStore
from srm.errors import ConfigError
from srm.kafka.config_store import KafkaConfig
from srm.kafka.metrics_store import KafkaMetrics
from srm.kafka.nodes import KafkaNodes
from srm.kafka.state import KafkaState
from srm.metrics.model.series import MetricPoint, Series
from srm.metrics.model.store import MetricsStore
from srm.state import StateFencedError
from srm.state.nodes import MemberRecord, NodeRecord, Nodes
from tests.support.aws import aws
from tests.support.clusters import Cluster
from tests.support.kafka import create_topic, unique

BASE = {
    "clusters": "a, b",
    "a.bootstrap.servers": "a:9092",
    "b.bootstrap.servers": "b:9092",
    "a->b.enabled": "true",
    "a->b.topics": "orders",
    "replication.factor": "3",
}


def config(**changes: str | None) -> SrmConfig:
    values = {**BASE, **changes}
    return SrmConfig.from_properties(Properties.of({k: v for k, v in values.items() if v is not None}))


class Stores:
    """Opens the same stores again each time it is asked (a restart in between)."""

    def __init__(self, kind: str, config: Callable[[], ConfigStore], nodes: Callable[[], Nodes]) -> None:
        self.kind = kind
        self.config = config
        self.nodes = nodes
        self.metrics: Callable[[], MetricsStore]


@pytest.fixture(params=["dynamodb", "kafka"])
def stores(request: pytest.FixtureRequest, clusters: dict[str, Cluster]) -> Iterator[Stores]:
    if request.param == "kafka":
        with kafka_stores(clusters) as opened:
            yield opened
        return
    with aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(db, "config")
        create_state_table(db, "state")
        create_metrics_table(db, "metrics")
        opened = Stores(
            "dynamodb",
            lambda: DynamoDBConfig(db, "config", cache_seconds=0),
            lambda: DynamoDBNodes(db, "state", "g"),
        )
        opened.metrics = lambda: MetricsTable(db, "metrics", minute_retention_s=600)
        yield opened


@pytest.fixture
def kafka(clusters: dict[str, Cluster]) -> Iterator[Stores]:
    with kafka_stores(clusters) as opened:
        yield opened


@contextlib.contextmanager
def kafka_stores(clusters: dict[str, Cluster]) -> Iterator[Stores]:
    bootstrap = clusters["a"].bootstrap
    topic, points = unique("srm-state"), unique("srm-metrics-points")
    for name in (topic, points):
        create_topic(bootstrap, name, 1, {"cleanup.policy": "compact"})
    conf = {"bootstrap.servers": bootstrap}
    with contextlib.ExitStack() as stack:

        def state() -> KafkaState:
            opened_state = KafkaState(topic, conf, dict(conf)).start()
            stack.callback(opened_state.stop)
            return opened_state

        def metrics() -> KafkaMetrics:
            store = KafkaMetrics(points, conf, dict(conf), minute_retention_s=600).start()
            stack.callback(store.stop)
            return store

        opened = Stores("kafka", lambda: KafkaConfig(state(), cache_seconds=0), lambda: KafkaNodes(state(), "g"))
        opened.metrics = metrics
        yield opened


# -- the configuration -------------------------------------------------------------------------------------------
def test_config_replace_all_then_read_after_a_restart_gives_versions_and_author(stores: Stores) -> None:
    stores.config().replace_all(config(), author="alice@host")

    store = stores.config()
    snapshot = store.read()
    assert sorted(snapshot.scopes) == ["cluster#a", "cluster#b", "flow#a->b", "global"]
    flow = snapshot.scope(scope_key(flow=("a", "b")))
    assert (flow.properties, flow.version, flow.updated_by) == (
        {"enabled": "true", "topics": "orders"},
        1,
        "alice@host",
    )
    assert dict(snapshot.properties()) == BASE
    assert store.load().settings("a", "b").topics == "orders"

    # WHEN one scope changes and one goes THEN only they are written: the changed one's version grows
    changes = store.replace_all(config(**{"a->b.topics": "payments", "replication.factor": None}), author="bob")
    assert sorted(changes) == ["flow#a->b", "global"]
    after = stores.config().read()
    assert after.scope("flow#a->b").version == 2 and after.scope("cluster#a").version == 1
    assert stores.config().load(fresh=True).settings("a", "b").topics == "payments"


def test_config_commit_on_a_stale_snapshot_conflicts_and_writes_nothing(stores: Stores) -> None:
    first, second = stores.config(), stores.config()
    first.replace_all(config())
    stale = second.read()
    first.commit(first.read(), {"flow#a->b": {"enabled": "false", "topics": "orders"}}, author="first")

    # a scope it changes, one it only read, and one it creates that appeared meanwhile: each conflicts
    with pytest.raises(ConfigConflictError, match="flow a->b changed since it was read"):
        second.commit(stale, {"flow#a->b": {"enabled": "true", "topics": "x"}}, author="second")
    with pytest.raises(ConfigConflictError):
        second.commit(stale, {"global": {"clusters": "a, b"}}, author="second")
    first.commit(first.read(), {"cluster#c": {"bootstrap.servers": "c:9092"}})
    with pytest.raises(ConfigConflictError, match="cluster c"):
        second.commit(second.read().__class__(stale.table, stale.scopes), {"cluster#c": {"x": "y"}})
    current = stores.config().read()
    assert current.scope("flow#a->b").properties == {"enabled": "false", "topics": "orders"}
    assert current.scope("cluster#c").properties == {"bootstrap.servers": "c:9092"}


def test_config_refuses_a_literal_secret_and_writes_nothing(stores: Stores) -> None:
    store = stores.config()
    with pytest.raises(ConfigError, match="never stores secrets"):
        store.replace_all(config(**{"a.sasl.password": "hunter2"}))
    assert not stores.config().read()


def test_config_an_empty_store_says_how_to_fill_it(stores: Stores) -> None:
    with pytest.raises(ConfigError, match="import"):
        stores.config().load(fresh=True)


def test_kafka_config_a_writer_fenced_mid_commit_lands_nothing(kafka: Stores) -> None:
    """The broker keeps the conditional write honest: a writer that checked its versions, then lost the
    configuration's transactional id to another writer, cannot land its write whatever it checked (DynamoDB's
    commit is one conditional transaction: it has no in-between)."""
    stores = kafka
    slow, fast = stores.config(), stores.config()
    slow.replace_all(config())
    slow_state = slow._state  # the writer, between its check and its write
    slow_state.log.claim(["config"])
    fast.commit(fast.read(), {"flow#a->b": {"enabled": "false", "topics": "orders"}}, author="fast")
    with pytest.raises(StateFencedError):
        slow_state.log.write([(("config", "flow#a->b"), {"p": {"topics": "lost"}, "v": 2})], "config")
    assert stores.config().read().scope("flow#a->b").properties == {"enabled": "false", "topics": "orders"}


# -- the nodes ---------------------------------------------------------------------------------------------------
def test_nodes_and_members_are_read_by_another_process_and_survive_a_restart(stores: Stores) -> None:
    writer = stores.nodes()
    node = NodeRecord("n1", "host", 42, "/srv/one", "tok", 1_000, 2_000)
    writer.put_node(node)
    writer.put_node(NodeRecord("n2", "other", 7, "/srv/two", "tok2", 1_000, 2_500))
    member = MemberRecord("n1", "a", "b", True, {"t": (0, 2)}, 1_500, 2_000, "", "stuck: t-0")
    writer.put_member(member)
    writer.put_member(MemberRecord("n2", "a", "b", False, {}, 1_500, 2_500, "n1"))
    writer.put_member(MemberRecord("n1", "b", "a", False))

    reader = stores.nodes()
    assert reader.nodes(consistent=True) == {
        "n1": node,
        "n2": NodeRecord("n2", "other", 7, "/srv/two", "tok2", 1_000, 2_500),
    }
    members = reader.members("a", "b")
    assert members["n1"] == member and members["n2"].fenced_by == "n1" and not members["n2"].leader
    assert set(reader.members("b", "a")) == {"n1"}

    writer.delete_node("n2")
    assert set(stores.nodes().nodes(consistent=True)) == {"n1"}


# -- the aggregated metrics ----------------------------------------------------------------------------------------
def test_metrics_points_of_a_series_in_a_range_oldest_first_overwritten_whole(stores: Stores) -> None:
    now = int(time.time() * 1000) // 60_000 * 60_000
    series, other = Series("1m", "topic", "a", "b", "t"), Series("1m", "topic", "a", "b", "u")
    writer = stores.metrics()
    assert writer.write([MetricPoint(series, now - 60_000 * i, {"record-count": i}) for i in range(3)]) == 3
    writer.write([MetricPoint(other, now, {"record-count": 9})])
    writer.write([MetricPoint(series, now, {"record-rate": 0.5, "latency": {"p50": 2.5, "nan": float("nan")}})])

    reader = stores.metrics()
    points = reader.query(series, now - 60_000, now)
    assert [p.window_start for p in points] == [now - 60_000, now]
    assert points[0].values == {"record-count": 1}
    assert points[1].values == {"record-rate": 0.5, "latency": {"p50": 2.5}}  # overwritten whole; NaN left out
    assert reader.query(series, now + 1, now + 60_000) == []


def test_kafka_metrics_minute_points_past_retention_are_dropped_hours_kept(kafka: Stores) -> None:
    """As DynamoDB expires them by its TTL attribute (tests/unit/test_metrics_table.py)."""
    stores = kafka
    now = int(time.time() * 1000)
    old = now - 1_200_000  # past the 10-minute retention of the fixture (the other points are within 3 minutes)
    minute, hour = Series("1m", "flow", "a", "b"), Series("1h", "flow", "a", "b")
    store = stores.metrics()
    store.write([MetricPoint(minute, old, {"record-count": 1}), MetricPoint(hour, old, {"record-count": 1})])
    store.write([MetricPoint(minute, now, {"record-count": 2})])  # a write drops what has expired
    reader = stores.metrics()
    assert [p.window_start for p in reader.query(minute, 0, now)] == [now]
    assert [p.window_start for p in reader.query(hour, 0, now)] == [old]
