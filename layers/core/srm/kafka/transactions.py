"""Kafka transactions for the exactly-once mirror: one transactional producer per source partition, and the read
of committed source offsets back from the offsets topic.

A producer's ``init_transactions`` fences every earlier producer of its ``transactional.id`` (an invocation that
outlived its timeout, another container that held the partition) and aborts what that one left open; from then on
the earlier producer's produce and commit fail. So while a producer commits, no other process has committed for its
partition since it was initialized.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from srm.core.source_offsets import CONNECTOR, SourceOffset, SourceOffsetError, parse_source_partition
from srm.errors import RetriableError
from srm.mm2.client import read_to_end

__all__ = [
    "TransactionError",
    "TransactionalProducers",
    "read_source_offsets",
    "transactional_id",
]

log = logging.getLogger(__name__)


class TransactionError(RetriableError, RuntimeError):
    """A transaction could not be started, read back or committed; the batch is retried."""


def transactional_id(source: str, target: str, topic: str, partition: int) -> str:
    """One per flow and source partition, named like the mirror's event source group."""
    return f"srm-mirror.{source}-{target}.{topic}.{partition}"


ProducerFactory = Callable[[dict[str, str]], Producer]


class TransactionalProducers:
    """Initialized transactional producers by source partition, kept across invocations; a producer that failed
    (fenced, or its transaction state unknown) is dropped and the next invocation initializes a new one."""

    def __init__(self, build: ProducerFactory) -> None:
        self._build = build
        self.base: dict[str, str] = {}  # the flow's producer config, set by the App from the current configuration
        self.timeout_s = 30.0
        self._producers: dict[tuple[str, int], tuple[dict[str, str], Producer]] = {}
        self._lock = threading.Lock()

    def get(self, topic: str, partition: int, tid: str) -> tuple[Producer, bool]:
        """The partition's producer, and whether it was initialized by this call (fencing every earlier one)."""
        conf = {**self.base, "transactional.id": tid}
        with self._lock:
            cached = self._producers.get((topic, partition))
        if cached is not None and cached[0] == conf:
            return cached[1], False
        producer = self._build(conf)
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as e:
            raise TransactionError(f"{tid}: cannot initialize transactions: {_reason(e)}") from None
        with self._lock:
            self._producers[(topic, partition)] = (conf, producer)
        return producer, True

    def holds(self, topic: str, partition: int) -> bool:
        with self._lock:
            return (topic, partition) in self._producers

    def fence(self, tid: str) -> None:
        """Fence every producer of ``tid`` and abort what it left open (a producer initialized, then closed)."""
        producer = self._build({**self.base, "transactional.id": tid})
        try:
            producer.init_transactions(self.timeout_s)
        except KafkaException as e:
            raise TransactionError(f"{tid}: cannot fence: {_reason(e)}") from None
        finally:
            with contextlib.suppress(KafkaException):
                producer.flush(0)

    def discard(self, topic: str, partition: int) -> None:
        with self._lock:
            dropped = self._producers.pop((topic, partition), None)
        if dropped is not None:
            with contextlib.suppress(KafkaException):  # a fenced producer has nothing left worth sending
                dropped[1].flush(0)

    def __len__(self) -> int:
        return len(self._producers)


def _reason(e: BaseException) -> str:
    err = e.args[0] if e.args else None
    return err.str() if isinstance(err, KafkaError) else str(e)


def fenced(e: BaseException) -> bool:
    """Whether a transaction call failed because a newer producer of the same ``transactional.id`` took over."""
    err = e.args[0] if isinstance(e, KafkaException) and e.args else None
    return isinstance(err, KafkaError) and err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED)


def read_source_offsets(
    consumer_conf: Mapping[str, str],
    topic: str,
    wanted: Iterable[tuple[str, str, int]],
    timeout_s: float,
    connector: str = CONNECTOR,
) -> dict[tuple[str, int], SourceOffset]:
    """The newest committed offset of each wanted ``(source, topic, partition)`` in the offsets ``topic``, by
    (topic, partition). Read ``read_committed`` from the log start up to the high watermark seen when called: every
    transaction committed before the call is below it, and the read waits out transactions still open there. (Not
    the end a read_committed consumer is told, the last stable offset: a transaction committed after another one
    that is still open lies beyond it, and a read ending there would take an older offset for the newest.)"""
    wanted_keys = {(s, t, p) for s, t, p in wanted}
    found: dict[tuple[str, int], SourceOffset] = {}
    consumer = Consumer(
        {
            **consumer_conf,
            "group.id": "srm-exactly-once-reader",
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise TransactionError(f"cannot read {topic}: {metadata.error.str() if metadata else 'no such topic'}")
        ranges = {}
        ends = Consumer({**consumer_conf, "group.id": "srm-exactly-once-reader", "isolation.level": "read_uncommitted"})
        try:
            for p in metadata.partitions:
                low, high = ends.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
                ranges[(topic, p)] = (low, high)
        finally:
            ends.close()
        # Short polls: the topic holds a few records per partition replicated, and a long one waits out its timeout.
        for msg in read_to_end(consumer, ranges, timeout_s, poll_s=0.02):
            where = parse_source_partition(msg.key() or b"", connector)
            if where not in wanted_keys:
                continue  # another flow's, or another connector's
            try:
                offset = SourceOffset.parse(msg.key() or b"", msg.value(), connector)
            except SourceOffsetError as e:
                raise TransactionError(f"{topic}@{msg.partition()}:{msg.offset()}: {e}") from None
            if offset is None:
                found.pop(where[1:], None)  # a tombstone: the offset was reset (Connect's offsets API)
            else:
                found[where[1:]] = offset
    except TimeoutError as e:
        raise TransactionError(f"{e} (a transaction left open there?)") from None
    except KafkaException as e:
        raise TransactionError(f"cannot read {topic}: {_reason(e)}") from None
    finally:
        consumer.close()
    return found
