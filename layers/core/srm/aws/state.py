"""The state table (DynamoDB): offset runs and the other bookkeeping replication needs to survive restarts.

This module alone knows the item layout. Keys: ``pk`` (S) and ``sk`` (S).

==================================  ==================================  ========================================
item                                pk                                  sk / attributes
==================================  ==================================  ========================================
offset run (see :mod:`srm.core.offsets`)``runs#<src>#<tgt>#<topic>#<p>``   ``sk`` = upstream start (20 digits); d, n
origin of a partition's runs         ``origin#<src>#<tgt>#<topic>``     ``sk`` = partition; o, f, at
last checkpoint of a group           ``ckpt#<src>#<tgt>#<group>``       ``sk`` = ``<topic>#<p>``; u, d, rt, m, at;
                                                                        nu, nw, nat
flow status                          ``flow#<src>#<tgt>``               ``sk`` = ``status``; one attribute per fact
topic mapping (srm-meta.internal)    ``topics#<src>#<tgt>``             ``sk`` = source topic; rt, p, cr, at, cf, acl
event source mapping                 ``esm#<src>#<tgt>``                ``sk`` = source topic; id, on, bs, bw, mp, at
offsets purged before replication    ``lost#<src>#<tgt>``               ``sk`` = ``<topic>#<p>#<start>``; e, at
records skipped past the last run    ``next#<src>#<tgt>#<topic>``       ``sk`` = partition; n
topic reset of a partition           ``reset#<src>#<tgt>``              ``sk`` = ``<topic>#<p>#<at>``; e, r, l
archived item of an old incarnation  ``old#<label>#<its pk>``           as the item it was
==================================  ==================================  ========================================

The origin of a partition's runs (:class:`srm.core.offsets.Origin`) is written once, by the first batch recorded while
the partition has no run: ``o`` its first offset, ``f`` true when that was the log start, ``at`` when (ms). A
checkpoint item's ``nu``/``nw``/``nat`` are present while the group's committed offset ``nu`` there got no
checkpoint: why (``nw``), since when (``nat``); ``srm-control offsets`` reports them. The origin's ``tid`` is the
source topic's id when the origin was written (absent where the broker has no topic ids).

What cannot be replayed (:mod:`srm.replication.continuity`): a lost range is ``start`` … ``e`` − 1, detected at
``at``; ``next`` holds the offset past a batch whose last records the identity loop guard skipped (so they are not
taken for a gap). A topic reset of a partition moves its runs, origin, lost ranges and ``next`` item under
``old#<label>#…`` (label: when, ms) and records ``e`` the old incarnation's replicated end, ``r`` why, ``l`` the label.

A topic mapping says what a flow replicates (what SRM keeps in ``srm-meta.internal``), so discovery and monitoring
work whatever the policy: ``rt`` remote topic, ``p`` partitions, ``cr`` true when srm created the remote topic (the
identity loop guard's notion of "came from"), ``at`` last sync (ms), ``cf`` the configs srm set on the remote topic
(map), ``acl`` the ACL bindings srm created on it (list). An event source mapping item records the mapping of a
source topic: ``id`` (Lambda UUID), ``on`` enabled, ``bs`` batch size, ``bw`` batching window ms, ``mp`` the
payload a batch is cut at, ``at`` (ms).
Facts of the flow status written by the topic control plane: ``topic_configs_synced_ms``,
``topic_acls_synced_ms``, and by the mirror ``heartbeat_ms`` (timestamp of the newest heartbeat replicated),
``heartbeat_latency_ms`` (its replication latency) and ``heartbeat_replicated_ms`` (when it was written); by the
local runtime's watchdog ``stalled`` (JSON: what is stuck → since when, ms, and why; ``{}`` when nothing is).

Offset runs are written once per batch per partition. The last run of each partition is cached in the container;
extending it is a conditional put on its previous length, so a stale cache (the partition was processed elsewhere
meanwhile) is detected, reloaded and retried rather than overwriting newer state.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.core.offsets import Origin, Run, merge_runs
from srm.errors import RetriableError

__all__ = [
    "EventSourceMappingRecord",
    "GroupCheckpoints",
    "LossRecord",
    "ResetRecord",
    "StateError",
    "StateStore",
    "TopicMappingRecord",
    "create_state_table",
]

log = logging.getLogger(__name__)

_WIDTH = 20


class StateError(RetriableError, RuntimeError):
    """The state table could not be read or written (retriable)."""


@dataclass(frozen=True)
class TopicMappingRecord:
    """A replicated source topic and its remote topic (see the table above)."""

    topic: str
    remote_topic: str
    partitions: int
    created: bool = False
    synced_at_ms: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)
    acls: tuple[str, ...] = ()


@dataclass(frozen=True)
class EventSourceMappingRecord:
    """The event source mapping of a source topic."""

    topic: str
    id: str
    enabled: bool
    batch_size: int
    batching_window_ms: int
    updated_at_ms: int = 0
    problem: str = ""  # what keeps it from replicating, as Lambda reported it at the last topic sync ("": none)
    max_payload_bytes: int = 6 * 1024 * 1024  # the invoke payload a batch is cut at (the local runtime's setting)


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
        with self._access("read"):
            item = self._db.get_item(
                TableName=self.table,
                ConsistentRead=True,
                Key={"pk": {"S": f"origin#{source}#{target}#{topic}"}, "sk": {"S": str(partition)}},
            ).get("Item")
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
            "pk": {"S": f"origin#{source}#{target}#{topic}"},
            "sk": {"S": str(partition)},
            "o": {"N": str(found.offset)},
            "f": {"BOOL": found.fresh},
            "at": {"N": str(int(time.time() * 1000))},
            **({"tid": {"S": found.topic_id}} if found.topic_id else {}),
        }
        try:
            self._db.put_item(TableName=self.table, Item=item, ConditionExpression="attribute_not_exists(pk)")
        except ClientError as e:
            if e.response["Error"]["Code"] != "ConditionalCheckFailedException":  # recorded by an earlier attempt
                raise StateError(f"cannot write state table {self.table}: {e.response['Error']['Message']}") from e

    def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]:
        """Every run of a partition, in upstream order."""
        return [_run(i) for i in self._items(_runs_pk(source, target, topic, partition))]

    def runs_around(self, source: str, target: str, topic: str, partition: int, upstream_offset: int) -> list[Run]:
        """The runs :func:`srm.core.offsets.translate` needs for one offset: the run starting at or below it and the
        first run after it — two small queries, whatever the length of the history."""
        pk = _runs_pk(source, target, topic, partition)
        return self._runs_where(pk, "<=", upstream_offset, nearest=True) + self._runs_where(
            pk, ">", upstream_offset, nearest=True
        )

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
                if e.response["Error"]["Code"] == "ConditionalCheckFailedException":
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
                    Key={"pk": {"S": f"next#{source}#{target}#{topic}"}, "sk": {"S": str(partition)}},
                    UpdateExpression="SET n = :n",
                    ConditionExpression="attribute_not_exists(n) OR n < :n",
                    ExpressionAttributeValues={":n": {"N": str(next_offset)}},
                )
        except StateError as e:
            if not isinstance(e.__cause__, ClientError) or not _conditional(e.__cause__):
                raise

    def processed(self, source: str, target: str, topic: str, partition: int) -> int | None:
        """What :meth:`mark_processed` last noted, if anything."""
        with self._access("read"):
            item = self._db.get_item(
                TableName=self.table,
                ConsistentRead=True,
                Key={"pk": {"S": f"next#{source}#{target}#{topic}"}, "sk": {"S": str(partition)}},
            ).get("Item")
        return None if item is None else int(item["n"]["N"])

    def record_loss(self, source: str, target: str, topic: str, partition: int, start: int, end: int) -> int:
        """Record offsets ``[start, end)`` of a partition as lost; returns how many of them were not recorded yet
        (0 when a retried batch reports the same loss again)."""
        item = {
            "pk": {"S": f"lost#{source}#{target}"},
            "sk": {"S": f"{topic}#{partition}#{_sk(start)}"},
            "e": {"N": str(end)},
            "at": {"N": str(int(time.time() * 1000))},
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
        return [_loss(i) for i in self._items(f"lost#{source}#{target}")]

    def lost_ranges(self, source: str, target: str, topic: str, partition: int) -> list[tuple[int, int]]:
        """The lost ranges ``[start, end)`` of one partition."""
        items = self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": f"lost#{source}#{target}"}, ":p": {"S": f"{topic}#{partition}#"}},
        )
        return [(r.start, r.end) for r in map(_loss, items)]

    def flow_lost_ranges(self, source: str, target: str) -> dict[tuple[str, int], list[tuple[int, int]]]:
        """Every lost range of the flow, by topic-partition."""
        found: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for r in self.losses(source, target):
            found.setdefault((r.topic, r.partition), []).append((r.start, r.end))
        return found

    def archive_partition(self, source: str, target: str, topic: str, partition: int, label: str) -> None:
        """Move what the state holds about a partition's current incarnation (runs, origin, lost ranges, ``next``)
        under ``old#<label>#…``: translation no longer sees it, the next batch starts the partition afresh."""
        runs_pk = _runs_pk(source, target, topic, partition)
        items = self._items(runs_pk)
        for pk, sk in (
            (f"origin#{source}#{target}#{topic}", str(partition)),
            (f"next#{source}#{target}#{topic}", str(partition)),
        ):
            with self._access("read"):
                found = self._db.get_item(
                    TableName=self.table, ConsistentRead=True, Key={"pk": {"S": pk}, "sk": {"S": sk}}
                ).get("Item")
            if found is not None:
                items.append(found)
        items += self._query(
            KeyConditionExpression="pk = :pk AND begins_with(sk, :p)",
            ExpressionAttributeValues={":pk": {"S": f"lost#{source}#{target}"}, ":p": {"S": f"{topic}#{partition}#"}},
        )
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

    # -- checkpoints ---------------------------------------------------------------------------------------------
    def checkpoints(self, source: str, target: str, group: str) -> GroupCheckpoints:
        """The last checkpoint emitted per upstream topic-partition of a group, and the committed offsets that got
        none (with why)."""
        items = self._items(f"ckpt#{source}#{target}#{group}")
        result = GroupCheckpoints({}, {})
        for item in items:
            topic, _, partition = item["sk"]["S"].rpartition("#")
            key = (topic, int(partition))
            if "u" in item:
                result.emitted[key] = StoredCheckpoint(
                    upstream_offset=int(item["u"]["N"]),
                    downstream_offset=int(item["d"]["N"]),
                    remote_topic=item["rt"]["S"],
                    metadata=item.get("m", {"S": ""})["S"],
                    at_ms=int(item["at"]["N"]),
                )
            if "nw" in item:
                result.untranslated[key] = Untranslated(int(item["nu"]["N"]), item["nw"]["S"], int(item["nat"]["N"]))
        return result

    def set_untranslated(
        self, source: str, target: str, group: str, changes: Mapping[tuple[str, int], Untranslated | None]
    ) -> None:
        """Note (or, for None, clear) why a group's committed offset got no checkpoint, leaving the checkpoint."""
        for (topic, partition), change in changes.items():
            key = {"pk": {"S": f"ckpt#{source}#{target}#{group}"}, "sk": {"S": f"{topic}#{partition}"}}
            if change is None:
                update: dict[str, Any] = {"UpdateExpression": "REMOVE nu, nw, nat"}
            else:
                update = {
                    "UpdateExpression": "SET nu = :u, nw = :w, nat = :at",
                    "ExpressionAttributeValues": {
                        ":u": {"N": str(change.upstream_offset)},
                        ":w": {"S": change.reason},
                        ":at": {"N": str(change.at_ms)},
                    },
                }
            with self._access("write"):
                self._db.update_item(TableName=self.table, Key=key, **update)

    def put_checkpoints(
        self, source: str, target: str, group: str, checkpoints: dict[tuple[str, int], StoredCheckpoint]
    ) -> None:
        pk = f"ckpt#{source}#{target}#{group}"
        self._batch_write(
            [
                {
                    "PutRequest": {
                        "Item": {
                            "pk": {"S": pk},
                            "sk": {"S": f"{topic}#{partition}"},
                            "u": {"N": str(c.upstream_offset)},
                            "d": {"N": str(c.downstream_offset)},
                            "rt": {"S": c.remote_topic},
                            "m": {"S": c.metadata},
                            "at": {"N": str(c.at_ms)},
                        }
                    }
                }
                for (topic, partition), c in checkpoints.items()
            ]
        )

    # -- flow status -----------------------------------------------------------------------------------------
    def flow_status(self, source: str, target: str) -> dict[str, int | str]:
        """Facts about a flow written by its functions (e.g. ``last_checkpoint_ms``); numbers come back as int."""
        with self._access("read"):
            item = self._db.get_item(
                TableName=self.table,
                ConsistentRead=True,
                Key={"pk": {"S": f"flow#{source}#{target}"}, "sk": {"S": "status"}},
            ).get("Item")
        facts: dict[str, int | str] = {}
        for name, value in (item or {}).items():
            if name not in ("pk", "sk"):
                facts[name] = int(value["N"]) if "N" in value else value["S"]
        return facts

    def update_flow_status(self, source: str, target: str, **facts: int | str) -> None:
        """Set some facts about a flow, leaving the others as they are."""
        names = {f"#f{i}": name for i, name in enumerate(facts)}
        values = {f":v{i}": ({"N": str(v)} if isinstance(v, int) else {"S": v}) for i, v in enumerate(facts.values())}
        with self._access("write"):
            self._db.update_item(
                TableName=self.table,
                Key={"pk": {"S": f"flow#{source}#{target}"}, "sk": {"S": "status"}},
                UpdateExpression="SET " + ", ".join(f"#f{i} = :v{i}" for i in range(len(facts))),
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )

    # -- topic mappings and event source mappings (the topic control plane) ---------------------------------------
    def topic_mappings(self, source: str, target: str) -> dict[str, TopicMappingRecord]:
        """Every topic ``source->target`` replicates (as of its last topic sync), by source topic."""
        items = self._items(f"topics#{source}#{target}")
        return {
            i["sk"]["S"]: TopicMappingRecord(
                topic=i["sk"]["S"],
                remote_topic=i["rt"]["S"],
                partitions=int(i["p"]["N"]),
                created=i.get("cr", {}).get("BOOL", False),
                synced_at_ms=int(i.get("at", {}).get("N", "0")),
                configs={k: v["S"] for k, v in i.get("cf", {}).get("M", {}).items()},
                acls=tuple(v["S"] for v in i.get("acl", {}).get("L", [])),
            )
            for i in items
        }

    def put_topic_mapping(self, source: str, target: str, record: TopicMappingRecord) -> None:
        item = {
            "pk": {"S": f"topics#{source}#{target}"},
            "sk": {"S": record.topic},
            "rt": {"S": record.remote_topic},
            "p": {"N": str(record.partitions)},
            "cr": {"BOOL": record.created},
            "at": {"N": str(record.synced_at_ms)},
            "cf": {"M": {k: {"S": v} for k, v in sorted(record.configs.items())}},
            "acl": {"L": [{"S": a} for a in sorted(record.acls)]},
        }
        self._put(item)

    def delete_topic_mapping(self, source: str, target: str, topic: str) -> None:
        self._delete(f"topics#{source}#{target}", topic)

    def event_source_mappings(self, source: str, target: str) -> dict[str, EventSourceMappingRecord]:
        """The event source mapping of every source topic of ``source->target`` that has one."""
        items = self._items(f"esm#{source}#{target}")
        return {
            i["sk"]["S"]: EventSourceMappingRecord(
                topic=i["sk"]["S"],
                id=i["id"]["S"],
                enabled=i["on"]["BOOL"],
                batch_size=int(i["bs"]["N"]),
                batching_window_ms=int(i["bw"]["N"]),
                updated_at_ms=int(i.get("at", {}).get("N", "0")),
                problem=i.get("pr", {}).get("S", ""),
                max_payload_bytes=int(i.get("mp", {}).get("N", str(6 * 1024 * 1024))),
            )
            for i in items
        }

    def put_event_source_mapping(self, source: str, target: str, record: EventSourceMappingRecord) -> None:
        self._put(
            {
                "pk": {"S": f"esm#{source}#{target}"},
                "sk": {"S": record.topic},
                "id": {"S": record.id},
                "on": {"BOOL": record.enabled},
                "bs": {"N": str(record.batch_size)},
                "bw": {"N": str(record.batching_window_ms)},
                "at": {"N": str(record.updated_at_ms)},
                "mp": {"N": str(record.max_payload_bytes)},
                **({"pr": {"S": record.problem}} if record.problem else {}),
            }
        )

    def delete_event_source_mapping(self, source: str, target: str, topic: str) -> None:
        self._delete(f"esm#{source}#{target}", topic)

    def _put(self, item: dict[str, Any]) -> None:
        with self._access("write"):
            self._db.put_item(TableName=self.table, Item=item)

    def _delete(self, pk: str, sk: str) -> None:
        with self._access("write"):
            self._db.delete_item(TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}})

    # -- plumbing ----------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _access(self, what: str) -> Iterator[None]:
        """DynamoDB's errors as the one error of this store: ``what`` is ``read`` or ``write``."""
        try:
            yield
        except ClientError as e:
            raise StateError(f"cannot {what} state table {self.table}: {e.response['Error']['Message']}") from e
        except BotoCoreError as e:  # not reachable, no credentials…
            raise StateError(f"cannot {what} state table {self.table}: {e}") from e

    def _items(self, pk: str) -> list[dict[str, Any]]:
        """Every item under one partition key."""
        return self._query(KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": pk}})

    def _query(self, single_page: bool = False, **kwargs: Any) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        with self._access("read"):
            while True:
                page = self._db.query(TableName=self.table, **kwargs)
                items.extend(page.get("Items", []))
                if single_page or "LastEvaluatedKey" not in page:
                    return items
                kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _batch_write(self, requests: list[dict[str, Any]]) -> None:
        with self._access("write"):
            for i in range(0, len(requests), 25):
                pending: dict[str, Any] = {self.table: requests[i : i + 25]}
                while pending:
                    response = self._db.batch_write_item(RequestItems=pending)
                    pending = response.get("UnprocessedItems") or {}


class _StaleCache(Exception):
    pass


def _conditional(e: ClientError) -> bool:
    return bool(e.response["Error"]["Code"] == "ConditionalCheckFailedException")


@dataclass(frozen=True)
class LossRecord:
    """Offsets ``start … end − 1`` of a partition purged on the source before they were replicated."""

    topic: str
    partition: int
    start: int
    end: int
    at_ms: int


def _loss(item: dict[str, Any]) -> LossRecord:
    topic, partition, start = item["sk"]["S"].rsplit("#", 2)
    return LossRecord(topic, int(partition), int(start), int(item["e"]["N"]), int(item["at"]["N"]))


@dataclass(frozen=True)
class ResetRecord:
    """A partition that started over: what its old incarnation had replicated, why, and its archive's label."""

    topic: str
    partition: int
    at_ms: int
    replicated_end: int
    reason: str
    label: str


@dataclass(frozen=True)
class GroupCheckpoints:
    """A group's checkpoint items, by upstream topic-partition."""

    emitted: dict[tuple[str, int], StoredCheckpoint]
    untranslated: dict[tuple[str, int], Untranslated]


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
