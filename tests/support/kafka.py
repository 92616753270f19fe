"""Record helpers: create topics, produce, read whole partitions, compare two clusters partition by partition."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from srm.kafka.admin import alter_group_offsets
from srm.mm2.client import read_to_end

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int
    offset: int = -1

    def content(self) -> tuple:
        """What replication must preserve (everything but the offset)."""
        return (self.key, self.value, self.headers, self.timestamp)


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# A new client costs a broker 15-60 ms of CPU (connections, metadata), a question over an open one about 1 ms, and
# waits ask several times a second: the helpers keep their clients until the test ends (close_clients, which
# tests/conftest.py calls after each test), one set per thread, as a reading consumer is not shared between threads.
_clients: dict[tuple[object, ...], AdminClient | Consumer] = {}
_clients_lock = threading.Lock()
# What they log (a kept client retries a stopped cluster) goes to the test's captured log, not to the terminal.
_CLIENT_LOG = logging.getLogger("tests.kafka.clients")


def _cached(key: tuple[object, ...], make) -> Any:
    key = (*key, threading.get_ident())
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = make()
        return client


def close_clients() -> None:
    """Close the clients the helpers kept: the test's clusters may stop, and another test's take their ports."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        if isinstance(client, Consumer):
            client.close()


def admin(bootstrap: str) -> AdminClient:
    return _cached(("admin", bootstrap), lambda: AdminClient({"bootstrap.servers": bootstrap, "logger": _CLIENT_LOG}))


def rewind(bootstrap: str, group: str, topic: str, partitions: int, offset: int) -> None:
    """Set an idle group's committed offset of every partition of ``topic`` to ``offset``."""
    offsets = {(topic, p): offset for p in range(partitions)}

    def committed() -> bool:
        # the call succeeds as a whole while a partition's commit can fail, e.g. on a topic created a moment ago
        # that the group coordinator does not know yet: those errors are per partition
        return not alter_group_offsets(admin(bootstrap), group, offsets)

    wait_for(committed, 30, message=f"group {group}'s offsets of {topic} committed")


def _reader(bootstrap: str, isolation: str) -> Consumer:
    """A consumer that is only ever assigned partitions (no group membership), kept for the test."""
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": unique("reader"),
        "enable.auto.commit": False,
        "isolation.level": isolation,
        # an assignment's first fetch waits for the last one's end: no held fetch to wait out
        "fetch.wait.max.ms": 10,
        "logger": _CLIENT_LOG,
    }
    return _cached(("reader", bootstrap, isolation), lambda: Consumer(config))


def _watermarks(consumer: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """Low and high watermark of ``tp``, asked of the broker. A kept client's metadata may predate partitions added
    since (it refreshes every 5 minutes): it is refreshed when the partition is unknown to it."""
    try:
        return consumer.get_watermark_offsets(tp, timeout=10, cached=False)
    except KafkaException as e:
        if e.args[0].code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC):
            raise
    consumer.list_topics(tp.topic, timeout=10)
    return consumer.get_watermark_offsets(tp, timeout=10, cached=False)


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict[str, str] | None = None) -> None:
    client = admin(bootstrap)  # the client must outlive its future
    client.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    # the controller has it; a broker's metadata follows a moment later, and the test's next question may go there
    wait_for(lambda: topic_partitions(bootstrap, name) == partitions, 30, 0.05, f"{name} in the brokers' metadata")


def topic_partitions(bootstrap: str, name: str) -> int | None:
    md = admin(bootstrap).list_topics(timeout=10)
    t = md.topics.get(name)
    return None if t is None or t.error is not None else len(t.partitions)


def list_topic_names(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=10).topics)


def produce(bootstrap: str, topic: str, records: Iterable[tuple[int, Rec]], **config: str) -> None:
    """Produce ``(partition, record)`` pairs and wait for every acknowledgement."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True, **config})
    errors: list[str] = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err.str())

    for partition, rec in records:
        producer.produce(
            topic,
            rec.value,
            rec.key,
            partition=partition,
            timestamp=rec.timestamp,
            headers=list(rec.headers) if rec.headers else None,
            on_delivery=on_delivery,
        )
        producer.poll(0)
    producer.flush(30)
    assert not errors, errors


def read_partition(
    bootstrap: str, topic: str, partition: int, timeout: float = 20.0, isolation: str = "read_committed"
) -> list[Rec]:
    """Every record of a partition, from the log start to the end offset at the time of the call; past ``timeout``
    raises TimeoutError."""
    consumer = _reader(bootstrap, isolation)
    low, high = _settled_watermarks(consumer, bootstrap, TopicPartition(topic, partition), isolation)
    out: list[Rec] = []
    try:
        for m in read_to_end(consumer, {(topic, partition): (low, high)}, timeout):
            # the consumer is reused: take only this assignment's records, each once, in order
            if m.topic() != topic or m.partition() != partition or m.offset() < low:
                continue
            if out and m.offset() <= out[-1].offset:
                continue
            out.append(Rec(m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1], m.offset()))
        return out
    finally:
        consumer.unassign()


def _settled_watermarks(consumer: Consumer, bootstrap: str, tp: TopicPartition, isolation: str) -> tuple[int, int]:
    """The partition's watermarks; read_committed waits briefly for a just-committed transaction's markers.

    A transaction's commit returns before the coordinator writes its markers, so the last stable offset can still
    stand before records committed a moment ago. It reaches the log end within moments unless a transaction is really
    open (a zombie's, say), which is then left out as read_committed leaves it out.
    """
    low, high = _watermarks(consumer, tp)
    if isolation != "read_committed":
        return low, high
    end = _watermarks(_reader(bootstrap, "read_uncommitted"), tp)[1]
    deadline = time.monotonic() + 3.0
    while high < end and time.monotonic() < deadline:
        time.sleep(0.05)
        low, high = _watermarks(consumer, tp)
    return low, high


def read_topic(bootstrap: str, topic: str) -> dict[int, list[Rec]]:
    n = topic_partitions(bootstrap, topic) or 0
    return {p: read_partition(bootstrap, topic, p) for p in range(n)}


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.25, message: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except KafkaException:
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {message} (last: {last!r})")


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end as a read_committed consumer sees it (the last stable offset)."""
    consumer = _reader(bootstrap, "read_committed")
    n = topic_partitions(bootstrap, topic) or 0
    return {p: _watermarks(consumer, TopicPartition(topic, p))[1] for p in range(n)}


def record_count(bootstrap: str, topic: str) -> int:
    """Records (not offsets) in a topic: markers of transactions do not count."""
    return sum(len(v) for v in read_topic(bootstrap, topic).values())


def wait_replicated(source: str, source_topic: str, target: str, remote_topic: str, timeout: float = 60.0) -> None:
    """Wait until every partition of the remote topic holds at least as many records as the source's."""
    want = {p: len(r) for p, r in read_topic(source, source_topic).items()}

    def done():
        # a partition holds no more records than its end offset: read the records only once the ends allow them
        ends = end_offsets(target, remote_topic)
        if not ends or any(ends.get(p, 0) < n for p, n in want.items()):
            return False
        have = read_topic(target, remote_topic)
        return all(len(have.get(p, [])) >= n for p, n in want.items()) and have

    wait_for(done, timeout, message=f"{source_topic} replicated to {remote_topic}")


def assert_identical(source: str, source_topic: str, target: str, remote_topic: str) -> dict[int, int]:
    """Every partition of the remote topic equals the source's, record by record (key, value, headers in order,
    timestamp): zero lost, zero duplicated, zero reordered. Returns records per partition."""
    src = read_topic(source, source_topic)
    dst = read_topic(target, remote_topic)
    assert sorted(dst) == sorted(src), f"partitions differ: {sorted(src)} vs {sorted(dst)}"
    counts = {}
    for p, records in src.items():
        want = [r.content() for r in records]
        got = [r.content() for r in dst[p]]
        lost = len(set(want) - set(got)) if len(set(want)) == len(want) else None
        assert got == want, (
            f"{remote_topic}-{p}: {len(want)} source records, {len(got)} remote; "
            f"first difference at {_first_diff(want, got)}; lost={lost}"
        )
        counts[p] = len(records)
    return counts


def _first_diff(a: Sequence, b: Sequence) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def numbered_records(n: int, partitions: int, tag: str, start: int = 0) -> list[tuple[int, Rec]]:
    """``n`` distinct records spread round-robin over ``partitions``: a key (null every 5th), a value naming the
    record, a duplicated header key and a recent CreateTime timestamp (old ones fall to the default retention),
    so any loss, duplicate or reordering shows."""
    base = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(start, start + n):
        key = None if i % 5 == 0 else f"{tag}-k{i}".encode()
        headers = (("seq", str(i).encode()), ("seq", b"\x00\xff"), ("nil", None)) if i % 2 else ()
        out.append((i % partitions, Rec(key, f"{tag}-v{i}".encode(), headers, base + i)))
    return out


def create_topic_with_records(bootstrap: str, topic: str, partitions: int, count: int) -> None:
    """A new topic holding ``count`` :func:`numbered_records` (tagged with its name) over its ``partitions``."""
    create_topic(bootstrap, topic, partitions)
    produce(bootstrap, topic, numbered_records(count, partitions, topic))


def create_partitions(bootstrap: str, name: str, total: int) -> None:
    from confluent_kafka.admin import NewPartitions

    client = admin(bootstrap)  # the client must outlive its future
    client.create_partitions([NewPartitions(name, total)])[name].result(30)


def assert_no_loss(source: Sequence[Rec], target: Sequence[Rec], stale_runs: bool = False) -> int:
    """At-least-once check of one partition: the target is the source sequence in which runs may be re-sent.

    Reading the target in order, each record either continues the current run (the next source record) or starts
    a re-sent run at an earlier source record (a retried batch); a jump forward past a record not yet written is
    loss or reordering. With ``stale_runs`` a re-sent run may also end early and the first copies go on after it
    (what a writer woken after it lost the partition leaves: the rest of its batch, late). At the end every source
    record must have been written. Source records must be distinct. Returns the number of duplicates (re-sent
    copies), which is ``len(target) - len(source)``.
    """
    want = [r.content() for r in source]
    index = {c: i for i, c in enumerate(want)}
    assert len(index) == len(want), "assert_no_loss needs distinct source records"
    written = 0  # source records [0, written) have a first copy in the target so far
    nxt = 0  # the source index that continues the current run
    duplicates = 0
    for n, rec in enumerate(target):
        i = index.get(rec.content())
        assert i is not None, f"target record {n} (offset {rec.offset}) is no source record: {rec!r}"
        assert i <= nxt or (stale_runs and i == written), (
            f"target record {n} (offset {rec.offset}) is source record {i}, but the run expected source record "
            f"{nxt}: source records {nxt}..{i - 1} are missing or out of order here"
        )
        if i < written:
            duplicates += 1
        else:
            written = i + 1
        nxt = i + 1
    assert written == len(want), (
        f"lost {len(want) - written} of {len(want)} records: the target ({len(target)} records, {duplicates} "
        f"duplicates) ends at source record {written}"
    )
    assert duplicates == len(target) - len(source)
    return duplicates
