"""Mirror a batch of source records to the target cluster, and record exactly where each one landed.

Every record goes to the remote topic the policy names, same partition, same key, value, headers (order and
duplicates kept) and CreateTime timestamp, through an idempotent ``acks=all`` producer. The call returns only when
the target acknowledged every record; on any failure it raises, so the event source retries the whole batch and
commits nothing (at-least-once, never loss). Then, once per partition: the offset runs go to the state table (the
first batch of a partition with no runs records their origin, :class:`srm.core.offsets.Origin`) and MM2-format offset
syncs to MM2's offset-syncs topic (:func:`offset_syncs_topic`).

When the remote topic keeps the source topic's name (``IdentityReplicationPolicy``), each record also carries the
``srm-provenance`` header (:mod:`srm.core.loops`): the source is added to it, and a record that has already visited
the target is skipped — counted as processed, never written; its offset is an upstream gap between offset runs. With
the default policy nothing is added: records stay byte-identical. A batch of the source's own ``heartbeats`` topic
also records the newest heartbeat's replication latency in the flow status (:mod:`srm.replication.heartbeat`).

A record larger than the remote topic's ``max.message.bytes`` fails its batch (:class:`RecordTooLargeError`, retried:
the partition stops) unless ``errors.tolerance = all``: then it goes to the dead-letter destination before anything
of the batch is written (:mod:`srm.core.dead_letters`) and, like a skipped record, leaves an upstream gap.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from srm.aws.state import StateError, StateStore
from srm.config.settings import FlowSettings
from srm.core.dead_letters import DeadLetter, DeadLetterError, DeadLetters, record_batch_size
from srm.core.events import PartitionBatch
from srm.core.loops import stamp_provenance
from srm.core.offsets import Origin, Run, runs_from_pairs
from srm.errors import RetriableError
from srm.kafka.clients import Acks, produce
from srm.kafka.transactions import TransactionError
from srm.metrics.schema import DeadLetterBatch, MirrorBatch, MirrorFailure, SketchData
from srm.metrics.sinks import Emitter, NullEmitter
from srm.metrics.sketch import Sketch
from srm.mm2.formats import OffsetSync
from srm.mm2.policy import ReplicationPolicy
from srm.replication.continuity import SourceLookups, check_batches
from srm.replication.dead_letters import MessageSizeLimits, NoDeadLetters, oversized
from srm.replication.exactly_once import ExactlyOnce
from srm.replication.heartbeat import latest_heartbeat

__all__ = [
    "BatchResult",
    "DataLossError",
    "DeliveryError",
    "MirrorContext",
    "MirrorError",
    "RecordTooLargeError",
    "TopicNotReplicatedError",
    "log_start_lookup",
    "offset_syncs_topic",
    "replicate_batch",
]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


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
    lost: dict[str, int] = field(default_factory=dict)  # by source topic: offsets found lost before this batch
    resets: dict[str, int] = field(default_factory=dict)  # by source topic: partitions found started over
    heartbeat_latency_ms: int | None = None  # replication latency of the newest heartbeat of the batch
    topics: dict[str, TopicStats] = field(default_factory=dict)  # by source topic

    def summary(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "bytes": self.bytes,
            "partitions": self.partitions,
            "maxLatencyMs": self.max_latency_ms,
            **({"skipped": self.skipped} if self.skipped else {}),
            **({"alreadyWritten": self.already_written} if self.already_written else {}),
            **({"deadLettered": self.dead_lettered} if self.dead_lettered else {}),
            **({"lostOffsets": self.lost} if self.lost else {}),
            **({"topicResets": self.resets} if self.resets else {}),
            **({"heartbeatLatencyMs": self.heartbeat_latency_ms} if self.heartbeat_latency_ms is not None else {}),
        }


def replicate_batch(batches: list[PartitionBatch], target: MirrorContext) -> BatchResult:
    """Replicate one event's batches (:func:`srm.core.events.parse_event`). Raises TopicNotReplicatedError or
    MirrorError (after emitting a failure record per partition: the event source retries the batch)."""
    eos = target.exactly_once
    try:
        with eos.abandoning(batches) if eos is not None else contextlib.nullcontext():
            return _replicate(batches, target)
    except MirrorError as e:
        ts = int(time.time() * 1000)
        if target.forget_remote_topic is not None:  # deleted on the target? the retry finds out and recreates it
            for remote in {target.policy.format_remote_topic(target.source, b.topic) for b in batches}:
                target.forget_remote_topic(remote)
        for batch in batches:
            target.metrics.emit(
                MirrorFailure(
                    ts=ts,
                    source=target.source,
                    target=target.target,
                    topic=batch.topic,
                    partition=batch.partition,
                    error=type(e).__name__,
                    retries=1,  # the event source delivers the batch again
                    records=len(batch),
                )
            )
        raise


def _replicate(batches: list[PartitionBatch], target: MirrorContext) -> BatchResult:
    settings = target.settings
    result = BatchResult()
    pending: list[tuple[PartitionBatch, str, Acks]] = []
    replicate = settings.replicate_decision(target.target, target.policy)
    firsts: dict[tuple[str, int], int] = {}  # each partition's first offset, skipped records included
    lasts: dict[tuple[str, int], int] = {}  # … and its last
    letters: list[DeadLetter] = []
    tails: dict[tuple[str, int], int] = {}  # one past the last offset of partitions with skipped records
    now_ms = int(time.time() * 1000)

    for batch in batches:
        if not replicate(batch.topic):
            raise TopicNotReplicatedError(
                f"{batch.topic} is not replicated by {target.source}->{target.target} (topics={settings.topics!r}, "
                f"topics.exclude={settings.topics_exclude!r}); its event source mapping should be disabled"
            )
    _check_continuity(batches, target, result)
    for batch in batches:
        remote = target.policy.format_remote_topic(target.source, batch.topic)
        target.ensure_remote_topic(batch.topic, remote, batch.partition + 1)
        if len(batch):
            firsts[(batch.topic, batch.partition)] = batch.offsets[0]
            lasts[(batch.topic, batch.partition)] = batch.offsets[-1]
        if remote == batch.topic:  # the name cannot tell where records came from: the provenance header does
            last = batch.offsets[-1] if len(batch) else None
            batch, skipped = _with_provenance(batch, target.source, target.target)
            result.skipped += skipped
            if skipped and last is not None:
                tails[(batch.topic, batch.partition)] = last + 1
        if settings.errors_tolerance == "all" and target.max_message_bytes is not None and len(batch):
            batch = _set_aside_oversized(target, batch, remote, target.max_message_bytes(remote), letters)
        acks = Acks(len(batch))
        pending.append((batch, remote, acks))
    if letters:  # stored before any record is written: a failure from here on retries the whole batch
        try:
            target.dead_letters.write(letters)
        except DeadLetterError as e:
            raise MirrorError(str(e)) from None
        result.dead_lettered = len(letters)

    eos = target.exactly_once
    if eos is not None:
        pending, result.already_written = _transactional(
            eos.prepare, pending, lambda missing: _record_runs(target, missing, {})
        )
    producer = target.producer
    for batch, remote, acks in pending:
        if eos is not None and len(batch):
            producer = _transactional(eos.begin, batch)
        _produce_partition(producer, batch, remote, acks, target.target)
        result.records += len(batch)
        result.partitions[f"{remote}-{batch.partition}"] = len(batch)
        result.bytes += sum(map(len, filter(None, batch.values))) + sum(map(len, filter(None, batch.keys)))
        if len(batch):
            result.max_latency_ms = max(result.max_latency_ms, now_ms - min(batch.timestamps))

    if eos is None:
        _await_acks(target, pending, settings.mirror_delivery_timeout_ms / 1000.0)
        runs = {(b.topic, b.partition): _runs(b.offsets, acks.offsets) for b, _, acks in pending}
    else:  # each partition's records and its next source offset in one transaction
        runs = _transactional(
            eos.commit,
            pending,
            lasts,
            lambda producer, waiting, timeout: _await_acks(target, waiting, timeout, producer),
            lambda b, acks: _runs(b.offsets, acks.offsets),
        )
    _measure(target, pending, now_ms, int(time.time() * 1000), result)

    # Offset syncs travel while the state is written; both are done before the batch counts as replicated.
    sync_acks = _send_offset_syncs(
        target, [s for b, _, _ in pending for s in _offset_syncs(b, runs[(b.topic, b.partition)])]
    )
    _record_runs(target, runs, firsts)
    if eos is not None:
        eos.recorded(runs)
    for (topic, partition), tail in tails.items():
        written = runs.get((topic, partition))
        if not written or written[-1].upstream_end < tail:  # else a gap after the runs would look like lost records
            target.state.mark_processed(target.source, target.target, topic, partition, tail)
    if sync_acks is not None:
        _await_offset_syncs(target, sync_acks)
    result.heartbeat_latency_ms = _record_heartbeat(target, pending)
    _count_dead_letters(target, letters)
    return result


def _transactional(call: Callable[..., _T], *args: Any) -> _T:
    """A step of :class:`ExactlyOnce`, its failure raised as a MirrorError (the batch is retried)."""
    try:
        return call(*args)
    except TransactionError as e:
        raise MirrorError(str(e)) from e


def _set_aside_oversized(
    target: MirrorContext, batch: PartitionBatch, remote: str, limit: int, letters: list[DeadLetter]
) -> PartitionBatch:
    """The batch without its records larger than ``limit``; those are added to ``letters``, each logged."""
    found = oversized(batch, limit)
    if not found:
        return batch
    for i, size in found:
        offset = batch.offsets[i]
        reason = f"record_too_large: {size} bytes, {remote} accepts at most {limit} (max.message.bytes)"
        log.warning(
            "%s->%s: %s-%d@%d (%d bytes) is larger than %s accepts (max.message.bytes=%d): sent to the dead "
            "letters at %s (errors.tolerance=all)",
            target.source,
            target.target,
            batch.topic,
            batch.partition,
            offset,
            size,
            remote,
            limit,
            target.dead_letters.location,
        )
        letters.append(
            DeadLetter(
                target.source,
                target.target,
                batch.topic,
                batch.partition,
                offset,
                batch.timestamps[i],
                batch.keys[i],
                batch.values[i],
                batch.headers[i],
                remote,
                reason,
                size,
            )
        )
    out = {i for i, _ in found}
    return _keeping(batch, [i for i in range(len(batch)) if i not in out], batch.headers)


def _count_dead_letters(target: MirrorContext, letters: list[DeadLetter]) -> None:
    """One raw metric record per partition with dead letters, once the batch is replicated (a retried batch's
    letters are counted by the attempt that succeeds)."""
    per_partition: dict[tuple[str, int], list[DeadLetter]] = {}
    for letter in letters:
        per_partition.setdefault((letter.topic, letter.partition), []).append(letter)
    ts = int(time.time() * 1000)
    for (topic, partition), found in per_partition.items():
        target.metrics.emit(
            DeadLetterBatch(
                ts=ts,
                source=target.source,
                target=target.target,
                topic=topic,
                partition=partition,
                records=len(found),
                bytes=sum(len(x.key or b"") + len(x.value or b"") for x in found),
                error="record_too_large",
            )
        )


def _check_continuity(batches: list[PartitionBatch], target: MirrorContext, result: BatchResult) -> None:
    """Records lost on the source before this batch, or a partition that started over (:mod:`.continuity`): noted in
    the result; with ``fail.on.data.loss``, lost records fail the batch before anything is written."""
    lookups = SourceLookups(target.log_start, target.log_end, target.topic_id)
    findings = check_batches(
        batches,
        source=target.source,
        target=target.target,
        state=target.state,
        lookups=lookups,
        metrics=target.metrics,
        fail_on_data_loss=target.settings.fail_on_data_loss,
    )
    for reset in findings.resets:
        result.resets[reset.topic] = result.resets.get(reset.topic, 0) + 1
    if findings.losses and target.settings.fail_on_data_loss:
        raise DataLossError(
            "; ".join(loss.describe() for loss in findings.losses)
            + "; the partition stops (fail.on.data.loss = true): turn it off to replicate past the gap",
            lost=dict(findings.lost),
        )
    result.lost.update(findings.lost)


def _measure(
    target: MirrorContext,
    pending: list[tuple[PartitionBatch, str, Acks]],
    arrived_ms: int,
    acked_ms: int,
    result: BatchResult,
) -> None:
    """One raw record per partition: latency = ack time − record timestamp (the ack time is when the batch's last
    acknowledgement arrived), age = arrival at the function − record timestamp. Records with equal timestamps are
    counted together: a sketch update per distinct timestamp, not per record."""
    for batch, remote, _ in pending:
        if not len(batch):
            continue
        latency, age = Sketch(), Sketch()
        for timestamp, count in Counter(batch.timestamps).items():
            latency.add(acked_ms - timestamp, count)
            age.add(arrived_ms - timestamp, count)
        size = sum(map(len, filter(None, batch.values))) + sum(map(len, filter(None, batch.keys)))
        stats = result.topics.setdefault(batch.topic, TopicStats())
        stats.records += len(batch)
        stats.bytes += size
        stats.max_latency_ms = max(stats.max_latency_ms, int(latency.max))
        stats.max_age_ms = max(stats.max_age_ms, int(age.max))
        target.metrics.emit(
            MirrorBatch(
                ts=acked_ms,
                source=target.source,
                target=target.target,
                topic=batch.topic,
                remote_topic=remote,
                partition=batch.partition,
                records=len(batch),
                bytes=size,
                latency=SketchData.of(latency),
                age=SketchData.of(age),
            )
        )


def _produce_partition(producer: Producer, batch: PartitionBatch, remote: str, acks: Acks, cluster: str) -> None:
    produce, poll, on_delivery, partition = producer.produce, producer.poll, acks.on_delivery, batch.partition
    refreshed = False
    for key, value, timestamp, headers in zip(batch.keys, batch.values, batch.timestamps, batch.headers, strict=True):
        while True:
            try:
                # Positional, in the order of the C signature (topic, value, key, partition, callback, on_delivery,
                # timestamp, headers): keyword arguments cost about 40 % more per call.
                produce(remote, value, key, partition, on_delivery, None, timestamp, headers)  # type: ignore[arg-type]
                break
            except BufferError:
                poll(0.05)  # local queue full: let deliveries drain
            except KafkaException as e:
                # A partition added since the producer last read metadata (topic-sync grew the remote topic):
                # refresh once and produce again; a partition still unknown fails the batch (it is retried).
                err = e.args[0]
                if refreshed or err.code() != KafkaError._UNKNOWN_PARTITION:
                    hint = _acl_hint(err, cluster, "WRITE", remote)
                    raise MirrorError(f"{remote}-{partition}: not produced: {err.str()}{hint}") from e
                producer.list_topics(remote, timeout=10)
                refreshed = True


def _await_acks(
    target: MirrorContext,
    pending: list[tuple[PartitionBatch, str, Acks]],
    timeout: float,
    producer: Producer | None = None,  # a transactional one (exactly-once); else the flow's
) -> None:
    producer = producer or target.producer
    deadline = time.monotonic() + timeout
    while not all(acks.settled for _, _, acks in pending):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            missing = sum(acks.expected - len(acks.offsets) for _, _, acks in pending)
            raise MirrorError(
                f"{missing} record(s) not acknowledged by the target within {timeout:.0f}s "
                "(mirror.delivery.timeout.ms); is the target cluster reachable?"
            )
        _flush(producer, min(remaining, 1.0))  # flush sends at once, without waiting for linger.ms
    for batch, remote, acks in pending:
        if acks.error is not None:
            err = acks.error
            offset = batch.offsets[acks.error_offset] if 0 <= acks.error_offset < len(batch) else -1
            where = f"{batch.topic}-{batch.partition}@{offset} → {remote}-{batch.partition}"
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise _too_large(target, batch, remote, offset)
            raise DeliveryError(
                f"{where}: not acknowledged: {err.str()}{_acl_hint(err, target.target, 'WRITE', remote)}",
                topic=batch.topic,
                partition=batch.partition,
                offset=offset,
            )
        # Reports may be served by another thread's poll, interleaved; the idempotent producer writes a
        # partition's records in produce order, so the k-th smallest offset belongs to the k-th record.
        acks.offsets.sort()


def _too_large(target: MirrorContext, batch: PartitionBatch, remote: str, offset: int) -> RecordTooLargeError:
    """The error naming the first record of the batch larger than the remote topic's limit (looked up afresh), or
    saying that the records fit one by one but not batched together."""
    limit = None
    if target.max_message_bytes is not None:
        target.max_message_bytes.forget(remote)
        try:
            limit = target.max_message_bytes(remote)
        except Exception as e:  # only a detail of the message
            log.warning("max.message.bytes of %s not read: %s", remote, e)
    found = oversized(batch, limit) if limit is not None else []
    if found:
        i, size = found[0]
        offset = batch.offsets[i]
        what = (
            f"record of {size} bytes is larger than {remote} accepts (max.message.bytes={limit}); raise it on the "
            "target, or set errors.tolerance=all to send such records to the dead letters"
        )
    elif limit is not None:
        what = (
            f"the records fit {remote}'s max.message.bytes={limit} one by one but not batched together: set the "
            "target producer's batch.size below it"
        )
    else:
        size = max(record_batch_size(k, v, h) for k, v, h in zip(batch.keys, batch.values, batch.headers, strict=True))
        what = f"a record (the largest is {size} bytes) is larger than {remote} accepts (max.message.bytes)"
    return RecordTooLargeError(
        f"{batch.topic}-{batch.partition}@{offset} → {remote}-{batch.partition}: {what}; the batch is retried, "
        "the partition does not move on",
        topic=batch.topic,
        partition=batch.partition,
        offset=offset,
    )


def _flush(producer: Producer, timeout: float) -> None:
    """``producer.flush``, its own failure — a fatal error, raised once, wrapped in a SystemError when it surfaces
    during a delivery callback — raised as a MirrorError naming it (the client cache replaces a fatally failed
    producer before the retry)."""
    try:
        producer.flush(timeout)
    except Exception as e:
        cause = e if isinstance(e, KafkaException) else e.__cause__
        if not isinstance(cause, KafkaException) or not cause.args or not isinstance(cause.args[0], KafkaError):
            raise
        raise MirrorError(f"the producer failed: {cause.args[0].str()}") from e


def _runs(upstream: list[int], downstream: list[int]) -> list[Run]:
    """The batch's offset runs. Both lists ascend strictly (upstream: the event's order; downstream: the target's
    offsets, sorted), so equal spans mean both sides are contiguous: one run, with no walk over the records."""
    if upstream and upstream[-1] - upstream[0] == downstream[-1] - downstream[0] == len(upstream) - 1:
        return [Run(upstream[0], downstream[0], len(upstream))]
    return runs_from_pairs(zip(upstream, downstream, strict=True))


def _record_runs(
    target: MirrorContext, runs: dict[tuple[str, int], list[Run]], firsts: dict[tuple[str, int], int]
) -> None:
    """One state write per partition of the batch; the partitions' writes run side by side (a batch spans up to
    every partition of its topic, and each write is a round trip to DynamoDB). Raises the first failure, after
    every write has finished."""
    writes = [(topic, partition, r) for (topic, partition), r in runs.items() if r]

    def record(topic: str, partition: int, partition_runs: list[Run]) -> None:
        origin = _origin(target, topic, partition, firsts.get((topic, partition), partition_runs[0].upstream))
        target.state.record_runs(target.source, target.target, topic, partition, partition_runs, origin=origin)

    if len(writes) <= 1:
        for write in writes:
            record(*write)
        return
    pool = target.state_writers.pool()
    futures = [pool.submit(record, *write) for write in writes]
    wait(futures)
    for future in futures:
        future.result()


def _origin(target: MirrorContext, topic: str, partition: int, first: int) -> Callable[[], Origin]:
    """The origin a partition's runs get if they begin with this batch: fresh when the batch starts at the log
    start (the event source started there), else resumed from a committed offset. Asked of the source only then."""

    def origin() -> Origin:
        fresh = first == 0 or (target.log_start is not None and first <= target.log_start(topic, partition))
        return Origin(first, fresh, target.topic_id(topic) if target.topic_id is not None else None)

    return origin


def log_start_lookup(admin: AdminClient, timeout: float = 10.0) -> Callable[[str, int], int]:
    """The log-start offset of a partition, from the cluster ``admin`` talks to."""

    def lookup(topic: str, partition: int) -> int:
        tp = TopicPartition(topic, partition)
        return int(admin.list_offsets({tp: OffsetSpec.earliest()}, request_timeout=timeout)[tp].result().offset)

    return lookup


def offset_syncs_topic(source: str, target: str, settings: FlowSettings, policy: ReplicationPolicy) -> tuple[str, str]:
    """The cluster holding the flow's offset syncs (``offset-syncs.topic.location``) and the topic's name there.
    As MM2 names it: after the *other* cluster — ``mm2-offset-syncs.<target>.internal`` on the source,
    ``mm2-offset-syncs.<source>.internal`` on the target."""
    if settings.offset_syncs_topic_location == "source":
        return source, policy.offset_syncs_topic(target)
    return target, policy.offset_syncs_topic(source)


def _with_provenance(batch: PartitionBatch, source: str, target: str) -> tuple[PartitionBatch, int]:
    """The batch with ``source`` added to every record's provenance, minus the records that have visited
    ``target`` already; and how many were left out."""
    keep: list[int] = []
    headers: list[list[tuple[str, bytes | None]] | None] = []
    for i, record_headers in enumerate(batch.headers):
        stamped = stamp_provenance(record_headers, source, target)
        if stamped is not None:
            keep.append(i)
            headers.append(stamped)
    if len(keep) == len(batch):
        return replace(batch, headers=headers), 0
    return _keeping(batch, keep, headers), len(batch) - len(keep)


def _keeping(
    batch: PartitionBatch, keep: list[int], headers: list[list[tuple[str, bytes | None]] | None]
) -> PartitionBatch:
    """The records ``keep`` (indices) of the batch, with ``headers`` (the kept records', or the batch's)."""
    return PartitionBatch(
        batch.topic,
        batch.partition,
        [batch.offsets[i] for i in keep],
        [batch.keys[i] for i in keep],
        [batch.values[i] for i in keep],
        [batch.timestamps[i] for i in keep],
        headers if len(headers) == len(keep) else [headers[i] for i in keep],
    )


def _record_heartbeat(target: MirrorContext, pending: list[tuple[PartitionBatch, str, Acks]]) -> int | None:
    """After a batch of the source's heartbeats topic reached the target: its newest heartbeat's latency, recorded
    in the flow status. A state table hiccup is logged, never fails a replicated batch."""
    heartbeats_topic = target.policy.heartbeats_topic()
    newest = None
    for batch, _, _ in pending:
        if batch.topic == heartbeats_topic:
            found = latest_heartbeat(batch.keys, batch.values, target.source)
            if found is not None and (newest is None or found.timestamp > newest.timestamp):
                newest = found
    if newest is None:
        return None
    now_ms = int(time.time() * 1000)
    latency = max(0, now_ms - newest.timestamp)
    try:
        target.state.update_flow_status(
            target.source,
            target.target,
            heartbeat_ms=newest.timestamp,
            heartbeat_latency_ms=latency,
            heartbeat_replicated_ms=now_ms,
        )
    except StateError as e:
        log.warning("heartbeat latency of %s->%s not recorded: %s", target.source, target.target, e)
    return latency


def _offset_syncs(batch: PartitionBatch, runs: list[Run]) -> list[OffsetSync]:
    """MM2 offset syncs for a partition: the first record of every run and the batch's last record."""
    if not runs:
        return []  # every record of the batch was skipped
    syncs = [OffsetSync(batch.topic, batch.partition, r.upstream, r.downstream) for r in runs]
    last = runs[-1]
    if last.length > 1:
        syncs.append(OffsetSync(batch.topic, batch.partition, last.upstream_end - 1, last.downstream_end - 1))
    return syncs


def _send_offset_syncs(target: MirrorContext, syncs: list[OffsetSync]) -> Acks | None:
    producer = target.offset_sync_producer
    if producer is None or not syncs:
        return None
    _, topic = offset_syncs_topic(target.source, target.target, target.settings, target.policy)
    return produce(producer, topic, [(s.key(), s.value(), None) for s in syncs])


def _await_offset_syncs(target: MirrorContext, acks: Acks) -> None:
    producer = target.offset_sync_producer
    assert producer is not None
    deadline = time.monotonic() + target.settings.mirror_delivery_timeout_ms / 1000.0
    while not acks.settled and time.monotonic() < deadline:
        _flush(producer, min(1.0, max(0.0, deadline - time.monotonic())))
    if acks.error is not None or not acks.settled:
        location, topic = offset_syncs_topic(target.source, target.target, target.settings, target.policy)
        error = acks.error
        reason = error.str() + _acl_hint(error, location, "WRITE", topic) if error is not None else "timed out"
        raise MirrorError(f"offset syncs to {topic} not acknowledged: {reason}")


def _acl_hint(err: KafkaError, cluster: str, operation: str, topic: str) -> str:
    """What a refusal by the cluster's authorizer means, to say after its error."""
    if err.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return ""
    return f" ({cluster}'s ACLs must allow srm's user {operation} on topic {topic})"
