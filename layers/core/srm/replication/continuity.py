"""Before a batch is written: has its partition lost records, or started over? (:mod:`srm.core.continuity` decides.)

A batch that continues its partition costs nothing here: the partition's replicated end comes from the state
store's cache of its last run. Only a batch that does not continue it asks more — the state table once, and the
source once: its log start after a gap (data loss?), its topic id and log end below the replicated end (a topic
reset, or a redelivery?).

Data loss is recorded in the state (once per range: a retried batch does not count it again), logged as an error
naming the topic-partition and offsets, and emitted as a raw metric record (the handler publishes ``LostOffsets``);
offset translation refuses the lost offsets (:func:`srm.core.offsets.translate_checked`). A topic reset archives the
partition's old incarnation in the state, so the batch starts new offset runs with their own origin.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from srm.core.continuity import Loss, Reset, known_topic_id, lost_range, reset_reason
from srm.core.events import PartitionBatch
from srm.metrics.model.schema import DataLoss, TopicReset
from srm.metrics.sinks import Emitter
from srm.state import ResetRecord, StateStore

__all__ = ["Findings", "SourceLookups", "check_batches", "log_end_lookup", "topic_id_lookup"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceLookups:
    """What the check asks the source cluster, each only when a batch does not continue its partition."""

    log_start: Callable[[str, int], int] | None = None
    log_end: Callable[[str, int], int] | None = None
    topic_id: Callable[[str], str | None] | None = None  # None where the broker has no topic ids


@dataclass
class Findings:
    losses: list[Loss] = field(default_factory=list)
    lost: Counter[str] = field(default_factory=Counter)  # by topic: offsets not reported before
    resets: list[Reset] = field(default_factory=list)


def check_batches(
    batches: list[PartitionBatch],
    *,
    source: str,
    target: str,
    state: StateStore,
    lookups: SourceLookups,
    metrics: Emitter,
    fail_on_data_loss: bool,
) -> Findings:
    """Check every partition of an event before any of it is written; records what it finds (see the module)."""
    check = _Check(source, target, state, lookups, metrics, fail_on_data_loss)
    for batch in batches:
        if not len(batch):
            continue
        topic, partition, first = batch.topic, batch.partition, batch.offsets[0]
        end = state.replicated_end(source, target, topic, partition, first)
        if end is None or end == first:
            continue
        if first > end:
            check.gap(topic, partition, first, end)
        else:
            check.backward(topic, partition, end)
    return check.findings


@dataclass
class _Check:
    """One event's check of one flow: what it asks, where it records, and what it found so far."""

    source: str
    target: str
    state: StateStore
    lookups: SourceLookups
    metrics: Emitter
    fail_on_data_loss: bool
    findings: Findings = field(default_factory=Findings)

    def gap(self, topic: str, partition: int, first: int, end: int) -> None:
        """The batch starts past the replicated end: lost records, unless the log start says nothing was there."""
        if self.lookups.log_start is None:
            return
        source, target, state = self.source, self.target, self.state
        log_start = self.lookups.log_start(topic, partition)
        lost = lost_range(end, first, log_start)
        if lost is None:
            return  # compacted offsets, transaction markers, aborted records: nothing was there to replicate
        processed = state.processed(source, target, topic, partition)
        if processed is not None and processed > end:  # the records after the last run were skipped, not lost
            lost = lost_range(processed, first, log_start)
            if lost is None:
                return
        loss = Loss(topic, partition, *lost)
        new = state.record_loss(source, target, topic, partition, loss.start, loss.end)
        self.findings.losses.append(loss)
        if new:
            self.findings.lost[topic] += new
            what = (
                "the partition stops here until fail.on.data.loss is turned off"
                if self.fail_on_data_loss
                else "replication goes on after them (fail.on.data.loss = true stops the partition instead)"
            )
            log.error("%s->%s %s; %s", source, target, loss.describe(), what)
            self.metrics.emit(
                DataLoss(
                    ts=int(time.time() * 1000),
                    source=source,
                    target=target,
                    topic=topic,
                    partition=partition,
                    start_offset=loss.start,
                    end_offset=loss.end,
                    lost=new,
                )
            )

    def backward(self, topic: str, partition: int, end: int) -> None:
        """The batch starts below the replicated end: a topic reset (archived) or a redelivery (nothing to do)."""
        source, target, state, lookups = self.source, self.target, self.state, self.lookups
        origin = state.origin(source, target, topic, partition)
        current = lookups.topic_id(topic) if lookups.topic_id is not None else None
        log_end = lookups.log_end(topic, partition) if lookups.log_end is not None else None
        reason = reset_reason(end, log_end, origin.topic_id if origin is not None else None, current)
        if reason is None:
            return  # a redelivery
        now = int(time.time() * 1000)
        label = str(now)
        state.archive_partition(source, target, topic, partition, label)
        state.record_reset(source, target, ResetRecord(topic, partition, now, end, reason, label))
        reset = Reset(topic, partition, end, reason)
        self.findings.resets.append(reset)
        log.error("%s->%s %s (archived as old#%s)", source, target, reset.describe(), label)
        self.metrics.emit(
            TopicReset(ts=now, source=source, target=target, topic=topic, partition=partition, replicated_end=end)
        )


def log_end_lookup(admin: AdminClient, timeout: float = 10.0) -> Callable[[str, int], int]:
    """The log-end offset of a partition, from the cluster ``admin`` talks to."""

    def lookup(topic: str, partition: int) -> int:
        tp = TopicPartition(topic, partition)
        return int(admin.list_offsets({tp: OffsetSpec.latest()}, request_timeout=timeout)[tp].result().offset)

    return lookup


def topic_id_lookup(admin: AdminClient, timeout: float = 10.0) -> Callable[[str], str | None]:
    """A topic's id, from the cluster ``admin`` talks to; None where the broker has no topic ids."""

    def lookup(topic: str) -> str | None:
        found = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic].result()
        return known_topic_id(found.topic_id)

    return lookup
