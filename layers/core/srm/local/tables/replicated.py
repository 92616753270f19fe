"""Tables kept in a compacted Kafka topic, as Kafka Connect and MirrorMaker 2 keep their state: every process that
reads the topic holds the same tables, so the nodes of one ``srm run`` cluster share them and they outlive any node.

The log holds each item's latest value under its key (``i`` + table + key attributes; a table's definition under
``t`` + table), a null value when it was deleted; compaction keeps the latest per key, which is the state.

A write runs on this process's tables first — where its condition is checked, against tables caught up with the
log if the outcome depends on what is stored (:meth:`Tables.needs_current_state`: the broker's end offset is asked
and everything before it read) — then its changes are produced (idempotent, acks=all) and the write answers once
they are acknowledged. Several changes of one ``TransactWriteItems`` go in one Kafka transaction: a reader sees all
or none. Reading the log back, a process skips what it wrote itself and values others wrote to a key it has
written since (its own write is later in the log): every process ends with the log's order.

Invariants:
A. Every write this store answered with success is in the log, acknowledged by all in-sync replicas.
B. A process whose produce failed no longer knows which of its changes are in the log: it forgets its tables and
   reads the log again from the start, answering ``ServiceUnavailable`` (which clients retry) meanwhile.
C. Two writers race only where two nodes write one key at once: each key has one writer at a time in srm (a
   partition's runs are written by the member that holds the partition, the rest by a flow's leader), and a write
   whose condition depends on stored values first reads everything logged before it.
D. While the log cannot be reached, writes fail and reads are answered from this process's tables (a consistent
   read too: it is as fresh as this process can make it); they hold this process's own failed writes until the
   log is read again, which is why a node still shows what it noted during an outage of the cluster.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from srm.local.tables.engine import Change, TableError, Tables

__all__ = ["ReplicatedTables", "StoreUnavailableError"]

log = logging.getLogger(__name__)

_WRITER = "w"  # header: the writing process's id and its sequence number
_OWN_WRITE_S = 1.0  # an item this process wrote this recently is still its own (see _written_lately)


class StoreUnavailableError(RuntimeError):
    """The log cannot be read or written now (answered as a retriable ``ServiceUnavailable``)."""


class _Delivery:
    """The acknowledgements of one write's records."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.offsets: list[int] = []
        self.errors: list[str] = []

    def report(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(err.str())
        elif (offset := msg.offset()) is not None:
            self.offsets.append(offset)

    def done(self) -> bool:
        return bool(self.errors) or len(self.offsets) >= self.expected


def _encode_key(change: Change) -> bytes:
    if change.key is None:
        return b"t" + change.table.encode()
    return b"i" + json.dumps([change.table, change.key_item], sort_keys=True, separators=(",", ":")).encode()


class ReplicatedTables:
    """:class:`Tables` replicated through one partition of ``topic``. ``consumer`` and ``producer`` are librdkafka
    settings for the cluster that holds it (security included); the group and transactional ids are set here."""

    def __init__(
        self,
        topic: str,
        consumer: dict[str, Any],
        producer: dict[str, Any],
        *,
        sync_timeout_s: float = 5.0,
    ) -> None:
        self.topic = topic
        self.tables = Tables()
        self.writer = uuid.uuid4().hex[:16]
        self._tp = TopicPartition(topic, 0)
        self._consumer_conf = {
            **consumer,
            "group.id": f"srm-store-reader-{self.writer}",  # never joins nor commits: the partition is assigned
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
            "enable.partition.eof": "false",
        }
        self._producer_conf = {**producer, "linger.ms": "0", "enable.idempotence": "true", "acks": "all"}
        self._sync_timeout_s = sync_timeout_s
        self._ack_timeout_s = 3 * sync_timeout_s  # a broker restart's worth: a write waits it out
        self._lock = threading.Condition()  # the tables, _position, _pending
        self._write_lock = threading.Lock()  # one write at a time: its changes go to the log in its order
        self._position = 0  # the next offset of the log to read
        self._pending: dict[bytes, int] = {}  # key → sequence of this process's last write of it not read back yet
        self._own_writes: dict[str, float] = {}  # item key → when this process last wrote it (monotonic)
        self._own: set[int] = set()  # offsets of this process's acknowledged changes not read back yet
        self._seq = 0
        self._consumer: Consumer | None = None
        self._ends: Consumer | None = None  # asks for the log's end (the reader's consumer is busy consuming)
        self._ends_lock = threading.Lock()
        self._producer: Producer | None = None
        self._transactional: Producer | None = None
        self._reader: threading.Thread | None = None
        self._stop = threading.Event()
        self._broken: str | None = None  # why the tables are being read again (invariant B)
        self._rebuild = threading.Event()
        self._ready = threading.Event()
        self._noted_at = -60.0
        self._problem = ""  # the last problem reading the log (why the store is not ready)
        self.on_change: Callable[[Change], None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self, timeout: float | None = 60.0) -> None:
        """Start reading the log, and wait until it was read to its end (``timeout``; None: do not wait, see
        :attr:`ready`); raises StoreUnavailableError when that takes longer."""
        self._producer = Producer(self._producer_conf)
        self._ends = Consumer(self._consumer_conf)
        self._reader = threading.Thread(target=self._read, name="store-reader", daemon=True)
        self._reader.start()
        if timeout is not None and not self._ready.wait(timeout):
            raise StoreUnavailableError(self._problem or f"cannot read the store's log {self.topic}")

    @property
    def ready(self) -> bool:
        """Whether the log was read to its end once: the tables answer (a rebuild still answers reads)."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        return self._ready.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(10)
        for producer in (self._producer, self._transactional):
            if producer is not None:
                producer.flush(5)
        with self._ends_lock:
            ends, self._ends = self._ends, None
        if ends is not None:
            ends.close()

    # -- requests ------------------------------------------------------------------------------------------------
    def execute(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        """Run one DynamoDB operation; TableError for what DynamoDB would refuse, StoreUnavailableError when the log
        cannot be reached."""
        if not self._ready.is_set():
            why = self._problem or "it is being read"
            raise StoreUnavailableError(f"the state (topic {self.topic}) is not available yet: {why}")
        if operation not in Tables.WRITES:
            if self.tables.needs_current_state(operation, request) and self._broken is None:
                # the log does not answer: this process's tables answer, as fresh as they are (invariant D)
                with contextlib.suppress(StoreUnavailableError):
                    self.sync()
            with self._lock:
                return self.tables.execute(operation, request)[0]
        if self._broken is not None:
            # Being read again: the write is noted in this process's tables, not logged, and fails (invariant D).
            with self._lock:
                self.tables.execute(operation, request)
            raise StoreUnavailableError(self._broken)
        if self.tables.needs_current_state(operation, request) and not self._written_lately(operation, request):
            self.sync()
        with self._write_lock:
            with self._lock:
                response, changes = self.tables.execute(operation, request)
                records = [self._record(c) for c in changes]
            if not records:
                return response
            if operation == "TransactWriteItems" and len(records) > 1:
                self._publish_transaction(records)
                return response
            # Produced in this order under the lock; acknowledged outside it, so writes of several threads (the
            # partitions of a batch) share the round trips.
            delivery = self._produce(records)
        self._await(delivery)
        return response

    def _written_lately(self, operation: str, request: dict[str, Any]) -> bool:
        """Whether this process wrote the one item this write touches within :data:`_OWN_WRITE_S`: no other node can
        have written it since (invariant C: a key changes hands with a partition, which takes a rebalance, seconds
        with its heartbeats), so the write needs no reading of the log first — the state write of a busy
        partition's every batch."""
        key = self.tables.item_key(operation, request)
        return key is not None and time.monotonic() - self._own_writes.get(key, -_OWN_WRITE_S) < _OWN_WRITE_S

    def _record(self, change: Change) -> tuple[bytes, bytes | None, int]:
        """The log record of a change (called with the lock held), noted as pending until read back."""
        key = _encode_key(change)
        if change.key is None:
            value = None if change.definition is None else json.dumps(change.definition).encode()
        else:
            value = None if change.item is None else json.dumps(change.item, separators=(",", ":")).encode()
        self._seq += 1
        self._pending[key] = self._seq
        if change.key is not None:
            now = self._own_writes[key[1:].decode()] = time.monotonic()
            if len(self._own_writes) > 10_000:  # only the recent ones matter
                self._own_writes = {k: t for k, t in self._own_writes.items() if now - t < _OWN_WRITE_S}
        return key, value, self._seq

    def _produce(self, records: list[tuple[bytes, bytes | None, int]], producer: Producer | None = None) -> _Delivery:
        """Hand the records to the producer (this process's plain one unless told), each tagged with its writer."""
        producer = self._producer if producer is None else producer
        assert producer is not None
        delivery = _Delivery(len(records))
        try:
            for key, value, seq in records:
                producer.produce(
                    self.topic,
                    value,
                    key,
                    partition=0,
                    on_delivery=delivery.report,
                    headers=[(_WRITER, f"{self.writer}:{seq}".encode())],
                )
        except (KafkaException, BufferError) as e:
            delivery.errors.append(str(e))
        return delivery

    def _await(self, delivery: _Delivery) -> None:
        """Wait for the acknowledgements (invariant A); on failure, invariant B."""
        assert self._producer is not None
        deadline = time.monotonic() + self._ack_timeout_s
        while not delivery.done() and time.monotonic() < deadline:
            # serves this writer's reports and any other thread's (briefly: another thread may serve ours)
            self._producer.poll(0.002)
        if not delivery.done():
            delivery.errors.append(f"changes not acknowledged within {self._ack_timeout_s:.0f}s")
        if delivery.errors:
            self._break(f"cannot write the store's log {self.topic}: {delivery.errors[0]}")
            raise StoreUnavailableError(self._broken or delivery.errors[0])
        with self._lock:
            self._own.update(delivery.offsets)

    def _publish_transaction(self, records: list[tuple[bytes, bytes | None, int]]) -> None:
        """Several changes in one Kafka transaction: a reader sees all of them or none."""
        try:
            producer = self._transaction_producer()
            producer.begin_transaction()
            delivery = self._produce(records, producer)
            if not delivery.errors:
                producer.commit_transaction(self._sync_timeout_s)  # serves the reports first
        except KafkaException as e:
            delivery = _Delivery(0)
            delivery.errors.append(str(e))
        if delivery.errors or not delivery.done():
            self._give_up_transaction()
            why = delivery.errors[0] if delivery.errors else "the transaction's changes were not acknowledged"
            self._break(f"cannot write the store's log {self.topic}: {why}")
            raise StoreUnavailableError(self._broken or why)
        with self._lock:
            self._own.update(delivery.offsets)

    def _transaction_producer(self) -> Producer:
        if self._transactional is None:
            self._transactional = Producer(
                {
                    **self._producer_conf,
                    "transactional.id": f"srm-store-{self.writer}",
                    "transaction.timeout.ms": "30000",
                }
            )
            self._transactional.init_transactions(self._sync_timeout_s)
        return self._transactional

    def _give_up_transaction(self) -> None:
        """A failed transaction may still be open, and its producer would refuse the next one: abort it if the
        broker answers, and start the next with a new producer, whose ``init_transactions`` (same transactional id)
        aborts whatever this one left open and fences it."""
        producer, self._transactional = self._transactional, None
        if producer is not None:
            with contextlib.suppress(KafkaException):  # else fenced and aborted by the next producer
                producer.abort_transaction(1)

    def _break(self, why: str) -> None:
        log.error("%s; reading the store's log again from its start", why)
        self._broken = why
        self._rebuild.set()

    # -- catching up ---------------------------------------------------------------------------------------------
    def sync(self, timeout: float | None = None) -> None:
        """Return once everything others logged before now has been read (this process's own changes are in its
        tables already)."""
        timeout = self._sync_timeout_s if timeout is None else timeout
        try:
            end = self._log_end(timeout)
        except KafkaException as e:
            raise StoreUnavailableError(f"cannot reach the store's log {self.topic}: {e}") from None
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._caught_up(end):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._broken is not None:
                    raise StoreUnavailableError(
                        self._broken
                        or f"the store's log {self.topic} was not read up to offset {end} in {timeout:.0f}s"
                    )
                self._lock.wait(remaining)

    def _caught_up(self, end: int) -> bool:
        if self._position >= end:
            return True
        return all(o in self._own for o in range(self._position, end))  # only our own changes are left to read

    # -- the reader ------------------------------------------------------------------------------------------------
    def _read(self) -> None:
        """Read the log from its start into new tables, put them in place once at its end, then follow it; on a
        failure (invariant B) start over, the tables in place answering reads meanwhile."""
        while not self._stop.is_set():
            consumer = Consumer(self._consumer_conf)
            try:
                consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
                self._rebuild.clear()
                tables, position = self._read_to_end(consumer)
                if tables is None:
                    continue
                with self._lock:
                    self.tables, self._position, self._pending, self._own = tables, position, {}, set()
                    self._consumer = consumer
                    self._broken = None
                    self._lock.notify_all()
                self._ready.set()
                self._follow(consumer)
            except Exception as e:  # a broken reader starts over: the tables are read again from the log
                self._broken = f"reading the store's log {self.topic} failed, reading it again: {e}"
                self._note(self._broken)
                self._stop.wait(1.0)
            finally:
                self._consumer = None
                consumer.close()

    def _read_to_end(self, consumer: Consumer) -> tuple[Tables | None, int]:
        """Tables from the log's start to its end (None when stopped or asked to start over meanwhile)."""
        tables = Tables()
        position = 0
        while not self._stop.is_set() and not self._rebuild.is_set():
            messages = consumer.consume(5000, 0.2)
            for msg in messages:
                err = msg.error()
                if err is None:
                    change = _decode(msg.key() or b"", msg.value(), tables)
                    if change is not None:
                        tables.apply(change)
                elif err.fatal():
                    raise KafkaException(err)
            position = max(position, consumer.position([self._tp])[0].offset)
            if len(messages) == 5000:
                continue  # more is waiting: the end is asked for once what the fetches held is read (a busy log
                # never goes quiet: waiting for an empty poll could last for ever)
            end = self._end()
            if end is not None and position >= end:
                return tables, position
        return None, 0

    def _follow(self, consumer: Consumer) -> None:
        while not self._stop.is_set() and not self._rebuild.is_set():
            messages = consumer.consume(1000, 0.2)
            with self._lock:
                for msg in messages:
                    err = msg.error()
                    if err is None:
                        self._apply(msg)
                    elif err.fatal():
                        raise KafkaException(err)
                    else:
                        self._note(f"reading the store's log {self.topic}: {err.str()}")
                position = consumer.position([self._tp])[0].offset
                if position >= 0:
                    self._position = max(self._position, position)
                self._own = {o for o in self._own if o >= self._position}
                self._lock.notify_all()

    def _end(self) -> int | None:
        """The log's end offset, as the broker answers now; None (noted) when it does not."""
        try:
            return self._log_end(self._sync_timeout_s)
        except KafkaException as e:
            self._note(f"cannot reach the store's log {self.topic}: {e}")
            return None

    def _log_end(self, timeout: float) -> int:
        """The log's end offset as the partition's leader answers; a client that could not ask is replaced (after a
        broker restart librdkafka may keep answering "unknown partition" for a topic it is not assigned)."""
        with self._ends_lock:
            ends = self._ends
        if ends is None:
            raise StoreUnavailableError(f"the store's log {self.topic} is closed: srm is stopping")
        try:
            return int(ends.get_watermark_offsets(self._tp, timeout=timeout)[1])
        except RuntimeError:
            # another thread replaced (and closed) this client meanwhile: ask its replacement
            with self._ends_lock:
                if self._ends is None or self._ends is ends:
                    raise StoreUnavailableError(f"the store's log {self.topic} is closed: srm is stopping") from None
            return self._log_end(timeout)
        except KafkaException:
            with self._ends_lock:
                if self._ends is ends:
                    self._ends = Consumer(self._consumer_conf)
                    ends.close()
            raise

    def _note(self, message: str) -> None:
        """A problem reading the log, logged once a minute at most (a cluster that is down says so every poll)."""
        self._problem = message
        now = time.monotonic()
        if now - self._noted_at >= 60.0:
            self._noted_at = now
            log.warning(message)

    def _apply(self, msg: Message) -> None:
        key = msg.key() or b""
        header = dict(msg.headers() or []).get(_WRITER) or b""
        writer = header.decode() if isinstance(header, bytes) else str(header)
        own_seq = None
        if writer.startswith(self.writer + ":"):
            own_seq = int(writer.rsplit(":", 1)[1])
        pending = self._pending.get(key)
        if own_seq is not None:
            if pending == own_seq:
                del self._pending[key]
            return  # applied when it was written
        if pending is not None:
            return  # this process wrote the key since: its own value comes later in the log
        change = _decode(key, msg.value(), self.tables)
        if change is not None:
            self.tables.apply(change)
            if self.on_change is not None:
                self.on_change(change)


def _decode(key: bytes, value: bytes | None, tables: Tables) -> Change | None:
    if key.startswith(b"t"):
        return Change(key[1:].decode(), None, None, None if value is None else json.loads(value))
    if key.startswith(b"i"):
        table, item_key = json.loads(key[1:])
        try:
            parsed = tables.key_of(table, item_key)
        except TableError:
            return None  # its table was dropped
        return Change(table, parsed, None if value is None else json.loads(value), key_item=item_key)
    log.warning("the store's log holds a record it cannot read (key %r): ignored", key[:40])
    return None
