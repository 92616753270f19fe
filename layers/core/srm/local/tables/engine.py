"""Tables in memory with DynamoDB's API (the operations srm's stores use), as requests and responses in DynamoDB's
JSON shapes. Pure: no I/O, no locking (the caller serializes), so the same requests give the same results wherever
the same changes were applied first.

Every mutating operation returns its response and the :class:`Change` list it made: what a replicated store writes
to its log, and what :meth:`Tables.apply` replays elsewhere.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from srm.local.tables.expressions import ExpressionError, Item, Value, apply_update, compile_condition
from srm.local.tables.table import Table, TableError, key_value, validation_error

__all__ = ["Change", "TableError", "Tables"]

Response = dict[str, Any]


@dataclass(frozen=True)
class Change:
    """One effect of a write: an item set (``item``) or deleted (None), or a table's definition set or dropped."""

    table: str
    key: tuple[Any, ...] | None  # the item's key (see Table.key_of); None: the change is to the table itself
    item: Item | None
    definition: dict[str, Any] | None = None
    key_item: Item | None = None  # the item's key attributes, as written


class Tables:
    """A set of tables; one method per DynamoDB operation (``PutItem`` → :meth:`put_item`), each taking the request
    as DynamoDB's JSON and returning ``(response, changes)`` (reads: the response alone)."""

    def __init__(self) -> None:
        self._tables: dict[str, Table] = {}

    # -- dispatch ------------------------------------------------------------------------------------------------
    WRITES = frozenset(
        {
            "CreateTable",
            "DeleteTable",
            "UpdateTimeToLive",
            "PutItem",
            "DeleteItem",
            "UpdateItem",
            "BatchWriteItem",
            "TransactWriteItems",
        }
    )
    READS = frozenset({"GetItem", "Query", "Scan", "ListTables", "DescribeTable", "DescribeTimeToLive", "BatchGetItem"})

    def execute(self, operation: str, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        """Run one operation; reads make no changes."""
        method: Callable[[dict[str, Any]], Any] | None = getattr(self, _snake(operation), None)
        if operation not in self.WRITES | self.READS or method is None:
            raise TableError("UnknownOperationException", f"{operation} is not supported by this store")
        try:
            result = method(request)
        except ExpressionError as e:
            raise validation_error(str(e)) from None
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise validation_error(f"invalid {operation} request: {type(e).__name__}: {e}") from None
        if operation in self.WRITES:
            return result  # type: ignore[no-any-return]
        return result, []

    def needs_current_state(self, operation: str, request: dict[str, Any]) -> bool:
        """Whether the operation's outcome depends on what is stored (a condition, an update of stored values, old
        values returned): a replicated store must be caught up before it runs it."""
        if operation in ("UpdateItem", "TransactWriteItems", "CreateTable", "DeleteTable", "UpdateTimeToLive"):
            return True
        if operation in ("PutItem", "DeleteItem"):
            return "ConditionExpression" in request or request.get("ReturnValues", "NONE") != "NONE"
        return operation in self.READS and bool(request.get("ConsistentRead"))

    def item_key(self, operation: str, request: dict[str, Any]) -> str | None:
        """The one item a single-item write touches, as a string (None: a write of several items, or of a table)."""
        if operation not in ("PutItem", "UpdateItem", "DeleteItem") or request.get("TableName") not in self._tables:
            return None
        table = self._tables[request["TableName"]]
        try:
            key = table.key_attributes(request["Item"] if operation == "PutItem" else request["Key"])
        except KeyError:
            return None
        return json.dumps([table.name, key], sort_keys=True, separators=(",", ":"))

    # -- tables --------------------------------------------------------------------------------------------------
    def _table(self, name: str) -> Table:
        table = self._tables.get(name)
        if table is None:
            raise TableError("ResourceNotFoundException", f"Requested resource not found: Table: {name} not found")
        return table

    def _describe(self, table: Table) -> dict[str, Any]:
        d = table.definition
        return {
            "TableName": table.name,
            "KeySchema": d.get("KeySchema", []),
            "AttributeDefinitions": d.get("AttributeDefinitions", []),
            "TableStatus": "ACTIVE",
            "CreationDateTime": table.created,
            "ItemCount": table.count(),
            "TableArn": f"arn:aws:dynamodb:local:000000000000:table/{table.name}",
            "BillingModeSummary": {"BillingMode": d.get("BillingMode", "PAY_PER_REQUEST")},
        }

    def create_table(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        name = request["TableName"]
        if name in self._tables:
            raise TableError("ResourceInUseException", f"Table already exists: {name}")
        definition: dict[str, Any] = {
            k: request[k] for k in ("TableName", "KeySchema", "AttributeDefinitions") if k in request
        }
        definition["BillingMode"] = request.get("BillingMode", "PAY_PER_REQUEST")
        change = Change(name, None, None, definition)
        self.apply(change)
        return {"TableDescription": self._describe(self._tables[name])}, [change]

    def delete_table(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        table = self._table(request["TableName"])
        change = Change(table.name, None, None, None)
        description = self._describe(table)
        self.apply(change)
        return {"TableDescription": {**description, "TableStatus": "DELETING"}}, [change]

    def describe_table(self, request: dict[str, Any]) -> Response:
        return {"Table": self._describe(self._table(request["TableName"]))}

    def list_tables(self, request: dict[str, Any]) -> Response:
        names = sorted(self._tables)
        start = request.get("ExclusiveStartTableName")
        if start:
            names = [n for n in names if n > start]
        limit = int(request.get("Limit", 100))
        response: Response = {"TableNames": names[:limit]}
        if len(names) > limit:
            response["LastEvaluatedTableName"] = names[limit - 1]
        return response

    def update_time_to_live(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        table = self._table(request["TableName"])
        spec = request["TimeToLiveSpecification"]
        change = Change(table.name, None, None, {**table.definition, "TimeToLiveSpecification": spec})
        self.apply(change)
        return {"TimeToLiveSpecification": spec}, [change]

    def describe_time_to_live(self, request: dict[str, Any]) -> Response:
        spec = self._table(request["TableName"]).definition.get("TimeToLiveSpecification")
        if spec and spec.get("Enabled"):
            return {"TimeToLiveDescription": {"TimeToLiveStatus": "ENABLED", "AttributeName": spec["AttributeName"]}}
        return {"TimeToLiveDescription": {"TimeToLiveStatus": "DISABLED"}}

    # -- items ---------------------------------------------------------------------------------------------------
    def get_item(self, request: dict[str, Any]) -> Response:
        table = self._table(request["TableName"])
        item = table.get(table.key_of(request["Key"], "key"))
        return {} if item is None else {"Item": copy.deepcopy(item)}

    def batch_get_item(self, request: dict[str, Any]) -> Response:
        found: dict[str, list[Item]] = {}
        for name, spec in request["RequestItems"].items():
            table = self._table(name)
            items = [table.get(table.key_of(k, "key")) for k in spec["Keys"]]
            found[name] = [copy.deepcopy(i) for i in items if i is not None]
        return {"Responses": found, "UnprocessedKeys": {}}

    def put_item(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        table = self._table(request["TableName"])
        item = request["Item"]
        key = table.key_of(item)
        old = table.get(key)
        self._check(request, old)
        change = Change(table.name, key, copy.deepcopy(item), key_item=table.key_attributes(item))
        self.apply(change)
        return self._returned(request, old, None), [change]

    def delete_item(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        table = self._table(request["TableName"])
        key = table.key_of(request["Key"], "key")
        old = table.get(key)
        self._check(request, old)
        changes = [] if old is None else [Change(table.name, key, None, key_item=table.key_attributes(old))]
        for change in changes:
            self.apply(change)
        return self._returned(request, old, None), changes

    def update_item(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        table = self._table(request["TableName"])
        key_item = request["Key"]
        key = table.key_of(key_item, "key")
        old = table.get(key)
        self._check(request, old)
        new = self._updated(table, request, old)
        change = Change(table.name, key, new, key_item=table.key_attributes(new))
        self.apply(change)
        return self._returned(request, old, new), [change]

    def _updated(self, table: Table, request: dict[str, Any], old: Item | None) -> Item:
        base = old if old is not None else dict(request["Key"])
        if "UpdateExpression" not in request:
            if "AttributeUpdates" in request:
                raise validation_error("AttributeUpdates is not supported by this store: use UpdateExpression")
            return copy.deepcopy(base)
        new = apply_update(
            copy.deepcopy(base),
            request["UpdateExpression"],
            request.get("ExpressionAttributeNames"),
            request.get("ExpressionAttributeValues"),
        )
        for name in table.key_attributes(request["Key"]):
            if new.get(name) != request["Key"][name]:
                raise validation_error(f"One or more parameter values were invalid: Cannot update attribute {name}")
        return new

    @staticmethod
    def _check(request: dict[str, Any], old: Item | None) -> None:
        if "Expected" in request:
            raise validation_error("Expected is not supported by this store: use ConditionExpression")
        condition = request.get("ConditionExpression")
        if condition is None:
            return
        predicate = compile_condition(
            condition, request.get("ExpressionAttributeNames"), request.get("ExpressionAttributeValues")
        )
        if not predicate(old or {}):
            raise TableError("ConditionalCheckFailedException", "The conditional request failed")

    @staticmethod
    def _returned(request: dict[str, Any], old: Item | None, new: Item | None) -> Response:
        wanted = request.get("ReturnValues", "NONE")
        if wanted == "ALL_OLD" and old is not None:
            return {"Attributes": copy.deepcopy(old)}
        if wanted in ("ALL_NEW", "UPDATED_NEW") and new is not None:
            if wanted == "UPDATED_NEW":
                return {"Attributes": {k: v for k, v in new.items() if (old or {}).get(k) != v}}
            return {"Attributes": copy.deepcopy(new)}
        if wanted == "UPDATED_OLD" and old is not None and new is not None:
            return {"Attributes": {k: v for k, v in old.items() if new.get(k) != v}}
        return {}

    def batch_write_item(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        planned: list[Change] = []
        for name, requests in request["RequestItems"].items():
            table = self._table(name)
            if len(requests) > 25:
                raise validation_error("Too many items requested for the BatchWriteItem call")
            for r in requests:
                if "PutRequest" in r:
                    item = r["PutRequest"]["Item"]
                    planned.append(
                        Change(name, table.key_of(item), copy.deepcopy(item), key_item=table.key_attributes(item))
                    )
                else:
                    key_item = r["DeleteRequest"]["Key"]
                    planned.append(
                        Change(name, table.key_of(key_item, "key"), None, key_item=table.key_attributes(key_item))
                    )
        for change in planned:
            self.apply(change)
        return {"UnprocessedItems": {}}, planned

    def transact_write_items(self, request: dict[str, Any]) -> tuple[Response, list[Change]]:
        """All or nothing: every condition is checked first; one failing cancels the whole transaction."""
        actions = request["TransactItems"]
        if len(actions) > 100:
            raise validation_error("Member must have length less than or equal to 100")
        reasons: list[dict[str, str]] = []
        planned: list[Change] = []
        failed = False
        for action in actions:
            ((kind, spec),) = action.items()
            table = self._table(spec["TableName"])
            key_item = spec["Item"] if kind == "Put" else spec["Key"]
            key = table.key_of(key_item, "item" if kind == "Put" else "key")
            old = table.get(key)
            try:
                self._check(spec, old)
            except TableError:
                failed = True
                reasons.append({"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"})
                continue
            reasons.append({"Code": "None"})
            key_attributes = table.key_attributes(key_item)
            if kind == "Put":
                planned.append(Change(table.name, key, copy.deepcopy(spec["Item"]), key_item=key_attributes))
            elif kind == "Delete":
                planned.append(Change(table.name, key, None, key_item=key_attributes))
            elif kind == "Update":
                planned.append(Change(table.name, key, self._updated(table, spec, old), key_item=key_attributes))
        if failed:
            codes = ", ".join(r["Code"] for r in reasons)
            raise TableError(
                "TransactionCanceledException",
                f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
                reasons,
            )
        if len({(c.table, c.key) for c in planned}) != len(planned):
            raise validation_error("Transaction request cannot include multiple operations on one item")
        for change in planned:
            self.apply(change)
        return {}, planned

    # -- reading many ----------------------------------------------------------------------------------------------
    def query(self, request: dict[str, Any]) -> Response:
        table = self._table(request["TableName"])
        names = request.get("ExpressionAttributeNames")
        values = request.get("ExpressionAttributeValues") or {}
        text = request.get("KeyConditionExpression")
        if not text:
            raise validation_error("Either the KeyConditions or KeyConditionExpression parameter must be specified")
        key_condition = compile_condition(text, names, values)
        hash_value = _hash_value(text, table.hash_name, names or {}, values)
        forward = request.get("ScanIndexForward", True)
        after = None
        if "ExclusiveStartKey" in request:
            after = table.key_of(request["ExclusiveStartKey"], "key")[1]
        candidates = table.items_of(key_value(hash_value), forward, after)
        return self._page(table, request, (i for i in candidates if key_condition(i)))

    def scan(self, request: dict[str, Any]) -> Response:
        table = self._table(request["TableName"])
        items: Iterator[Item] = table.all_items()
        if "ExclusiveStartKey" in request:
            start = table.key_of(request["ExclusiveStartKey"], "key")
            listed = list(items)
            index = next((n for n, i in enumerate(listed) if table.key_of(i) == start), len(listed) - 1)
            items = iter(listed[index + 1 :])
        return self._page(table, request, items)

    def _page(self, table: Table, request: dict[str, Any], candidates: Iterator[Item]) -> Response:
        limit = request.get("Limit")
        filter_text = request.get("FilterExpression")
        keep = (
            compile_condition(
                filter_text, request.get("ExpressionAttributeNames"), request.get("ExpressionAttributeValues")
            )
            if filter_text
            else None
        )
        found: list[Item] = []
        scanned = 0
        last: Item | None = None
        for item in candidates:
            scanned += 1
            last = item
            if keep is None or keep(item):
                found.append(copy.deepcopy(item))
            if limit is not None and scanned >= int(limit):
                break
        else:
            last = None
        response: Response = {"Count": len(found), "ScannedCount": scanned}
        if request.get("Select") != "COUNT":
            response["Items"] = found
        if last is not None:
            response["LastEvaluatedKey"] = table.key_attributes(last)
        return response

    # -- replication -----------------------------------------------------------------------------------------------
    def apply(self, change: Change) -> None:
        """Make one change (a replica replays those another made, in the same order)."""
        if change.key is None:
            if change.definition is None:
                self._tables.pop(change.table, None)
            elif change.table in self._tables:
                self._tables[change.table].definition = change.definition
            else:
                self._tables[change.table] = Table(change.definition)
            return
        table = self._tables.get(change.table)
        if table is not None:  # a change to a table dropped meanwhile has nothing to change
            table.set(change.key, change.item)

    def key_of(self, table: str, item: Item) -> tuple[Any, ...]:
        return self._table(table).key_of(item)

    def definitions(self) -> dict[str, dict[str, Any]]:
        return {name: t.definition for name, t in self._tables.items()}

    def clear(self) -> None:
        self._tables.clear()


def _hash_value(text: str, hash_name: str, names: dict[str, str], values: dict[str, Value]) -> Value:
    """The value the key condition gives the hash key (``<hash> = :v``, in either order)."""
    import re

    aliases = [hash_name] + [n for n, real in names.items() if real == hash_name]
    alias = "|".join(re.escape(a) for a in aliases)
    m = re.search(rf"(?<![#\w])(?:{alias})\s*=\s*(:\w+)|(:\w+)\s*=\s*(?:{alias})(?![\w])", text)
    if m is None:
        raise validation_error(f"Query condition missed key schema element: {hash_name}")
    placeholder = m.group(1) or m.group(2)
    if placeholder not in values:
        raise validation_error(f"An expression attribute value used in expression is not defined: {placeholder}")
    return values[placeholder]


def _snake(name: str) -> str:
    out = [name[0].lower()]
    for ch in name[1:]:
        out.append(f"_{ch.lower()}" if ch.isupper() else ch)
    return "".join(out)
