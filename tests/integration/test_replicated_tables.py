"""The Kafka store on a real broker (srm.local.tables): the nodes' shared tables through DynamoDB's HTTP API —
another node reads what one wrote, a conditional write sees what another node wrote before it, a transaction is
all or nothing (and a failed one does not hold up the next), a restarted node reads everything back from the log,
and compaction keeps the latest value."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from srm.aws.state import DynamoDBState, create_state_table
from srm.core.offsets import Run
from srm.local.tables.replicated import ReplicatedTables
from srm.local.tables.server import TablesServer
from tests.support.kafka import create_topic, unique, wait_for

pytestmark = pytest.mark.integration


class Node:
    """One node's store: its replica of the topic's tables, served over HTTP, and a boto3 client of it."""

    def __init__(self, bootstrap: str, topic: str, **producer: str) -> None:
        conf = {"bootstrap.servers": bootstrap}
        self.tables = ReplicatedTables(topic, dict(conf), {**conf, **producer})
        self.tables.start(60)
        self.server = TablesServer(self.tables)
        self.db: Any = boto3.client(
            "dynamodb",
            endpoint_url=self.server.start(),
            region_name="us-east-1",
            config=Config(retries={"max_attempts": 2}),
        )

    def stop(self) -> None:
        self.server.stop()
        self.tables.stop()


@pytest.fixture
def store(clusters) -> Iterator[tuple[str, str, list[Node]]]:
    bootstrap = clusters["b"].bootstrap
    topic = unique("srm-store")
    create_topic(bootstrap, topic, 1, {"cleanup.policy": "compact"})
    nodes: list[Node] = []
    yield bootstrap, topic, nodes
    for node in nodes:
        node.stop()


def items_on_another_node(store: tuple[str, str, list[Node]], pk: str) -> list[dict[str, Any]]:
    """The items of partition key ``pk`` as a node started now reads them from the topic."""
    bootstrap, topic, nodes = store
    other = Node(bootstrap, topic)
    nodes.append(other)
    return list(
        other.db.query(
            TableName="state",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": pk}},
            ConsistentRead=True,
        )["Items"]
    )


def test_two_nodes_share_the_state_and_a_restarted_node_reads_it_back(store) -> None:
    bootstrap, topic, nodes = store
    # GIVEN two nodes on one store topic, and a state table created on the first
    one = Node(bootstrap, topic)
    nodes.append(one)
    create_state_table(one.db, "state")
    first = DynamoDBState(one.db, "state")
    first.record_runs("a", "b", "t", 0, [Run(0, 10, 100)])
    two = Node(bootstrap, topic)
    nodes.append(two)
    second = DynamoDBState(two.db, "state")

    # THEN the second reads the first's runs (a consistent read waits for what was logged before it)
    assert second.replicated_end("a", "b", "t", 0, 100) == 100

    # WHEN the partition moves to the second node and it extends the run there (a conditional write)
    second.record_runs("a", "b", "t", 0, [Run(100, 110, 50)])
    # THEN the first, extending the run it last wrote, finds it changed elsewhere (a conditional write after
    # reading all that was logged before it) and writes on top of the second's extension
    first.record_runs("a", "b", "t", 0, [Run(100, 110, 50)])
    first.record_runs("a", "b", "t", 0, [Run(150, 160, 10)])
    assert first.replicated_end("a", "b", "t", 0, 0) == second.replicated_end("a", "b", "t", 0, 0) == 160
    assert second.runs("a", "b", "t", 0) == first.runs("a", "b", "t", 0) == [Run(0, 10, 160)]

    # WHEN a node restarts THEN it reads every table back from the topic
    one.stop()
    nodes.remove(one)
    again = Node(bootstrap, topic)
    nodes.append(again)
    assert DynamoDBState(again.db, "state").runs("a", "b", "t", 0) == [Run(0, 10, 160)]


def test_a_transaction_is_all_or_nothing_and_a_deleted_item_stays_deleted(store) -> None:
    bootstrap, topic, nodes = store
    node = Node(bootstrap, topic)
    nodes.append(node)
    create_state_table(node.db, "state")
    put = {"TableName": "state", "Item": {"pk": {"S": "p"}, "sk": {"S": "a"}, "v": {"N": "1"}}}
    node.db.put_item(**put)
    # WHEN a transaction's condition fails THEN none of its writes is made, and the reasons name which
    with pytest.raises(node.db.exceptions.TransactionCanceledException) as cancelled:
        node.db.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "state", "Item": {"pk": {"S": "p"}, "sk": {"S": "b"}}}},
                {
                    "ConditionCheck": {
                        "TableName": "state",
                        "Key": {"pk": {"S": "p"}, "sk": {"S": "a"}},
                        "ConditionExpression": "v = :two",
                        "ExpressionAttributeValues": {":two": {"N": "2"}},
                    }
                },
            ]
        )
    assert [r["Code"] for r in cancelled.value.response["CancellationReasons"]] == ["None", "ConditionalCheckFailed"]
    # WHEN it holds THEN both writes are made, and another node sees both
    node.db.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": "state", "Item": {"pk": {"S": "p"}, "sk": {"S": "b"}}}},
            {"Delete": {"TableName": "state", "Key": {"pk": {"S": "p"}, "sk": {"S": "a"}}}},
        ]
    )
    assert items_on_another_node(store, "p") == [{"pk": {"S": "p"}, "sk": {"S": "b"}}]


def test_a_transaction_that_failed_does_not_hold_up_the_next(store) -> None:
    bootstrap, topic, nodes = store
    # GIVEN a node whose producer refuses records over 4 KB (as a broker refuses an oversized batch)
    node = Node(bootstrap, topic, **{"message.max.bytes": "4096"})
    nodes.append(node)
    create_state_table(node.db, "state")

    def transaction(*items: dict[str, Any]) -> None:
        node.db.transact_write_items(TransactItems=[{"Put": {"TableName": "state", "Item": i}} for i in items])

    # WHEN a transaction fails half-way through its writes
    with pytest.raises(node.db.exceptions.ClientError):
        big = {"pk": {"S": "p"}, "sk": {"S": "big"}, "v": {"S": "x" * 8000}}
        transaction({"pk": {"S": "p"}, "sk": {"S": "a"}}, big)

    # THEN the next transaction is written once the log is read again (the first one's is not left open)
    def written() -> bool:
        try:
            transaction({"pk": {"S": "p"}, "sk": {"S": "b"}}, {"pk": {"S": "p"}, "sk": {"S": "c"}})
        except node.db.exceptions.ClientError:
            return False
        return True

    wait_for(written, timeout=30, message="a transaction written after a failed one")
    # AND neither wrote half of itself
    assert [i["sk"]["S"] for i in items_on_another_node(store, "p")] == ["b", "c"]
