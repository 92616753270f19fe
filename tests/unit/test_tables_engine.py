"""The Kafka store's tables (srm.local.tables.engine): DynamoDB's answers to the requests srm's stores make, checked
against moto's DynamoDB on the same requests, and what a replica replays."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from srm.aws.config_table import ConfigConflictError, ConfigStore, create_config_table
from srm.aws.metrics_table import MetricsTable, create_metrics_table
from srm.aws.state import DynamoDBState, create_state_table
from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.core.offsets import Origin, Run
from srm.local.tables.engine import Change, TableError, Tables
from srm.local.tables.expressions import ExpressionError, apply_update, compile_condition
from srm.metrics.model.series import MetricPoint, Series


class EngineClient:
    """A boto3-shaped DynamoDB client over :class:`Tables`: what the store's HTTP server does, without HTTP."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self.changes: list[Change] = []

    def __getattr__(self, name: str) -> Callable[..., dict[str, Any]]:
        operation = "".join(part.title() for part in name.split("_"))

        def call(**request: Any) -> dict[str, Any]:
            try:
                response, changes = self.tables.execute(operation, request)
            except TableError as e:
                error: dict[str, Any] = {"Error": {"Code": e.code, "Message": e.message}}
                if e.reasons is not None:
                    error["CancellationReasons"] = e.reasons
                raise ClientError(error, operation) from None
            self.changes.extend(changes)
            return response

        return call


@pytest.fixture
def moto_db() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("dynamodb", region_name="us-east-1")


def exercise_state(db: Any) -> dict[str, Any]:
    """Every kind of state write and read srm makes, on one client; what the reads returned."""
    create_state_table(db, "state")
    state = DynamoDBState(db, "state")
    for i in range(5):
        state.record_runs("a", "b", "t", 0, [Run(i * 10, i * 10 + 3, 10)], origin=lambda: Origin(0, True, "id"))
    state.record_runs("a", "b", "t", 0, [Run(100, 200, 5)])  # a gap: a new run
    state.record_runs("a", "b", "t", 1, [Run(7, 7, 3)], origin=lambda: Origin(7, False, None))
    state.mark_processed("a", "b", "t", 1, 12)
    state.mark_processed("a", "b", "t", 1, 11)  # never moves back
    lost_first, lost_again = state.record_loss("a", "b", "t", 1, 0, 7), state.record_loss("a", "b", "t", 1, 0, 7)
    state.put_checkpoints("a", "b", "g", {("t", 0): StoredCheckpoint(42, 45, "a.t", "", 1000)})
    state.set_untranslated("a", "b", "g", {("t", 1): Untranslated(3, "below the first run", 2000)})
    state.update_flow_status("a", "b", heartbeat_ms=5, stalled="{}")
    state.update_flow_status("a", "b", heartbeat_ms=6)
    before_reset = state.runs("a", "b", "t", 1)
    state.archive_partition("a", "b", "t", 1, "label")
    return {
        "runs0": state.runs("a", "b", "t", 0),
        "around": state.runs_around("a", "b", "t", 0, 47),
        "end": state.replicated_end("a", "b", "t", 0, 105),
        "origin": state.origin("a", "b", "t", 0),
        "before_reset": before_reset,
        "runs1": state.runs("a", "b", "t", 1),
        "processed": state.processed("a", "b", "t", 1),
        "lost": (lost_first, lost_again),
        "losses": state.losses("a", "b"),
        "checkpoints": state.checkpoints("a", "b", "g"),
        "status": state.flow_status("a", "b"),
    }


def test_state_store_on_the_engine_answers_as_dynamodb_does(moto_db: Any) -> None:
    # GIVEN the same sequence of state writes on moto's DynamoDB and on the engine
    # WHEN each is read back THEN both return the same
    engine_result = exercise_state(EngineClient(Tables()))
    assert engine_result == exercise_state(moto_db)
    assert engine_result["runs0"] == [Run(0, 3, 50), Run(100, 200, 5)]
    assert engine_result["lost"] == (7, 0)
    assert engine_result["processed"] is None  # archived with the reset


def config(**extra: str) -> SrmConfig:
    return SrmConfig.from_properties(
        Properties.of(
            {
                "clusters": "a, b",
                "a.bootstrap.servers": "h:1",
                "b.bootstrap.servers": "h:2",
                "a->b.enabled": "true",
                **extra,
            }
        )
    )


def test_config_commits_conflict_as_on_dynamodb(moto_db: Any) -> None:
    # GIVEN a config table on the engine holding a configuration
    db = EngineClient(Tables())
    create_config_table(db, "cfg")
    store = ConfigStore.__new__(ConfigStore)  # the transactional writes alone (the reader needs a real endpoint)
    store._db, store.table = db, "cfg"
    store.replace_all(config(), author="one")
    base = store.read()
    # WHEN another writer changes it first THEN a commit on the old base is refused, naming the scope
    store.replace_all(config(**{"a->b.topics": "x.*"}), author="two")
    with pytest.raises(ConfigConflictError):
        store.commit(base, {"flow#a->b": {"enabled": "false"}})
    # and the table holds the second writer's configuration, whole
    assert store.read().scope("flow#a->b").properties == {"enabled": "true", "topics": "x.*"}


def test_metrics_points_in_a_window_newest_query_as_on_dynamodb(moto_db: Any) -> None:
    series = Series("1m", "flow", "a", "b")
    points = [MetricPoint(series, 60_000 * i, {"value": i, "sum": 1.5 * i}) for i in range(30)]
    found = []
    for db in (EngineClient(Tables()), moto_db):
        create_metrics_table(db, "metrics")
        table = MetricsTable(db, "metrics")
        table.write(points)
        found.append(table.query(series, 60_000 * 5, 60_000 * 9))
    assert found[0] == found[1]
    assert [p.window_start for p in found[0]] == [60_000 * i for i in range(5, 10)]


def test_conditions_compare_as_dynamodb() -> None:
    item = {"n": {"N": "10"}, "s": {"S": "abc"}, "b": {"BOOL": True}}
    values = {":n": {"N": "10.0"}, ":m": {"N": "9"}, ":s": {"S": "ab"}, ":t": {"S": "abc"}}
    cases = {
        "n = :n": True,  # numbers compare by value
        "n > :m AND s = :t": True,
        "n < :m OR attribute_not_exists(x)": True,
        "NOT attribute_exists(n)": False,
        "begins_with(s, :s)": True,
        "n BETWEEN :m AND :n": True,
        "s IN (:s, :t)": True,
        "x < :n": False,  # a missing attribute compares false
        "s < :n": False,  # different types compare false
        "(n = :m) OR (s <> :s AND size(s) = :m)": False,
        "contains(s, :s)": True,
    }
    for text, expected in cases.items():
        assert compile_condition(text, {}, values)(item) is expected, text


def test_updates_and_bad_expressions() -> None:
    item = {"pk": {"S": "k"}, "n": {"N": "1"}, "gone": {"S": "x"}}
    new = apply_update(
        item,
        "SET #a = :v, n = n + :one, c = if_not_exists(c, :zero) REMOVE gone",
        {"#a": "a"},
        {":v": {"S": "y"}, ":one": {"N": "1"}, ":zero": {"N": "0"}},
    )
    assert new == {"pk": {"S": "k"}, "n": {"N": "2"}, "a": {"S": "y"}, "c": {"N": "0"}}
    assert item["n"] == {"N": "1"}  # the old item is left as it was
    for bad in ("n = :undefined", "#undefined = :n", "n = = :n", "attribute_exists(", "n"):
        with pytest.raises(ExpressionError):
            compile_condition(bad, {}, {":n": {"N": "1"}})({})


keys = st.integers(min_value=0, max_value=30)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["put", "delete", "grow"]), keys, keys), max_size=40))
def test_a_replica_replaying_the_changes_holds_the_same_tables(operations: list[tuple[str, int, int]]) -> None:
    # GIVEN any sequence of writes, conditional ones among them, on one engine
    primary, replica = Tables(), Tables()
    definition = {
        "TableName": "t",
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
    }
    changes = primary.execute("CreateTable", definition)[1]
    for op, a, b in operations:
        key = {"pk": {"S": f"p{a % 3}"}, "sk": {"N": str(a)}}
        request: dict[str, Any] = {"TableName": "t"}
        if op == "put":
            request.update(Item={**key, "v": {"N": str(b)}})
        elif op == "delete":
            request.update(Key=key)
        else:
            request.update(
                Key=key,
                UpdateExpression="SET v = v + :b",
                ConditionExpression="v < :b",
                ExpressionAttributeValues={":b": {"N": str(b)}},
            )
        try:
            operation = {"put": "PutItem", "delete": "DeleteItem", "grow": "UpdateItem"}[op]
            changes += primary.execute(operation, request)[1]
        except TableError:
            pass
    # WHEN another replays its changes THEN both answer every query the same
    for change in changes:
        replica.apply(change)
    for p in range(3):
        query = {
            "TableName": "t",
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": f"p{p}"}},
        }
        assert primary.query(query) == replica.query(query)


def test_requests_the_store_cannot_serve_are_refused_by_name() -> None:
    tables = Tables()
    with pytest.raises(TableError) as missing:
        tables.execute("GetItem", {"TableName": "none", "Key": {"pk": {"S": "x"}}})
    assert missing.value.code == "ResourceNotFoundException"
    with pytest.raises(TableError) as unknown:
        tables.execute("RestoreTableFromBackup", {})
    assert unknown.value.code == "UnknownOperationException"
