"""``srm-control verify``: a flow's copy compared with its source, record by record (:mod:`srm.core.verification`).

Each replicated partition is read twice, streaming: the source range already replicated and the remote range it maps
to. Where srm holds offset runs for the partition, they pair the records exactly ("offset runs"); where it holds none
(a copy MirrorMaker 2 or another replicator made), MM2's offset syncs place the start of the ranges ("offset syncs")
and the records are aligned by content, or from the partitions' starts when there is no sync either ("content").

Both sides are read ``read_committed``: the mirror replicates only committed source records (an aborted record is an
offset gap, never a copy), and an exactly-once copy's aborted attempts on the target are not records a consumer
sees — read uncommitted they would show as duplicates that no consumer ever reads.

What was verified is kept in the flow's status facts (``verified:<topic>:<partition>`` = ``<next upstream>/<next
downstream>``), so the next run continues where the last one stopped; only an identical range moves it forward.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.admin import AdminClient

from srm.config.secrets import SecretResolver
from srm.config.settings import SrmConfig
from srm.control.edits import ControlError
from srm.core.continuity import LostRange
from srm.core.dead_letters import record_batch_size
from srm.core.offsets import Origin, Run
from srm.core.plans import plan_topics
from srm.core.transforms import Record
from srm.core.verification import (
    Alignment,
    Content,
    ContentAlignment,
    Expectations,
    Method,
    PartitionReport,
    RunsAlignment,
    content_of,
    downstream_range,
    sample_blocks,
    verified_key,
    verified_positions,
)
from srm.errors import SrmError
from srm.flow import Flow
from srm.kafka.admin import describe_topic_configs, list_topics
from srm.kafka.clients import admin_config, build, consumer_config
from srm.kafka.mapping_groups import offsets_at
from srm.kafka.partition_reader import bounded_reader_config, read_range, watermarks
from srm.metrics.model.schema import VerificationRun
from srm.metrics.sinks import Emitter, NullEmitter
from srm.mm2.client import read_to_end
from srm.mm2.formats import OffsetSync
from srm.state import StateError, StateStore

__all__ = [
    "FlowVerification",
    "Progress",
    "Throttle",
    "Verifier",
    "VerifyContext",
    "VerifyInputError",
    "VerifyOptions",
    "check_flow",
    "differences",
    "verify_due",
    "verify_increment",
    "verify_values",
]

log = logging.getLogger(__name__)
CHECKPOINT_EVERY = 50_000  # records between two saves of the position while a partition is verified


class VerifyInputError(ControlError, ValueError):
    """What to verify does not exist: a flow, topic or partition (exit 2)."""


@dataclass(frozen=True)
class VerifyOptions:
    topic: str | None = None  # a regex, matched in full against the source topics
    partition: int | None = None
    from_offset: int | None = None
    since_ms: int | None = None
    sample: float | None = None  # a fraction of each range, in evenly spread blocks
    max_rate: float | None = None  # records per second, read on both sides together
    resume: bool = True  # start where the last run stopped (ignored with from_offset, since_ms or sample)
    # continuous verification on Lambda: no partition is started once time.monotonic() passes it (one begun runs to
    # its end, its position kept every CHECKPOINT_EVERY records); those left are verified first by the next run
    deadline: float | None = None
    first: tuple[str, int] | None = None  # the partition to start with (the one a deadline left first)


@dataclass
class Progress:
    """Where a run stands, for a progress bar: called with it after every chunk of records."""

    total_records: int = 0  # estimated: the source ranges' sizes
    done_records: int = 0
    total_partitions: int = 0
    done_partitions: int = 0
    started: float = field(default_factory=time.monotonic)
    report: Callable[[Progress], None] | None = None

    def add(self, records: int) -> None:
        self.done_records += records
        if self.report is not None:
            self.report(self)

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done_records / elapsed if elapsed > 0 else 0.0

    @property
    def eta_s(self) -> float | None:
        rate = self.rate
        if rate <= 0 or self.total_records <= self.done_records:
            return None
        return (self.total_records - self.done_records) / rate


class Throttle:
    """At most ``rate`` source records per second on average, by sleeping; measures the rate it held."""

    def __init__(self, rate: float | None, sleep: Callable[[float], None] = time.sleep) -> None:
        self.rate = rate
        self.sleep = sleep
        self.started: float | None = None  # when the first source record was asked for
        self.count = 0

    def start(self) -> None:
        if self.started is None:
            self.started = time.monotonic()

    def take(self, n: int) -> None:
        self.start()
        assert self.started is not None
        self.count += n
        if not self.rate:
            return
        ahead = self.count / self.rate - (time.monotonic() - self.started)
        if ahead > 0:
            self.sleep(ahead)

    @property
    def achieved(self) -> float | None:
        """Source records a second since the first one was asked for."""
        if self.started is None:
            return None
        elapsed = time.monotonic() - self.started
        return self.count / elapsed if elapsed > 0 else None


@dataclass
class FlowVerification:
    flow: Flow
    reports: list[PartitionReport]
    elapsed_s: float = 0.0
    records_per_s: float | None = None  # source records read a second, from the first one
    deferred: list[tuple[str, int]] = field(default_factory=list)  # not started: the deadline had passed

    @property
    def identical(self) -> bool:
        return all(r.identical for r in self.reports)

    @property
    def compared(self) -> int:
        return sum(r.compared for r in self.reports)

    def verdict(self) -> str:
        n = len(self.reports)
        counts = {
            "missing": sum(r.missing.count for r in self.reports),
            "extra": sum(r.extra.count for r in self.reports),
            "different": sum(r.different.count for r in self.reports),
            "duplicates": sum(r.duplicates.count for r in self.reports),
        }
        what = f"{self.compared} records compared in {n} partition{'s' if n != 1 else ''}"
        found = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
        if self.identical:
            return f"{self.flow}: IDENTICAL ({what}{'; ' + found if found else ''})"
        return f"{self.flow}: DIFFERENT ({what}; {found})"

    def to_dict(self) -> dict[str, Any]:
        return {
            "flow": str(self.flow),
            "identical": self.identical,
            "compared": self.compared,
            "elapsedSeconds": round(self.elapsed_s, 3),
            "recordsPerSecond": None if self.records_per_s is None else round(self.records_per_s, 1),
            "partitions": [r.to_dict() for r in self.reports],
            "deferred": [{"topic": t, "partition": p} for t, p in self.deferred],
            "verdict": self.verdict(),
        }


def check_flow(config: SrmConfig, source: str, target: str) -> Flow:
    """The flow, when the configuration has it (ConfigError for an unknown alias, VerifyInputError otherwise)."""
    flow = config.check_flow(source, target)
    if flow not in config.flows:
        flows = ", ".join(str(f) for f in config.flows) or "none"
        raise VerifyInputError(f"unknown flow {flow} (flows: {flows})")
    return flow


@dataclass
class _Partition:
    topic: str
    partition: int
    remote: str


@dataclass
class Verifier:
    """One flow's copy verified: the partitions chosen, each read and compared, the positions kept."""

    config: SrmConfig
    flow: Flow
    source_admin: AdminClient
    target_admin: AdminClient
    reader: Callable[[str], Consumer]  # a bounded reader of a cluster
    state: StateStore | None
    timeout: float = 30.0
    throttle: Throttle = field(default_factory=lambda: Throttle(None))
    progress: Progress = field(default_factory=Progress)

    @classmethod
    def for_flow(
        cls, config: SrmConfig, source: str, target: str, resolver: SecretResolver, state: StateStore | None, **kw: Any
    ) -> Verifier:
        flow = check_flow(config, source, target)

        def admin(alias: str) -> AdminClient:
            return cast(
                AdminClient, build(AdminClient, admin_config(config, alias, flow, resolver), config, alias, "admin")
            )

        def reader(alias: str) -> Consumer:
            conf = consumer_config(config, alias, flow, group_id=f"srm-verify-{source}-{target}", resolver=resolver)
            return cast(Consumer, build(Consumer, bounded_reader_config(conf), config, alias, "consumer"))

        return cls(config, flow, admin(source), admin(target), reader, state, **kw)

    # -- what is verified ----------------------------------------------------------------------------------------
    def partitions(self, options: VerifyOptions) -> list[_Partition]:
        """The replicated partitions chosen: every data topic of the flow, or those ``options.topic`` matches (the
        heartbeats topic only when named)."""
        source, target = self.flow
        policy = self.config.policy(source, target)
        plan = plan_topics(
            list_topics(self.source_admin, self.timeout),
            source=source,
            policy=policy,
            replicate=self.config.replicate(source, target),
        )
        topics = {t: rp for t, rp in plan.replicated.items()}
        if options.topic is None:
            chosen = {t: rp for t, rp in topics.items() if not policy.is_heartbeats_topic(t)}
        else:
            try:
                pattern = re.compile(options.topic)
            except re.error as e:
                raise VerifyInputError(f"--topic {options.topic!r} is not a valid regex ({e})") from None
            chosen = {t: rp for t, rp in topics.items() if pattern.fullmatch(t)}
            if not chosen:
                names = ", ".join(sorted(topics)) or "none"
                raise VerifyInputError(f"{self.flow} replicates no topic matching {options.topic!r} (topics: {names})")
        found = [_Partition(t, p, remote) for t, (remote, n) in sorted(chosen.items()) for p in range(n)]
        if options.partition is None:
            return found
        picked = [p for p in found if p.partition == options.partition]
        if not picked:
            most = max((n for _, n in chosen.values()), default=0)
            raise VerifyInputError(
                f"{self.flow}: partition {options.partition} is out of range (the chosen topics have {most} "
                f"partition{'s' if most != 1 else ''})"
            )
        return picked

    # -- verifying -------------------------------------------------------------------------------------------------
    def run(self, options: VerifyOptions) -> FlowVerification:
        started = time.monotonic()
        chosen = _starting_at(self.partitions(options), options.first)
        facts = self._facts()
        since = self._since(chosen, options)
        plans = [self._plan(p, options, facts, since) for p in chosen]
        self.progress.total_partitions = len(plans)
        self.progress.total_records = sum(plan.estimate for plan in plans)
        reports: list[PartitionReport] = []
        deferred: list[tuple[str, int]] = []
        for plan in plans:
            if deferred or (options.deadline is not None and reports and time.monotonic() >= options.deadline):
                deferred.append((plan.p.topic, plan.p.partition))  # at least one partition a run: always progress
                continue
            reports.append(plan.verify(self))
            self.progress.done_partitions += 1
            self.progress.add(0)
        return FlowVerification(self.flow, reports, time.monotonic() - started, self.throttle.achieved, deferred)

    def _facts(self) -> Mapping[str, int | str]:
        if self.state is None:
            return {}
        try:
            return self.state.flow_status(*self.flow)
        except StateError as e:
            log.warning("%s: the verified positions cannot be read (%s): verifying from the start", self.flow, e)
            return {}

    def _since(self, chosen: Sequence[_Partition], options: VerifyOptions) -> Mapping[tuple[str, int], int | None]:
        if options.since_ms is None:
            return {}
        return offsets_at(self.source_admin, [(p.topic, p.partition) for p in chosen], options.since_ms, self.timeout)

    def _plan(
        self,
        p: _Partition,
        options: VerifyOptions,
        facts: Mapping[str, int | str],
        since: Mapping[tuple[str, int], int | None],
    ) -> _Plan:
        source, target = self.flow
        runs: list[Run] = []
        lost: list[LostRange] = []
        resets: list[str] = []
        processed = None
        origin = None
        if self.state is not None:
            origin = self.state.origin(source, target, p.topic, p.partition)
            runs = self.state.runs(source, target, p.topic, p.partition)
            lost = self.state.lost_ranges(source, target, p.topic, p.partition)
            processed = self.state.processed(source, target, p.topic, p.partition)
            resets = [
                f"topic reset ({r.reason}): the old incarnation's copies (replicated up to offset {r.replicated_end}) "
                "are not verified"
                for r in self.state.resets(source, target)
                if (r.topic, r.partition) == (p.topic, p.partition)
            ]
        reader = self._reader(self.flow.source)
        low, high = watermarks(reader, p.topic, p.partition, self.timeout)
        start = options.from_offset
        if (p.topic, p.partition) in since:
            found = since[(p.topic, p.partition)]
            start = high if found is None else found
        resumed = None
        if start is None and options.resume and not options.sample:
            resumed = verified_positions(facts).get((p.topic, p.partition))
            start = resumed[0] if resumed else None
        return _Plan(p, runs, lost, resets, processed, origin, (low, high), start, resumed, options)

    def _reader(self, alias: str) -> Consumer:
        cache: dict[str, Consumer] = self.__dict__.setdefault("_readers", {})
        if alias not in cache:
            cache[alias] = self.reader(alias)
        return cache[alias]

    def close(self) -> None:
        for consumer in self.__dict__.pop("_readers", {}).values():
            consumer.close()

    # -- what the mirror writes for a source record --------------------------------------------------------------
    def expectations(self, remote: str, topic: str) -> Expectations:
        source, target = self.flow
        settings = self.config.settings(source, target)
        diverted = None
        if settings.errors_tolerance == "all":
            limit = self._max_message_bytes(remote)
            if limit is not None:
                diverted = _larger_than(limit)
        return Expectations(source, target, remote == topic, self.config.transforms(source, target), diverted=diverted)

    def _remote_config(self, remote: str) -> Mapping[str, Any]:
        try:
            return describe_topic_configs(self.target_admin, [remote], self.timeout).get(remote, {})
        except Exception as e:  # only refines what is reported: a copy is still verified without it
            log.warning("%s: the configs of %s cannot be described (%s)", self.flow, remote, e)
            return {}

    def _max_message_bytes(self, remote: str) -> int | None:
        entry = self._remote_config(remote).get("max.message.bytes")
        return None if entry is None or entry.value is None else int(entry.value)

    def target_compacted(self, remote: str) -> bool:
        entry = self._remote_config(remote).get("cleanup.policy")
        return entry is not None and "compact" in str(entry.value or "")

    def offset_syncs(self, topic: str, partition: int) -> list[OffsetSync]:
        """MM2's offset syncs of a source partition, oldest first (as many as compaction left)."""
        source, target = self.flow
        settings, policy = self.config.settings(source, target), self.config.policy(source, target)
        # where MM2 keeps them (offset-syncs.topic.location): named after the other cluster
        if settings.offset_syncs_topic_location == "source":
            where, name = source, policy.offset_syncs_topic(target)
        else:
            where, name = target, policy.offset_syncs_topic(source)
        reader = self._reader(where)
        try:
            low, high = watermarks(reader, name, 0, self.timeout)
        except Exception:  # no such topic: no syncs
            return []
        found = []
        for msg in read_to_end(reader, {(name, 0): (low, high)}, self.timeout * 4):
            try:
                sync = OffsetSync.decode(msg.key(), msg.value())
            except ValueError:
                continue
            if (sync.topic, sync.partition) == (topic, partition):
                found.append(sync)
        reader.unassign()
        return found

    def records(self, alias: str, topic: str, partition: int, start: int, end: int) -> Iterator[Record]:
        """A range's records; the source's counted by the throttle and the progress, every 500."""
        reader = self._reader(alias)
        counted = alias == self.flow.source
        if counted:
            self.throttle.start()
        count = 0
        for record in read_range(reader, topic, partition, start, end, idle_timeout=self.timeout):
            yield record
            count += 1
            if counted and count % 500 == 0:
                self.throttle.take(500)
                self.progress.add(500)
        if counted:
            self.throttle.take(count % 500)
            self.progress.add(count % 500)

    def save_position(self, p: _Partition, upstream: int, downstream: int) -> None:
        if self.state is None:
            return
        try:
            self.state.update_flow_status(
                *self.flow, **{verified_key(p.topic, p.partition): f"{upstream}/{downstream}"}
            )
        except (StateError, SrmError) as e:
            log.warning("%s: the verified position of %s-%d not kept: %s", self.flow, p.topic, p.partition, e)


def _starting_at(partitions: list[_Partition], first: tuple[str, int] | None) -> list[_Partition]:
    """The partitions in their order, rotated to begin with ``first`` (unchanged when it is not among them)."""
    at = next((i for i, p in enumerate(partitions) if (p.topic, p.partition) == first), 0)
    return partitions[at:] + partitions[:at]


def _larger_than(limit: int) -> Callable[[Record], bool]:
    def diverted(record: Record) -> bool:
        return record_batch_size(record.key, record.value, record.headers) > limit

    return diverted


@dataclass
class _Plan:
    """One partition: what the state says of it, where the range starts, and how it is verified."""

    p: _Partition
    runs: list[Run]
    lost: list[LostRange]
    resets: list[str]
    processed: int | None
    origin: Origin | None
    log: tuple[int, int]  # the source partition's log start and end
    start: int | None  # the first upstream offset asked for (None: from the start of the copy)
    resumed: tuple[int, int] | None
    options: VerifyOptions

    @property
    def source_range(self) -> tuple[int, int]:
        if self.runs:
            first = self.runs[0].upstream
            end = max(self.runs[-1].upstream_end, self.processed or 0)
        else:
            first, end = self.log
        start = first if self.start is None else max(first, self.start)
        return start, max(start, end)

    @property
    def estimate(self) -> int:
        start, end = self.source_range
        return max(0, end - start)

    def verify(self, v: Verifier) -> PartitionReport:
        if self.runs:
            return self._by_runs(v)
        return self._by_content(v)

    # -- a copy srm made ------------------------------------------------------------------------------------------
    def _by_runs(self, v: Verifier) -> PartitionReport:
        start, end = self.source_range
        blocks = sample_blocks(start, end, self.options.sample) if self.options.sample else [(start, end)]
        compacted = v.target_compacted(self.p.remote)
        report = self._report("offset runs", (start, end), (0, 0))
        report.duplicates_differ = v.config.settings(*v.flow).exactly_once
        downstream = downstream_range(self.runs, start, end) or (0, 0)
        report.target_range = downstream
        first = self.runs[0].upstream
        if self.origin is not None and not self.origin.fresh and start == first and first > self.log[0]:
            report.notes.append(
                f"source offsets {self.log[0]}..{first - 1} may have been replicated before srm's offset runs begin "
                "(its first batch resumed there): not verified"
            )
        parts = []
        for s, e in blocks:
            d = downstream_range(self.runs, s, e)
            if d is None:
                continue
            part = self._report("offset runs", (s, e), d)
            alignment = RunsAlignment(part, self.runs, self.lost, target_compacted=compacted)
            parts.append(self._compare(v, alignment, (s, e), d))
        _combine(report, parts)
        if report.identical and not self.options.sample and downstream != (0, 0):
            v.save_position(self.p, end, downstream[1])
        return report

    # -- a copy another replicator made ------------------------------------------------------------------------------
    def _by_content(self, v: Verifier) -> PartitionReport:
        start, end = self.source_range
        try:
            target_low, target_high = watermarks(v._reader(v.flow.target), self.p.remote, self.p.partition, v.timeout)
        except KafkaException:  # no such remote partition: nothing is replicated there yet
            report = self._report("content", (start, start), (0, 0))
            report.notes.append(f"{self.p.remote}-{self.p.partition} is not on the target yet: nothing to compare")
            return report
        # The source's end read again, after the target's: every record on the target was copied from one below it,
        # so a record copied since the plan was made is compared, not counted extra.
        with contextlib.suppress(KafkaException):
            high = watermarks(v._reader(v.flow.source), self.p.topic, self.p.partition, v.timeout)[1]
            self.log = (self.log[0], max(self.log[1], high))
            start, end = self.source_range
        syncs = v.offset_syncs(self.p.topic, self.p.partition)
        down = target_low
        method: Method = "offset syncs" if syncs else "content"
        if self.resumed is not None and self.start == self.resumed[0]:
            down = max(target_low, self.resumed[1])
        elif start > self.log[0] and syncs:
            below = [s for s in syncs if s.upstream_offset <= start]
            if below:
                best = max(below, key=lambda s: s.upstream_offset)
                start, down = best.upstream_offset, max(target_low, best.downstream_offset)
        report = self._report(method, (start, end), (down, target_high))
        if self.options.sample:  # blocks need a mapping of every offset: the whole range is compared
            report.sampled = None
            report.notes.append("--sample needs srm's offset runs: the whole range was compared")
        report = self._compare(v, ContentAlignment(report, self.lost), (start, end), (down, target_high))
        if report.identical and not self.options.sample and report.compared:
            v.save_position(self.p, report.source_range[1], target_high)
        return report

    # -- shared ------------------------------------------------------------------------------------------------------
    def _report(self, method: Method, source: tuple[int, int], target: tuple[int, int]) -> PartitionReport:
        report = PartitionReport(self.p.topic, self.p.partition, self.p.remote, method, source, target)
        report.lost_ranges = [r for r in self.lost if r[1] > source[0] and r[0] < source[1]]
        report.resets = list(self.resets)
        report.sampled = self.options.sample
        return report

    def _compare(
        self, v: Verifier, alignment: Alignment, source: tuple[int, int], target: tuple[int, int]
    ) -> PartitionReport:
        expectations = v.expectations(self.p.remote, self.p.topic)
        items = expectations.items(v.records(v.flow.source, self.p.topic, self.p.partition, *source))
        copies = _contents(v.records(v.flow.target, self.p.remote, self.p.partition, *target))
        if not self.options.sample:
            alignment.checkpoint = lambda upstream, downstream: v.save_position(self.p, upstream, downstream)
            alignment.checkpoint_every = CHECKPOINT_EVERY
        return alignment.verify(items, copies)


def _contents(records: Iterable[Record]) -> Iterator[tuple[int, Content]]:
    for r in records:
        yield r.offset, content_of(r)


def _combine(report: PartitionReport, parts: Sequence[PartitionReport]) -> None:
    """Sampled blocks of one partition as one report."""
    digest = hashlib.sha256()
    for part in parts:
        report.compared += part.compared
        for mine, theirs in (
            (report.missing, part.missing),
            (report.extra, part.extra),
            (report.different, part.different),
            (report.duplicates, part.duplicates),
        ):
            mine.count += theirs.count
            mine.first.extend(theirs.first[: max(0, 20 - len(mine.first))])
        for name, value in vars(part.absences).items():
            setattr(report.absences, name, getattr(report.absences, name) + value)
        digest.update(part.digest.encode())
    report.digest = parts[0].digest if len(parts) == 1 else digest.hexdigest()


# -- continuous verification ------------------------------------------------------------------------------------------
NEXT_FACT = "verify_next"  # flow status: ``<topic>:<partition>`` a deadline left first, where the next run starts
STARTED_FACT = "verify_started_ms"  # flow status: when the last continuous run started (what "due" counts from)


@dataclass(frozen=True)
class VerifyContext:
    """What a scheduled verification of the flow needs (the verify function's, and ``srm run``'s scheduler's)."""

    config: SrmConfig
    flow: Flow
    state: StateStore
    resolver: SecretResolver
    metrics: Emitter = field(default_factory=NullEmitter)
    timeout: float = 30.0


def verify_due(ctx: VerifyContext, now_ms: int | None = None, deadline: float | None = None) -> FlowVerification | None:
    """One tick of the verify function's schedule: a run of continuous verification when one is due
    (``verify.interval.seconds`` since the last run started; 0, the default, is off), none otherwise.

    On AWS the schedule ticks more often than the interval, in ``srm run`` at the interval: both ask here. A run
    starts no partition past ``deadline`` (the invocation's remaining time); the next run begins with those left.
    Each verified partition's figures go to the raw metrics (:class:`VerificationRun`)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    settings = ctx.config.settings(*ctx.flow)
    interval_ms = int(settings.verify_interval_seconds * 1000)
    if not settings.enabled or not interval_ms:
        return None
    facts = ctx.state.flow_status(*ctx.flow)
    last = facts.get(STARTED_FACT)
    # a schedule fires a little early or late: a tick this close to due counts as due, or an interval of one
    # EventBridge minute would verify every other minute
    early_ms = min(10_000, interval_ms // 10)
    if isinstance(last, int) and now_ms + early_ms < last + interval_ms:
        return None
    source, target = ctx.flow
    ctx.state.update_flow_status(source, target, **{STARTED_FACT: now_ms})
    first = _partition_of(str(facts.get(NEXT_FACT, "")))
    result = verify_increment(
        ctx.config, ctx.flow, ctx.state, ctx.resolver, ctx.timeout, VerifyOptions(deadline=deadline, first=first)
    )
    for r in result.reports:
        ctx.metrics.emit(
            VerificationRun(
                ts=now_ms,
                source=ctx.flow.source,
                target=ctx.flow.target,
                topic=r.topic,
                partition=r.partition,
                compared=r.compared,
                differences=differences(FlowVerification(result.flow, [r])),
                verified_through=_through(r),
            )
        )
    return result


def _partition_of(fact: str) -> tuple[str, int] | None:
    topic, _, partition = fact.rpartition(":")
    return (topic, int(partition)) if topic and partition.isdigit() else None


def verify_increment(
    config: SrmConfig,
    flow: Flow,
    state: StateStore,
    resolver: SecretResolver,
    timeout: float = 30.0,
    options: VerifyOptions | None = None,
) -> FlowVerification:
    """One run of continuous verification (``verify.interval.seconds``): every partition of the flow from where the
    last identical run stopped to what is replicated now; the differences, the time and the partition a deadline
    left first noted in the flow's status."""
    verifier = Verifier.for_flow(config, *flow, resolver, state, timeout=timeout)
    try:
        result = verifier.run(options or VerifyOptions())
    finally:
        verifier.close()
    deferred = "" if not result.deferred else "{}:{}".format(*result.deferred[0])
    state.update_flow_status(
        *flow,
        verified_at_ms=int(time.time() * 1000),
        verification_differences=differences(result),
        **{NEXT_FACT: deferred},
    )
    return result


def _through(report: PartitionReport) -> int:
    """The next source offset not verified identical: the range's end, or its start when it differed."""
    return report.source_range[1] if report.identical else report.source_range[0]


def differences(result: FlowVerification) -> int:
    """Missing, extra and different records (and duplicates where they count) of a verification."""
    return sum(
        r.missing.count + r.extra.count + r.different.count + (r.duplicates.count if r.duplicates_differ else 0)
        for r in result.reports
    )


def verify_values(result: FlowVerification) -> list[tuple[str, float, str | None]]:
    """The metrics of a run, per topic: the lowest next offset not verified identical, the records compared and the
    differences found (:data:`srm.metrics.model.names.EMF_METRICS`); the flow's records and differences summed (what
    the dashboard and ``VerificationDifferencesAlarm`` read)."""
    values: list[tuple[str, float, str | None]] = [
        ("VerifiedRecords", result.compared, None),
        ("VerificationDifferences", differences(result), None),
    ]
    for topic in sorted({r.topic for r in result.reports}):
        reports = [r for r in result.reports if r.topic == topic]
        through = [_through(r) for r in reports]
        values += [
            ("VerifiedThroughOffset", min(through), topic),
            ("VerifiedRecords", sum(r.compared for r in reports), topic),
            ("VerificationDifferences", differences(FlowVerification(result.flow, reports)), topic),
        ]
    return values
