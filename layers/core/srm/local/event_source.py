"""An emulated MSK event source mapping: what Lambda's poller does, on one machine.

Per replicated topic: a consumer in the mapping's own group polls the source; records are batched (batch size,
batching window, the 6 MB invoke payload) into byte-identical MSK events; the very handler Lambda runs is
invoked; the source offsets are committed only after it returns. A failed batch is retried, the same bytes, with
backoff, forever (as Lambda's default); partition order is kept because one batch is in flight at a time.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from srm.core.events import EventBuilder, record_json

__all__ = ["EmulatedMapping", "LocalContext", "MappingSettings", "MappingStats"]

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
_TIMESTAMP_TYPES = {1: "CREATE_TIME", 2: "LOG_APPEND_TIME"}
_IDLE_PROBE_S = 0.05
_IDLE_CHECK_S = 0.1
_WATERMARK_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class MappingSettings:
    batch_size: int = 100
    batching_window_ms: int = 500
    max_payload_bytes: int = 6 * 1024 * 1024


@dataclass
class MappingStats:
    records: int = 0
    batches: int = 0
    failures: int = 0
    last_error: str | None = None
    last_latency_ms: int = 0


@dataclass
class LocalContext:
    """The part of Lambda's context object handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int = 1024
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:local:000000000000:function:{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return 900_000


def _caught_up(consumer: Consumer, assignment: list[TopicPartition], *, fresh: bool) -> bool:
    """Whether every assigned partition is read to its end: as the last fetch responses tell, or (``fresh``) as
    the broker answers now. Unknown counts as not caught up."""
    try:
        for tp in consumer.position(assignment):
            if tp.offset < 0:
                return False
            if fresh:
                _low, high = consumer.get_watermark_offsets(tp, timeout=_WATERMARK_TIMEOUT_S)
            else:
                _low, high = consumer.get_watermark_offsets(tp, cached=True)
            if high < 0 or tp.offset < high:
                return False
    except KafkaException:
        return False
    return True


class OversizedRecordError(RuntimeError):
    pass


class EmulatedMapping:
    """One topic's mapping, polling on its own thread."""

    def __init__(
        self,
        *,
        name: str,
        topic: str,
        consumer_config: dict[str, str],
        handler: Handler,
        function_name: str,
        source_arn: str,
        bootstrap_servers: str,
        settings: MappingSettings,
    ) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.topic = topic
        self.settings = settings
        self._consumer_config = consumer_config
        self._handler = handler
        self._function_name = function_name
        self._source_arn = source_arn
        self._bootstrap = bootstrap_servers
        self._stop_event = threading.Event()
        self._revoked = False
        self._resting = False  # partitions paused while the topic is idle
        self._last_check_s = 0.0  # how long the last look-up of the log ends took
        self.stats = MappingStats()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop_event.set()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    @property
    def resting(self) -> bool:
        """Whether the topic is read to its end and the mapping waits for it to grow (partitions paused)."""
        return self._resting

    # -- the poller ----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self.stopping:
            try:
                self._poll_loop()
            except Exception as e:  # a broken consumer is rebuilt; nothing was committed for the failed batch
                self.stats.last_error = f"{type(e).__name__}: {e}"
                log.error("event source for %s failed, restarting: %s", self.topic, self.stats.last_error)
                self._stop_event.wait(2.0)

    def _poll_loop(self) -> None:
        consumer = Consumer(self._consumer_config)
        buffer: deque[Message] = deque()
        self._resting = False

        def on_revoke(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self._revoked = True  # buffered records are re-read from the committed offsets after reassignment
            if self._resting:
                consumer.resume(partitions)
                self._resting = False

        consumer.subscribe([self.topic], on_revoke=on_revoke)
        try:
            while not self.stopping:
                builder = self._collect(consumer, buffer)
                if builder is None or builder.count == 0:
                    continue
                if self._invoke_until_done(builder.to_bytes()):
                    offsets = [TopicPartition(t, p, o + 1) for t, p, o in builder.last_offsets()]
                    try:
                        consumer.commit(offsets=offsets, asynchronous=False)
                    except Exception as e:  # the batch will be delivered again: duplicates, never loss
                        log.warning("commit for %s failed, the batch will be redelivered: %s", self.topic, e)
        finally:
            consumer.close()

    def _collect(self, consumer: Consumer, buffer: deque[Message]) -> EventBuilder | None:
        """Gather one batch as Lambda does: invoke when the batch is full, the payload would exceed the limit, or
        the batching window (counted from the first record) has passed."""
        s = self.settings
        builder = EventBuilder(self._source_arn, self._bootstrap, s.max_payload_bytes)
        first_at: float | None = None
        window = s.batching_window_ms / 1000.0
        while builder.count < s.batch_size and not self.stopping:
            if not buffer:
                if first_at is None:
                    fetched = self._wait_for_first(consumer)
                else:
                    remaining = window - (time.monotonic() - first_at)
                    # Wait out the window for the rest of the batch (no wait once it has passed).
                    fetched = consumer.consume(num_messages=s.batch_size - builder.count, timeout=max(0.0, remaining))
                for msg in fetched:
                    err = msg.error()
                    if err is None:
                        buffer.append(msg)
                    elif err.code() != KafkaError._PARTITION_EOF:
                        log.warning("consumer of %s: %s", self.topic, err.str())
                if self._revoked:
                    self._revoked = False
                    buffer.clear()
                    return None
                if not buffer:
                    if first_at is not None and time.monotonic() - first_at >= window:
                        break
                    continue
            msg = buffer[0]
            topic, partition, offset = cast(str, msg.topic()), cast(int, msg.partition()), cast(int, msg.offset())
            ts_type, ts = msg.timestamp()
            text = record_json(
                topic,
                partition,
                offset,
                ts,
                _TIMESTAMP_TYPES.get(ts_type, "CREATE_TIME"),
                cast("bytes | None", msg.key()),
                cast("bytes | None", msg.value()),
                cast("list[tuple[str, bytes | None]] | None", msg.headers()),
            )
            cost = builder.cost(topic, partition, text)
            if not builder.fits(cost):
                if builder.count:
                    break
                self._stuck_on_oversized(msg, cost)
                return None
            builder.append(topic, partition, offset, text, cost)
            buffer.popleft()
            if first_at is None:
                first_at = time.monotonic()
        return builder

    def _wait_for_first(self, consumer: Consumer) -> list[Message]:
        """A short poll; once every partition is read to its end, the partitions rest (paused) and only their log
        ends are looked up, every ``_IDLE_CHECK_S``, until one has grown.

        Fetching at the log end is not free on every broker: one that answers a fetch at once instead of holding it
        (``fetch.wait.max.ms``) has the consumer fetch in a tight loop — on the embedded test Kafka about a core,
        client and broker together, per idle mapping. A resting mapping costs ~1 % of that and adds at most
        ``_IDLE_CHECK_S`` to the latency of the first record after a quiet spell (Lambda's poller backs off on an
        idle topic too)."""
        if (msg := consumer.poll(_IDLE_PROBE_S)) is not None:
            return [msg]
        assignment = consumer.assignment()  # rebalance callbacks only run inside poll, so this set holds here
        if not assignment:
            return []
        if not self._resting:
            if _caught_up(consumer, assignment, fresh=False):  # pausing drops fetched records: only when there are none
                consumer.pause(assignment)
                self._resting = True
            return []
        self._stop_event.wait(max(_IDLE_CHECK_S, self._last_check_s))  # many partitions: fewer look-ups per second
        started = time.monotonic()
        caught_up = _caught_up(consumer, assignment, fresh=True)
        self._last_check_s = time.monotonic() - started
        if not caught_up:
            consumer.resume(assignment)
            self._resting = False
            # librdkafka's fetcher notices a resume only on its next one-second tick; any request to the broker,
            # such as this look-up, wakes it at once.
            _caught_up(consumer, assignment[:1], fresh=True)
        return []

    def _stuck_on_oversized(self, msg: Message, estimate: int) -> None:
        """A record too big for one invocation is never skipped: report it and hold the partition."""
        self.stats.failures += 1
        self.stats.last_error = (
            f"{msg.topic()}-{msg.partition()}@{msg.offset()}: record needs ~{estimate} bytes of event payload, more "
            f"than the {self.settings.max_payload_bytes}-byte Lambda invoke limit; it cannot be mirrored through "
            "Lambda and the partition waits here"
        )
        log.error(self.stats.last_error)
        self._stop_event.wait(30.0)
        raise OversizedRecordError(self.stats.last_error)

    def _invoke_until_done(self, payload: bytes) -> bool:
        """Invoke the handler with the same bytes until it succeeds; False when stopped first."""
        delay = 0.5
        while not self.stopping:
            event = json.loads(payload)  # what the Lambda runtime does with the invoke payload
            try:
                self._handler(event, LocalContext(self._function_name))
            except Exception as e:
                self.stats.failures += 1
                self.stats.last_error = f"{type(e).__name__}: {e}"
                log.warning("%s batch failed, retrying in %.1fs: %s", self.topic, delay, self.stats.last_error)
                self._stop_event.wait(delay)
                delay = min(delay * 2, 30.0)
                continue
            self.stats.batches += 1
            records = event["records"]
            self.stats.records += sum(len(r) for r in records.values())
            newest = max(r[-1]["timestamp"] for r in records.values())
            self.stats.last_latency_ms = int(time.time() * 1000) - newest
            self.stats.last_error = None
            return True
        return False
