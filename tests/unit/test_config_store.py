"""srm.aws.config_table on DynamoDB (moto, or LocalStack's DynamoDB Local): versioned scopes, conditional
transactional commits, the cached load."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from srm.aws.config_table import DynamoDBConfig, create_config_table
from srm.config.parsing import Properties
from srm.config.scopes import scope_key, split_scopes
from srm.config.settings import SrmConfig
from srm.config.store import ConfigConflictError, ConfigStoreError
from srm.errors import ConfigError
from tests.support.aws import aws

pytestmark = pytest.mark.aws_adapter

TABLE = "srm-config"
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


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_config_table(client, TABLE)
        yield client


@pytest.fixture
def store(dynamodb: Any) -> DynamoDBConfig:
    return DynamoDBConfig(dynamodb, TABLE, cache_seconds=0)


def test_replace_all_then_read_gives_scopes_with_versions_and_author(store: DynamoDBConfig):
    # WHEN a configuration is loaded into an empty table
    store.replace_all(config(), author="alice@host")

    # THEN each scope is an item of its own, version 1, stamped with who wrote it, and flattens back to the same map
    snapshot = store.read()
    assert sorted(snapshot.scopes) == ["cluster#a", "cluster#b", "flow#a->b", "global"]
    flow = snapshot.scope(scope_key(flow=("a", "b")))
    assert (flow.properties, flow.version, flow.updated_by) == (
        {"enabled": "true", "topics": "orders"},
        1,
        "alice@host",
    )
    assert flow.updated_at and flow.updated_at.endswith("Z")
    assert dict(snapshot.properties()) == BASE


def test_replace_all_writes_only_changed_scopes_and_deletes_dropped_ones(store: DynamoDBConfig):
    # GIVEN a stored configuration with a flow b->a
    store.replace_all(config(**{"b->a.enabled": "false"}))

    # WHEN one with another replication factor and without b->a replaces it
    changes = store.replace_all(config(**{"replication.factor": "1"}))

    # THEN only the global scope is rewritten (version 2), b->a is deleted, the rest keeps version 1
    assert changes == {"global": {"clusters": "a, b", "replication.factor": "1"}, "flow#b->a": None}
    versions = {sk: s.version for sk, s in store.read().scopes.items()}
    assert versions == {"global": 2, "cluster#a": 1, "cluster#b": 1, "flow#a->b": 1}


def test_commit_on_a_stale_snapshot_raises_conflict_and_writes_nothing(store: DynamoDBConfig):
    # GIVEN two operators who read the same version of the configuration
    store.replace_all(config())
    first, second = store.read(), store.read()
    sk = scope_key(flow=("a", "b"))

    # WHEN the first writes the flow, then the second writes the flow and the global scope from its stale read
    store.commit(first, {sk: {"enabled": "true", "topics": "orders, payments"}})
    with pytest.raises(ConfigConflictError) as raised:
        store.commit(second, {sk: {"enabled": "false"}, "global": {"clusters": "a, b"}})

    # THEN the second write fails as a whole, naming the flow; the first operator's edit is intact
    assert raised.value.scopes == (sk,)
    assert "flow a->b changed since it was read" in str(raised.value)
    after = store.read()
    assert after.scope(sk).properties == {"enabled": "true", "topics": "orders, payments"}
    assert after.scope("global").properties == {"clusters": "a, b", "replication.factor": "3"}


def test_commit_fails_when_a_scope_it_did_not_change_changed_meanwhile(store: DynamoDBConfig):
    # GIVEN a change validated against a snapshot, and a concurrent edit of another scope (the cluster list)
    store.replace_all(config())
    stale = store.read()
    store.commit(store.read(), {"global": {"clusters": "a, b", "replication.factor": "1"}})

    # WHEN the change is committed on its snapshot
    # THEN it fails: it was validated against a configuration that no longer exists
    with pytest.raises(ConfigConflictError) as raised:
        store.commit(stale, {scope_key(flow=("a", "b")): {"enabled": "false"}})
    assert raised.value.scopes == ("global",)
    assert store.read().scope(scope_key(flow=("a", "b"))).properties["enabled"] == "true"


def test_commit_creating_a_scope_someone_else_created_meanwhile_conflicts(store: DynamoDBConfig):
    store.replace_all(config())
    stale = store.read()
    store.commit(store.read(), {scope_key(flow=("b", "a")): {"enabled": "true"}})
    with pytest.raises(ConfigConflictError):
        store.commit(stale, {scope_key(flow=("b", "a")): {"enabled": "false"}})
    assert store.read().scope(scope_key(flow=("b", "a"))).properties == {"enabled": "true"}


def test_replace_all_refuses_a_literal_secret_and_writes_nothing(store: DynamoDBConfig):
    # GIVEN a configuration with a literal SASL password
    with_secret = config(**{"a.sasl.password": "hunter2"})

    # WHEN it is loaded / THEN it is refused before anything is written, naming the key
    with pytest.raises(ConfigError, match=r"a\.sasl\.password: the config table never stores secrets"):
        store.replace_all(with_secret)
    assert not store.read()

    # AND a reference is stored as written
    store.replace_all(config(**{"a.sasl.password": "${secretsmanager:srm/a:password}"}))
    assert store.read().properties()["a.sasl.password"] == "${secretsmanager:srm/a:password}"


def test_commit_of_more_scopes_than_one_transaction_holds_writes_them_all(store: DynamoDBConfig):
    # GIVEN 120 flows: more scopes than DynamoDB's 100 items per transaction
    aliases = [f"c{i}" for i in range(121)]
    props = {"clusters": ", ".join(aliases), **{f"c0->c{i}.enabled": "false" for i in range(1, 121)}}
    big = SrmConfig.from_properties(Properties.of(props))

    # WHEN it is loaded / THEN every scope is written
    store.replace_all(big)
    assert len(store.read().scopes) == 121
    assert dict(store.read().properties()) == props


def test_load_serves_the_cache_until_it_expires_or_fresh_is_asked(dynamodb: Any):
    # GIVEN a store whose readers cache the configuration for a minute
    writer = DynamoDBConfig(dynamodb, TABLE, cache_seconds=0)
    writer.replace_all(config())
    reader = DynamoDBConfig(dynamodb, TABLE, cache_seconds=60)
    assert reader.load().settings("a", "b").topics == "orders"

    # WHEN the flow's topics change
    base = writer.read()
    writer.commit(base, {scope_key(flow=("a", "b")): {"enabled": "true", "topics": "payments"}})

    # THEN the cached configuration is served until a fresh read is asked for
    assert reader.load().settings("a", "b").topics == "orders"
    assert reader.load(fresh=True).settings("a", "b").topics == "payments"


def test_read_of_a_missing_table_raises_store_error_naming_it():
    with aws():
        store = DynamoDBConfig(boto3.client("dynamodb", region_name="us-east-1"), "nope", cache_seconds=0)
        with pytest.raises(ConfigStoreError, match="config table nope does not exist") as raised:
            store.read()
        assert raised.value.missing_table


def test_split_scopes_puts_keys_of_unknown_aliases_in_the_global_scope():
    scopes = split_scopes({"clusters": "a", "a.x": "1", "z.y": "2", "a->b.topics": "t"}, ("a",))
    assert scopes == {"global": {"clusters": "a", "z.y": "2"}, "cluster#a": {"x": "1"}, "flow#a->b": {"topics": "t"}}
