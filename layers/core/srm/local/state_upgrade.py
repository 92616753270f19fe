"""Bringing an ``srm run`` state kept in the layout before the state topic over: versions before it kept DynamoDB
items — the state table's, the metrics table's, the config table's and the nodes' — in the compacted topic
``srm-store.<group id>.internal`` (key ``i`` + ``[table, item key]``, value the item in DynamoDB's JSON), served by a
DynamoDB emulation. At the first start of this version the state table's items (offset runs, checkpoints, mappings,
continuity; :mod:`srm.aws.state` documents them) become the state topic's records (:mod:`srm.kafka.state`) and the
metrics table's items aggregated metrics (:mod:`srm.kafka.metrics_store`). The configuration is loaded from the file
at every start anyway, and the nodes note themselves again.

Offset runs are what exact translation stands on: nothing is left behind. The state is written in one transaction
with the mark of the upgrade, so a start stopped half-way carries it over again, and an item this version cannot
read stops the upgrade with a message rather than being dropped. The old topic is left as it is.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from srm.errors import PermanentError
from srm.kafka.metrics_store import KafkaMetrics
from srm.kafka.state import KafkaState
from srm.kafka.state_log import Key
from srm.metrics.model.series import MetricPoint, Series

__all__ = ["UpgradeError", "read_legacy_store", "state_items_records", "upgrade_store"]

log = logging.getLogger(__name__)

_NOT_STATE = ("nodes#", "members#", "upgraded#")  # the nodes' own items, and the mark of an upgrade done before
_STATE_CARRIED = "upgraded#state"  # an earlier version carried the state table over to the state topic already
_MARK = ("upgrade", "store")
_METRIC_KEYS = ("pk", "sk", "expires_at")


class UpgradeError(PermanentError, RuntimeError):
    """An item of the old layout that cannot be carried over (``srm run`` stops with it, nothing changed)."""


def _value(attribute: dict[str, Any]) -> Any:
    (kind, value), *_ = attribute.items()
    if kind == "N":
        return int(value) if value.lstrip("-").isdigit() else float(value)
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


def state_items_records(items: Iterable[dict[str, Any]]) -> Iterator[tuple[Key, Any]]:
    """The state topic's records for the state table's items (DynamoDB JSON), the nodes' own left out."""
    for item in items:
        attributes = dict(item)
        pk, sk = attributes.pop("pk")["S"], attributes.pop("sk")["S"]
        if not pk.startswith(_NOT_STATE):
            yield from _record(pk, sk, {name: _value(v) for name, v in attributes.items()})


def _metric_points(items: Iterable[dict[str, Any]]) -> Iterator[MetricPoint]:
    for item in items:
        values = {k: _value(v) for k, v in item.items() if k not in _METRIC_KEYS}
        yield MetricPoint(Series.parse(item["pk"]["S"]), int(item["sk"]["N"]), values)


def read_legacy_store(consumer: dict[str, Any], topic: str, timeout_s: float = 30.0) -> dict[str, list[dict[str, Any]]]:
    """The items of every table the old store topic holds (the latest of each key), by table."""
    conf = {
        **consumer,
        "group.id": f"srm-upgrade-{uuid.uuid4().hex[:8]}",  # assigned, never joins nor commits
        "enable.auto.commit": "false",
        "isolation.level": "read_committed",
    }
    for key in ("group.instance.id", "partition.assignment.strategy"):
        conf.pop(key, None)
    reader = Consumer(conf)
    latest: dict[bytes, bytes | None] = {}
    try:
        partition = TopicPartition(topic, 0)
        _, end = reader.get_watermark_offsets(partition, timeout=timeout_s)
        reader.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_s
        idle = 0  # polls in a row that found nothing: past the last record (a transaction marker may end the log)
        while end > 0 and reader.position([partition])[0].offset < end and idle < 4:
            if time.monotonic() > deadline:
                raise UpgradeError(f"cannot read {topic} to its end (offset {end}) within {timeout_s:.0f}s")
            msg = reader.poll(0.5)
            if msg is None:
                idle += 1 if reader.position([partition])[0].offset >= 0 else 0
                continue
            idle = 0
            if msg.error() is not None:
                raise KafkaException(msg.error())
            raw = msg.key() or b""
            if raw.startswith(b"i"):
                latest[raw] = msg.value()
    finally:
        reader.close()
    tables: dict[str, list[dict[str, Any]]] = {}
    for raw, value in latest.items():
        if value is not None:
            table, _ = json.loads(raw[1:])
            tables.setdefault(table, []).append(json.loads(value))
    return tables


def upgrade_store(
    state: KafkaState,
    legacy_topic: str,
    read_legacy: Callable[[], dict[str, list[dict[str, Any]]]],
    open_metrics: Callable[[], KafkaMetrics],
    *,
    state_table: str = "srm-state",
    metrics_table: str = "srm-metrics",
) -> tuple[int, int]:
    """Carry the old store topic's state and aggregated metrics over, once (see the module docstring): how many state
    records and metric points were written."""
    if state.get(*_MARK) is not None:
        return 0, 0
    tables = read_legacy()
    state_items = tables.get(state_table, [])
    carried_before = any(i.get("pk", {}).get("S") == _STATE_CARRIED for i in state_items)
    records = [] if carried_before or not state.is_empty() else list(state_items_records(state_items))
    points = list(_metric_points(tables.get(metrics_table, [])))
    if points:
        metrics = open_metrics()
        try:
            metrics.write(points)
        finally:
            metrics.stop()
    # all or nothing with its mark: a start stopped half-way finds no mark and carries the state over again
    mark = {"from": legacy_topic, "records": len(records), "points": len(points), "at": int(time.time() * 1000)}
    state.log.write([*records, (_MARK, mark)], owner="upgrade")
    state.log.release(["upgrade"])
    log.info(
        "carried over from %s (the layout before this version): %d state records, %d aggregated metric points; it is "
        "no longer used (delete it once this version runs well)",
        legacy_topic,
        len(records),
        len(points),
    )
    return len(records), len(points)
