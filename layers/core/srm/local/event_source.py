"""An emulated MSK event source mapping: what Lambda's poller does, on one machine.

Per replicated topic: a consumer in the mapping's own group polls the source; records are batched (batch size,
batching window, the 6 MB invoke payload) as Lambda batches them; the very handler Lambda runs is invoked; the
source offsets are committed only after it returns. The handler gets the batch decoded (:class:`DecodedEvent`, the
default: no JSON text is written and parsed back) or, with ``event_format="json"``, the byte-identical MSK event
after ``json.loads``, as Lambda's runtime hands it over; both give the same result. A failed batch is retried, the
same records, with backoff, forever (as Lambda's default); partition order is kept because one batch is in flight
at a time.

Its consumer is one member of the mapping's group: the nodes of a cluster share the topic's partitions. A member
fenced by another with its ``group.instance.id`` (a second node given this node's id) drops the batch it was
collecting, commits nothing more, and asks the group who holds its id now. Another consumer: it stops and says who
(:attr:`EmulatedMapping.fenced`). Its own: librdkafka rejoins after its session times out (a coordinator that does
not answer for a while, as while a broker restarts), and a commit of the old session is fenced by the new one; a
new consumer then takes over, as after any broken consumer.

A mapping also keeps what a watchdog needs to tell it is stuck (:meth:`EmulatedMapping.stall`): since when some
partition of its topic has been assigned to no member of its group, and when it last made progress — a batch
committed, or its partitions confirmed read to the end — and, when it makes none, where its thread waits (the
innermost frames: a handler call that outlasts the bound, or a consumer call); it rebuilds its consumer when asked.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import groupby
from operator import itemgetter
from typing import Any, Literal, NamedTuple, cast

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from srm.core.events import DecodedEventBuilder, EventBuilder, RecordColumns, run_json_size
from srm.local.context import LocalContext
from srm.local.positions import WATERMARK_TIMEOUT_S, caught_up
from srm.local.threads import waiting_in
from srm.state import StateFencedError

__all__ = ["EmulatedMapping", "GroupMember", "MappingSettings", "MappingStats", "offer_fetched"]

log = logging.getLogger(__name__)

Handler = Callable[[Any, Any], Any]  # (the MSK JSON event or a DecodedEvent, the context)
# group → its members: instance (or member) id → ("client@host", assigned partitions)
GroupMembers = Callable[[str], dict[str, "GroupMember"]]
# a record's timestamp type by confluent-kafka's number (0: none given, which Lambda reports as CREATE_TIME)
_TIMESTAMP_TYPES = ("CREATE_TIME", "CREATE_TIME", "LOG_APPEND_TIME")
# Message's own methods, called by map over a fetch: C calls, no Python per record
# (typed as a record has them: a partition and an offset, bytes or null, headers of bytes values)
_ERROR, _TIMESTAMP, _KEY, _VALUE = Message.error, Message.timestamp, Message.key, Message.value
_PARTITION = cast("Callable[[Message], int]", Message.partition)
_OFFSET = cast("Callable[[Message], int]", Message.offset)
_HEADERS = cast("Callable[[Message], list[tuple[str, bytes | None]] | None]", Message.headers)
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_IDLE_POLL_S = 0.5  # the broker holds an empty fetch (fetch.wait.max.ms): an idle mapping costs next to nothing
_ASSIGNMENT_CHECK_S = 1.0  # how often the assignment is compared with the topic's partitions
_METADATA_CHECK_S = 5.0  # how often the topic's partition count is asked for
_FENCE_SETTLE_S = 5.0  # beyond a session: how long a fenced member asks the group who holds its id


class GroupMember(NamedTuple):
    client: str  # client id @ host
    partitions: tuple[int, ...]  # assigned
    member_id: str


@dataclass(frozen=True)
class MappingSettings:
    batch_size: int = 10_000
    batching_window_ms: int = 0  # 0: a batch is what was fetched by the time the previous one was replicated
    max_payload_bytes: int = 6 * 1024 * 1024
    event_format: Literal["decoded", "json"] = "decoded"


@dataclass
class MappingStats:
    records: int = 0
    batches: int = 0
    failures: int = 0
    last_error: str | None = None
    last_latency_ms: int = 0


class OversizedRecordError(RuntimeError):
    pass


class FencedError(RuntimeError):
    """Another consumer with this member's ``group.instance.id`` joined the group: this one may not go on."""


def _fenced(err: KafkaError) -> bool:
    return err.code() == KafkaError.FENCED_INSTANCE_ID or (
        err.code() == KafkaError._FATAL and "fenced" in err.str().lower()
    )


class _RebuildRequested(Exception):
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
        group_members: GroupMembers | None = None,
        on_assigned: Callable[[list[int]], None] | None = None,
        on_revoked: Callable[[list[int]], None] | None = None,
    ) -> None:
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._group_members = group_members
        self._on_assigned = on_assigned  # told the partitions newly assigned, before their first batch
        self._on_revoked = on_revoked  # told the partitions given up cleanly, once what they replicated is committed
        self.fenced: str | None = None  # who took this member's place, once fenced
        self.last_rebalance_ms = 0  # when its assignment last changed (wall clock)
        self.topic = topic
        self.settings = settings
        self._consumer_config = consumer_config
        self._member_id = ""  # its last consumer's member id in the group, as that consumer closed
        self._handler = handler
        self._function_name = function_name
        self._source_arn = source_arn
        self._bootstrap = bootstrap_servers
        self._stop_event = threading.Event()
        self._revoked = False
        self._caught_up = False  # every assigned partition read to its end, at the last empty poll
        self._positions: dict[int, int] = {}  # per partition: where reading goes on (see caught_up)
        self.stats = MappingStats()
        # What the watchdog reads (monotonic seconds); kept across consumer rebuilds, so a rebuild that changes
        # nothing does not hide a stall.
        started = time.monotonic()
        self._progress_at = started  # last batch committed, or last time the partitions were confirmed read
        self._unassigned_since: float | None = started  # since when some partition is not assigned (None: none)
        self._assigned: tuple[int, ...] = ()
        self._elsewhere: tuple[int, ...] = ()  # partitions other members hold, as last asked
        self._next_group_check = 0.0
        self._partitions = 0  # the topic's partition count, as last read (0: unknown)
        self._next_assignment_check = 0.0
        self._next_metadata_check = 0.0
        self._invoking = False
        self._invoked_at = 0.0  # when the handler call under way began (monotonic)
        self._rebuild = threading.Event()
        self._commit_error: Exception | None = None  # an asynchronous commit's failure, raised by the poller
        self._delivered: dict[int, int] = {}  # per partition: one past the last record replicated since assigned

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
    def caught_up(self) -> bool:
        """Whether, at its last empty poll, every assigned partition was read to its end."""
        return self._caught_up

    @property
    def assigned(self) -> tuple[int, ...]:
        """The partitions assigned to its consumer, as last observed (about every second)."""
        return self._assigned

    @property
    def group_id(self) -> str:
        return self._consumer_config.get("group.id", "")

    @property
    def instance_id(self) -> str | None:
        return self._consumer_config.get("group.instance.id")

    @property
    def failing(self) -> bool:
        """Whether a batch is being retried: the handler, not the consumer, is what holds the mapping up."""
        return self._invoking and self.stats.last_error is not None

    def stall(self, bound_s: float, now: float | None = None) -> tuple[float, str] | None:
        """``(since, reason)`` when some partition of the topic has been assigned to no member of the group, or
        this member has made no progress, for longer than ``bound_s`` (``since`` is monotonic); None while it is
        healthy."""
        now = time.monotonic() if now is None else now
        unassigned = self._unassigned_since
        if unassigned is not None and now - unassigned > bound_s:
            held = set(self._assigned) | set(self._elsewhere)
            missing = sorted(set(range(self._partitions)) - held)
            if not held:
                what = f"no partition of {self.topic} assigned"
            else:
                numbers = f"partition{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}"
                what = f"{numbers} of {self._partitions} of {self.topic} not assigned"
            return unassigned, f"{what} to its consumers (group {self.group_id})"
        held = set(self._assigned) | set(self._elsewhere)
        complete = bool(held) and len(held) >= self._partitions
        # no progress is a stall of its own only while every partition is held: else the one held by none explains it
        if unassigned is None and complete and now - self._progress_at > bound_s:
            reason = self.stats.last_error or "records wait beyond the committed offsets and none is replicated"
            if self._invoking and (self.stats.last_error is None or now - self._invoked_at > bound_s):
                took = now - self._invoked_at
                reason = f"a handler call under way for {took:.0f}s waits in {waiting_in(self._thread)}"
            elif not self._invoking:  # the consumer's side: a poll, or a call that does not return (a commit)
                reason += f"; its poller is in {waiting_in(self._thread)}"
            return self._progress_at, f"no batch of {self.topic} replicated: {reason}"
        return None

    def rebuild(self) -> bool:
        """Ask the poller to close its consumer and start a new one (it does so between batches); False while a
        batch is being retried, which a new consumer would not help."""
        if self.failing:
            return False
        self._rebuild.set()
        return True

    # -- the poller ----------------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self.stopping:
            try:
                self._poll_loop()
            except _RebuildRequested:
                log.info("event source for %s: consumer rebuilt", self.topic)
            except FencedError:
                holder = self._taken_over_by()
                if holder is None:
                    log.warning(
                        "event source for %s: member %s was fenced by its own rejoin (after a session timeout) or by "
                        "a consumer since gone; a new consumer takes its place",
                        self.topic,
                        self.instance_id,
                    )
                    continue
                self.fenced = holder
                log.error(
                    "event source for %s: member %s fenced, it stops: %s took its place in group %s",
                    self.topic,
                    self.instance_id,
                    self.fenced,
                    self.group_id,
                )
                self._stop_event.set()  # a fenced member never rejoins: it would fence the other in turn
            except Exception as e:  # a broken consumer is rebuilt; nothing was committed for the failed batch
                self.stats.last_error = f"{type(e).__name__}: {e}"
                log.error("event source for %s failed, restarting: %s", self.topic, self.stats.last_error)
                self._stop_event.wait(2.0)

    def _poll_loop(self) -> None:
        self._rebuild.clear()
        self._commit_error = None
        self._delivered.clear()
        consumer = Consumer({**self._consumer_config, "on_commit": self._on_commit})
        buffer: list[Message] = []
        self._caught_up = False
        self._positions.clear()
        self._next_assignment_check = 0.0

        def on_revoke(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if not partitions:
                return  # a cooperative rebalance that takes nothing from this member
            # What was replicated is committed before the partitions go (behind the asynchronous commits under way):
            # the next owner starts from there. A failure: the records are read again.
            gone = {tp.partition for tp in partitions}
            delivered = self._delivered
            revoked = [TopicPartition(self.topic, p, delivered[p]) for p in sorted(gone & delivered.keys())]
            if revoked:
                with contextlib.suppress(KafkaException):
                    consumer.commit(offsets=revoked, asynchronous=False)
            if self._on_revoked is not None:
                try:
                    self._on_revoked(sorted(gone))
                except Exception as e:  # their next holder takes them over all the same
                    log.warning("event source for %s: releasing revoked partitions failed: %s", self.topic, e)
            self._delivered = {p: o for p, o in delivered.items() if p not in gone}
            self._dropped_batch()

        def on_lost(_consumer: Consumer, _partitions: list[TopicPartition]) -> None:
            # lost (a session timed out, a commit fenced): another member may hold them already; nothing is committed
            # for them. What this member replicated stays known: should they come back, it is not read again.
            self._dropped_batch()

        def on_assign(_consumer: Consumer, partitions: list[TopicPartition]) -> None:
            if partitions:
                self._rebalanced()
                if self._on_assigned is not None:
                    try:
                        self._on_assigned(sorted(tp.partition for tp in partitions))
                    except Exception as e:  # only a head start: the first batch does the same and retries
                        log.warning("event source for %s: readying assigned partitions failed: %s", self.topic, e)

        consumer.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
        try:
            while not self.stopping:
                builder = self._collect(consumer, buffer)
                if builder is not None and builder.count:
                    self._deliver(consumer, builder)
        finally:
            with contextlib.suppress(Exception):
                self._member_id = consumer.memberid() or ""
            consumer.close()

    def _deliver(self, consumer: Consumer, builder: EventBuilder | DecodedEventBuilder) -> None:
        """Replicate one batch (retried until it succeeds or the mapping stops), then commit its source offsets.

        The commit is asynchronous: the next batch is collected while the coordinator writes it, as a Kafka Connect
        worker commits. It is sent only after the batch succeeded, and commits of one consumer reach the coordinator
        in order, so what is committed never runs ahead of what was replicated. Its outcome arrives in
        :meth:`_on_commit` during a later poll; a revoke or a close waits for the commits under way."""
        if not self._invoke_until_done(builder):
            return
        offsets = [TopicPartition(t, p, o + 1) for t, p, o in builder.last_offsets()]
        self._positions.update((tp.partition, tp.offset) for tp in offsets)
        self._delivered.update((tp.partition, tp.offset) for tp in offsets)
        try:
            consumer.commit(offsets=offsets, asynchronous=True)
        except KafkaException as e:  # the batch may be delivered again: duplicates, never loss
            self._commit_failed(e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None, str(e))
        self._raise_commit_failure()

    def _on_commit(self, err: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """librdkafka's report of an asynchronous commit (called inside a poll of the mapping's thread)."""
        failed = next((tp.error for tp in partitions if tp.error is not None), None) if err is None else err
        if failed is None:
            self._progress_at = time.monotonic()
            return
        self._commit_failed(failed, failed.str())

    def _commit_failed(self, err: KafkaError | None, text: str) -> None:
        if err is not None and _fenced(err):
            self._commit_error = FencedError(err.str())
            return
        if err is not None and err.code() == KafkaError._NO_OFFSET:
            return  # nothing new to commit
        log.warning("commit for %s failed, the batch may be delivered again: %s", self.topic, text)
        if err is not None and err.fatal():
            self._commit_error = KafkaException(err)  # this consumer can do nothing more: a new one takes over

    def _raise_commit_failure(self) -> None:
        error, self._commit_error = self._commit_error, None
        if error is not None:
            raise error

    def _collect(self, consumer: Consumer, buffer: list[Message]) -> EventBuilder | DecodedEventBuilder | None:
        """Gather one batch as Lambda does: invoke when the batch is full, the payload would exceed the limit, or
        the batching window (counted from the first record) has passed."""
        s = self.settings
        build = DecodedEventBuilder if s.event_format == "decoded" else EventBuilder
        builder = build(self._source_arn, self._bootstrap, s.max_payload_bytes)
        first_at: float | None = None
        window = s.batching_window_ms / 1000.0
        while builder.count < s.batch_size and not self.stopping:
            if self._rebuild.is_set():
                raise _RebuildRequested()  # nothing of this batch was handed over: the new consumer reads it again
            self._observe_assignment(consumer)
            if not buffer:
                if first_at is None:
                    fetched = self._wait_for_first(consumer)
                else:
                    remaining = window - (time.monotonic() - first_at)
                    # Wait out the window for the rest of the batch (no wait once it has passed).
                    fetched = consumer.consume(num_messages=s.batch_size - builder.count, timeout=max(0.0, remaining))
                self._raise_commit_failure()  # reported by the poll just made
                buffer += self._records_of(fetched) if any(map(_ERROR, fetched)) else fetched
                if self._revoked:
                    self._revoked = False
                    buffer.clear()
                    self._rewind(consumer)
                    return None
                if not buffer:
                    if first_at is not None and time.monotonic() - first_at >= window:
                        break
                    continue
            taken = offer_fetched(builder, buffer, s.batch_size - builder.count)
            if taken:
                del buffer[:taken]
                if first_at is None:
                    first_at = time.monotonic()
            if buffer and builder.count < s.batch_size:  # the next record does not fit the payload
                if builder.count:
                    break
                self._stuck_on_oversized(buffer[0])
                return None
        return builder

    def _records_of(self, fetched: list[Message]) -> list[Message]:
        """The records of a fetch that reported errors too: a fencing or a fatal error raises, others are logged."""
        records = []
        for msg in fetched:
            err = msg.error()
            if err is None:
                records.append(msg)
            elif _fenced(err):  # the collected records are dropped: another member reads them now
                raise FencedError(err.str())
            elif err.fatal() or err.code() == KafkaError._FATAL:  # this consumer can do nothing more
                raise KafkaException(err)
            elif err.code() != KafkaError._PARTITION_EOF:
                log.warning("consumer of %s: %s", self.topic, err.str())
        return records

    def _wait_for_first(self, consumer: Consumer) -> list[Message]:
        """Wait up to ``_IDLE_POLL_S`` for a record; return it with those fetched with it. Kafka holds a fetch at
        the log end until records arrive or ``fetch.wait.max.ms`` passes, so the first record after a quiet spell is
        handed over as soon as it is fetched. An empty poll over partitions all read to their end counts as progress
        for the watchdog (the log ends are the ones the last fetches reported: no request)."""
        # poll, not consume: consume waits for a whole batch_size of records (or the timeout), which held every
        # batch of a steady stream back by up to _IDLE_POLL_S before its batching window even began.
        first = consumer.poll(_IDLE_POLL_S)
        if first is not None:
            self._caught_up = False
            more = self.settings.batch_size - 1
            return [first, *consumer.consume(num_messages=more, timeout=0)] if more else [first]
        assignment = consumer.assignment()  # rebalance callbacks only run inside poll, so this set holds here
        self._caught_up = bool(assignment) and caught_up(consumer, assignment, self._positions, fresh=False)
        if self._caught_up:
            self._progress_at = time.monotonic()
        return []

    def _rewind(self, consumer: Consumer) -> None:
        """After a rebalance, read every assigned partition again from one past what was replicated of it: by this
        member while it held it, or as committed by whoever held it, whichever is further. The records of the
        dropped batch are read again that way — including any the same poll already fetched for the new assignment,
        which would otherwise be skipped — and none replicated already: the partitions kept through an incremental
        revoke go on where they were, though their asynchronous commits may not have landed (or were refused by the
        rebalance)."""
        assignment = consumer.assignment()
        delivered = self._delivered
        if not assignment:
            delivered.clear()
            return  # assigned later: fetching starts from the committed offsets anyway
        # a partition with no committed offset starts where the consumer's auto.offset.reset says, as it did at first
        reset = str(self._consumer_config.get("auto.offset.reset", "earliest")).lower()
        start = OFFSET_END if reset in ("latest", "largest", "end") else OFFSET_BEGINNING
        self._delivered = {}
        for tp in consumer.committed(assignment, timeout=WATERMARK_TIMEOUT_S):
            offset = max(tp.offset, delivered.get(tp.partition, -1))
            if offset >= 0:
                self._delivered[tp.partition] = offset
            consumer.seek(TopicPartition(tp.topic, tp.partition, offset if offset >= 0 else start))

    def _observe_assignment(self, consumer: Consumer) -> None:
        """Note which partitions are assigned, and since when some are not (local calls, plus a metadata request
        every ``_METADATA_CHECK_S``)."""
        now = time.monotonic()
        if now < self._next_assignment_check:
            return
        self._next_assignment_check = now + _ASSIGNMENT_CHECK_S
        assigned = tuple(sorted(tp.partition for tp in consumer.assignment()))
        if now >= self._next_metadata_check or (assigned and assigned[-1] >= self._partitions):
            self._next_metadata_check = now + _METADATA_CHECK_S
            try:
                topic = consumer.list_topics(self.topic, timeout=WATERMARK_TIMEOUT_S).topics.get(self.topic)
                if topic is not None and topic.error is None:
                    self._partitions = len(topic.partitions)
            except KafkaException:
                pass  # the source does not answer: the partition count stays as last read
        self._assigned = assigned
        complete = bool(assigned) and len(assigned) >= self._partitions
        if not complete and self._group_members is not None and now >= self._next_group_check:
            self._next_group_check = now + _METADATA_CHECK_S
            try:
                members = self._group_members(self.group_id)
                self._elsewhere = tuple(
                    sorted({p for m, member in members.items() if m != self.instance_id for p in member.partitions})
                )
            except Exception:
                pass  # the source does not answer: the other members' partitions stay as last read
        if not complete:
            held = set(assigned) | set(self._elsewhere)
            complete = bool(held) and len(held) >= self._partitions
        if complete:
            self._unassigned_since = None
        elif self._unassigned_since is None:
            self._unassigned_since = now

    def _dropped_batch(self) -> None:
        """Partitions were taken away: the batch being collected is dropped and its records read again."""
        self._revoked = True
        self._positions.clear()
        self._caught_up = False
        self._rebalanced()

    def _rebalanced(self) -> None:
        """The assignment changed: the watchdog's clock of progress starts again (the partitions this member held a
        moment ago are another's business now, and its own need a moment to be read)."""
        self.last_rebalance_ms = int(time.time() * 1000)
        self._progress_at = time.monotonic()

    def _taken_over_by(self) -> str | None:
        """Who holds this member's ``group.instance.id`` now (client id @ host), or None when it was this mapping's
        own consumer. The group is asked until it answers: nobody, or the member id its last consumer had, holds the
        id — its own rejoin; another member holds it past a session — taken over (the member of a rejoin whose
        answer the consumer never read expires within a session: nothing heartbeats for it)."""
        if self._group_members is None or self.instance_id is None:
            return "another consumer"
        session_s = int(self._consumer_config.get("session.timeout.ms", 45_000)) / 1000
        deadline = time.monotonic() + session_s + _FENCE_SETTLE_S
        holder = None
        while not self.stopping and time.monotonic() < deadline:
            try:
                members: dict[str, GroupMember] | None = self._group_members(self.group_id)
            except Exception:  # the coordinator is not back yet
                members = None
            if members is not None:
                found = members.get(self.instance_id)
                if found is None or found.member_id == self._member_id:
                    return None
                holder = found.client
            self._stop_event.wait(1.0)
        return holder

    def _stuck_on_oversized(self, msg: Message) -> None:
        """A record too big for one invocation is never skipped: report it and hold the partition."""
        estimate = run_json_size(cast(str, msg.topic()), _PARTITION(msg), _columns([msg]))
        self.stats.failures += 1
        self.stats.last_error = (
            f"{msg.topic()}-{msg.partition()}@{msg.offset()}: record needs ~{estimate} bytes of event payload, more "
            f"than the {self.settings.max_payload_bytes}-byte Lambda invoke limit; it cannot be mirrored through "
            "Lambda and the partition waits here"
        )
        log.error(self.stats.last_error)
        self._stop_event.wait(30.0)
        raise OversizedRecordError(self.stats.last_error)

    def _invoke_until_done(self, builder: EventBuilder | DecodedEventBuilder) -> bool:
        """Invoke the handler with the same batch until it succeeds; False when stopped first."""
        delay = 0.5
        self._invoking, self._invoked_at = True, time.monotonic()
        payload = builder.payload()
        try:
            while not self.stopping:
                # the JSON event as the Lambda runtime hands it over: decoded afresh for each try
                event = json.loads(payload) if isinstance(payload, bytes) else payload
                try:
                    self._handler(event, LocalContext(self._function_name))
                except StateFencedError as e:
                    # This member no longer owns a partition of the batch (it was frozen past its session, say):
                    # the batch is dropped, and a new consumer rejoins the group, reading what it is given from the
                    # committed offsets. The partition's new holder replicates the batch's records.
                    self.stats.failures += 1
                    self.stats.last_error = f"{type(e).__name__}: {e}"
                    log.warning("%s batch dropped: %s; the event source rejoins its group", self.topic, e)
                    raise _RebuildRequested() from None
                except Exception as e:
                    self.stats.failures += 1
                    self.stats.last_error = f"{type(e).__name__}: {e}"
                    log.warning("%s batch failed, retrying in %.1fs: %s", self.topic, delay, self.stats.last_error)
                    self._stop_event.wait(delay)
                    delay = min(delay * 2, 30.0)
                    self._invoked_at = time.monotonic()
                    continue
                self.stats.batches += 1
                self.stats.records += builder.count
                self.stats.last_latency_ms = int(time.time() * 1000) - builder.newest_timestamp
                self.stats.last_error = None
                return True
            return False
        finally:
            self._invoking = False


def offer_fetched(builder: EventBuilder | DecodedEventBuilder, records: list[Message], most: int) -> int:
    """Offer the builder up to ``most`` of the fetched records, in order, a partition's run at a time (a fetch
    hands them over grouped by partition), each run as columns read by ``map``: how many it took."""
    taken = 0
    for partition, group in groupby(records[:most], _PARTITION):
        messages = list(group)
        added = builder.offer_run(cast(str, messages[0].topic()), partition, _columns(messages))  # one topic
        taken += added
        if added < len(messages):
            break
    return taken


def _columns(messages: list[Message]) -> RecordColumns:
    """Records of one partition as columns, each read by ``map`` over a ``Message`` method."""
    stamps = list(map(_TIMESTAMP, messages))
    return RecordColumns(
        list(map(_OFFSET, messages)),
        list(map(_SECOND, stamps)),
        list(map(_TIMESTAMP_TYPES.__getitem__, map(_FIRST, stamps))),
        list(map(_KEY, messages)),
        list(map(_VALUE, messages)),
        list(map(_HEADERS, messages)),
    )
