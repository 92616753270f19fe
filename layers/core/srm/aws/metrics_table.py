"""The metrics table (DynamoDB): aggregated replication metrics, one item per series and window.

Keys are made for "one series over a time range" (one ``Query``, sorted by time):

* ``pk`` (S) = ``<resolution>#<level>#<source>#<target>[#<topic>[#<partition>]]``, resolution ``1m`` or ``1h``,
  level ``flow`` (SRM's cluster metrics), ``topic`` (the upstream topic) or ``partition``;
* ``sk`` (N) = the window's start, epoch ms.

The other attributes are the metrics of that window, named as the metrics API names them (MM2's and SRM's names):
numbers (``record-count``, ``record-rate``, ``replication-records-lag`` …), distributions as maps
(``replication-latency-ms`` = ``{count, min, max, avg, p50, p95, p99}``) and counts by reason as maps
(``groups-skipped-by-reason``). A metric without data in the window is absent. 1-minute items carry
``expires_at`` (epoch s, the table's TTL attribute) = window start + ``minute_retention_s``; hourly items are kept.

Writing is idempotent: an item is the whole result of its window, so writing it again overwrites it with the same
content (nothing depends on the time of writing).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from botocore.exceptions import ClientError

from srm.metrics.model.series import MetricPoint, Series
from srm.metrics.model.store import MetricsStoreError

__all__ = ["MetricsTable", "create_metrics_table"]

log = logging.getLogger(__name__)

TTL_ATTRIBUTE = "expires_at"
_KEYS = ("pk", "sk", TTL_ATTRIBUTE)


def _to_attribute(value: Any) -> dict[str, Any] | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return {"N": str(value)}
    if isinstance(value, float):
        return {"N": repr(value)} if math.isfinite(value) else None
    if isinstance(value, Mapping):
        members = {str(k): a for k, v in value.items() if (a := _to_attribute(v)) is not None}
        return {"M": members}
    raise TypeError(f"metric values are numbers or maps of numbers, got {type(value).__name__}")


def _from_attribute(attribute: Mapping[str, Any]) -> Any:
    if "N" in attribute:
        text = attribute["N"]
        return int(text) if text.lstrip("-").isdigit() else float(text)
    if "M" in attribute:
        return {k: _from_attribute(v) for k, v in attribute["M"].items()}
    raise TypeError(f"unexpected attribute in the metrics table: {attribute}")


class MetricsTable:
    """Aggregated metrics in the metrics table: the DynamoDB adapter of
    :class:`srm.metrics.model.store.MetricsStore`."""

    def __init__(self, client: Any, table: str, *, minute_retention_s: int = 15 * 86_400) -> None:
        self._db = client
        self.table = table
        self.minute_retention_s = minute_retention_s

    def item(self, point: MetricPoint) -> dict[str, Any]:
        item: dict[str, Any] = {"pk": {"S": point.series.key}, "sk": {"N": str(point.window_start)}}
        for name, value in point.values.items():
            if name in _KEYS:
                raise ValueError(f"{name!r} is a key attribute of the metrics table, not a metric")
            if (attribute := _to_attribute(value)) is not None:
                item[name] = attribute
        if point.series.resolution == "1m":
            item[TTL_ATTRIBUTE] = {"N": str(point.window_start // 1000 + self.minute_retention_s)}
        return item

    def write(self, points: Iterable[MetricPoint]) -> int:
        written = 0
        batch: list[dict[str, Any]] = []
        for point in points:
            batch.append({"PutRequest": {"Item": self.item(point)}})
            if len(batch) == 25:
                self._write_batch(batch)
                written += len(batch)
                batch = []
        if batch:
            self._write_batch(batch)
            written += len(batch)
        return written

    def _write_batch(self, requests: list[dict[str, Any]]) -> None:
        pending = {self.table: requests}
        for attempt in range(8):
            try:
                response = self._db.batch_write_item(RequestItems=pending)
            except ClientError as e:
                raise MetricsStoreError(f"metrics table {self.table}: {e.response['Error']['Code']}") from e
            pending = response.get("UnprocessedItems") or {}
            if not pending:
                return
            time.sleep(min(0.05 * 2**attempt, 2.0))
        raise MetricsStoreError(f"metrics table {self.table}: items still unprocessed after retries (throttled?)")

    def query(self, series: Series, start_ms: int, end_ms: int) -> list[MetricPoint]:
        return list(self._query(series, start_ms, end_ms))

    def _query(self, series: Series, start_ms: int, end_ms: int) -> Iterator[MetricPoint]:
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :from AND :to",
            "ExpressionAttributeValues": {
                ":pk": {"S": series.key},
                ":from": {"N": str(start_ms)},
                ":to": {"N": str(end_ms)},
            },
        }
        while True:
            try:
                response = self._db.query(**kwargs)
            except ClientError as e:
                raise MetricsStoreError(f"metrics table {self.table}: {e.response['Error']['Code']}") from e
            for item in response.get("Items", []):
                values = {k: _from_attribute(v) for k, v in item.items() if k not in _KEYS}
                yield MetricPoint(series, int(item["sk"]["N"]), values)
            if "LastEvaluatedKey" not in response:
                return
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def create_metrics_table(client: Any, table: str) -> None:
    """Create the metrics table with its TTL if missing (the local runtime; on AWS the template defines it)."""
    try:
        client.create_table(
            TableName=table,
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "N"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            BillingMode="PAY_PER_REQUEST",
        )
    except ClientError as e:
        if e.response["Error"]["Code"] != "ResourceInUseException":
            raise
        return
    client.update_time_to_live(
        TableName=table, TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE}
    )
