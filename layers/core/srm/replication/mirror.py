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

The flow's Single Message Transforms (``transforms``, :mod:`srm.core.transforms`) run on each record after that, in
order; a record one drops is counted (``filtered``) and, like a skipped record, leaves an upstream gap, so a group
whose next record was dropped translates to the next replicated one. A transform that raises fails the batch. With no
transforms nothing is called per record.

A record larger than the remote topic's ``max.message.bytes`` fails its batch (:class:`RecordTooLargeError`, retried:
the partition stops) unless ``errors.tolerance = all``: then it goes to the dead-letter destination before anything
of the batch is written (:mod:`srm.core.dead_letters`) and, like a skipped record, leaves an upstream gap.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import wait
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from srm.core.dead_letters import DeadLetter, DeadLetterError
from srm.core.events import PartitionBatch
from srm.core.loops import stamp_provenance
from srm.core.offsets import Origin, Run, runs_from_pairs
from srm.core.transforms import TransformChain, TransformError
from srm.kafka.clients import Acks
from srm.kafka.transactions import TransactionError
from srm.metrics.model.schema import DeadLetterBatch, MirrorBatch, MirrorFailure, SketchData
from srm.metrics.model.sketch import Sketch
from srm.replication.context import (
    BatchResult,
    DataLossError,
    MirrorContext,
    MirrorError,
    TopicNotReplicatedError,
    TopicStats,
)
from srm.replication.continuity import SourceLookups, check_batches
from srm.replication.dead_letters import oversized
from srm.replication.delivery import (
    await_acks,
    await_offset_syncs,
    drain,
    offset_syncs,
    produce_partition,
    send_offset_syncs,
)
from srm.replication.exactly_once import ExactlyOnce, Pending
from srm.replication.heartbeat import latest_heartbeat
from srm.state import StateError

__all__ = ["AtLeastOnce", "Delivery", "ExactlyOnceDelivery", "log_start_lookup", "replicate_batch"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def replicate_batch(batches: list[PartitionBatch], target: MirrorContext) -> BatchResult:
    """Replicate one event's batches (:func:`srm.core.events.parse_event`). Raises TopicNotReplicatedError or
    MirrorError (after emitting a failure record per partition: the event source retries the batch)."""
    delivery: Delivery = (
        AtLeastOnce(target) if target.exactly_once is None else ExactlyOnceDelivery(target, target.exactly_once)
    )
    try:
        with delivery.guard(batches):
            return _replicate(batches, target, delivery)
    except MirrorError as e:
        ts = int(time.time() * 1000)
        if target.forget_remote_topic is not None:  # deleted on the target? the retry finds out and recreates it
            for remote in {target.policy.format_remote_topic(target.source, b.topic) for b in batches}:
                target.forget_remote_topic(remote)
        for batch in batches:
            _emit(
                target,
                MirrorFailure,
                ts=ts,
                topic=batch.topic,
                partition=batch.partition,
                error=type(e).__name__,
                retries=1,  # the event source delivers the batch again
                records=len(batch),
            )
        raise


def _emit(target: MirrorContext, record: Callable[..., object], **fields: Any) -> None:
    """Send a raw metric record of the flow (``record`` of ``fields`` and the flow's source and target)."""
    target.metrics.emit(record(source=target.source, target=target.target, **fields))


PartitionKey = tuple[str, int]


class Delivery(Protocol):
    """How a batch's records reach the target and when they count as written: at-least-once or exactly-once."""

    def guard(self, batches: list[PartitionBatch]) -> contextlib.AbstractContextManager[None]:
        """Around the whole batch: what a failure leaves behind is cleaned up."""
        ...

    def prepare(self, pending: list[Pending]) -> tuple[list[Pending], int]:
        """The records still to write, and how many were left out as written before."""
        ...

    def write(
        self, pending: list[Pending], lasts: dict[PartitionKey, int], result: BatchResult, now_ms: int
    ) -> dict[PartitionKey, list[Run]]:
        """Write the records; once the target holds them for good, each partition's offset runs."""
        ...

    def recorded(self, runs: dict[PartitionKey, list[Run]]) -> None:
        """The runs are in the state table now."""
        ...


class AtLeastOnce:
    """Every record through the flow's idempotent producer; written once the target acknowledged all of them. A
    failed batch waits until the producer delivered or gave up what it was handed, so that its retry duplicates
    nothing still in flight."""

    def __init__(self, target: MirrorContext) -> None:
        self.target = target

    def guard(self, batches: list[PartitionBatch]) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()

    def prepare(self, pending: list[Pending]) -> tuple[list[Pending], int]:
        return pending, 0

    def write(
        self, pending: list[Pending], lasts: dict[PartitionKey, int], result: BatchResult, now_ms: int
    ) -> dict[PartitionKey, list[Run]]:
        target = self.target
        timeout_s = target.settings.mirror_delivery_timeout_ms / 1000.0
        handed: list[Acks] = []  # the batches whose records went to the producer
        try:
            for batch, remote, acks in pending:
                handed.append(acks)
                _produce(target, target.producer, batch, remote, acks, result, now_ms)
            await_acks(target, pending, timeout_s)
        except MirrorError:
            drain(target.producer, handed, timeout_s)
            raise
        return {(b.topic, b.partition): _runs(b.offsets, acks.offsets) for b, _, acks in pending}

    def recorded(self, runs: dict[PartitionKey, list[Run]]) -> None:
        pass


class ExactlyOnceDelivery:
    """Each partition's records and its next source offset in one transaction of the partition's own producer
    (:class:`srm.replication.exactly_once.ExactlyOnce`): records an earlier transaction committed are left out, and a
    failed batch's open transactions are dropped (their next producer aborts them)."""

    def __init__(self, target: MirrorContext, eos: ExactlyOnce) -> None:
        self.target, self.eos = target, eos

    def guard(self, batches: list[PartitionBatch]) -> contextlib.AbstractContextManager[None]:
        return self.eos.abandoning(batches)

    def prepare(self, pending: list[Pending]) -> tuple[list[Pending], int]:
        return _transactional(self.eos.prepare, pending, lambda missing: _record_runs(self.target, missing, {}))

    def write(
        self, pending: list[Pending], lasts: dict[PartitionKey, int], result: BatchResult, now_ms: int
    ) -> dict[PartitionKey, list[Run]]:
        target = self.target
        for batch, remote, acks in pending:
            producer = _transactional(self.eos.begin, batch) if len(batch) else target.producer
            _produce(target, producer, batch, remote, acks, result, now_ms)
        return _transactional(
            self.eos.commit,
            pending,
            lasts,
            lambda producer, waiting, timeout: await_acks(target, waiting, timeout, producer),
            lambda b, acks: _runs(b.offsets, acks.offsets),
        )

    def recorded(self, runs: dict[PartitionKey, list[Run]]) -> None:
        self.eos.recorded(runs)


def _produce(
    target: MirrorContext,
    producer: Producer,
    batch: PartitionBatch,
    remote: str,
    acks: Acks,
    result: BatchResult,
    now_ms: int,
) -> None:
    """Hand a partition's records to ``producer`` and count them in ``result``."""
    produce_partition(producer, batch, remote, acks, target.target)
    result.records += len(batch)
    result.partitions[f"{remote}-{batch.partition}"] = len(batch)
    result.bytes += sum(map(len, filter(None, batch.values))) + sum(map(len, filter(None, batch.keys)))
    if len(batch):
        result.max_latency_ms = max(result.max_latency_ms, now_ms - min(batch.timestamps))


def _replicate(batches: list[PartitionBatch], target: MirrorContext, delivery: Delivery) -> BatchResult:
    settings = target.settings
    result = BatchResult()
    pending: list[Pending] = []
    replicate = settings.replicate_decision(target.target, target.policy)
    firsts: dict[tuple[str, int], int] = {}  # each partition's first offset, skipped records included
    lasts: dict[tuple[str, int], int] = {}  # … and its last
    letters: list[DeadLetter] = []
    tails: dict[tuple[str, int], int] = {}  # one past the last offset of partitions with records left out
    chain = target.transforms
    filtered: dict[tuple[str, int], int] = {}  # records the transforms dropped, by partition
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
        delivered = len(batch)
        if remote == batch.topic:  # the name cannot tell where records came from: the provenance header does
            batch, skipped = _with_provenance(batch, target.source, target.target)
            result.skipped += skipped
        if chain and len(batch):  # branched once per batch: an empty chain costs nothing per record
            batch = _transform(chain, batch, result, filtered)
        if len(batch) < delivered:  # records left out are upstream gaps; past the last run, the tail says so
            tails[(batch.topic, batch.partition)] = lasts[(batch.topic, batch.partition)] + 1
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

    pending, result.already_written = delivery.prepare(pending)
    runs = delivery.write(pending, lasts, result, now_ms)
    _measure(target, pending, now_ms, int(time.time() * 1000), result, filtered)

    # Offset syncs travel while the state is written; both are done before the batch counts as replicated.
    sync_acks = send_offset_syncs(
        target, [s for b, _, _ in pending for s in offset_syncs(b, runs[(b.topic, b.partition)])]
    )
    _record_runs(target, runs, firsts)
    delivery.recorded(runs)
    for (topic, partition), tail in tails.items():
        written = runs.get((topic, partition))
        if not written or written[-1].upstream_end < tail:  # else a gap after the runs would look like lost records
            target.state.mark_processed(target.source, target.target, topic, partition, tail)
    if sync_acks is not None:
        await_offset_syncs(target, sync_acks)
    result.heartbeat_latency_ms = _record_heartbeat(target, pending)
    _count_dead_letters(target, letters)
    return result


def _transform(
    chain: TransformChain, batch: PartitionBatch, result: BatchResult, filtered: dict[tuple[str, int], int]
) -> PartitionBatch:
    """The batch through the flow's transforms; what they dropped counted. A transform that raises fails the batch
    (it is retried), naming the record."""
    try:
        batch, dropped = chain.apply(batch)
    except TransformError as e:
        raise MirrorError(str(e)) from e
    if dropped:
        filtered[(batch.topic, batch.partition)] = dropped
        result.filtered[batch.topic] = result.filtered.get(batch.topic, 0) + dropped
    return batch


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
        _emit(
            target,
            DeadLetterBatch,
            ts=ts,
            topic=topic,
            partition=partition,
            records=len(found),
            bytes=sum(len(x.key or b"") + len(x.value or b"") for x in found),
            error="record_too_large",
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
    pending: list[Pending],
    arrived_ms: int,
    acked_ms: int,
    result: BatchResult,
    filtered: dict[tuple[str, int], int],
) -> None:
    """One raw record per partition: latency = ack time − record timestamp (the ack time is when the batch's last
    acknowledgement arrived), age = arrival at the function − record timestamp, and the records the transforms
    dropped. Records with equal timestamps are counted together: a sketch update per distinct timestamp, not per
    record."""
    for batch, remote, _ in pending:
        dropped = filtered.get((batch.topic, batch.partition), 0)
        if not len(batch):
            if dropped:
                _emit(
                    target,
                    MirrorBatch,
                    ts=acked_ms,
                    topic=batch.topic,
                    remote_topic=remote,
                    partition=batch.partition,
                    records=0,
                    bytes=0,
                    filtered=dropped,
                )
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
        _emit(
            target,
            MirrorBatch,
            ts=acked_ms,
            topic=batch.topic,
            remote_topic=remote,
            partition=batch.partition,
            records=len(batch),
            bytes=size,
            latency=SketchData.of(latency),
            age=SketchData.of(age),
            filtered=dropped,
        )


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


def _record_heartbeat(target: MirrorContext, pending: list[Pending]) -> int | None:
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
