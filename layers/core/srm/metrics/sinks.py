"""Carrying raw metric records off the record path: a bounded buffer, a sender thread, and two sinks.

:class:`MetricsEmitter` never blocks and never raises into the caller: ``emit`` puts the encoded line into a bounded
queue (a full queue drops the record, counted in ``dropped``); a daemon thread takes up to ``batch_size`` lines at
a time and hands them to the sink; a failed send is logged (error class only: no payloads, no secrets) and its
lines are counted in ``failed``. Each record gets a unique ``id`` (``<producer>:<sequence>``): Firehose may deliver
a record twice, and the aggregation keeps one record per id. ``flush`` waits, with a bound, until everything queued
so far has been handed over; a Lambda handler calls it before returning, since the thread is frozen between
invocations. ``close``
flushes and stops the thread.

Sinks: :class:`FileSink` appends to ``<root>/dt=YYYY-MM-DD/hour=HH/<producer>-<n>.jsonl`` (UTC hour of writing,
one file per process and hour, ``n`` grows when a file passes ``max_bytes``), the local twin of
:class:`srm.aws.firehose.FirehoseSink`, which puts lines to a Kinesis Data Firehose delivery stream whose S3
prefix is partitioned the same way by arrival time (``raw/dt=!{timestamp:yyyy-MM-dd}/hour=!{timestamp:HH}/``).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from srm.metrics.model.schema import encode

__all__ = ["Emitter", "FileSink", "MetricsEmitter", "NullEmitter", "Sink", "SinkError", "raw_partition"]

log = logging.getLogger(__name__)


class SinkError(RuntimeError):
    """A sink could not take some lines (``failed`` of them)."""

    def __init__(self, message: str, *, failed: int) -> None:
        super().__init__(message)
        self.failed = failed


class Sink(Protocol):
    def send(self, lines: Sequence[str]) -> None:
        """Deliver JSON lines (without newlines) or raise; a :class:`SinkError` may say only some failed."""


def raw_partition(epoch_ms: int) -> str:
    """The ``dt=YYYY-MM-DD/hour=HH`` folder of a moment (UTC)."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("dt=%Y-%m-%d/hour=%H")


class FileSink:
    """JSON lines appended to hourly files of this process (the local runtime's raw store)."""

    def __init__(
        self,
        root: Path,
        producer: str,
        *,
        max_bytes: int = 16 << 20,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.root = root
        self.producer = producer
        self.max_bytes = max_bytes
        self._clock_ms = clock_ms
        self._folder: str | None = None
        self._n = 0

    def _path(self, folder: str) -> Path:
        if folder != self._folder:
            self._folder, self._n = folder, 0
        path = self.root / folder / f"{self.producer}-{self._n}.jsonl"
        while path.exists() and path.stat().st_size >= self.max_bytes:
            self._n += 1
            path = self.root / folder / f"{self.producer}-{self._n}.jsonl"
        return path

    def send(self, lines: Sequence[str]) -> None:
        if not lines:
            return
        path = self._path(raw_partition(self._clock_ms()))
        path.parent.mkdir(parents=True, exist_ok=True)
        data = "".join(f"{line}\n" for line in lines).encode()
        # One write of whole lines on an O_APPEND descriptor: a reader sees complete lines, never a torn one.
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)


class Emitter(Protocol):
    """What the use cases emit raw metric records to (:class:`MetricsEmitter`, or :class:`NullEmitter`)."""

    def emit(self, record: Any) -> None: ...

    def flush(self, timeout_s: float = 2.0) -> bool: ...

    def close(self, timeout_s: float = 5.0) -> bool: ...


class NullEmitter:
    """Monitoring off (``srm run --no-metrics``, or no raw metrics destination configured)."""

    def emit(self, record: Any) -> None:
        pass

    def flush(self, timeout_s: float = 2.0) -> bool:
        return True

    def close(self, timeout_s: float = 5.0) -> bool:
        return True


@dataclass
class EmitterCounts:
    sent: int = 0
    failed: int = 0
    dropped: int = 0


class MetricsEmitter:
    """Buffers raw metric records and sends them from a background thread (see the module docstring)."""

    def __init__(
        self,
        sink: Sink,
        *,
        producer: str,
        capacity: int = 10_000,
        batch_size: int = 500,
        poll_s: float = 0.5,
        linger_s: float = 0.2,
    ) -> None:
        self.sink = sink
        self.producer = producer  # unique per process: the ids' prefix
        self._sequence = itertools.count()
        self.capacity = capacity
        self.batch_size = batch_size
        self.poll_s = poll_s  # how long the idle thread waits before it looks at close()
        self.linger_s = linger_s
        self.counts = EmitterCounts()
        # One lock and one condition for both directions: the sender waits on it for lines (woken at once by a
        # flush, which ends its lingering), a flush waits on it for the lines to be sent.
        self._lines: deque[str] = deque()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._unsent = 0  # queued or being sent
        self._flushing = 0  # callers waiting in flush(): send what is there without lingering
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="srm-metrics", daemon=True)
        self._thread.start()

    def emit(self, record: Any) -> None:
        """Queue one record (a :mod:`srm.metrics.model.schema` model); never blocks, never raises."""
        try:
            line = encode(record.model_copy(update={"id": f"{self.producer}:{next(self._sequence)}"}))
        except Exception as e:  # a metric must never fail the batch it describes
            log.warning("metric record not encoded: %s", type(e).__name__)
            return
        with self._lock:
            if len(self._lines) >= self.capacity:
                self.counts.dropped += 1
                dropped = self.counts.dropped
            else:
                self._lines.append(line)
                self._unsent += 1
                if len(self._lines) == 1 or len(self._lines) >= self.batch_size:
                    self._changed.notify_all()
                return
        if dropped & (dropped - 1) == 0:  # 1, 2, 4, 8 …: the first and then ever fewer log lines
            log.warning("metrics buffer full: %d records dropped so far", dropped)

    def _take(self) -> list[str]:
        """Up to ``batch_size`` lines: what arrives within ``linger_s`` of the first (at once when flushing or
        closing); [] when none arrived within ``poll_s``."""
        with self._lock:
            if not self._lines:
                self._changed.wait(self.poll_s)
                if not self._lines:
                    return []
            deadline = time.monotonic() + self.linger_s
            while len(self._lines) < self.batch_size and not self._flushing and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            lines = self._lines
            return [lines.popleft() for _ in range(min(len(lines), self.batch_size))]

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed and not self._lines:
                    return
            lines = self._take()
            if not lines:
                continue
            sent, failed = len(lines), 0
            try:
                self.sink.send(lines)
            except SinkError as e:
                failed = e.failed
                log.warning("metrics not sent: %s", e)
            except Exception as e:
                failed = len(lines)
                log.warning("metrics not sent: %d lines, %s", failed, type(e).__name__)
            with self._lock:
                self.counts.sent += sent - failed
                self.counts.failed += failed
                self._unsent -= len(lines)
                self._changed.notify_all()

    def flush(self, timeout_s: float = 2.0) -> bool:
        """Wait until every record emitted so far was handed to the sink; False when ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            if not self._unsent:
                return True
            self._flushing += 1
            self._changed.notify_all()
            try:
                while self._unsent:
                    left = deadline - time.monotonic()
                    if left <= 0 or not self._thread.is_alive():
                        return False
                    self._changed.wait(left)
                return True
            finally:
                self._flushing -= 1

    def close(self, timeout_s: float = 5.0) -> bool:
        """Flush and stop the sender thread."""
        flushed = self.flush(timeout_s)
        with self._lock:
            self._closed = True
            self._changed.notify_all()
        self._thread.join(timeout_s)
        return flushed
