"""The state table's plumbing: DynamoDB's errors as :class:`StateError`, single reads, paged queries, batched writes;
and creating a table with the state table's key shape where no template does (the local runtime).

What the items mean is :mod:`srm.aws.state`'s business (and :mod:`srm.aws.state_runs`'): this module knows only keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from srm.state.records import StateError

__all__ = ["StateTable", "create_state_table", "create_table"]

# DynamoDB's bound on the requests of one BatchWriteItem.
_BATCH_WRITE_MAX = 25

_Record = TypeVar("_Record")


class StateTable:
    """Items of the state table by key (``pk``, ``sk``); every DynamoDB error leaves it as :class:`StateError`."""

    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self.table = table

    @contextlib.contextmanager
    def _access(self, what: str) -> Iterator[None]:
        """DynamoDB's errors as the one error of this store: ``what`` is ``read`` or ``write``."""
        try:
            yield
        except ClientError as e:
            raise StateError(f"cannot {what} state table {self.table}: {e.response['Error']['Message']}") from e
        except BotoCoreError as e:  # not reachable, no credentials…
            raise StateError(f"cannot {what} state table {self.table}: {e}") from e

    def _get(self, pk: str, sk: str) -> dict[str, Any] | None:
        """One item, read consistently; None when there is none."""
        with self._access("read"):
            item: dict[str, Any] | None = self._db.get_item(
                TableName=self.table, ConsistentRead=True, Key={"pk": {"S": pk}, "sk": {"S": sk}}
            ).get("Item")
        return item

    def _items(self, pk: str) -> list[dict[str, Any]]:
        """Every item under one partition key."""
        return self._query(KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}})

    def _by_sort_key(self, pk: str, decode: Callable[[dict[str, Any]], _Record]) -> dict[str, _Record]:
        """Every item under one partition key, decoded, by sort key."""
        return {i["sk"]["S"]: decode(i) for i in self._items(pk)}

    def _query(self, single_page: bool = False, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        with self._access("read"):
            while True:
                page = self._db.query(TableName=self.table, **kwargs)
                items.extend(page.get("Items", []))
                if single_page or "LastEvaluatedKey" not in page:
                    return items
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _put(self, item: dict[str, Any]) -> None:
        with self._access("write"):
            self._db.put_item(TableName=self.table, Item=item)

    def _delete(self, pk: str, sk: str) -> None:
        with self._access("write"):
            self._db.delete_item(TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}})

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        with self._access("write"):
            for i in range(0, len(requests), _BATCH_WRITE_MAX):
                pending: dict[str, Any] = {self.table: requests[i : i + _BATCH_WRITE_MAX]}
                while pending:
                    response = self._db.batch_write_item(RequestItems=pending)
                    pending = response.get("UnprocessedItems") or {}


def create_state_table(client: Any, table: str) -> None:
    """Create the state table if missing (the local runtime; on AWS template.yaml defines it)."""
    create_table(client, table, "pk", "sk")


def create_table(client: Any, table: str, hash_key: str, range_key: str) -> None:
    """Create an on-demand table keyed by two strings, unless it exists."""
    try:
        client.create_table(
            TableName=table,
            AttributeDefinitions=[
                {"AttributeName": hash_key, "AttributeType": "S"},
                {"AttributeName": range_key, "AttributeType": "S"},
            ],
            KeySchema=[
                {"AttributeName": hash_key, "KeyType": "HASH"},
                {"AttributeName": range_key, "KeyType": "RANGE"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
    except ClientError as e:
        if e.response["Error"]["Code"] != "ResourceInUseException":
            raise
