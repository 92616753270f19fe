"""The benchmark's data: deterministic, text-like records (they compress about as well as JSON events do), a key and
three headers each, spread over the partitions round-robin."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

__all__ = [
    "CommittedWatch",
    "OffsetWatch",
    "Workload",
    "committed_census",
    "create_topics",
    "end_offsets",
    "produce_backlog",
    "record_seq",
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


def record_seq(value: bytes) -> int:
    """The sequence number a value of :func:`record_stream` starts with (``{"seq":<i>,``)."""
    return int(value[7 : value.index(b",", 7)])


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


def _committed_reader(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "srm-bench-committed",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )


def _read_to_end(consumer: Consumer, starts: list[TopicPartition], timeout: float) -> Iterator[tuple[int, bytes]]:
    """``(partition, value)`` of every committed record from ``starts`` to each partition's end as it is now."""
    consumer.assign(starts)
    open_ = {tp.partition for tp in starts}
    deadline = time.monotonic() + timeout
    try:
        while open_ and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 0.5):
                error = m.error()
                if error is None:
                    yield m.partition(), m.value()
                elif error.code() == KafkaError._PARTITION_EOF:
                    open_.discard(m.partition())
    finally:
        consumer.unassign()


class CommittedWatch(OffsetWatch):
    """Records replicated to a remote topic of a :func:`produce_backlog` topic, per partition, as ``read_committed``
    readers see them, asked again and again: the source position after the partition's last committed record
    (record ``seq`` sits at offset ``seq // partitions`` of the source). A transactional topic's end offsets also
    count its commit markers, one per transaction and partition, so they overtake the records; this does not."""

    window = 64  # offsets read back from the end first: enough for a few markers between records

    def get(self, topic: str, partitions: int) -> list[int]:
        if self._consumer is None:
            self._consumer = _committed_reader(self.bootstrap)
        try:
            ends = end_offsets(self.bootstrap, topic, partitions, self._consumer)
        except KafkaException:
            self.close()
            return [0] * partitions
        counts = [0] * partitions
        todo, back = {p: end for p, end in enumerate(ends) if end > 0}, self.window
        while todo:  # a window of markers or aborted records only: look further back
            starts = [TopicPartition(topic, p, max(0, end - back)) for p, end in todo.items()]
            for p, value in _read_to_end(self._consumer, starts, timeout=10):
                counts[p] = record_seq(value) // partitions + 1
            todo = {p: end for p, end in todo.items() if not counts[p] and end > back}
            back *= 8
        return counts


def committed_census(bootstrap: str, topic: str, partitions: int) -> dict[str, int]:
    """A whole remote topic read ``read_committed``: its records, the distinct source records among them, and the
    offsets that hold no committed record (transaction markers, aborted records; 0 for a non-transactional
    writer)."""
    consumer = _committed_reader(bootstrap)
    uncommitted = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "srm-bench-offsets", "isolation.level": "read_uncommitted"}
    )
    try:
        seqs = [
            record_seq(v)
            for _, v in _read_to_end(consumer, [TopicPartition(topic, p, 0) for p in range(partitions)], 300)
        ]
        offsets = sum(end_offsets(bootstrap, topic, partitions, uncommitted))
    finally:
        consumer.close()
        uncommitted.close()
    return {"records": len(seqs), "distinct": len(set(seqs)), "other_offsets": offsets - len(seqs)}


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
