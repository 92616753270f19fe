"""Topic sync in-process against real brokers: the local runtime's emulated event source mappings follow the same
decisions as the Lambda API adapter (created, disabled by a filter change, deleted with the topic, idempotent), the
state table records them, and a node's running mappings follow the records; the configs a remote topic is created
with are srm's to reset. (Topic ACL sync, a target without an authorizer included: tests/e2e/test_acl_sync.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from srm.app import App, Environment
from srm.aws.config_table import DynamoDBConfig, create_config_table
from srm.aws.state import create_state_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.local.mappings import LocalEventSources
from srm.replication.context import TopicNotReplicatedError
from srm.replication.topic_sync import sync_topics
from tests.support.kafka import admin, create_topic, list_topic_names, unique, wait_for
from tests.support.topics import alter_topic, topic_overrides

pytestmark = pytest.mark.integration


class Flow:
    """A flow a->b selecting ``<prefix>.*``: its config in a moto config table, an App, emulated mappings."""

    def __init__(self, clusters: dict[str, Any], db: Any) -> None:
        self.prefix = unique("esm")
        self.a, self.b = clusters["a"].bootstrap, clusters["b"].bootstrap
        self.store = DynamoDBConfig(db, "srm-config", cache_seconds=0)
        self.configure(topics=f"{self.prefix}\\..*")
        self.app = App(Environment("a", "b", config_cache_seconds=0), dynamodb=db)
        self.invocations: list[dict[str, Any]] = []
        self.mappings = LocalEventSources(
            self.app, lambda event, _ctx: self.invocations.append(event), member_id=unique("node")
        )
        self.app.event_sources = self.mappings

    def configure(self, **flow: str) -> None:
        props = {
            "clusters": "a, b",
            "a.bootstrap.servers": self.a,
            "b.bootstrap.servers": self.b,
            "a->b.enabled": "true",
            "replication.factor": "1",
            "heartbeats.replication.enabled": "false",  # the shared clusters' heartbeats are other tests' business
            "sync.topic.acls.enabled": "false",  # no authorizer on the shared clusters
            **{f"a->b.{k.replace('_', '.')}": v for k, v in flow.items()},
        }
        self.store.replace_all(SrmConfig.from_properties(Properties.of(props)))

    def sync(self) -> dict[str, list[str]]:
        result = sync_topics(self.app.topic_sync_context())
        assert result.mappings is not None
        return result.mappings.summary()

    def running(self) -> set[str]:
        """The mappings this node runs once it followed the state's records (as its worker does every second)."""
        self.mappings.follow(self.app.state.event_source_mappings("a", "b"))
        return {t for t, m in self.mappings.mappings().items() if m.is_alive()}


def create_listed(bootstrap: str, topic: str, partitions: int) -> None:
    """Create a topic and wait until the broker lists it: Kafka answers CreateTopics once the controller has the
    topic, its brokers' metadata follows a moment later, and topic sync plans from that metadata."""
    create_topic(bootstrap, topic, partitions)
    wait_for(lambda: topic in list_topic_names(bootstrap), 30, message=f"{topic} listed")


@pytest.fixture
def flow(clusters) -> Iterator[Flow]:
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(db, "srm-config")
        create_state_table(db, "srm-state")
        f = Flow(clusters, db)
        try:
            yield f
        finally:
            f.mappings.stop_all()


def test_local_mappings_created_disabled_deleted_and_idempotent(flow: Flow) -> None:
    # GIVEN two matching topics on the source
    one, two = f"{flow.prefix}.one", f"{flow.prefix}.two"
    create_listed(flow.a, one, 2)
    create_listed(flow.a, two, 1)

    # WHEN topic sync runs THEN each gets a running mapping, recorded in the state table
    assert flow.sync() == {"create": [one, two]}
    assert flow.running() == {one, two}
    records = flow.app.state.event_source_mappings("a", "b")
    assert set(records) == {one, two} and all(r.enabled and r.batch_size == 10_000 for r in records.values())
    mappings = flow.app.state.topic_mappings("a", "b")
    assert {t: (m.remote_topic, m.partitions, m.created) for t, m in mappings.items()} == {
        one: (f"a.{one}", 2, True),
        two: (f"a.{two}", 1, True),
    }

    # WHEN it runs again THEN nothing changes, and nothing is written to the state table
    writes: list[str] = []
    db = flow.app.stores.dynamodb
    db.meta.events.register("before-call.dynamodb.*", lambda model, **_: writes.append(model.name))
    assert flow.sync() == {}
    assert not {w for w in writes if w in ("PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem")}, writes

    # WHEN a filter change excludes `two` THEN its mapping is disabled (stopped, kept), `one` untouched
    flow.configure(topics=f"{flow.prefix}\\..*", topics_exclude=f"{flow.prefix}\\.two")
    assert flow.sync() == {"disable": [two]}
    assert flow.running() == {one}
    assert not flow.app.state.event_source_mappings("a", "b")[two].enabled
    assert set(flow.app.state.topic_mappings("a", "b")) == {one}

    # WHEN `one` is deleted on the source THEN its mapping is deleted, and its records with it
    client = admin(flow.a)  # the client must outlive its future
    client.delete_topics([one])[one].result(30)
    wait_for(lambda: one not in admin(flow.a).list_topics(timeout=10).topics, message=f"{one} deleted")
    assert flow.sync() == {"delete": [one]}
    assert flow.running() == set()
    assert set(flow.app.state.event_source_mappings("a", "b")) == {two}
    assert flow.sync() == {}

    # WHEN `two` is selected again THEN the same mapping is re-enabled
    flow.configure(topics=f"{flow.prefix}\\..*")
    assert flow.sync() == {"update": [two]}
    assert flow.running() == {two}


def test_disabled_flow_pauses_mappings_creates_nothing_and_enabling_resumes(flow: Flow) -> None:
    # GIVEN a replicated topic with a running mapping
    one, later = f"{flow.prefix}.one", f"{flow.prefix}.later"
    create_listed(flow.a, one, 1)
    assert flow.sync() == {"create": [one]}

    # WHEN the flow is disabled (srm-control flows disable) and a new matching topic appears meanwhile
    flow.configure(topics=f"{flow.prefix}\\..*", enabled="false")
    create_listed(flow.a, later, 1)

    # THEN topic sync pauses the mapping (kept, not deleted) and creates neither a mapping nor a remote topic
    assert flow.sync() == {"disable": [one]}
    assert flow.running() == set()
    assert f"a.{later}" not in admin(flow.b).list_topics(timeout=10).topics
    # and a batch still in flight is refused (retried, nothing committed) rather than replicated
    with pytest.raises(TopicNotReplicatedError, match="disabled"):
        flow.app.mirror_context()

    # WHEN enabled again THEN the paused mapping resumes and the new topic gets one
    flow.configure(topics=f"{flow.prefix}\\..*", enabled="true")
    assert flow.sync() == {"update": [one], "create": [later]}
    assert flow.running() == {one, later}


def test_a_config_the_source_drops_after_the_remote_topic_was_created_with_it_is_reset(flow: Flow) -> None:
    # GIVEN a source topic with explicit configs, its remote topic created by a topic sync whose config sync is not
    # due (as when the source changes between the creation and the next config sync)
    topic, remote = f"{flow.prefix}.orders", f"a.{flow.prefix}.orders"
    create_topic(flow.a, topic, 2, {"retention.ms": "3600000", "max.message.bytes": "200000"})
    wait_for(lambda: topic in list_topic_names(flow.a), 30, message=f"{topic} listed")
    flow.configure(topics=f"{flow.prefix}\\..*", sync_topic_configs_enabled="false")
    flow.sync()
    assert topic_overrides(flow.b, remote) == {"retention.ms": "3600000", "max.message.bytes": "200000"}

    # WHEN the source drops one of them and the next topic sync syncs configs
    alter_topic(flow.a, topic, {}, delete=("max.message.bytes",))
    flow.configure(topics=f"{flow.prefix}\\..*")
    flow.sync()

    # THEN the remote topic drops it too: srm set it, at the creation
    assert topic_overrides(flow.b, remote) == {"retention.ms": "3600000"}
    assert dict(flow.app.state.topic_mappings("a", "b")[topic].configs) == {"retention.ms": "3600000"}
