"""One table in memory: its key schema, and its items grouped by hash key, each group in DynamoDB's order of the range
key (what :class:`srm.local.tables.engine.Tables` reads and writes)."""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from srm.local.tables.expressions import Item, Value, sort_key

__all__ = ["Table", "TableError", "key_value", "validation_error"]


class TableError(Exception):
    """An error DynamoDB answers with: ``code`` is its name (``ConditionalCheckFailedException``…)."""

    def __init__(self, code: str, message: str, reasons: list[dict[str, str]] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reasons = reasons


def validation_error(message: str) -> TableError:
    return TableError("ValidationException", message)


def key_value(value: Value) -> tuple[str, Any]:
    kind, content = next(iter(value.items()))
    return kind, content


@dataclass
class Table:
    """A table's definition and items, keyed ``(hash key, range sort key)``."""

    definition: dict[str, Any]  # the CreateTable request, and TimeToLiveSpecification when set
    hash_name: str = ""
    range_name: str | None = None
    types: dict[str, str] = field(default_factory=dict)
    # hash key → (sorted range sort keys, range sort key → item); tables without a range key use None
    buckets: dict[tuple[str, Any], tuple[list[Any], dict[Any, Item]]] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        for k in self.definition.get("KeySchema", []):
            if k["KeyType"] == "HASH":
                self.hash_name = k["AttributeName"]
            else:
                self.range_name = k["AttributeName"]
        self.types = {a["AttributeName"]: a["AttributeType"] for a in self.definition.get("AttributeDefinitions", [])}

    @property
    def name(self) -> str:
        return str(self.definition["TableName"])

    def key_of(self, item: Item, what: str = "item") -> tuple[Any, ...]:
        """``(hash key, range sort key)`` of an item or a key, validated against the schema."""
        parts = []
        names = [self.hash_name] + ([self.range_name] if self.range_name else [])
        for name in names:
            value = item.get(name)
            if value is None:
                raise validation_error(
                    f"One or more parameter values were invalid: Missing the key {name} in the {what}"
                )
            kind, _ = key_value(value)
            if kind != self.types.get(name, kind):
                raise validation_error(
                    f"One or more parameter values were invalid: Type mismatch for key {name} expected: "
                    f"{self.types[name]} actual: {kind}"
                )
            parts.append(value)
        hash_key = key_value(parts[0])
        return (hash_key, sort_key(parts[1]) if self.range_name else None)

    def key_attributes(self, item: Item) -> Item:
        names = [self.hash_name] + ([self.range_name] if self.range_name else [])
        return {n: item[n] for n in names}

    def get(self, key: tuple[Any, ...]) -> Item | None:
        bucket = self.buckets.get(key[0])
        return None if bucket is None else bucket[1].get(key[1])

    def set(self, key: tuple[Any, ...], item: Item | None) -> None:
        bucket = self.buckets.get(key[0])
        if item is None:
            if bucket is not None and key[1] in bucket[1]:
                del bucket[1][key[1]]
                bucket[0].pop(bisect.bisect_left(bucket[0], key[1]))
                if not bucket[1]:
                    del self.buckets[key[0]]
            return
        if bucket is None:
            bucket = self.buckets[key[0]] = ([], {})
        if key[1] not in bucket[1]:
            bisect.insort(bucket[0], key[1])
        bucket[1][key[1]] = item

    def items_of(self, hash_key: tuple[str, Any], forward: bool, after: Any = None) -> Iterator[Item]:
        bucket = self.buckets.get(hash_key)
        if bucket is None:
            return
        keys, items = bucket
        if forward:
            start = 0 if after is None else bisect.bisect_right(keys, after)
            indices: Any = range(start, len(keys))
        else:
            end = len(keys) if after is None else bisect.bisect_left(keys, after)
            indices = range(end - 1, -1, -1)
        for i in indices:
            yield items[keys[i]]

    def all_items(self) -> Iterator[Item]:
        for hash_key in sorted(self.buckets, key=repr):
            yield from self.items_of(hash_key, True)

    def count(self) -> int:
        return sum(len(b[1]) for b in self.buckets.values())
