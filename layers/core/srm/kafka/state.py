"""The state port (:class:`srm.state.StateStore`) on a compacted Kafka topic: what ``srm run`` keeps its state in, one
node or many (the log itself: :mod:`srm.kafka.state_log`).

Each record is one key (a JSON array) and its value (JSON; null: deleted):

=======================================================  =========================================================
key                                                      value
=======================================================  =========================================================
``["runs", src, tgt, topic, p, upstream start]``         ``[downstream start, length]``
``["origin", src, tgt, topic, p]``                       ``{"o": first offset, "f": was the log start, "at", "tid"}``
``["next", src, tgt, topic, p]``                         offset past records skipped after the last run
``["lost", src, tgt, topic, p, start]``                  ``{"e": end, "at"}``, and ``"r"``: why, when skipped
``["reset", src, tgt, topic, p, at]``                    ``{"e": replicated end, "r": why, "l": archive label}``
``["old", label, …the key of a reset partition's item]``  the item's value (a topic reset set it aside)
``["ckpt", src, tgt, group, topic, p]``                  ``{"u", "d", "rt", "m", "at"}`` and ``"nu", "nw", "nat"``
``["flow", src, tgt, fact]``                             the fact's value (one record per fact: one writer each)
``["topics", src, tgt, topic]``                          ``{"rt", "p", "cr", "at", "cf", "acl"}``
``["esm", src, tgt, topic]``                             ``{"id", "on", "bs", "bw", "at", "mp", "pr"}``
``["config", scope]``                                    the configuration (:mod:`srm.kafka.config_store`)
``["node", node id]``, ``["member", src, tgt, node id]``  the nodes (:mod:`srm.kafka.nodes`)
=======================================================  =========================================================

The attributes mean what the state table's do (:mod:`srm.aws.state`). A partition's records are written by the
member holding it, in transactions of the partition's own transactional id (claimed when the partition is assigned);
topic, event source mapping and checkpoint records by the flow's leader, in transactions of the leadership's id;
flow facts with the process's idempotent producer. Reads of what this process writes are served from memory; other
reads first catch up with the log (:meth:`StateLog.sync`), as DynamoDB's consistent reads would.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from srm.config.nodes import state_topic
from srm.config.secrets import SecretResolver, default_secret_resolver
from srm.config.settings import SrmConfig
from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.core.continuity import LostRange
from srm.core.offsets import Origin, Run, merge_runs
from srm.kafka.clients import consumer_config, producer_config
from srm.kafka.state_log import Key, StateLog
from srm.state.records import (
    DEFAULT_MAX_PAYLOAD_BYTES,
    EventSourceMappingRecord,
    GroupCheckpoints,
    LossRecord,
    ResetRecord,
    StateError,
    TopicMappingRecord,
)

__all__ = ["KafkaState", "state_topic"]

# how many leading key elements name a table (the rest is the item's key within it)
_TABLES = {
    "runs": 5,
    "origin": 4,
    "next": 4,
    "lost": 3,
    "reset": 3,
    "old": 2,
    "ckpt": 4,
    "flow": 3,
    "topics": 3,
    "esm": 3,
    # the other ports kept in this log
    "config": 1,
    "node": 1,
    "member": 3,
    "upgrade": 1,  # the mark of an upgrade from an older layout (srm.local.state_upgrade)
}
_NOT_REPLICATION_STATE = {"config", "node", "member", "upgrade"}


_READ_SYNC_S = 2.0  # how long a read waits to catch up with the log before it answers from memory


class _Table:
    """One table's items by their keys, with the keys in order (a partition's runs are read by range)."""

    __slots__ = ("items", "order")

    def __init__(self) -> None:
        self.items: dict[Any, Any] = {}
        self.order: list[Any] = []

    def set(self, key: Any, value: Any) -> None:
        if value is None:
            if self.items.pop(key, _MISSING) is not _MISSING:
                del self.order[bisect.bisect_left(self.order, key)]
            return
        if key not in self.items:
            bisect.insort(self.order, key)
        self.items[key] = value


_MISSING = object()


class KafkaState:
    """The state of every flow of an ``srm run`` cluster, in ``topic`` (see the module docstring)."""

    def __init__(
        self,
        topic: str,
        consumer: dict[str, Any],
        producer: dict[str, Any],
        *,
        timeout_s: float = 10.0,
    ) -> None:
        self._tables: dict[Key, _Table] = {}
        self.log = StateLog(
            topic,
            consumer,
            producer,
            apply=self._apply,
            transactional_prefix=f"{topic}.",
            timeout_s=timeout_s,
        )
        self._leaders: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    @classmethod
    def on_cluster(
        cls,
        config: SrmConfig,
        alias: str,
        topic: str,
        resolver: SecretResolver = default_secret_resolver,
    ) -> KafkaState:
        """The state in ``topic`` of the configuration's cluster ``alias`` (its clients' settings and security)."""
        consumer = consumer_config(config, alias, None, group_id="srm-state", resolver=resolver)
        producer = producer_config(config, alias, None, delivery_timeout_ms=30_000, resolver=resolver)
        return cls(topic, consumer, producer)

    def start(self, timeout: float | None = None, *, writer: bool = False) -> KafkaState:
        self.log.start(timeout, writer=writer)
        return self

    def stop(self) -> None:
        self.log.stop()

    # -- the tables in memory ------------------------------------------------------------------------------------
    def _apply(self, key: Key, value: Any) -> None:  # called by the log, under its lock
        width = _TABLES.get(key[0]) if key else None
        if width is None:
            return  # a kind of record this version does not know: kept in the log, not read
        prefix, rest = key[:width], key[width:]
        table = self._tables.get(prefix)
        if table is None:
            if value is None:
                return
            table = self._tables[prefix] = _Table()
        table.set(rest[0] if len(rest) == 1 else tuple(rest), value)

    def _table(self, *prefix: Any) -> _Table:
        return self._tables.get(prefix) or _Table()

    def _items(self, *prefix: Any) -> list[tuple[Any, Any]]:
        """A table's items in key order (a copy: the reader thread changes tables)."""
        with self.log.lock:
            table = self._tables.get(prefix)
            return [] if table is None else [(k, table.items[k]) for k in table.order]

    def _get(self, *key: Any) -> Any:
        width = _TABLES[key[0]]
        with self.log.lock:
            table = self._tables.get(key[:width])
            rest = key[width:]
            return None if table is None else table.items.get(rest[0] if len(rest) == 1 else tuple(rest))

    # -- ownership -------------------------------------------------------------------------------------------------
    @staticmethod
    def _partition_owner(source: str, target: str, topic: str, partition: int) -> str:
        return f"{source}->{target}.{topic}.{partition}"

    @staticmethod
    def _leader_owner(source: str, target: str) -> str:
        return f"{source}->{target}.leader"

    def claim_partitions(self, source: str, target: str, topic: str, partitions: Sequence[int]) -> None:
        self.log.claim([self._partition_owner(source, target, topic, p) for p in partitions])

    def release_partitions(self, source: str, target: str, topic: str, partitions: Sequence[int]) -> None:
        self.log.release([self._partition_owner(source, target, topic, p) for p in partitions])

    def claim_leadership(self, source: str, target: str) -> None:
        self.log.claim([self._leader_owner(source, target)])
        with self._lock:
            self._leaders.add((source, target))

    def release_leadership(self, source: str, target: str) -> None:
        with self._lock:
            self._leaders.discard((source, target))
        self.log.release([self._leader_owner(source, target)])

    def _leader(self, source: str, target: str) -> str | None:
        """The leadership's owner when this process leads the flow (its writes are fenced), else None: an
        operator's or a test's edit goes through the plain producer."""
        with self._lock:
            return self._leader_owner(source, target) if (source, target) in self._leaders else None

    def _fresh(self, owner: str | None = None) -> None:
        """Catch up with the log, unless what is read is this process's own (read from memory). While the log
        cannot be reached, reads are answered from memory, as fresh as this process could make it (what it wrote
        itself included): a status shown, mappings followed, a translation that stays behind rather than fails."""
        if owner is None or not self.log.holds(owner):
            try:
                self.log.sync(_READ_SYNC_S)
            except StateError as e:
                self.log.note(f"answering from memory: {e}", problem=False)

    # -- offset runs -----------------------------------------------------------------------------------------------
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
        if not new:
            return
        owner = self._partition_owner(source, target, topic, partition)
        self.log.ensure(owner)
        prefix = ("runs", source, target, topic, partition)
        region = self._region(prefix, new[0].upstream)
        records: list[tuple[Key, Any]] = []
        if origin is not None and not region and self._get("origin", source, target, topic, partition) is None:
            try:
                found = origin()
            except Exception as e:  # the log start could not be looked up: the batch is retried
                raise StateError(f"cannot tell where the offset runs of {topic}-{partition} begin: {e}") from e
            value: dict[str, Any] = {"o": found.offset, "f": found.fresh, "at": _now_ms()}
            if found.topic_id:
                value["tid"] = found.topic_id
            records.append((("origin", source, target, topic, partition), value))
        merged = merge_runs(region, new)
        kept = {r.upstream for r in merged}
        old = {r.upstream: r for r in region}
        records += [((*prefix, r.upstream), [r.downstream, r.length]) for r in merged if old.get(r.upstream) != r]
        records += [((*prefix, r.upstream), None) for r in region if r.upstream not in kept]
        self.log.write(records, owner)

    def _region(self, prefix: Key, first: int) -> list[Run]:
        """The stored runs a batch starting at ``first`` may touch: the run before it and every run after."""
        with self.log.lock:
            table = self._tables.get(prefix)
            if table is None:
                return []
            i = max(0, bisect.bisect_left(table.order, first) - 1)
            return [Run(u, *table.items[u]) for u in table.order[i:]]

    def origin(self, source: str, target: str, topic: str, partition: int) -> Origin | None:
        self._fresh(self._partition_owner(source, target, topic, partition))
        found = self._get("origin", source, target, topic, partition)
        return None if found is None else Origin(found["o"], found["f"], found.get("tid"))

    def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]:
        self._fresh(self._partition_owner(source, target, topic, partition))
        return [Run(u, d, n) for u, (d, n) in self._items("runs", source, target, topic, partition)]

    def runs_around(self, source: str, target: str, topic: str, partition: int, upstream_offset: int) -> list[Run]:
        self._fresh(self._partition_owner(source, target, topic, partition))
        with self.log.lock:
            table = self._tables.get(("runs", source, target, topic, partition))
            if table is None:
                return []
            i = bisect.bisect_right(table.order, upstream_offset)
            return [Run(u, *table.items[u]) for u in table.order[max(0, i - 1) : i + 1]]

    # -- what cannot be replayed -----------------------------------------------------------------------------------
    def replicated_end(self, source: str, target: str, topic: str, partition: int, first: int) -> int | None:
        self._fresh(self._partition_owner(source, target, topic, partition))
        with self.log.lock:
            table = self._tables.get(("runs", source, target, topic, partition))
            if table is None or not table.order:
                return None
            last = table.order[-1]
            return int(last + table.items[last][1])

    def mark_processed(self, source: str, target: str, topic: str, partition: int, next_offset: int) -> None:
        owner = self._partition_owner(source, target, topic, partition)
        self.log.ensure(owner)
        known = self._get("next", source, target, topic, partition)
        if known is None or known < next_offset:
            self.log.write([(("next", source, target, topic, partition), next_offset)], owner)

    def processed(self, source: str, target: str, topic: str, partition: int) -> int | None:
        self._fresh(self._partition_owner(source, target, topic, partition))
        found = self._get("next", source, target, topic, partition)
        return None if found is None else int(found)

    def record_loss(
        self, source: str, target: str, topic: str, partition: int, start: int, end: int, reason: str = ""
    ) -> int:
        owner = self._partition_owner(source, target, topic, partition)
        self.log.ensure(owner)
        key = ("lost", source, target, topic, partition, start)
        old = self._get(*key)
        if old is not None and old["e"] >= end:
            return 0
        value: dict[str, Any] = {"e": end, "at": _now_ms()}
        if reason:
            value["r"] = reason
        self.log.write([(key, value)], owner)
        return end - (old["e"] if old is not None else start)

    def losses(self, source: str, target: str) -> list[LossRecord]:
        self._fresh()
        return [
            LossRecord(t, p, s, v["e"], v["at"], v.get("r", "")) for (t, p, s), v in self._items("lost", source, target)
        ]

    def lost_ranges(self, source: str, target: str, topic: str, partition: int) -> list[LostRange]:
        self._fresh(self._partition_owner(source, target, topic, partition))
        return [
            LossRecord(t, p, s, v["e"], 0, v.get("r", "")).range
            for (t, p, s), v in self._items("lost", source, target)
            if (t, p) == (topic, partition)
        ]

    def flow_lost_ranges(self, source: str, target: str) -> dict[tuple[str, int], list[LostRange]]:
        found: dict[tuple[str, int], list[LostRange]] = {}
        for r in self.losses(source, target):
            found.setdefault((r.topic, r.partition), []).append(r.range)
        return found

    def archive_partition(self, source: str, target: str, topic: str, partition: int, label: str) -> None:
        owner = self._partition_owner(source, target, topic, partition)
        self.log.ensure(owner)
        items: list[tuple[Key, Any]] = [
            (("runs", source, target, topic, partition, u), v)
            for u, v in self._items("runs", source, target, topic, partition)
        ]
        for kind in ("origin", "next"):
            found = self._get(kind, source, target, topic, partition)
            if found is not None:
                items.append(((kind, source, target, topic, partition), found))
        items += [
            (("lost", source, target, t, p, s), v)
            for (t, p, s), v in self._items("lost", source, target)
            if (t, p) == (topic, partition)
        ]
        # one transaction: the copies and the deletions land together or not at all
        self.log.write([*((("old", label, *k), v) for k, v in items), *((k, None) for k, _ in items)], owner)

    def record_reset(self, source: str, target: str, reset: ResetRecord) -> None:
        owner = self._partition_owner(source, target, reset.topic, reset.partition)
        self.log.ensure(owner)
        value = {"e": reset.replicated_end, "r": reset.reason, "l": reset.label}
        self.log.write([(("reset", source, target, reset.topic, reset.partition, reset.at_ms), value)], owner)

    def resets(self, source: str, target: str) -> list[ResetRecord]:
        self._fresh()
        return [ResetRecord(t, p, at, v["e"], v["r"], v["l"]) for (t, p, at), v in self._items("reset", source, target)]

    # -- checkpoints -------------------------------------------------------------------------------------------------
    def checkpoints(self, source: str, target: str, group: str) -> GroupCheckpoints:
        self._fresh(self._leader_owner(source, target))
        result = GroupCheckpoints({}, {})
        for (topic, partition), v in self._items("ckpt", source, target, group):
            if "u" in v:
                result.emitted[(topic, partition)] = StoredCheckpoint(
                    upstream_offset=v["u"],
                    downstream_offset=v["d"],
                    remote_topic=v["rt"],
                    metadata=v["m"],
                    at_ms=v["at"],
                )
            if "nw" in v:
                result.untranslated[(topic, partition)] = Untranslated(v["nu"], v["nw"], v["nat"])
        return result

    def put_checkpoints(
        self, source: str, target: str, group: str, checkpoints: dict[tuple[str, int], StoredCheckpoint]
    ) -> None:
        records = [
            (
                ("ckpt", source, target, group, topic, partition),
                {
                    "u": c.upstream_offset,
                    "d": c.downstream_offset,
                    "rt": c.remote_topic,
                    "m": c.metadata,
                    "at": c.at_ms,
                },
            )
            for (topic, partition), c in checkpoints.items()
        ]
        self.log.write(records, self._leader(source, target))

    def set_untranslated(
        self, source: str, target: str, group: str, changes: Mapping[tuple[str, int], Untranslated | None]
    ) -> None:
        owner = self._leader(source, target)
        self._fresh(owner)
        records: list[tuple[Key, Any]] = []
        for (topic, partition), change in changes.items():
            key = ("ckpt", source, target, group, topic, partition)
            value = {k: v for k, v in (self._get(*key) or {}).items() if k not in ("nu", "nw", "nat")}
            if change is not None:
                value.update(nu=change.upstream_offset, nw=change.reason, nat=change.at_ms)
            records.append((key, value or None))
        self.log.write(records, owner)

    # -- flow status -------------------------------------------------------------------------------------------------
    def flow_status(self, source: str, target: str) -> dict[str, int | str]:
        self._fresh()
        return dict(self._items("flow", source, target))

    def update_flow_status(self, source: str, target: str, **facts: int | str) -> None:
        self.log.write([(("flow", source, target, name), value) for name, value in facts.items()])

    # -- topic mappings and event source mappings --------------------------------------------------------------------
    def topic_mappings(self, source: str, target: str) -> dict[str, TopicMappingRecord]:
        self._fresh(self._leader_owner(source, target))
        return {
            topic: TopicMappingRecord(
                topic,
                v["rt"],
                v["p"],
                v.get("cr", False),
                v.get("at", 0),
                dict(v.get("cf", {})),
                tuple(v.get("acl", ())),
            )
            for topic, v in self._items("topics", source, target)
        }

    def put_topic_mapping(self, source: str, target: str, record: TopicMappingRecord) -> None:
        value = {
            "rt": record.remote_topic,
            "p": record.partitions,
            "cr": record.created,
            "at": record.synced_at_ms,
            "cf": dict(sorted(record.configs.items())),
            "acl": sorted(record.acls),
        }
        self.log.write([(("topics", source, target, record.topic), value)], self._leader(source, target))

    def delete_topic_mapping(self, source: str, target: str, topic: str) -> None:
        self.log.write([(("topics", source, target, topic), None)], self._leader(source, target))

    def event_source_mappings(self, source: str, target: str) -> dict[str, EventSourceMappingRecord]:
        self._fresh(self._leader_owner(source, target))
        return {
            topic: EventSourceMappingRecord(
                topic,
                v["id"],
                v["on"],
                v["bs"],
                v["bw"],
                v.get("at", 0),
                v.get("pr", ""),
                v.get("mp", DEFAULT_MAX_PAYLOAD_BYTES),
            )
            for topic, v in self._items("esm", source, target)
        }

    def put_event_source_mapping(self, source: str, target: str, record: EventSourceMappingRecord) -> None:
        value: dict[str, Any] = {
            "id": record.id,
            "on": record.enabled,
            "bs": record.batch_size,
            "bw": record.batching_window_ms,
            "at": record.updated_at_ms,
            "mp": record.max_payload_bytes,
        }
        if record.problem:
            value["pr"] = record.problem
        self.log.write([(("esm", source, target, record.topic), value)], self._leader(source, target))

    def delete_event_source_mapping(self, source: str, target: str, topic: str) -> None:
        self.log.write([(("esm", source, target, topic), None)], self._leader(source, target))

    def is_empty(self) -> bool:
        """Whether the log holds no replication state (the configuration and the nodes aside)."""
        self.log.sync()
        with self.log.lock:
            return not any(t.items for k, t in self._tables.items() if k[0] not in _NOT_REPLICATION_STATE)

    # -- the records of the ports kept beside the state (srm.kafka.config_store, srm.kafka.nodes) ------------------
    def items(self, *prefix: Any) -> list[tuple[Any, Any]]:
        """A table's items in key order."""
        return self._items(*prefix)

    def get(self, *key: Any) -> Any:
        return self._get(*key)

    def catch_up(self) -> None:
        """Read everything written before this was asked, or answer from memory while the log cannot be read."""
        self._fresh()


def _now_ms() -> int:
    return int(time.time() * 1000)
