"""The benchmark's data: deterministic, text-like records (they compress about as well as JSON events do), a key and
three headers each, spread over the partitions round-robin."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = [
    "OffsetWatch",
    "Workload",
    "create_topics",
    "end_offsets",
    "produce_backlog",
    "record_stream",
    "wait_for_offsets",
]

Header = tuple[str, bytes | None]
KEY_BYTES = len(b"customer-00000")

_WORDS = (
    "order payment customer invoice shipped pending refund account region priority express standard warehouse item "
    "quantity amount currency discount coupon address street city country postal status created updated delivered "
    "cancelled returned carrier tracking session device mobile desktop browser campaign channel email partner tier "
    "gold silver bronze loyalty points balance credit debit transfer merchant category grocery electronics apparel"
)


def _corpus(size: int, seed: int) -> bytes:
    """Text of words and numbers: the filling of record values (compresses like real JSON payloads, ~2-3x)."""
    rng = random.Random(seed)
    words = _WORDS.split(" ")
    parts: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words) if rng.random() < 0.8 else f"{rng.randrange(10**6)}"
        parts.append(word)
        length += len(word) + 1
    return " ".join(parts).encode()[:size]


@dataclass(frozen=True)
class Workload:
    """``records`` records of ``value_bytes`` each on a topic of ``partitions`` partitions."""

    name: str
    topic: str
    records: int
    value_bytes: int
    partitions: int = 6

    @property
    def record_bytes(self) -> int:
        """Key + value bytes of one record."""
        return KEY_BYTES + self.value_bytes

    def label(self) -> str:
        size = f"{self.value_bytes // 1024} KB" if self.value_bytes >= 1024 else f"{self.value_bytes} B"
        return f"{self.name} ({self.records:,} × {size})"


def record_stream(
    workload: Workload, start: int = 0, count: int | None = None, seed: int = 7
) -> Iterator[tuple[int, bytes, bytes, list[Header]]]:
    """``(partition, key, value, headers)`` of records ``start …``: partition round-robin, a customer key, a value of
    exactly ``value_bytes`` and three headers (a trace id, a constant, the sequence number)."""
    corpus = _corpus(1 << 22, seed)
    span = len(corpus) - workload.value_bytes
    rng = random.Random(seed + start)
    end = workload.records if count is None else start + count
    for i in range(start, end):
        prefix = b'{"seq":%d,"customer":"c-%05d","note":"' % (i, i % 50_000)
        fill = workload.value_bytes - len(prefix) - 2
        offset = rng.randrange(span)
        value = prefix + corpus[offset : offset + fill] + b'"}'
        headers: list[Header] = [
            ("trace-id", rng.randbytes(8).hex().encode()),
            ("source", b"bench"),
            ("seq", b"%d" % i),
        ]
        yield i % workload.partitions, b"customer-%05d" % (i % 50_000), value, headers


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, p, 1) for t, p in topics.items()])
    for future in futures.values():
        future.result(30)


def produce_backlog(bootstrap: str, workload: Workload) -> float:
    """Produce the workload (CreateTime = now); seconds taken."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 1 << 20,
            "compression.type": "lz4",
        }
    )
    errors: list[str] = []

    def on_error(err, _msg):  # type: ignore[no-untyped-def]
        errors.append(err.str())

    t0 = time.perf_counter()
    for partition, key, value, headers in record_stream(workload):
        while True:
            try:
                producer.produce(workload.topic, value, key, partition=partition, headers=headers)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(120) or errors:
        raise RuntimeError(f"backlog of {workload.topic} not produced: {errors[:3]}")
    return time.perf_counter() - t0


def end_offsets(bootstrap: str, topic: str, partitions: int, consumer: Consumer | None = None) -> list[int]:
    """End offsets of a topic's partitions; raises KafkaException when the topic is unknown (a consumer that asked
    about an unknown topic keeps that answer until its next metadata refresh: use a fresh one then)."""
    own = consumer is None
    c = consumer or Consumer({"bootstrap.servers": bootstrap, "group.id": "srm-bench-offsets"})
    try:
        return [
            c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(partitions)
        ]
    finally:
        if own:
            c.close()


class OffsetWatch:
    """End offsets of topics that may not exist yet, asked again and again."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._consumer: Consumer | None = None

    def get(self, topic: str, partitions: int) -> list[int]:
        if self._consumer is None:
            self._consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "srm-bench-offsets"})
        try:
            return end_offsets(self.bootstrap, topic, partitions, self._consumer)
        except KafkaException:
            self.close()
            return [0] * partitions

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def wait_for_offsets(
    bootstrap: str, targets: dict[str, list[int]], timeout: float, poll: float = 0.1
) -> tuple[float | None, float | None]:
    """Wait until every topic's partitions reach the wanted end offsets. Returns (monotonic time the first record
    arrived, monotonic time all had), None for what did not happen within ``timeout``."""
    watch = OffsetWatch(bootstrap)
    first: float | None = None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            have = {t: watch.get(t, len(want)) for t, want in targets.items()}
            now = time.monotonic()
            if first is None and any(sum(v) for v in have.values()):
                first = now
            if all(h >= w for t, want in targets.items() for h, w in zip(have[t], want, strict=True)):
                return first, now
            time.sleep(poll)
        return first, None
    finally:
        watch.close()
