"""Writing a batch to the target: the records of each partition through the flow's producer, their
acknowledgements awaited (a refusal named, with what to do about it), and the MM2 offset syncs of what landed."""

from __future__ import annotations

import contextlib
import logging
import time

from confluent_kafka import KafkaError, KafkaException, Producer

from srm.config.settings import FlowSettings
from srm.core.dead_letters import record_batch_size
from srm.core.events import PartitionBatch
from srm.core.offsets import Run
from srm.kafka.clients import Acks, produce
from srm.mm2.formats import OffsetSync
from srm.mm2.policy import ReplicationPolicy
from srm.replication.context import DeliveryError, MirrorContext, MirrorError, RecordTooLargeError
from srm.replication.dead_letters import oversized

__all__ = [
    "acl_hint",
    "await_acks",
    "await_offset_syncs",
    "drain",
    "flush",
    "offset_syncs",
    "offset_syncs_topic",
    "produce_partition",
    "send_offset_syncs",
    "too_large",
]

log = logging.getLogger(__name__)


def produce_partition(producer: Producer, batch: PartitionBatch, remote: str, acks: Acks, cluster: str) -> None:
    produce, poll, on_delivery, partition = producer.produce, producer.poll, acks.on_delivery, batch.partition
    refreshed = False
    records = zip(batch.keys, batch.values, batch.timestamps, batch.headers, strict=True)
    for key, value, timestamp, headers in records:
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
                    acks.withdraw(1 + sum(1 for _ in records))  # this record and the rest never reach the producer
                    hint = acl_hint(err, cluster, "WRITE", remote)
                    raise MirrorError(f"{remote}-{partition}: not produced: {err.str()}{hint}") from e
                producer.list_topics(remote, timeout=10)
                refreshed = True


def await_acks(
    target: MirrorContext,
    pending: list[tuple[PartitionBatch, str, Acks]],
    timeout: float,
    producer: Producer | None = None,  # a transactional one (exactly-once); else the flow's
) -> None:
    producer = target.producer if producer is None else producer
    deadline = time.monotonic() + timeout
    while not all(acks.settled for _, _, acks in pending):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            missing = sum(acks.expected - len(acks.offsets) for _, _, acks in pending)
            raise MirrorError(
                f"{missing} record(s) not acknowledged by the target within {timeout:.0f}s "
                "(mirror.delivery.timeout.ms); is the target cluster reachable?"
            )
        flush(producer, min(remaining, 1.0))  # flush sends at once, without waiting for linger.ms
    for batch, remote, acks in pending:
        if acks.error is not None:
            err = acks.error
            offset = batch.offsets[acks.error_offset] if 0 <= acks.error_offset < len(batch) else -1
            where = f"{batch.topic}-{batch.partition}@{offset} → {remote}-{batch.partition}"
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise too_large(target, batch, remote, offset)
            raise DeliveryError(
                f"{where}: not acknowledged: {err.str()}{acl_hint(err, target.target, 'WRITE', remote)}",
                topic=batch.topic,
                partition=batch.partition,
                offset=offset,
            )
        # Reports may be served by another thread's poll, interleaved; the idempotent producer writes a
        # partition's records in produce order, so the k-th smallest offset belongs to the k-th record.
        acks.offsets.sort()


def drain(producer: Producer, handed: list[Acks], timeout: float) -> None:
    """Before a failed batch is retried, wait until the producer has delivered or given up each record it was
    handed: one left in it would be written after the retry wrote it again (a duplicate). ``message.timeout.ms`` is
    the delivery ``timeout``, so it gives up on them within about as long."""
    deadline = time.monotonic() + timeout + 2.0  # and its once-a-second timeout scan
    with contextlib.suppress(MirrorError):  # failed fatally: it delivers none of them
        while not all(acks.settled for acks in handed) and time.monotonic() < deadline:
            flush(producer, min(1.0, max(0.0, deadline - time.monotonic())))
    left = sum(acks.unsettled for acks in handed)
    if left:
        log.warning("%d record(s) of a failed batch are still in the producer: its retry may duplicate them", left)


def too_large(target: MirrorContext, batch: PartitionBatch, remote: str, offset: int) -> RecordTooLargeError:
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


def flush(producer: Producer, timeout: float) -> None:
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


def offset_syncs_topic(source: str, target: str, settings: FlowSettings, policy: ReplicationPolicy) -> tuple[str, str]:
    """The cluster holding the flow's offset syncs (``offset-syncs.topic.location``) and the topic's name there.
    As MM2 names it: after the *other* cluster — ``mm2-offset-syncs.<target>.internal`` on the source,
    ``mm2-offset-syncs.<source>.internal`` on the target."""
    if settings.offset_syncs_topic_location == "source":
        return source, policy.offset_syncs_topic(target)
    return target, policy.offset_syncs_topic(source)


def offset_syncs(batch: PartitionBatch, runs: list[Run]) -> list[OffsetSync]:
    """MM2 offset syncs for a partition: the first record of every run and the batch's last record."""
    if not runs:
        return []  # every record of the batch was skipped
    syncs = [OffsetSync(batch.topic, batch.partition, r.upstream, r.downstream) for r in runs]
    last = runs[-1]
    if last.length > 1:
        syncs.append(OffsetSync(batch.topic, batch.partition, last.upstream_end - 1, last.downstream_end - 1))
    return syncs


def send_offset_syncs(target: MirrorContext, syncs: list[OffsetSync]) -> Acks | None:
    producer = target.offset_sync_producer
    if producer is None or not syncs:
        return None
    _, topic = offset_syncs_topic(target.source, target.target, target.settings, target.policy)
    return produce(producer, topic, [(s.key(), s.value(), None) for s in syncs])


def await_offset_syncs(target: MirrorContext, acks: Acks) -> None:
    producer = target.offset_sync_producer
    assert producer is not None
    deadline = time.monotonic() + target.settings.mirror_delivery_timeout_ms / 1000.0
    while not acks.settled and time.monotonic() < deadline:
        flush(producer, min(1.0, max(0.0, deadline - time.monotonic())))
    if acks.error is not None or not acks.settled:
        location, topic = offset_syncs_topic(target.source, target.target, target.settings, target.policy)
        error = acks.error
        reason = error.str() + acl_hint(error, location, "WRITE", topic) if error is not None else "timed out"
        raise MirrorError(f"offset syncs to {topic} not acknowledged: {reason}")


def acl_hint(err: KafkaError, cluster: str, operation: str, topic: str) -> str:
    """What a refusal by the cluster's authorizer means, to say after its error."""
    if err.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
        return ""
    return f" ({cluster}'s ACLs must allow srm's user {operation} on topic {topic})"
