"""The state table (DynamoDB): offset runs and the other bookkeeping replication needs to survive restarts.

This module alone knows the item layout. Keys: ``pk`` (S) and ``sk`` (S).

========================================  ==========================  ==============================================
item                                      pk                          sk / attributes
========================================  ==========================  ==============================================
offset run (see :mod:`srm.offsets`)       ``runs#<src>#<tgt>#<topic>#<p>``  ``sk`` = upstream start, 20 digits; ``d``, ``n``
========================================  ==========================  ==============================================

Offset runs are written once per batch per partition. The last run of each partition is cached in the container;
extending it is a conditional put on its previous length, so a stale cache (the partition was processed elsewhere
meanwhile) is detected, reloaded and retried rather than overwriting newer state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from srm.offsets import Run, merge_runs

__all__ = ["StateError", "StateStore", "create_state_table"]

log = logging.getLogger(__name__)

_WIDTH = 20


class StateError(RuntimeError):
    """The state table could not be read or written (retriable)."""


def _sk(offset: int) -> str:
    return f"{offset:0{_WIDTH}d}"


def _runs_pk(source: str, target: str, topic: str, partition: int) -> str:
    return f"runs#{source}#{target}#{topic}#{partition}"


def _run(item: dict[str, Any]) -> Run:
    return Run(int(item["sk"]["S"]), int(item["d"]["N"]), int(item["n"]["N"]))


def _run_item(pk: str, run: Run) -> dict[str, Any]:
    return {
        "pk": {"S": pk},
        "sk": {"S": _sk(run.upstream)},
        "d": {"N": str(run.downstream)},
        "n": {"N": str(run.length)},
    }


class StateStore:
    def __init__(self, client: Any, table: str) -> None:
        self._db = client
        self.table = table
        self._last_runs: dict[str, Run] = {}
        self._lock = threading.Lock()

    # -- offset runs -------------------------------------------------------------------------------------------
    def record_runs(self, source: str, target: str, topic: str, partition: int, new: Sequence[Run]) -> None:
        """Store a batch's runs for one partition (see :func:`srm.offsets.merge_runs`)."""
        if not new:
            return
        pk = _runs_pk(source, target, topic, partition)
        for attempt in range(3):
            with self._lock:
                cached = self._last_runs.get(pk)
            region = [cached] if cached is not None and cached.upstream_end <= new[0].upstream else None
            if region is None:
                region = self._load_region(pk, new[0].upstream)
            merged = merge_runs(region, new)
            try:
                self._write_region(pk, region, merged)
            except _StaleCache:
                with self._lock:
                    self._last_runs.pop(pk, None)
                log.info("state for %s changed elsewhere; reloading (attempt %d)", pk, attempt + 1)
                continue
            with self._lock:
                self._last_runs[pk] = merged[-1]
            return
        raise StateError(f"could not record offset runs for {topic}-{partition}: concurrent writers")

    def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]:
        """Every run of a partition, in upstream order."""
        pk = _runs_pk(source, target, topic, partition)
        return [
            _run(i)
            for i in self._query(KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}})
        ]

    def runs_around(self, source: str, target: str, topic: str, partition: int, upstream_offset: int) -> list[Run]:
        """The runs :func:`srm.offsets.translate` needs for one offset: the run starting at or below it and the
        first run after it — two small queries, whatever the length of the history."""
        pk = _runs_pk(source, target, topic, partition)
        below = self._query(
            KeyConditionExpression="pk = :pk AND sk <= :sk",
            ExpressionAttributeValues={":pk": {"S": pk}, ":sk": {"S": _sk(upstream_offset)}},
            ScanIndexForward=False,
            Limit=1,
            single_page=True,
        )
        after = self._query(
            KeyConditionExpression="pk = :pk AND sk > :sk",
            ExpressionAttributeValues={":pk": {"S": pk}, ":sk": {"S": _sk(upstream_offset)}},
            Limit=1,
            single_page=True,
        )
        return [_run(i) for i in below + after]

    def _load_region(self, pk: str, first: int) -> list[Run]:
        """The stored runs a batch starting at ``first`` may touch: the run before it and every run after."""
        before = self._query(
            KeyConditionExpression="pk = :pk AND sk < :sk",
            ExpressionAttributeValues={":pk": {"S": pk}, ":sk": {"S": _sk(first)}},
            ScanIndexForward=False,
            Limit=1,
            single_page=True,
        )
        after = self._query(
            KeyConditionExpression="pk = :pk AND sk >= :sk",
            ExpressionAttributeValues={":pk": {"S": pk}, ":sk": {"S": _sk(first)}},
        )
        return [_run(i) for i in before + after]

    def _write_region(self, pk: str, old: list[Run], new: list[Run]) -> None:
        old_by_key = {r.upstream: r for r in old}
        new_keys = {r.upstream for r in new}
        puts = [r for r in new if old_by_key.get(r.upstream) != r]
        deletes = [r for r in old if r.upstream not in new_keys]
        # The run that already existed and grows is written first, conditionally: that is where a concurrent
        # writer would have been; everything else has keys no one else writes.
        for run in puts:
            previous = old_by_key.get(run.upstream)
            if previous is None:
                continue
            try:
                self._db.put_item(
                    TableName=self.table,
                    Item=_run_item(pk, run),
                    ConditionExpression="n = :n AND d = :d",
                    ExpressionAttributeValues={
                        ":n": {"N": str(previous.length)},
                        ":d": {"N": str(previous.downstream)},
                    },
                )
            except ClientError as e:
                if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
                    raise _StaleCache() from None
                raise StateError(f"cannot write offset runs: {e.response['Error']['Message']}") from e
        requests = [{"PutRequest": {"Item": _run_item(pk, r)}} for r in puts if r.upstream not in old_by_key]
        requests += [{"DeleteRequest": {"Key": {"pk": {"S": pk}, "sk": {"S": _sk(r.upstream)}}}} for r in deletes]
        self._batch_write(requests)

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _query(self, single_page: bool = False, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        try:
            while True:
                page = self._db.query(TableName=self.table, **kwargs)
                items.extend(page.get("Items", []))
                if single_page or "LastEvaluatedKey" not in page:
                    return items
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        except ClientError as e:
            raise StateError(f"cannot read state table {self.table}: {e.response['Error']['Message']}") from e

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        try:
            for i in range(0, len(requests), 25):
                pending: dict[str, Any] = {self.table: requests[i : i + 25]}
                while pending:
                    response = self._db.batch_write_item(RequestItems=pending)
                    pending = response.get("UnprocessedItems") or {}
        except ClientError as e:
            raise StateError(f"cannot write state table {self.table}: {e.response['Error']['Message']}") from e


class _StaleCache(Exception):
    pass


def create_state_table(client: Any, table: str) -> None:
    """Create the state table if missing (the local runtime; on AWS template.yaml defines it)."""
    _create_table(client, table, "pk", "sk")


def _create_table(client: Any, table: str, hash_key: str, range_key: str) -> None:
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
