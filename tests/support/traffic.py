"""Live traffic for the fault tests: distinct numbered records produced at a steady rate, when each first reached
the target, and how soon replication resumed after a fault."""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.support.kafka import (
    assert_no_loss,
    create_topic,
    numbered_records,
    produce,
    read_topic,
    record_count,
    topic_partitions,
    unique,
    wait_for,
)
from tests.support.runtime import SrmRun, child_pids, srm_run

RECOVERY_BOUND_S = 30.0  # from a fault to the first record produced after it being on the target
PARTITIONS = 4  # of a topic under live traffic


class Traffic:
    """Distinct numbered records produced round-robin to ``partitions`` of the source at ``rate`` per second by one
    idempotent producer (a new one should a fatal error leave it unusable), each with the time it was handed over."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS, rate: int = 400) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.partitions, self.rate = partitions, rate
        self.sent: list[tuple[float, bytes]] = []  # (when, value), in the order handed over
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _producer(self) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})

    def _run(self) -> None:
        producer, n, per_tick = self._producer(), 0, self.rate // 20
        while not self._stop.is_set():
            try:
                for partition, rec in numbered_records(per_tick, self.partitions, self.topic, start=n):
                    producer.produce(
                        self.topic,
                        rec.value,
                        rec.key,
                        partition=partition,
                        timestamp=rec.timestamp,
                        headers=list(rec.headers) or None,
                    )
                    self.sent.append((time.monotonic(), rec.value))
                n += per_tick
                producer.poll(0)
            except BufferError:
                producer.poll(0.1)
            except KafkaException:  # fatal: what it had not delivered is not on the source either
                producer = self._producer()
            self._stop.wait(0.05)
        with contextlib.suppress(KafkaException):
            producer.flush(30)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


class Arrivals:
    """When each value first reached the remote topic, read from its start by a consumer of the target."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
        self.first_seen: dict[bytes, float] = {}
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": unique("arrivals"),
                "enable.auto.commit": False,
                "log_level": 0,
            }
        )
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(1000, 0.1):
                if msg.error() is None:
                    self.first_seen.setdefault(msg.value(), time.monotonic())
        self._consumer.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)


def worker_pid(run: SrmRun, index: int = 0) -> int:
    """The flow's worker process (the store may run as a child of srm run too); with ``srm run --workers``, the
    one started ``index``-th (its ``SRM_WORKER_INDEX``)."""

    def find() -> int | None:
        for pid in child_pids(run.process.pid):
            with contextlib.suppress(OSError):
                if b"srm.local.worker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    continue
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                if f"SRM_WORKER_INDEX={index}".encode() in environ:
                    return pid
        return None

    return wait_for(find, timeout=30, message=f"the worker process {index}")


def recovery(traffic: Traffic, arrivals: Arrivals, since: float, partitions: set[int] | None = None) -> float:
    """Seconds from ``since`` until a record produced after it was on the target — with ``partitions``, once a record
    produced after it to each of them was."""

    def partition(value: bytes) -> int:
        return int(value.rsplit(b"-v", 1)[1]) % traffic.partitions  # numbered_records: "<tag>-v<i>" goes to i % n

    def arrived() -> float | None:
        sent = traffic.sent[:]  # a copy: the traffic thread appends meanwhile
        after = sent[bisect.bisect_left(sent, (since, b"")) :]
        first: dict[int, float] = {}
        for _, v in after:
            if v in arrivals.first_seen:
                p = partition(v)
                first[p] = min(first.get(p, float("inf")), arrivals.first_seen[v])
        wanted = set(first) if partitions is None else partitions
        if not first or not wanted <= set(first):
            return None
        return max(first[p] for p in wanted) - since if partitions else min(first.values()) - since

    return wait_for(arrived, timeout=RECOVERY_BOUND_S + 30, interval=0.1, message="a record produced after the fault")


def no_loss_yet(source: str, topic: str, target: str, remote: str) -> int | None:
    """1 + duplicates once every partition of the remote topic holds every source record, else None."""
    src, dst = read_topic(source, topic), read_topic(target, remote)
    try:
        return sum(assert_no_loss(src[p], dst.get(p, [])) for p in src) + 1
    except AssertionError:
        return None


def wait_no_loss(
    source: str,
    topic: str,
    target: str,
    remote: str,
    timeout: float = 180,
    message: str = "every source record on the target",
) -> int:
    """Wait until every partition of the remote topic holds every source record in order (at-least-once: re-sent runs
    allowed); returns the number of duplicates."""
    return wait_for(lambda: no_loss_yet(source, topic, target, remote), timeout, message=message) - 1


class Batches:
    """Numbered records produced by a thread while the ``with`` block runs: a batch of ``size`` over ``partitions``
    every 0.1 s, each acknowledged before the next, numbered on from ``start`` (the records produced before);
    ``produced`` counts them all."""

    def __init__(self, bootstrap: str, topic: str, size: int, start: int, partitions: int = 2) -> None:
        self.bootstrap, self.topic, self.size, self.partitions = bootstrap, topic, size, partitions
        self.produced = start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            produce(self.bootstrap, self.topic, numbered_records(self.size, self.partitions, self.topic, self.produced))
            self.produced += self.size
            time.sleep(0.1)

    def __enter__(self) -> Batches:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def produce_replicated(source: str, target: str, topic: str, count: int) -> None:
    """Produce ``count`` numbered records to ``topic`` (over 2 partitions); wait until ``a.<topic>`` holds as many."""
    produce(source, topic, numbered_records(count, 2, topic))
    remote = f"a.{topic}"
    wait_for(
        lambda: topic_partitions(target, remote) and record_count(target, remote) >= count,
        timeout=120,
        message="the first records replicated",
    )


@dataclass
class LiveFlow:
    """srm run replicating ``topic`` to ``remote`` while :class:`Traffic` arrives, and its :class:`Arrivals`."""

    run: SrmRun
    topic: str
    remote: str
    traffic: Traffic
    arrivals: Arrivals

    def recovery(self) -> float:
        """Seconds until a record produced from now on is on the target."""
        return recovery(self.traffic, self.arrivals, time.monotonic())

    def stop_traffic(self) -> None:
        self.arrivals.stop()
        self.traffic.stop()


@contextlib.contextmanager
def live_flow(
    workdir: Path, source: str, target: str, topic: str, *, args: tuple[str, ...] = (), **flow: Any
) -> Iterator[LiveFlow]:
    """``topic`` created with :data:`PARTITIONS` on the source and replicated a->b by ``srm run ARGS`` in ``workdir``
    (with ``flow`` settings) while records arrive: the block runs once they reach the target. The traffic stops at
    :meth:`LiveFlow.stop_traffic` or when the block ends, srm run after it."""
    remote = f"a.{topic}"
    create_topic(source, topic, PARTITIONS)
    with srm_run(workdir, {"a": source, "b": target}, {"a->b": {"topics": topic, **flow}}, args=args) as run:
        traffic = Traffic(source, topic)
        try:
            wait_for(lambda: topic_partitions(target, remote) == PARTITIONS, timeout=120, message="the remote topic")
            arrivals = Arrivals(target, remote)
            try:
                live = LiveFlow(run, topic, remote, traffic, arrivals)
                live.recovery()  # replicating
                yield live
            finally:
                arrivals.stop()
        finally:
            traffic.stop()
