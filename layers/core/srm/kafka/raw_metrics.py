"""Raw metric records through a Kafka topic: how the nodes of an ``srm run`` cluster hand their records to the one
node that aggregates them (the local twin of Firehose delivering every Lambda's records to one S3 prefix).

:class:`KafkaSink` produces each JSON line to the topic (one partition: arrival order). :class:`RawDownload` reads
the topic into hourly files laid out as :class:`srm.metrics.sinks.FileSink` writes them, by the time the broker
stamped each record, so the aggregation reads them as it reads a single node's files.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from srm.metrics.sinks import SinkError, raw_partition

__all__ = ["KafkaSink", "RawDownload"]

log = logging.getLogger(__name__)


class KafkaSink:
    """Sends lines to ``topic`` with the producer ``producer()`` gives (made on first use, and again after a
    fatal error: the configuration is read then)."""

    def __init__(self, producer: Callable[[], Producer], topic: str, timeout_s: float = 10.0) -> None:
        self._producer = producer
        self.topic = topic
        self.timeout_s = timeout_s

    def send(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        producer = self._producer()
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(err.str())

        try:
            for line in lines:
                producer.produce(self.topic, line.encode(), partition=0, on_delivery=delivered)
            left = producer.flush(self.timeout_s)
        except (KafkaException, BufferError) as e:
            raise SinkError(f"raw metrics not produced to {self.topic}: {type(e).__name__}", failed=len(lines)) from e
        if failed or left:
            raise SinkError(f"raw metrics not acknowledged by {self.topic}", failed=len(failed) + left)


class RawDownload:
    """Appends what the topic holds past what was read before to hourly files under ``root``."""

    def __init__(self, consumer_config: dict[str, Any], topic: str, root: Path) -> None:
        self._consumer = Consumer({**consumer_config, "enable.auto.commit": "false", "enable.partition.eof": "true"})
        self._consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.topic = topic
        self.root = root
        self.records = 0

    def read(self, max_s: float = 30.0) -> int:
        """Read up to the topic's end (or ``max_s`` seconds' worth); returns how many records were written."""
        written = 0
        files: dict[str, list[bytes]] = {}
        while True:
            messages = self._consumer.consume(10_000, 1.0)
            at_end = not messages
            for msg in messages:
                err = msg.error()
                if err is not None:
                    at_end = at_end or err.code() == err._PARTITION_EOF
                    continue
                value = msg.value()
                if value:
                    files.setdefault(raw_partition(msg.timestamp()[1]), []).append(bytes(value) + b"\n")
            written += self._write(files)
            files.clear()
            if at_end or written > 1_000_000 or max_s <= 0:
                break
            max_s -= 1.0
        self.records += written
        return written

    def _write(self, files: dict[str, list[bytes]]) -> int:
        count = 0
        for folder, lines in files.items():
            path = self.root / folder / "nodes-0.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, b"".join(lines))  # whole lines in one write: a reader never sees a torn one
            finally:
                os.close(fd)
            count += len(lines)
        return count

    def close(self) -> None:
        self._consumer.close()
