"""Bringing an ``srm run`` state kept in the layout before the state topic over: the state table's items (offset
runs, checkpoints, mappings, continuity; :mod:`srm.aws.state` documents them) become the state topic's records
(:mod:`srm.kafka.state`). Offset runs are what exact translation stands on: nothing is left behind, and an item this
version cannot read stops the upgrade with a message rather than being dropped."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from srm.errors import PermanentError
from srm.kafka.state import KafkaState
from srm.kafka.state_log import Key

__all__ = ["UpgradeError", "state_table_records", "upgrade_state"]

log = logging.getLogger(__name__)

_NOT_STATE = ("nodes#", "members#", "upgraded#")  # the nodes' own items, and the mark of an upgrade done
_MARK = {"pk": {"S": "upgraded#state"}, "sk": {"S": "topic"}}


class UpgradeError(PermanentError, RuntimeError):
    """An item of the old layout that cannot be carried over (``srm run`` stops with it, nothing changed)."""


def _value(attribute: dict[str, Any]) -> Any:
    (kind, value), *_ = attribute.items()
    if kind == "N":
        return int(value)
    if kind == "M":
        return {k: _value(v) for k, v in value.items()}
    if kind == "L":
        return [_value(v) for v in value]
    return value  # S, BOOL


def _record(pk: str, sk: str, attributes: dict[str, Any]) -> list[tuple[Key, Any]]:
    kind, _, rest = pk.partition("#")
    if kind == "old":
        label, _, original = rest.partition("#")
        return [(("old", label, *key), value) for key, value in _record(original, sk, attributes)]
    if kind == "runs":
        scope, partition = rest.rsplit("#", 1)
        source, target, topic = scope.split("#", 2)
        return [(("runs", source, target, topic, int(partition), int(sk)), [attributes["d"], attributes["n"]])]
    if kind in ("origin", "next"):
        source, target, topic = rest.split("#", 2)
        value = attributes["n"] if kind == "next" else attributes
        return [((kind, source, target, topic, int(sk)), value)]
    if kind in ("lost", "reset"):
        source, target = rest.split("#", 1)
        topic, partition, number = sk.rsplit("#", 2)
        return [((kind, source, target, topic, int(partition), int(number)), attributes)]
    if kind == "ckpt":
        source, target, group = rest.split("#", 2)
        topic, partition = sk.rsplit("#", 1)
        return [(("ckpt", source, target, group, topic, int(partition)), attributes)]
    if kind == "flow":
        source, target = rest.split("#", 1)
        return [(("flow", source, target, name), value) for name, value in attributes.items()]
    if kind in ("topics", "esm"):
        source, target = rest.split("#", 1)
        return [((kind, source, target, sk), attributes)]
    raise UpgradeError(
        f"the state table holds an item this version of srm cannot carry over to the state topic ({pk} / {sk}): "
        "run the srm version that wrote it, or move .srm-local aside to start afresh"
    )


def state_table_records(dynamodb: Any, table: str) -> Iterator[tuple[Key, Any]]:
    """The state topic's records for every state item of the table (not the nodes' own)."""
    for page in dynamodb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        for item in page.get("Items", []):
            pk, sk = item.pop("pk")["S"], item.pop("sk")["S"]
            if not pk.startswith(_NOT_STATE):
                yield from _record(pk, sk, {name: _value(v) for name, v in item.items()})


def upgrade_state(dynamodb: Any, table: str, open_state: Callable[[], KafkaState]) -> int:
    """Copy the state table's state into the state topic (``open_state()``) once, when that is still empty; how many
    records were written. The table's items are left where they are (marked as carried over)."""
    if "Item" in dynamodb.get_item(TableName=table, Key=_MARK, ConsistentRead=True):
        return 0
    records = list(state_table_records(dynamodb, table))
    written = 0
    if records:
        state = open_state()
        try:
            if state.is_empty():
                state.import_records(records)
                written = len(records)
                log.info("state carried over from table %s to topic %s: %d records", table, state.log.topic, written)
        finally:
            state.stop()
    dynamodb.put_item(TableName=table, Item={**_MARK, "n": {"N": str(written)}})
    return written
