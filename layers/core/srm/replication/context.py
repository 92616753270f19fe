"""What the mirror works with: a flow's :class:`MirrorContext` (built once per container by :mod:`srm.app`), what a
batch's replication reports (:class:`BatchResult`), and how it fails (:class:`MirrorError` and its kinds: the event
source retries the batch)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

from srm.config.settings import FlowSettings
from srm.core.dead_letters import DeadLetters
from srm.core.transforms import TransformChain
from srm.errors import RetriableError
from srm.metrics.sinks import Emitter, NullEmitter
from srm.mm2.policy import ReplicationPolicy
from srm.replication.dead_letters import MessageSizeLimits, NoDeadLetters
from srm.replication.exactly_once import ExactlyOnce
from srm.state import StateStore

__all__ = [
    "BatchResult",
    "DataLossError",
    "DeliveryError",
    "MirrorContext",
    "MirrorError",
    "RecordTooLargeError",
    "StateWriters",
    "TopicNotReplicatedError",
    "TopicStats",
]


class MirrorError(RetriableError, RuntimeError):
    """The batch was not fully replicated; the event source must retry it."""


class DataLossError(MirrorError):
    """Records were purged on the source before they were replicated, and ``fail.on.data.loss`` stops the
    partition: the batch fails, so the event source retries it and makes no progress."""

    def __init__(self, message: str, *, lost: dict[str, int]) -> None:
        super().__init__(message)
        self.lost = lost  # by topic: offsets reported lost for the first time by this attempt


class TopicNotReplicatedError(MirrorError):
    """The batch's topic is not (or no longer) replicated by this flow; its mapping is being disabled."""


class DeliveryError(MirrorError):
    """The target did not acknowledge a record."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic, self.partition, self.offset = topic, partition, offset


class RecordTooLargeError(DeliveryError):
    """A record is larger than the target accepts."""


class StateWriters:
    """A thread pool for state writes, started on first use."""

    def __init__(self, max_workers: int = 16) -> None:
        self._max_workers = max_workers
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=self._max_workers, thread_name_prefix="srm-state")
            return self._pool


@dataclass
class MirrorContext:
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
    # The threads that write a batch's offset runs side by side (one pool per container, held by the App).
    state_writers: StateWriters = field(default_factory=lambda: StateWriters())
    # The log-start offset of a source partition, looked up when a partition with no offset runs is first recorded,
    # or after a gap in its offsets (data loss?).
    log_start: Callable[[str, int], int] | None = None
    # The log end and topic id of the source, looked up when a batch starts below its partition's runs (topic reset?).
    log_end: Callable[[str, int], int] | None = None
    topic_id: Callable[[str], str | None] | None = None
    # Raw metric records (one per partition of a batch; a failed batch's too), sent off the record path.
    metrics: Emitter = field(default_factory=NullEmitter)
    # The flow's transactions when exactly.once.source.support=enabled (one per container); None: at-least-once.
    exactly_once: ExactlyOnce | None = None
    # Where records go that the target refuses (errors.tolerance = all), and the remote topics' size limits.
    dead_letters: DeadLetters = field(default_factory=NoDeadLetters)
    max_message_bytes: MessageSizeLimits | None = None
    # Forgets what is known of a remote topic after a failed batch, so the retry checks it exists (or recreates it).
    forget_remote_topic: Callable[[str], None] | None = None
    # The flow's Single Message Transforms (srm.core.transforms); empty: the mirror never calls it.
    transforms: TransformChain = field(default_factory=TransformChain)


@dataclass
class TopicStats:
    """A batch's records of one topic, for CloudWatch: counts and the largest latency and age."""

    records: int = 0
    bytes: int = 0
    max_latency_ms: int = 0
    max_age_ms: int = 0


@dataclass
class BatchResult:
    records: int = 0
    bytes: int = 0
    partitions: dict[str, int] = field(default_factory=dict)  # "remote-topic-p" → records
    max_latency_ms: int = 0  # now − the oldest record timestamp of the batch
    skipped: int = 0  # records not written: their provenance names the target (identity loop guard)
    already_written: int = 0  # records not written: an earlier transaction committed them (exactly-once)
    dead_lettered: int = 0  # records sent to the dead-letter destination instead
    filtered: dict[str, int] = field(default_factory=dict)  # by source topic: records a transform dropped
    lost: dict[str, int] = field(default_factory=dict)  # by source topic: offsets found lost before this batch
    resets: dict[str, int] = field(default_factory=dict)  # by source topic: partitions found started over
    heartbeat_latency_ms: int | None = None  # replication latency of the newest heartbeat of the batch
    topics: dict[str, TopicStats] = field(default_factory=dict)  # by source topic

    def summary(self) -> dict[str, Any]:
        # records not written, and what the batch found lost or reset on the source: listed only when there are any
        only_when_any = {
            "skipped": self.skipped,
            "alreadyWritten": self.already_written,
            "deadLettered": self.dead_lettered,
            "filtered": sum(self.filtered.values()),
            "lostOffsets": self.lost,
            "topicResets": self.resets,
        }
        return {
            "records": self.records,
            "bytes": self.bytes,
            "partitions": self.partitions,
            "maxLatencyMs": self.max_latency_ms,
            **{key: value for key, value in only_when_any.items() if value},
            **({"heartbeatLatencyMs": self.heartbeat_latency_ms} if self.heartbeat_latency_ms is not None else {}),
        }
