"""Key/value records in one partition of a compacted topic, read into memory: how Kafka Connect and MirrorMaker 2 keep
their state (``KafkaBasedLog``), with each owner's writes fenced by the broker.

Every process that uses the state reads the whole log, follows it, and hands each record to ``apply`` (a null value
is a deletion). What has one writer at a time — a source partition's keys, a flow's leader's — belongs to an
**owner**, and its writes go out in Kafka transactions of the owner's own transactional id. Claiming an owner
(:meth:`StateLog.claim`, when the group protocol hands it over) initializes a producer of that id, which aborts what
an earlier holder left open and fences it: its next write fails at the broker, whatever that process believes, and
no other owner of it is touched. Writes of no owner (facts with one writer each, an operator's edits) go through the
process's idempotent producer.

A write is applied here once the broker acknowledged it, so this process reads its own writes at once. Reading the
log back, a process skips its own records (applied already) and others' records of a key it has written since (its
own comes later in the log): every process ends with the log's order. :meth:`StateLog.sync` waits until everything
written before it was asked has been read (Connect's ``readToEnd``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from srm.state.records import StateError, StateFencedError

__all__ = ["Key", "StateLog", "decode_key", "encode_key"]

log = logging.getLogger(__name__)

Key = tuple[Any, ...]
Record = tuple[Key, Any]  # a key and its value (None: deleted)
_Encoded = tuple[bytes, bytes | None, Key, Any]  # a record as sent, and as applied

_WRITER = "w"  # header: the writing process's id and the write's sequence number
_FIRST_ANSWER_S = 10.0  # how long a new reader waits for the cluster to answer at all (a busy one takes seconds)
_UNREACHABLE_S = 5.0  # after a sync that timed out, how long the next ones fail at once
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def _encode(records: Iterable[Record]) -> list[_Encoded]:
    return [
        (encode_key(k), None if v is None else json.dumps(v, separators=(",", ":")).encode(), k, v) for k, v in records
    ]


def encode_key(key: Key) -> bytes:
    return json.dumps(key, separators=(",", ":")).encode()


def decode_key(raw: bytes) -> Key:
    return tuple(json.loads(raw))


class StateLog:
    """The log of ``topic`` (its partition 0). ``consumer`` and ``producer`` are librdkafka settings for the cluster
    holding it (security included); ``transactional_prefix`` + an owner is that owner's transactional id."""

    def __init__(
        self,
        topic: str,
        consumer: dict[str, Any],
        producer: dict[str, Any],
        *,
        apply: Callable[[Key, Any], None],
        transactional_prefix: str,
        timeout_s: float = 10.0,
    ) -> None:
        self.topic = topic
        self.writer = uuid.uuid4().hex[:16]
        self._apply = apply
        self._prefix = transactional_prefix
        self._timeout_s = timeout_s
        self._tp = TopicPartition(topic, 0)
        # Background clients: against a network that swallows packets, one connection attempt waits as long as a
        # request may (not librdkafka's 10 s for the first one), so an outage is not met by a new attempt per
        # client every ten seconds. A refused connection still fails at once.
        consumer = {**consumer, "api.version.request.timeout.ms": "30000"}
        producer = {**producer, "api.version.request.timeout.ms": "30000"}
        self._consumer_conf = {
            **consumer,
            "group.id": f"srm-state-reader-{self.writer}",  # never joins nor commits: the partition is assigned
            "enable.auto.commit": "false",
            "isolation.level": "read_committed",
            # the end reached is said with the offset read up to, past a transaction's marker ending the log (the
            # position of the last record read stops before it); it comes with a fetch that found nothing new, so
            # such a fetch waits 100 ms at the broker, not 500: a reader knows it is at the end that much sooner
            "enable.partition.eof": "true",
            "fetch.wait.max.ms": "100",
            "auto.offset.reset": "earliest",
        }
        for key in ("group.instance.id", "partition.assignment.strategy"):
            self._consumer_conf.pop(key, None)
        self._producer_conf = {
            **producer,
            "linger.ms": "0",
            "enable.idempotence": "true",
            "acks": "all",
            # a state write is one short transaction: one left open (its writer frozen) holds readers this long at most
            "transaction.timeout.ms": "10000",
            "message.timeout.ms": "10000",
        }
        admin = {k: v for k, v in consumer.items() if not k.startswith(("group.", "enable.", "auto.", "isolation."))}
        self._admin = AdminClient({**admin, "log_level": "0"})
        self._lock = threading.Condition()  # applying, _position, _pending, _unapplied
        self._position = 0  # the next offset of the log to read
        self._pending: dict[bytes, int] = {}  # key → sequence of this process's last write of it, not read back yet
        self._unapplied: set[int] = set()  # sequences of own writes that failed here but may have landed
        self._seq = 0
        self._owners: dict[str, Producer] = {}  # owner → its transactional producer, while claimed
        self._fenced: set[str] = set()  # owners another process took over: no write until claimed again
        self._initializing: dict[str, Producer] = {}  # producers whose init_transactions timed out, by owner
        self._owner_locks: dict[str, threading.Lock] = {}
        self._owners_lock = threading.Lock()
        # Producers given up are kept, not destroyed where they were dropped: librdkafka's destroy of a client that
        # another thread may still be using is not safe. They are destroyed at stop (few: one per owner change).
        self._retired: list[Producer] = []
        self._plain: Producer | None = None
        self._plain_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._problem = ""
        self._noted_at = -60.0
        self._unreachable_until = 0.0  # syncs fail at once until then (the cluster did not answer)

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self, timeout: float | None = None, *, writer: bool = False) -> None:
        """Read the log to its end (waiting up to ``timeout``, by default the log's), then follow it. A cluster that
        does not answer at all fails it within ten seconds, however long reading a large log may take. ``writer``:
        this process writes soon — its idempotent producer gets its producer id while the log is read."""
        wait = self._timeout_s * 6 if timeout is None else timeout
        self._stable_end(min(wait, _FIRST_ANSWER_S))
        self._reader = threading.Thread(target=self._read, name="state-reader", daemon=True)
        self._reader.start()
        if writer:
            self._plain_producer()
        if not self._ready.wait(wait):
            raise StateError(self._problem or f"the state's log {self.topic} could not be read")

    def stop(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(10)
        with self._owners_lock:
            producers = [*self._owners.values(), *([self._plain] if self._plain is not None else [])]
            self._owners.clear()
            self._retired.clear()
        for producer in producers:
            producer.flush(2)

    # -- ownership -------------------------------------------------------------------------------------------------
    def claim(self, owners: Sequence[str]) -> None:
        """Become the writer of these owners' keys (the group protocol gave them to this process): each one's earlier
        holder is fenced (its open transaction aborted), and what it committed is read before this returns."""
        if not owners:
            return
        with self._owners_lock:  # given to this process: should the claim fail now, its first write claims them
            self._fenced.difference_update(owners)
        with ThreadPoolExecutor(min(8, len(owners)), thread_name_prefix="state-claim") as pool:
            for owner, producer in zip(owners, pool.map(self._transactional, owners), strict=True):
                with self._owners_lock:
                    old = self._owners.get(owner)
                    self._owners[owner] = producer
                    self._fenced.discard(owner)
                if old is not None:
                    self._retire(old)
        self.sync()

    def release(self, owners: Sequence[str]) -> None:
        """This process gives these owners up (the group moves them): their producers are closed, and nothing of
        theirs is written here until they are claimed again."""
        with self._owners_lock:
            producers = [p for o in owners if (p := self._owners.pop(o, None)) is not None]
            self._fenced.update(owners)
        for producer in producers:
            self._retire(producer)

    def ensure(self, owner: str) -> None:
        """Before an owner's keys are read to be written: claimed, unless this process holds it already — or lost
        it to another (StateFencedError: no write until the group gives it back)."""
        with self._owners_lock:
            if owner in self._owners:
                return
            if owner in self._fenced:
                raise StateFencedError(f"the state of {owner} is written by another process now")
        self.claim([owner])  # the first write of an owner not claimed here (a handler called directly)

    @property
    def lock(self) -> threading.Condition:
        """Held while records are applied: whoever reads what ``apply`` builds takes it."""
        return self._lock

    def holds(self, owner: str) -> bool:
        with self._owners_lock:
            return owner in self._owners

    def _transactional(self, owner: str) -> Producer:
        """A transactional producer of ``owner``'s id, initialized: whoever held that id before is fenced. One
        whose initialization timed out is asked again next time (librdkafka resumes it), not replaced: a cluster
        that does not answer is not asked by a new client per attempt."""
        with self._owners_lock:
            producer = self._initializing.pop(owner, None)
        if producer is None:
            producer = Producer({**self._producer_conf, "transactional.id": self._prefix + owner})
        try:
            producer.init_transactions(self._timeout_s)
        except KafkaException as e:
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if error is not None and error.retriable():
                with self._owners_lock:
                    self._initializing[owner] = producer
            raise StateError(f"cannot take over the state of {owner} in {self.topic}: {_message(e)}") from None
        return producer

    def _retire(self, producer: Producer) -> None:
        with self._owners_lock:
            if all(p is not producer for p in self._retired):
                self._retired.append(producer)

    def _owner_lock(self, owner: str) -> threading.Lock:
        with self._owners_lock:
            return self._owner_locks.setdefault(owner, threading.Lock())

    # -- writes ----------------------------------------------------------------------------------------------------
    def write(self, records: Iterable[Record], owner: str | None = None) -> None:
        """Write the records (in one transaction of ``owner``'s, or with this process's idempotent producer), and
        apply them here once acknowledged. StateFencedError when another process holds ``owner`` now."""
        encoded = _encode(records)
        if not encoded:
            return
        if owner is None:
            self._write_plain(encoded)
            return
        with self._owner_lock(owner):
            self.ensure(owner)
            with self._owners_lock:
                producer = self._owners[owner]
            self._write_transaction(owner, producer, encoded)

    def _write_transaction(self, owner: str, producer: Producer, encoded: list[_Encoded]) -> None:
        seq = self._note_pending(encoded)
        try:
            producer.begin_transaction()
            headers: list[tuple[str, str | bytes | None]] = [(_WRITER, self._header(seq))]
            for raw_key, raw_value, _, _ in encoded:
                producer.produce(self.topic, raw_value, raw_key, partition=0, headers=headers)
            producer.commit_transaction(self._timeout_s)
        except KafkaException as e:
            self._failed(encoded, seq)
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            fenced = error is not None and error.code() in _FENCED
            with self._owners_lock:
                if self._owners.get(owner) is producer:
                    # Fenced: another process holds the owner; no write until it is claimed here again. Else (a
                    # broker that does not answer, a commit still under way) the next write claims it afresh: the
                    # new producer's init_transactions settles whatever this one left open.
                    del self._owners[owner]
                    if fenced:
                        self._fenced.add(owner)
            self._retire(producer)
            if fenced:
                raise StateFencedError(f"the state of {owner} is written by another process now") from None
            raise StateError(f"cannot write the state of {owner} to {self.topic}: {_message(e)}") from None
        self._applied(encoded)

    def _write_plain(self, encoded: list[_Encoded]) -> None:
        if time.monotonic() < self._unreachable_until:  # see sync: fail at once while the cluster does not answer
            raise StateError(self._problem or f"cannot reach the state's log {self.topic}")
        producer = self._plain_producer()
        seq = self._note_pending(encoded)
        errors: list[str] = []
        acked = [0]

        def report(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(err.str())
            else:
                acked[0] += 1

        try:
            for raw_key, raw_value, _, _ in encoded:
                producer.produce(
                    self.topic,
                    raw_value,
                    raw_key,
                    partition=0,
                    on_delivery=report,
                    headers=[(_WRITER, self._header(seq))],
                )
            deadline = time.monotonic() + self._timeout_s
            while not errors and acked[0] < len(encoded) and time.monotonic() < deadline:
                producer.poll(0.002)
        except (KafkaException, BufferError) as e:
            errors.append(str(e))
        if errors or acked[0] < len(encoded):
            self._failed(encoded, seq)
            why = errors[0] if errors else f"not acknowledged within {self._timeout_s:.0f}s"
            self._problem = f"cannot write the state to {self.topic}: {why}"
            self._unreachable_until = time.monotonic() + _UNREACHABLE_S
            raise StateError(self._problem)
        self._applied(encoded)

    def _plain_producer(self) -> Producer:
        with self._plain_lock:
            if self._plain is None:
                conf = {k: v for k, v in self._producer_conf.items() if k != "transaction.timeout.ms"}
                self._plain = Producer(conf)
            return self._plain

    def _header(self, seq: int) -> bytes:
        return f"{self.writer}:{seq}".encode()

    def _note_pending(self, encoded: list[_Encoded]) -> int:
        with self._lock:
            self._seq += 1
            for raw_key, *_ in encoded:
                self._pending[raw_key] = self._seq
            return self._seq

    def _applied(self, encoded: list[_Encoded]) -> None:
        with self._lock:
            for _, _, key, value in encoded:
                self._apply(key, value)

    def _failed(self, encoded: list[_Encoded], seq: int) -> None:
        """A write that failed here may still have landed (an acknowledgement lost): read back, it is applied."""
        with self._lock:
            self._unapplied.add(seq)
            for raw_key, *_ in encoded:
                if self._pending.get(raw_key) == seq:
                    del self._pending[raw_key]

    # -- catching up ---------------------------------------------------------------------------------------------
    def sync(self, timeout: float | None = None) -> None:
        """Return once everything written to the log before now has been read. While the log's cluster does not
        answer, a sync fails at once for a few seconds after one timed out: a process asking every second does not
        wait out a timeout every second."""
        if time.monotonic() < self._unreachable_until:
            raise StateError(self._problem or f"cannot reach the state's log {self.topic}")
        timeout = self._timeout_s if timeout is None else timeout
        try:
            end = self._stable_end(timeout)
        except StateError as e:
            self._problem = str(e)
            self._unreachable_until = time.monotonic() + _UNREACHABLE_S
            raise
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._position < end:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise StateError(f"the state's log {self.topic} was not read up to offset {end} in {timeout:.0f}s")
                self._lock.wait(remaining)

    def _stable_end(self, timeout: float) -> int:
        """The log's end (its high watermark): the reader's position passes it once every transaction before it is
        decided, markers included. (The last stable offset would not do: a transaction's commit returns before its
        markers are written, so a reader could miss a write acknowledged to another process.) Asked again until
        ``timeout``: after a broker restart the first answers may be about stale leadership."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                futures = self._admin.list_offsets(
                    {self._tp: OffsetSpec.latest()},
                    isolation_level=IsolationLevel.READ_UNCOMMITTED,
                    request_timeout=max(1.0, deadline - time.monotonic()),
                )
                return int(futures[self._tp].result(max(1.0, deadline - time.monotonic())).offset)
            except Exception as e:  # KafkaException, a timeout
                if time.monotonic() + 0.2 >= deadline or self._stop.is_set():
                    raise StateError(f"cannot reach the state's log {self.topic}: {_message(e)}") from None
                self._stop.wait(0.2)

    # -- the reader ------------------------------------------------------------------------------------------------
    def _read(self) -> None:
        # Offset 0, not OFFSET_BEGINNING: that one is looked up first, half a second before the first fetch. A
        # compacted log keeps offset 0 as its start; a log whose start moved resets to it (auto.offset.reset).
        position = 0
        while not self._stop.is_set():
            consumer = Consumer(self._consumer_conf)
            try:
                consumer.assign([TopicPartition(self.topic, 0, position)])
                self._follow(consumer)
            except Exception as e:  # a broken reader goes on from where it was, with a new client
                self.note(f"reading the state's log {self.topic}: {_message(e)}")
                self._stop.wait(1.0)
            finally:
                with self._lock:
                    position = self._position
                consumer.close()

    def _follow(self, consumer: Consumer) -> None:
        while not self._stop.is_set():
            # Woken by the first record (a batch consume would wait out its timeout for want of a full batch),
            # then what else is fetched already.
            first = consumer.poll(0.2)
            messages = [] if first is None else [first, *consumer.consume(4999, 0)]
            with self._lock:
                for msg in messages:
                    err = msg.error()
                    if err is None:
                        self._read_record(msg)
                    elif err.code() == KafkaError._PARTITION_EOF:
                        self._position = max(self._position, msg.offset() or 0)
                    elif err.fatal():
                        raise KafkaException(err)
                    else:
                        self.note(f"reading the state's log {self.topic}: {err.str()}")
                position = consumer.position([self._tp])[0].offset
                if position >= 0:
                    self._position = max(self._position, position)
                self._lock.notify_all()
            if not self._ready.is_set() and len(messages) < 5000:  # a full batch: more to read first
                with contextlib.suppress(StateError):
                    if self._position >= self._stable_end(self._timeout_s):
                        self._ready.set()

    def _read_record(self, msg: Message) -> None:
        raw_key = msg.key() or b""
        header = dict(msg.headers() or []).get(_WRITER) or b""
        writer, _, seq_text = (header.decode() if isinstance(header, bytes) else str(header)).partition(":")
        if writer == self.writer:
            seq = int(seq_text)
            if self._pending.get(raw_key) == seq:
                del self._pending[raw_key]
            if seq not in self._unapplied:
                return  # applied when it was written
        elif raw_key in self._pending:
            return  # this process wrote the key since: its own value comes later in the log
        try:
            key = decode_key(raw_key)
            value = msg.value()
            self._apply(key, None if value is None else json.loads(value))
        except ValueError:
            log.warning("the state's log %s holds a record it cannot read (key %r): ignored", self.topic, raw_key[:60])

    def note(self, message: str, *, problem: bool = True) -> None:
        """A problem reading the log, logged once a minute at most (a cluster that is down says so every poll)."""
        if problem:
            self._problem = message
        now = time.monotonic()
        if now - self._noted_at >= 60.0:
            self._noted_at = now
            log.warning(message)


def _message(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return str(e.args[0].str())
    return str(e) or type(e).__name__
