"""Live traffic for the fault tests: distinct numbered records produced at a steady rate, when each first reached
the target, and how soon replication resumed after a fault."""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.support.kafka import assert_no_loss, numbered_records, read_topic, unique, wait_for
from tests.support.runtime import SrmRun, child_pids

RECOVERY_BOUND_S = 30.0  # from a fault to the first record produced after it being on the target


class Traffic:
    """Distinct numbered records produced round-robin to ``partitions`` of the source at ``rate`` per second by one
    idempotent producer (a new one should a fatal error leave it unusable), each with the time it was handed over."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 4, rate: int = 400) -> None:
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

    def __init__(self, bootstrap: str, topic: str, partitions: int = 4) -> None:
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


def worker_pid(run: SrmRun) -> int:
    """The flow's worker process (the store may run as a child of srm run too)."""

    def find() -> int | None:
        for pid in child_pids(run.process.pid):
            with contextlib.suppress(OSError):
                if b"srm.local.worker" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    return pid
        return None

    return wait_for(find, timeout=30, message="the worker process")


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
