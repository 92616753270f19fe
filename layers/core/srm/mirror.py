"""Mirror a batch of source records to the target cluster, and record exactly where each one landed.

Every record goes to the remote topic the policy names, same partition, same key, value, headers (order and
duplicates kept) and CreateTime timestamp, through an idempotent ``acks=all`` producer. The call returns only when
the target acknowledged every record; on any failure it raises, so the event source retries the whole batch and
commits nothing (at-least-once, never loss). Then, once per partition: the offset runs go to the state table and
MM2-format offset syncs to ``mm2-offset-syncs.<target>.internal``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Producer

from srm.config import FlowSettings
from srm.events import PartitionBatch, parse_event
from srm.filters import should_replicate_topic
from srm.formats import OffsetSync
from srm.offsets import Run, runs_from_pairs
from srm.policy import ReplicationPolicy
from srm.state import StateStore

__all__ = [
    "BatchResult",
    "DeliveryError",
    "MirrorError",
    "MirrorTarget",
    "RecordTooLargeError",
    "TopicNotReplicatedError",
    "replicate_batch",
]

log = logging.getLogger(__name__)


class MirrorError(RuntimeError):
    """The batch was not fully replicated; the event source must retry it."""


class TopicNotReplicatedError(MirrorError):
    """The batch's topic is not (or no longer) replicated by this flow; its mapping is being disabled."""


class DeliveryError(MirrorError):
    """The target did not acknowledge a record."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int, fatal: bool = False) -> None:
        super().__init__(message)
        self.topic, self.partition, self.offset, self.fatal = topic, partition, offset, fatal


class RecordTooLargeError(DeliveryError):
    """A record is larger than the target accepts."""


@dataclass
class MirrorTarget:
    """Everything the mirror needs for one flow, built once per container by :mod:`srm.app`."""

    source: str
    target: str
    settings: FlowSettings
    policy: ReplicationPolicy
    producer: Producer
    state: StateStore
    # Makes sure the remote topic exists with at least this many partitions (cached per container).
    ensure_remote_topic: Callable[[str, str, int], None]
    # Producer to the cluster holding the offset-syncs topic, or None when offset syncs are disabled.
    offset_sync_producer: Producer | None = None


@dataclass
class BatchResult:
    records: int = 0
    bytes: int = 0
    partitions: dict[str, int] = field(default_factory=dict)  # "remote-topic-p" → records
    max_latency_ms: int = 0  # now − the oldest record timestamp of the batch

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "bytes": self.bytes,
            "partitions": self.partitions,
            "maxLatencyMs": self.max_latency_ms,
        }


class _Acks:
    """Delivery reports of one remote partition."""

    __slots__ = ("error", "error_offset", "expected", "offsets")

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.offsets: list[int] = []
        self.error: KafkaError | None = None
        self.error_offset = -1

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.offsets.append(msg.offset())
        elif self.error is None:
            self.error = err
            self.error_offset = len(self.offsets)
            self.expected -= 1  # a failed record is settled too
        else:
            self.expected -= 1

    @property
    def settled(self) -> bool:
        return len(self.offsets) >= self.expected


def replicate_batch(event: Any, target: MirrorTarget) -> BatchResult:
    """Replicate one Lambda Kafka event. Raises MalformedEventError, TopicNotReplicatedError or MirrorError."""
    _, batches = parse_event(event)
    settings = target.settings
    result = BatchResult()
    pending: list[tuple[PartitionBatch, str, _Acks]] = []
    topic_filter = settings.topic_filter()
    now_ms = int(time.time() * 1000)

    for batch in batches:
        if not should_replicate_topic(
            batch.topic,
            target_alias=target.target,
            policy=target.policy,
            topic_filter=topic_filter,
            heartbeats_replication_enabled=settings.heartbeats_replication_enabled,
        ):
            raise TopicNotReplicatedError(
                f"{batch.topic} is not replicated by {target.source}->{target.target} (topics={settings.topics!r}, "
                f"topics.exclude={settings.topics_exclude!r}); its event source mapping should be disabled"
            )
        remote = target.policy.format_remote_topic(target.source, batch.topic)
        target.ensure_remote_topic(batch.topic, remote, batch.partition + 1)
        acks = _Acks(len(batch))
        pending.append((batch, remote, acks))

    producer = target.producer
    for batch, remote, acks in pending:
        _produce_partition(producer, batch, remote, acks)
        result.records += len(batch)
        result.partitions[f"{remote}-{batch.partition}"] = len(batch)
        result.bytes += sum(len(v) for v in batch.values if v is not None)
        result.bytes += sum(len(k) for k in batch.keys if k is not None)
        result.max_latency_ms = max(result.max_latency_ms, now_ms - min(batch.timestamps))

    _await_acks(producer, pending, settings.mirror_delivery_timeout_ms / 1000.0)

    runs = {
        (b.topic, b.partition): runs_from_pairs(zip(b.offsets, acks.offsets, strict=True)) for b, _, acks in pending
    }
    # Offset syncs travel while the state is written; both are done before the batch counts as replicated.
    sync_acks = _send_offset_syncs(
        target, [s for b, _, _ in pending for s in _offset_syncs(b, runs[(b.topic, b.partition)])]
    )
    for (topic, partition), partition_runs in runs.items():
        target.state.record_runs(target.source, target.target, topic, partition, partition_runs)
    if sync_acks is not None:
        _await_offset_syncs(target, sync_acks)
    return result


def _produce_partition(producer: Producer, batch: PartitionBatch, remote: str, acks: _Acks) -> None:
    produce, poll, on_delivery, partition = producer.produce, producer.poll, acks.on_delivery, batch.partition
    for key, value, timestamp, headers in zip(batch.keys, batch.values, batch.timestamps, batch.headers, strict=True):
        while True:
            try:
                produce(
                    remote,
                    value,
                    key,
                    partition=partition,
                    timestamp=timestamp,
                    headers=headers,
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                poll(0.05)  # local queue full: let deliveries drain


def _await_acks(producer: Producer, pending: list[tuple[PartitionBatch, str, _Acks]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(acks.settled for _, _, acks in pending):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            missing = sum(acks.expected - len(acks.offsets) for _, _, acks in pending)
            raise MirrorError(
                f"{missing} record(s) not acknowledged by the target within {timeout:.0f}s "
                "(mirror.delivery.timeout.ms); is the target cluster reachable?"
            )
        producer.flush(min(remaining, 1.0))  # flush sends at once, without waiting for linger.ms
    for batch, remote, acks in pending:
        if acks.error is not None:
            err = acks.error
            offset = batch.offsets[acks.error_offset] if 0 <= acks.error_offset < len(batch) else -1
            where = f"{batch.topic}-{batch.partition}@{offset} → {remote}-{batch.partition}"
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                size = len(batch.values[acks.error_offset] or b"")
                raise RecordTooLargeError(
                    f"{where}: record of {size} bytes is larger than the target accepts; raise max.message.bytes "
                    f"of {remote} (and the producer's message.max.bytes); it is retried, never dropped",
                    topic=batch.topic,
                    partition=batch.partition,
                    offset=offset,
                )
            raise DeliveryError(
                f"{where}: not acknowledged: {err.str()}",
                topic=batch.topic,
                partition=batch.partition,
                offset=offset,
                fatal=err.fatal(),
            )
        # Reports may be served by another thread's poll, interleaved; the idempotent producer writes a
        # partition's records in produce order, so the k-th smallest offset belongs to the k-th record.
        acks.offsets.sort()


def _offset_syncs(batch: PartitionBatch, runs: list[Run]) -> list[OffsetSync]:
    """MM2 offset syncs for a partition: the first record of every run and the batch's last record."""
    syncs = [OffsetSync(batch.topic, batch.partition, r.upstream, r.downstream) for r in runs]
    last = runs[-1]
    if last.length > 1:
        syncs.append(OffsetSync(batch.topic, batch.partition, last.upstream_end - 1, last.downstream_end - 1))
    return syncs


def _send_offset_syncs(target: MirrorTarget, syncs: list[OffsetSync]) -> _Acks | None:
    producer = target.offset_sync_producer
    if producer is None or not syncs:
        return None
    topic = target.policy.offset_syncs_topic(target.target)
    acks = _Acks(len(syncs))
    for sync in syncs:
        while True:
            try:
                producer.produce(topic, sync.value(), sync.key(), partition=0, on_delivery=acks.on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    return acks


def _await_offset_syncs(target: MirrorTarget, acks: _Acks) -> None:
    producer = target.offset_sync_producer
    assert producer is not None
    deadline = time.monotonic() + target.settings.mirror_delivery_timeout_ms / 1000.0
    while not acks.settled and time.monotonic() < deadline:
        producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    if acks.error is not None or not acks.settled:
        reason = acks.error.str() if acks.error is not None else "timed out"
        raise MirrorError(
            f"offset syncs to {target.policy.offset_syncs_topic(target.target)} not acknowledged: {reason}"
        )
