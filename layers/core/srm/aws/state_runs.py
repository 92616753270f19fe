"""The state table's items of offset translation and continuity: offset runs, where a partition's runs begin, and
what cannot be replayed (the replicated end, records skipped past the last run, lost ranges, topic resets).

The item layout, and what each attribute means, is the table in :mod:`srm.aws.state`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from srm.aws.state_table import StateTable
from srm.core.continuity import LostRange
from srm.core.offsets import Origin, Run, merge_runs
from srm.state.records import LossRecord, ResetRecord, StateError

__all__ = ["OffsetRunState"]

log = logging.getLogger(__name__)

_WIDTH = 20


def _sk(offset: int) -> str:
    return f"{offset:0{_WIDTH}d}"


def _runs_pk(source: str, target: str, topic: str, partition: int) -> str:
    return f"runs#{source}#{target}#{topic}#{partition}"


def _origin_pk(source: str, target: str, topic: str) -> str:
    return f"origin#{source}#{target}#{topic}"


def _next_pk(source: str, target: str, topic: str) -> str:
    return f"next#{source}#{target}#{topic}"


def _lost_pk(source: str, target: str) -> str:
    return f"lost#{source}#{target}"


def _run(item: dict[str, Any]) -> Run:
    return Run(int(item["sk"]["S"]), int(item["d"]["N"]), int(item["n"]["N"]))


def _run_item(pk: str, run: Run) -> dict[str, Any]:
    return {
        "pk": {"S": pk},
        "sk": {"S": _sk(run.upstream)},
        "d": {"N": str(run.downstream)},
        "n": {"N": str(run.length)},
    }


def _loss(item: dict[str, Any]) -> LossRecord:
    topic, partition, start = item["sk"]["S"].rsplit("#", 2)
    reason = item.get("r", {}).get("S", "")
    return LossRecord(topic, int(partition), int(start), int(item["e"]["N"]), int(item["at"]["N"]), reason)


def _conditional(e: ClientError) -> bool:
    return bool(e.response["Error"]["Code"] == "ConditionalCheckFailedException")


class _StaleCache(Exception):
    pass


class OffsetRunState(StateTable):
    """Offset runs and continuity. The last run of each partition is cached in the container (see
    :meth:`record_runs`)."""

    def __init__(self, client: Any, table: str) -> None:
        super().__init__(client, table)
        self._last_runs: dict[str, Run] = {}
        self._lock = threading.Lock()

    # -- offset runs -------------------------------------------------------------------------------------------
    def record_runs(
        self,
        source: str,
        target: str,
        topic: str,
        partition: int,
        new: Sequence[Run],
        *,
        origin: Callable[[], Origin] | None = None,
    ) -> None:
        """Store a batch's runs for one partition (see :func:`srm.core.offsets.merge_runs`). When the partition has no
        run yet, ``origin()`` is recorded first, unless an origin is there already."""
        if not new:
            return
        pk = _runs_pk(source, target, topic, partition)
        for attempt in range(3):
            with self._lock:
                cached = self._last_runs.get(pk)
            region = [cached] if cached is not None and cached.upstream_end <= new[0].upstream else None
            if region is None:
                region = self._load_region(pk, new[0].upstream)
                if not region and origin is not None:
                    self._record_origin(source, target, topic, partition, origin)
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

    def origin(self, source: str, target: str, topic: str, partition: int) -> Origin | None:
        """Where the partition's runs begin, if recorded."""
        item = self._get(_origin_pk(source, target, topic), str(partition))
        if item is None:
            return None
        return Origin(int(item["o"]["N"]), item["f"]["BOOL"], item["tid"]["S"] if "tid" in item else None)

    def _record_origin(
        self, source: str, target: str, topic: str, partition: int, origin: Callable[[], Origin]
    ) -> None:
        try:
            found = origin()
        except Exception as e:  # the log start could not be looked up: the batch is retried
            raise StateError(f"cannot tell where the offset runs of {topic}-{partition} begin: {e}") from e
        item = {
            "pk": {"S": _origin_pk(source, target, topic)},
            "sk": {"S": str(partition)},
            "o": {"N": str(found.offset)},
            "f": {"BOOL": found.fresh},
            "at": {"N": str(int(time.time() * 1000))},
            **({"tid": {"S": found.topic_id}} if found.topic_id else {}),
        }
        try:
            self._db.put_item(TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)")
        except ClientError as e:
            if not _conditional(e):  # a condition failure: recorded by an earlier attempt
                raise StateError(f"cannot write state table {self.table}: {e.response['Error']['Message']}") from e

    def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]:
        """Every run of a partition, in upstream order."""
        return [_run(i) for i in self._items(_runs_pk(source, target, topic, partition))]

    def runs_around(self, source: str, target: str, topic: str, partition: int, upstream_offset: int) -> list[Run]:
        """The runs :func:`srm.core.offsets.translate` needs for one offset: the run starting at or below it and the
        first run after it — two small queries, whatever the length of the history. The later run is read first: runs
        are written in upstream order, so one seen there has every earlier run written before it (read the other way
        round, a batch written between the queries shows the run after the offset without the one holding it)."""
        pk = _runs_pk(source, target, topic, partition)
        after = self._runs_where(pk, ">", upstream_offset, nearest=True)
        return self._runs_where(pk, "<=", upstream_offset, nearest=True) + after

    def _load_region(self, pk: str, first: int) -> list[Run]:
        """The stored runs a batch starting at ``first`` may touch: the run before it and every run after."""
        return self._runs_where(pk, "<", first, nearest=True) + self._runs_where(pk, ">=", first)

    def _runs_where(self, pk: str, op: str, offset: int, *, nearest: bool = False) -> list[Run]:
        """Runs whose upstream start compares ``op`` to ``offset``; with ``nearest``, only the closest one."""
        query: dict[str, Any] = {
            "KeyConditionExpression": f"pk = :pk AND sk {op} :sk",
            "ExpressionAttributeValues": {":pk": {"S": pk}, ":sk": {"S": _sk(offset)}},
        }
        if nearest:
            query.update(Limit=1, ScanIndexForward=not op.startswith("<"))
        return [_run(i) for i in self._query(single_page=nearest, **query)]

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
                if _conditional(e):
                    raise _StaleCache() from None
                raise StateError(f"cannot write offset runs: {e.response['Error']['Message']}") from e
        requests = [{"PutRequest": {"Item": _run_item(pk, r)}} for r in puts if r.upstream not in old_by_key]
        requests += [{"DeleteRequest": {"Key": {"pk": {"S": pk}, "sk": {"S": _sk(r.upstream)}}}} for r in deletes]
        self._batch_write(requests)

    # -- what cannot be replayed: replicated end, lost ranges, topic resets ----------------------------------------
    def replicated_end(self, source: str, target: str, topic: str, partition: int, first: int) -> int | None:
        """The end of the partition's last offset run (None: no run), for a batch starting at ``first``: from the
        container's cache when the batch continues it (no read), else read from the table."""
        pk = _runs_pk(source, target, topic, partition)
        with self._lock:
            cached = self._last_runs.get(pk)
        if cached is not None and cached.upstream_end == first:
            return first
        found = self._query(
            single_page=True,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": pk}},
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        if not found:
            return None
        last = _run(found[0])
        with self._lock:
            self._last_runs[pk] = last
        return last.upstream_end

    def mark_processed(self, source: str, target: str, topic: str, partition: int, next_offset: int) -> None:
        """Note that the mirror dealt with the partition up to ``next_offset`` though its runs end below (the batch's
        last records were skipped); never moves back."""
        try:
            with self._access("write"):
                self._db.update_item(
                    TableName=self.table,
                    Key={"pk": {"S": _next_pk(source, target, topic)}, "sk": {"S": str(partition)}},
                    UpdateExpression="SET n = :n",
                    ConditionExpression="attribute_not_exists(n) OR n < :n",
                    ExpressionAttributeValues={":n": {"N": str(next_offset)}},
                )
        except StateError as e:
            if not isinstance(e.__cause__, ClientError) or not _conditional(e.__cause__):
                raise

    def processed(self, source: str, target: str, topic: str, partition: int) -> int | None:
        """What :meth:`mark_processed` last noted, if anything."""
        item = self._get(_next_pk(source, target, topic), str(partition))
        return None if item is None else int(item["n"]["N"])

    def record_loss(
        self, source: str, target: str, topic: str, partition: int, start: int, end: int, reason: str = ""
    ) -> int:
        """Record offsets ``[start, end)`` of a partition as lost (``reason``: skipped on purpose, and why); returns
        how many of them were not recorded yet (0 when a retried batch reports the same loss again)."""
        item = {
            "pk": {"S": _lost_pk(source, target)},
            "sk": {"S": f"{topic}#{partition}#{_sk(start)}"},
            "e": {"N": str(end)},
            "at": {"N": str(int(time.time() * 1000))},
            **({"r": {"S": reason}} if reason else {}),
        }
        try:
            with self._access("write"):
                old = self._db.put_item(
                    TableName=self.table,
                    Item=item,
                    ConditionExpression="attribute_not_exists(pk) OR e < :e",
                    ExpressionAttributeValues={":e": {"N": str(end)}},
                    ReturnValues="ALL_OLD",
                ).get("Attributes")
        except StateError as e:
            if isinstance(e.__cause__, ClientError) and _conditional(e.__cause__):
                return 0
            raise
        return end - (int(old["e"]["N"]) if old else start)

    def losses(self, source: str, target: str) -> list[LossRecord]:
        """Every lost range of the flow's current incarnations, by topic, partition and offset."""
        return [_loss(i) for i in self._items(_lost_pk(source, target))]

    def lost_ranges(self, source: str, target: str, topic: str, partition: int) -> list[LostRange]:
        """The lost ranges ``[start, end)`` of one partition (``(start, end, reason)`` for a skipped one)."""
        return [r.range for r in map(_loss, self._lost_items(source, target, topic, partition))]

    def _lost_items(self, source: str, target: str, topic: str, partition: int) -> list[dict[str, Any]]:
        return self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": _lost_pk(source, target)}, ":p": {"S": f"{topic}#{partition}#"}},
        )

    def flow_lost_ranges(self, source: str, target: str) -> dict[tuple[str, int], list[LostRange]]:
        """Every lost range of the flow, by topic-partition."""
        found: dict[tuple[str, int], list[LostRange]] = {}
        for r in self.losses(source, target):
            found.setdefault((r.topic, r.partition), []).append(r.range)
        return found

    def archive_partition(self, source: str, target: str, topic: str, partition: int, label: str) -> None:
        """Move what the state holds about a partition's current incarnation (runs, origin, lost ranges, ``next``)
        under ``old#<label>#…``: translation no longer sees it, the next batch starts the partition afresh."""
        runs_pk = _runs_pk(source, target, topic, partition)
        items = self._items(runs_pk)
        for pk in (_origin_pk(source, target, topic), _next_pk(source, target, topic)):
            found = self._get(pk, str(partition))
            if found is not None:
                items.append(found)
        items += self._lost_items(source, target, topic, partition)
        copies = [{"PutRequest": {"Item": {**i, "pk": {"S": f"old#{label}#{i['pk']['S']}"}}}} for i in items]
        self._batch_write(copies)  # copies first: a failure in between leaves both, never neither
        self._batch_write([{"DeleteRequest": {"Key": {"pk": i["pk"], "sk": i["sk"]}}} for i in items])
        with self._lock:
            self._last_runs.pop(runs_pk, None)

    def record_reset(self, source: str, target: str, reset: ResetRecord) -> None:
        self._put(
            {
                "pk": {"S": f"reset#{source}#{target}"},
                "sk": {"S": f"{reset.topic}#{reset.partition}#{_sk(reset.at_ms)}"},
                "e": {"N": str(reset.replicated_end)},
                "r": {"S": reset.reason},
                "l": {"S": reset.label},
            }
        )

    def resets(self, source: str, target: str) -> list[ResetRecord]:
        """Every topic reset recorded for the flow, oldest first per partition."""
        found = []
        for i in self._items(f"reset#{source}#{target}"):
            topic, partition, at = i["sk"]["S"].rsplit("#", 2)
            found.append(ResetRecord(topic, int(partition), int(at), int(i["e"]["N"]), i["r"]["S"], i["l"]["S"]))
        return found
