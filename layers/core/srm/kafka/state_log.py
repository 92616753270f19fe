"""Key/value records in one partition of a compacted topic, read into memory: how Kafka Connect and MirrorMaker 2 keep
their state (``KafkaBasedLog``), with each owner's writes fenced by the broker.

Every process that uses the state reads the whole log, follows it, and hands each record to ``apply`` (a null value
is a deletion). What has one writer at a time — a source partition's keys, a flow's leader's — belongs to an
**owner**, and its writes go out in Kafka transactions of the process that holds it: one transactional producer per
process (its id: the node and worker), one transaction for what its threads write at once. Taking an owner over
(:meth:`StateLog.claim`, when the group protocol hands it over) reads who held it (the log's ``holder`` records);
a holder that did not release it is fenced: a producer of its transactional id is initialized, which aborts what it
left open and makes its next commit fail at the broker, whatever that process believes. Writes of no owner (facts
with one writer each, an operator's edits) go through the process's idempotent producer.

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
    OFFSET_BEGINNING,
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
_FENCED = {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}


def _encode(records: Iterable[Record]) -> list[_Encoded]:
    return [
        (encode_key(k), None if v is None else json.dumps(v, separators=(",", ":")).encode(), k, v) for k, v in records
    ]


class _Pending:
    """An owned write waiting for its transaction."""

    def __init__(self, records: list[_Encoded]) -> None:
        self.records = records
        self.done = False
        self.error: StateError | None = None

    def succeed(self) -> None:
        self.done = True

    def fail(self, error: StateError) -> None:
        self.done, self.error = True, error


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
        member: str | None = None,
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
            "enable.partition.eof": "false",
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
        self.member = member or uuid.uuid4().hex[:16]  # this process as a writer: its transactional id's suffix
        self._txn: Producer | None = None  # this process's transactional producer, once claimed
        self._held: set[str] = set()  # owners this process holds
        self._holders: dict[str, dict[str, Any]] = {}  # owner → its holder record, as read
        self._fenced = False  # another process took over: owned writes fail until a claim
        self._queue: list[_Pending] = []  # owned writes waiting for the next transaction
        self._commit_lock = threading.Lock()  # one transaction at a time
        self._initializing: dict[str, Producer] = {}  # producers whose init_transactions timed out, by member
        self._plain: Producer | None = None
        self._plain_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._problem = ""
        self._noted_at = -60.0

    # -- lifecycle -------------------------------------------------------------------------------------------------
    def start(self, timeout: float | None = None) -> None:
        """Read the log to its end (waiting up to ``timeout``, by default the log's), then follow it."""
        self._reader = threading.Thread(target=self._read, name="state-reader", daemon=True)
        self._reader.start()
        if not self._ready.wait(self._timeout_s * 6 if timeout is None else timeout):
            raise StateError(self._problem or f"the state's log {self.topic} could not be read")

    def stop(self) -> None:
        self._stop.set()
        if self._reader is not None:
            self._reader.join(10)
        for producer in (self._txn, self._plain):
            if producer is not None:
                producer.flush(2)

    # -- ownership -------------------------------------------------------------------------------------------------
    def claim(self, owners: Sequence[str]) -> None:
        """Become the writer of these owners' keys (the group protocol gave them to this process): an earlier holder
        that did not release one is fenced — its transactional producer's epoch bumped, its open transaction
        aborted — and what it committed is read before this returns."""
        if not owners:
            return
        with self._commit_lock:
            if self._txn is None:
                self._txn = self._transactional(self.member)  # fences this member's own earlier incarnation
        self.sync()
        with self._lock:
            holders = [self._holders.get(o) for o in owners]
            self._fenced = False
        # Said first, then enforced: a stale holder that looks after this sees it, and one that wrote before is
        # fenced below, what it committed read by the sync after.
        self._write_owned(_encode([(("holder", o), {"m": self.member}) for o in owners]))
        stale = sorted({h["m"] for h in holders if h and h["m"] != self.member and not h.get("r")})
        if stale:
            with ThreadPoolExecutor(min(8, len(stale)), thread_name_prefix="state-fence") as pool:
                for producer in pool.map(self._transactional, stale):
                    producer.flush(0)  # only its epoch mattered
            self.sync()
        with self._lock:
            self._held.update(owners)

    def release(self, owners: Sequence[str]) -> None:
        """This process gives these owners up (the group moves them): their next holder need not fence it."""
        with self._lock:
            owners = [o for o in owners if o in self._held]
            self._held.difference_update(owners)
        if owners and not self._fenced:
            with contextlib.suppress(StateError):  # not released: the next holder fences this process
                self._write_owned(_encode([(("holder", o), {"m": self.member, "r": True}) for o in owners]))

    def ensure(self, owner: str) -> None:
        """Before an owner's keys are read to be written: held, or claimed now unless another process holds it (a
        first write without a claim: a handler called directly) or this process was fenced (StateFencedError)."""
        with self._lock:
            if owner in self._held:
                return
            fenced = self._fenced
        if not fenced:
            self.sync()
            with self._lock:
                holder = self._holders.get(owner)
            if holder is None or holder["m"] == self.member or holder.get("r"):
                self.claim([owner])
                return
        raise StateFencedError(f"the state of {owner} is written by another process now")

    @property
    def lock(self) -> threading.Condition:
        """Held while records are applied: whoever reads what ``apply`` builds takes it."""
        return self._lock

    def holds(self, owner: str) -> bool:
        with self._lock:
            return owner in self._held

    def _transactional(self, member: str) -> Producer:
        """A transactional producer of ``member``'s id, initialized: whoever held that id before is fenced. One
        whose initialization timed out is asked again next time (librdkafka resumes it), not replaced: a cluster
        that does not answer is not asked by a new client per attempt."""
        with self._plain_lock:
            producer = self._initializing.pop(member, None)
        if producer is None:
            producer = Producer({**self._producer_conf, "transactional.id": self._prefix + member})
        try:
            producer.init_transactions(self._timeout_s)
        except KafkaException as e:
            error = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            if error is not None and error.retriable():
                with self._plain_lock:
                    self._initializing[member] = producer
            raise StateError(f"cannot take over the state of {member} in {self.topic}: {_message(e)}") from None
        return producer

    # -- writes ----------------------------------------------------------------------------------------------------
    def write(self, records: Iterable[Record], owner: str | None = None) -> None:
        """Write the records, and apply them here once acknowledged: an owner's in this process's transactions
        (StateFencedError when another process holds it now); others in them too once it has a transactional
        producer, else with its idempotent producer."""
        encoded = _encode(records)
        if not encoded:
            return
        if owner is None:
            if self._txn is not None and not self._fenced:
                self._write_owned(encoded)  # a process that writes transactions needs no second producer
            else:
                self._write_plain(encoded)
            return
        self.ensure(owner)
        self._write_owned(encoded)

    def _write_owned(self, encoded: list[_Encoded]) -> None:
        """Write in a transaction of this process's producer. Writes of several threads (a batch's partitions)
        arriving while one commits share the next transaction: one commit for all of them."""
        mine = _Pending(encoded)
        with self._lock:
            self._queue.append(mine)
        with self._commit_lock:
            if not mine.done:
                with self._lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        if mine.error is not None:
            raise mine.error

    def _commit(self, batch: list[_Pending]) -> None:
        """One transaction for the batch's writes (called holding the commit lock)."""
        if self._fenced or self._txn is None:
            error: StateError = StateFencedError("this process's state writes are fenced: another holds what it wrote")
            if not self._fenced:
                error = StateError(f"the state of {self.member} in {self.topic} is not claimed")
            for item in batch:
                item.fail(error)
            return
        producer = self._txn
        seqs = [self._note_pending(item.records) for item in batch]
        try:
            producer.begin_transaction()
            for item, seq in zip(batch, seqs, strict=True):
                for raw_key, raw_value, _, _ in item.records:
                    producer.produce(
                        self.topic, raw_value, raw_key, partition=0, headers=[(_WRITER, self._header(seq))]
                    )
            producer.commit_transaction(self._timeout_s)
        except KafkaException as e:
            for item, seq in zip(batch, seqs, strict=True):
                self._failed(item.records, seq)
            error_code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
            if error_code in _FENCED:
                # another process took over what this one held: no write until the group gives it something again
                with self._lock:
                    self._fenced = True
                    self._held.clear()
                self._txn = None
                failure: StateError = StateFencedError(
                    f"this process's state writes to {self.topic} are fenced: another process holds what it wrote"
                )
            else:
                # Not decided here (a broker that does not answer, a commit still under way): the producer is
                # dropped, and the next write claims what it writes afresh — a new producer of the same id settles
                # what this one left open — once the log says no other process holds it.
                with self._lock:
                    self._held.clear()
                self._txn = None
                producer.flush(0)
                failure = StateError(f"cannot write the state to {self.topic}: {_message(e)}")
            for item in batch:
                item.fail(failure)
            return
        for item in batch:
            self._applied(item.records)
            item.succeed()

    def _write_plain(self, encoded: list[_Encoded]) -> None:
        with self._plain_lock:
            if self._plain is None:
                conf = {k: v for k, v in self._producer_conf.items() if k != "transaction.timeout.ms"}
                self._plain = Producer(conf)
            producer = self._plain
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
            raise StateError(f"cannot write the state to {self.topic}: {why}")
        self._applied(encoded)

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
                self._apply_record(key, value)

    def _apply_record(self, key: Key, value: Any) -> None:
        """Holder records are the log's own (who writes an owner's keys); the rest go to ``apply``."""
        if key and key[0] == "holder":
            if value is None:
                self._holders.pop(key[1], None)
            else:
                self._holders[key[1]] = value
            return
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
        """Return once everything committed to the log before now has been read."""
        timeout = self._timeout_s if timeout is None else timeout
        end = self._stable_end(timeout)
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
        position = OFFSET_BEGINNING
        while not self._stop.is_set():
            consumer = Consumer(self._consumer_conf)
            try:
                consumer.assign([TopicPartition(self.topic, 0, position)])
                self._follow(consumer)
            except Exception as e:  # a broken reader goes on from where it was, with a new client
                self._note(f"reading the state's log {self.topic}: {_message(e)}")
                self._stop.wait(1.0)
            finally:
                with self._lock:
                    position = self._position
                consumer.close()

    def _follow(self, consumer: Consumer) -> None:
        while not self._stop.is_set():
            messages = consumer.consume(5000, 0.2)
            with self._lock:
                for msg in messages:
                    err = msg.error()
                    if err is None:
                        self._read_record(msg)
                    elif err.fatal():
                        raise KafkaException(err)
                    else:
                        self._note(f"reading the state's log {self.topic}: {err.str()}")
                position = consumer.position([self._tp])[0].offset
                if position >= 0:
                    self._position = max(self._position, position)
                self._lock.notify_all()
            if not self._ready.is_set() and len(messages) < 5000:
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
            self._apply_record(key, None if value is None else json.loads(value))
        except ValueError:
            log.warning("the state's log %s holds a record it cannot read (key %r): ignored", self.topic, raw_key[:60])

    def _note(self, message: str) -> None:
        """A problem reading the log, logged once a minute at most (a cluster that is down says so every poll)."""
        self._problem = message
        now = time.monotonic()
        if now - self._noted_at >= 60.0:
            self._noted_at = now
            log.warning(message)


def _message(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return str(e.args[0].str())
    return str(e) or type(e).__name__
