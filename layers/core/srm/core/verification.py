"""Proving a copy: a source partition and its remote partition compared record by record, streaming (pure).

A record's *content* is what replication preserves: key, value, headers and timestamp (:class:`Content`). What the
target must hold for a source record is that record through the mirror's own steps (:class:`Expectations`): the
provenance header where the remote topic keeps the source topic's name, then the flow's transform chain. srm's own
provenance header is left out of the comparison on both sides.

Two ways to pair the records (:class:`RunsAlignment`, :class:`ContentAlignment`):

* **offset runs** (a copy srm made): a run says which downstream offset holds the latest copy of each upstream
  record, so each target record is compared with exactly the source record it copies. A downstream offset no run
  covers holds a superseded copy (an at-least-once re-delivery, written before the latest copy): a *duplicate* when
  its content equals a source record whose latest copy comes later, else *extra*. A copy of a record found after its
  latest copy is *extra* (no replicator writes that). A source record a run maps whose copy the target lacks is
  *missing*; a run's target record whose content differs is *different* (out of order when it is a nearby record's).
* **content** (a copy another replicator made, e.g. MirrorMaker 2, started where its offset syncs say): each target
  record is looked for among the next source records; those passed over are missing, a target record found nowhere
  is extra, and one equal to a source record already matched is a duplicate (its re-delivery).

What is legitimately absent is counted apart, never as a difference: offsets with no record (transaction markers,
compaction, aborted records), recorded data-loss and skipped ranges, records a transform dropped, records the
identity loop guard skipped, records the dead-letter policy diverted, and copies whose source record is gone since
(compacted or purged on the source after it was replicated).

Memory is bounded whatever the partition size: the comparison holds a window of source records ahead
(:data:`LOOKAHEAD`), digests of recent ones (:data:`RECENT`) and of unexplained target records (:data:`PENDING`).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from srm.core.continuity import LostRange
from srm.core.events import PartitionBatch
from srm.core.loops import PROVENANCE_HEADER, stamp_provenance
from srm.core.offsets import Run
from srm.core.transforms import Record, TransformChain

__all__ = [
    "LOOKAHEAD",
    "PENDING",
    "RECENT",
    "VERIFIED_FACT",
    "Absences",
    "Alignment",
    "Content",
    "ContentAlignment",
    "Expectations",
    "Finding",
    "Method",
    "PartitionReport",
    "RunsAlignment",
    "SourceItem",
    "content_of",
    "downstream_range",
    "sample_blocks",
    "verified_key",
    "verified_positions",
]

Header = tuple[str, bytes | None]
Method = Literal["offset runs", "offset syncs", "content"]

LOOKAHEAD = 256  # source records held ahead, to name a record found out of order
RECENT = 20_000  # digests of source records already passed, to recognise duplicates and records moved back
PENDING = 20_000  # digests of target records not explained yet (superseded copies wait for their source record)
FIRST_OFFSETS = 20  # offsets named per kind of finding


@dataclass(frozen=True)
class Content:
    """What replication preserves of a record; srm's provenance header left out."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int

    @cached_property
    def digest(self) -> bytes:
        """16 bytes standing for the content (computed once: each record's is asked for several times)."""
        h = hashlib.blake2b(digest_size=16)
        for part in (self.key, self.value):
            h.update(b"\x00" if part is None else b"\x01%d:" % len(part) + part)
        for name, value in self.headers:
            encoded = name.encode()
            h.update(b"h%d:" % len(encoded) + encoded)
            h.update(b"\x00" if value is None else b"\x01%d:" % len(value) + value)
        h.update(b"t%d" % self.timestamp)
        return h.digest()

    def differences(self, other: Content) -> list[str]:
        """Which fields differ from ``other``'s."""
        return [
            name
            for name, a, b in (
                ("key", self.key, other.key),
                ("value", self.value, other.value),
                ("headers", self.headers, other.headers),
                ("timestamp", self.timestamp, other.timestamp),
            )
            if a != b
        ]


def content_of(record: Record) -> Content:
    headers = tuple(h for h in record.headers or () if h[0] != PROVENANCE_HEADER)
    return Content(record.key, record.value, headers, record.timestamp)


Absence = Literal["transform", "loop guard", "dead letter"]


@dataclass(frozen=True)
class SourceItem:
    """A source record and what the target should hold for it: its content, or None with why it is absent."""

    offset: int
    expected: Content | None
    absent: Absence | None = None


@dataclass
class Expectations:
    """A source record as the mirror writes it: provenance stamped where the remote topic keeps the name (a record
    that visited the target is skipped), then the transform chain; ``diverted`` says which records the dead-letter
    policy sets aside (too large for the remote topic)."""

    source: str
    target: str
    keeps_name: bool
    chain: TransformChain
    diverted: Callable[[Record], bool] | None = None
    chunk: int = 500  # records through the chain at a time

    def items(self, records: Iterable[Record]) -> Iterator[SourceItem]:
        buffer: list[Record] = []
        for record in records:
            buffer.append(record)
            if len(buffer) >= self.chunk:
                yield from self._expect(buffer)
                buffer = []
        if buffer:
            yield from self._expect(buffer)

    def _expect(self, records: list[Record]) -> Iterator[SourceItem]:
        passed: list[Record] = []
        absent: dict[int, Absence] = {}
        for r in records:
            if self.keeps_name:
                stamped = stamp_provenance(r.headers, self.source, self.target)
                if stamped is None:
                    absent[r.offset] = "loop guard"
                    continue
                r = r._replace(headers=stamped)
            passed.append(r)
        kept = {r.offset: r for r in passed}
        if self.chain and passed:
            batch = PartitionBatch(
                passed[0].topic,
                passed[0].partition,
                [r.offset for r in passed],
                [r.key for r in passed],
                [r.value for r in passed],
                [r.timestamp for r in passed],
                [r.headers for r in passed],
            )
            out, _ = self.chain.apply(batch)
            kept = {
                o: Record(batch.topic, batch.partition, o, t, k, v, h)
                for o, k, v, t, h in zip(out.offsets, out.keys, out.values, out.timestamps, out.headers, strict=True)
            }
        for r in records:
            if r.offset in absent:
                yield SourceItem(r.offset, None, absent[r.offset])
            elif r.offset not in kept:
                yield SourceItem(r.offset, None, "transform")
            elif self.diverted is not None and self.diverted(kept[r.offset]):
                yield SourceItem(r.offset, None, "dead letter")
            else:
                yield SourceItem(r.offset, content_of(kept[r.offset]))


@dataclass
class Finding:
    """How many of one kind, and the first offsets (with a note each)."""

    count: int = 0
    first: list[tuple[int, str]] = field(default_factory=list)

    def add(self, offset: int, note: str = "", limit: int = FIRST_OFFSETS) -> None:
        self.count += 1
        if len(self.first) < limit:
            self.first.append((offset, note))

    def to_dict(self) -> dict[str, Any]:
        return {"count": self.count, "first": [{"offset": o, **({"note": n} if n else {})} for o, n in self.first]}


@dataclass
class Absences:
    """What is legitimately absent from the target, by kind (counted in source offsets)."""

    offset_gaps: int = 0  # no record there (transaction markers, compaction, aborted records)
    lost: int = 0  # recorded data loss: purged on the source before it was replicated
    skipped: int = 0  # recorded as skipped on purpose (replication-offsets moved past it)
    transform: int = 0  # dropped by the transform chain
    loop_guard: int = 0  # skipped by the identity loop guard (it had visited the target)
    dead_letter: int = 0  # diverted by the dead-letter policy
    gone_from_source: int = 0  # copies whose source record was compacted or purged since it was replicated
    compacted_on_target: int = 0  # copies the target's log cleaner removed since

    def to_dict(self) -> dict[str, int]:
        return {
            "offsetGaps": self.offset_gaps,
            "dataLoss": self.lost,
            "skipped": self.skipped,
            "droppedByTransform": self.transform,
            "loopGuard": self.loop_guard,
            "deadLettered": self.dead_letter,
            "goneFromSource": self.gone_from_source,
            "compactedOnTarget": self.compacted_on_target,
        }


@dataclass
class PartitionReport:
    """One partition's verification: ranges, counts, first offsets of each difference, and the content digest."""

    topic: str
    partition: int
    remote_topic: str
    method: Method
    source_range: tuple[int, int]  # [start, end) upstream
    target_range: tuple[int, int]  # [start, end) downstream
    compared: int = 0
    missing: Finding = field(default_factory=Finding)  # by source offset
    extra: Finding = field(default_factory=Finding)  # by target offset
    different: Finding = field(default_factory=Finding)  # by target offset
    duplicates: Finding = field(default_factory=Finding)  # by target offset
    absences: Absences = field(default_factory=Absences)
    duplicates_differ: bool = False  # an exactly-once copy: a duplicate is a difference there
    lost_ranges: list[LostRange] = field(default_factory=list)
    resets: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    digest: str = ""
    sampled: float | None = None

    @property
    def identical(self) -> bool:
        dupes = self.duplicates.count if self.duplicates_differ else 0
        return not (self.missing.count or self.extra.count or self.different.count or dupes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "remoteTopic": self.remote_topic,
            "method": self.method,
            "sourceRange": list(self.source_range),
            "targetRange": list(self.target_range),
            "compared": self.compared,
            "missing": self.missing.to_dict(),
            "extra": self.extra.to_dict(),
            "different": self.different.to_dict(),
            "duplicates": self.duplicates.to_dict(),
            "absent": self.absences.to_dict(),
            "lostRanges": [
                {"start": r[0], "end": r[1], "reason": r[2] if len(r) == 3 else ""}  # type: ignore[misc]
                for r in self.lost_ranges
            ],
            "resets": self.resets,
            "notes": self.notes,
            "digest": self.digest,
            "sample": self.sampled,
            "identical": self.identical,
        }


class _Digest:
    """The content digest of the verified range: SHA-256 over each compared record's offset pair and content."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, upstream: int, content_digest: bytes) -> None:
        self._h.update(b"%d:" % upstream + content_digest)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


class _Source:
    """The source items in offset order, with a window ahead (to name a record out of order) and the digests of
    recent ones (to recognise a duplicate or a record moved back)."""

    def __init__(self, items: Iterator[SourceItem]) -> None:
        self._items = items
        self._ahead: deque[SourceItem] = deque()
        self.recent: OrderedDict[bytes, int] = OrderedDict()
        self.done = False

    def peek(self) -> SourceItem | None:
        if not self._ahead and not self._fill(1):
            return None
        return self._ahead[0]

    def pop(self) -> SourceItem:
        item = self._ahead.popleft() if self._ahead else next(self._items)
        if item.expected is not None:
            self.recent[item.expected.digest] = item.offset
            if len(self.recent) > RECENT:
                self.recent.popitem(last=False)
        return item

    def find_ahead(self, digest: bytes) -> int | None:
        self._fill(LOOKAHEAD)
        for item in self._ahead:
            if item.expected is not None and item.expected.digest == digest:
                return item.offset
        return None

    def _fill(self, n: int) -> bool:
        while len(self._ahead) < n and not self.done:
            item = next(self._items, None)
            if item is None:
                self.done = True
                break
            self._ahead.append(item)
        return bool(self._ahead)


class Alignment:
    """Pairs the records of a source partition with those of its remote partition and fills a report."""

    def __init__(self, report: PartitionReport, lost: Sequence[LostRange]) -> None:
        self.report = report
        self.lost = sorted(lost)
        self.digest = _Digest()
        self.pending: OrderedDict[bytes, list[int]] = OrderedDict()  # target records waiting for their source record
        self._next_upstream = report.source_range[0]  # to count offset gaps
        # called with (next upstream, next downstream) every ``checkpoint_every`` records compared while identical
        self.checkpoint: Callable[[int, int], None] | None = None
        self.checkpoint_every = 50_000

    def verify(self, source_items: Iterator[SourceItem], target: Iterable[tuple[int, Content]]) -> PartitionReport:
        """Both streams walked once, in offset order; the report filled."""
        raise NotImplementedError

    # -- shared steps ------------------------------------------------------------------------------------------------
    def _seen_source(self, offset: int) -> None:
        """Counts the offsets with no record before ``offset`` (outside recorded lost ranges) as offset gaps."""
        if offset > self._next_upstream:
            gap = offset - self._next_upstream - self._recorded(self._next_upstream, offset)
            self.report.absences.offset_gaps += max(0, gap)
        self._next_upstream = max(self._next_upstream, offset + 1)

    def _recorded(self, start: int, end: int) -> int:
        return sum(max(0, min(end, r[1]) - max(start, r[0])) for r in self.lost if len(r) == 2)

    def _absent(self, item: SourceItem) -> None:
        a = self.report.absences
        if item.absent == "transform":
            a.transform += 1
        elif item.absent == "loop guard":
            a.loop_guard += 1
        elif item.absent == "dead letter":
            a.dead_letter += 1

    def _skipped(self, offset: int) -> bool:
        return any(len(r) == 3 and r[0] <= offset < r[1] for r in self.lost)

    def _matched(self, upstream: int, downstream: int, content: Content) -> None:
        self.report.compared += 1
        d = content.digest
        self.digest.add(upstream, d)
        for offset in self.pending.pop(d, ()):  # copies written before this one: re-deliveries
            self.report.duplicates.add(offset, f"an earlier copy of source offset {upstream}")
        if (
            self.checkpoint is not None
            and self.report.compared % self.checkpoint_every == 0
            and self.report.identical
            and not self.pending
        ):
            self.checkpoint(upstream + 1, downstream + 1)

    def _unexplained(self, offset: int, digest: bytes) -> None:
        self.pending.setdefault(digest, []).append(offset)
        if len(self.pending) > PENDING:  # the oldest cannot be a re-delivery still waiting: counted extra
            _, offsets = self.pending.popitem(last=False)
            for o in offsets:
                self.report.extra.add(o, "no source record has this content")

    def finish(self) -> PartitionReport:
        """What is still unexplained counted, the digest and the recorded losses set."""
        left = [o for offsets in self.pending.values() for o in offsets]
        if self.report.sampled and left:  # their records may lie outside the sampled block: not judged
            self.report.notes.append(f"{len(left)} target records between runs not judged (outside the sampled block)")
            left = []
        for o in left:
            self.report.extra.add(o, "no source record in the verified range has this content")
        self.report.extra.first.sort()
        self.pending.clear()
        self.report.digest = self.digest.hexdigest()
        self.report.absences.lost = self._recorded(*self.report.source_range)
        return self.report


class RunsAlignment(Alignment):
    """A copy srm made: paired through its offset runs (see the module's docstring)."""

    def __init__(
        self, report: PartitionReport, runs: Sequence[Run], lost: Sequence[LostRange], *, target_compacted: bool
    ) -> None:
        super().__init__(report, lost)
        self.runs = sorted(runs)
        self.target_compacted = target_compacted
        self._by_down = 0  # run index, walked by downstream offset
        self._by_up = 0  # run index, walked by upstream offset

    def upstream_of(self, downstream: int) -> int | None:
        runs = self.runs
        while self._by_down < len(runs) and runs[self._by_down].downstream_end <= downstream:
            self._by_down += 1
        if self._by_down < len(runs) and runs[self._by_down].downstream <= downstream:
            run = runs[self._by_down]
            return run.upstream + downstream - run.downstream
        return None

    def downstream_of(self, upstream: int) -> int | None:
        runs = self.runs
        while self._by_up < len(runs) and runs[self._by_up].upstream_end <= upstream:
            self._by_up += 1
        if self._by_up < len(runs) and runs[self._by_up].upstream <= upstream:
            run = runs[self._by_up]
            return run.downstream + upstream - run.upstream
        return None

    def verify(self, source_items: Iterator[SourceItem], target: Iterable[tuple[int, Content]]) -> PartitionReport:
        source = _Source(source_items)
        start, end = self.report.source_range
        for offset, content in target:
            upstream = self.upstream_of(offset)
            if upstream is None or not start <= upstream < end:
                self._uncovered(offset, content, source)
                continue
            item = self._advance(source, upstream)
            if item is None:  # compacted or purged on the source since it was replicated
                self.report.absences.gone_from_source += 1
            elif item.expected is None:  # the configuration changed since it was copied
                self.report.different.add(offset, f"a copy of source offset {upstream}, which the flow now leaves out")
            else:
                self._compare(item, offset, content, source)
        self._advance(source, end)
        return self.finish()

    def _advance(self, source: _Source, upstream: int) -> SourceItem | None:
        """Passes the source items below ``upstream`` (each accounted for) and returns the one at it, if any."""
        while (item := source.peek()) is not None and item.offset < upstream:
            self._passed(source.pop())
        item = source.peek()
        if item is not None and item.offset == upstream:
            self._seen_source(upstream)
            return source.pop()
        return None

    def _passed(self, item: SourceItem) -> None:
        """A source item no target record was compared with."""
        self._seen_source(item.offset)
        if item.expected is None:
            self._absent(item)
            return
        if self._skipped(item.offset):
            self.report.absences.skipped += 1
            return
        copies = self.pending.pop(item.expected.digest, None)
        if copies:  # its copy is there, outside the runs: the runs lost track of it, the target did not
            self.report.compared += 1
            self.digest.add(item.offset, item.expected.digest)
            for o in copies[1:]:
                self.report.duplicates.add(o, f"a copy of source offset {item.offset}")
            return
        downstream = self.downstream_of(item.offset)
        if downstream is not None and self.target_compacted:
            self.report.absences.compacted_on_target += 1
        elif downstream is not None:
            self.report.missing.add(item.offset, f"its copy at target offset {downstream} is not there")
        else:
            self.report.missing.add(item.offset, "never written to the target")

    def _compare(self, item: SourceItem, offset: int, content: Content, source: _Source) -> None:
        assert item.expected is not None
        if item.expected == content:
            self._matched(item.offset, offset, content)
            return
        d = content.digest
        moved = source.find_ahead(d)
        if moved is None:
            back = source.recent.get(d)
            moved = back if back is not None and back != item.offset else None
        diff = ", ".join(item.expected.differences(content))
        note = f"source offset {item.offset}: {diff} differ"
        if moved is not None:
            note = f"holds source offset {moved}'s record instead of {item.offset}'s (out of order)"
        self.report.different.add(offset, note)

    def _uncovered(self, offset: int, content: Content, source: _Source) -> None:
        d = content.digest
        earlier = source.recent.get(d)
        if earlier is not None:
            self.report.extra.add(offset, f"a duplicate of source offset {earlier}, written after its replicated copy")
            return
        self._unexplained(offset, d)


class ContentAlignment(Alignment):
    """A copy without offset runs: each target record found among the next source records by its content."""

    def verify(self, source_items: Iterator[SourceItem], target: Iterable[tuple[int, Content]]) -> PartitionReport:
        source = _Source(source_items)
        last_matched = self.report.source_range[0]
        for offset, content in target:
            d = content.digest
            nxt = source.peek()
            if nxt is not None and nxt.expected == content:
                last_matched = self._take(source, nxt.offset)
                self._matched(last_matched, offset, content)
                continue
            ahead = source.find_ahead(d)
            if ahead is not None:
                last_matched = self._take(source, ahead)
                self._matched(ahead, offset, content)
                continue
            earlier = source.recent.get(d)
            if earlier is not None:
                self.report.duplicates.add(offset, f"a copy of source offset {earlier} (re-delivered)")
                continue
            self.report.extra.add(offset, "not found among the next source records")
        self._rest(source, last_matched)
        return self.finish()

    def _take(self, source: _Source, upstream: int) -> int:
        """Passes the source items below ``upstream`` (missing unless legitimately absent) and takes the one at it."""
        while (item := source.peek()) is not None and item.offset < upstream:
            self._seen_source(item.offset)
            item = source.pop()
            if item.expected is None:
                self._absent(item)
            elif self._skipped(item.offset):
                self.report.absences.skipped += 1
            else:
                self.report.missing.add(item.offset, "not found on the target")
        self._seen_source(upstream)
        source.pop()
        return upstream

    def _rest(self, source: _Source, last_matched: int) -> None:
        """Source records after the last one found: the copy has not reached them (its replicated range ends)."""
        end = last_matched + 1
        while source.peek() is not None:
            item = source.pop()
            if item.expected is None:
                self._seen_source(item.offset)
                self._absent(item)
                end = item.offset + 1
        self.report.source_range = (self.report.source_range[0], max(end, self.report.source_range[0]))


VERIFIED_FACT = (
    "verified:"  # a flow status fact: ``verified:<topic>:<partition>`` = ``<next upstream>/<next downstream>``
)


def verified_key(topic: str, partition: int) -> str:
    return f"{VERIFIED_FACT}{topic}:{partition}"


def verified_positions(facts: Mapping[str, int | str]) -> dict[tuple[str, int], tuple[int, int]]:
    """Per source partition, the next upstream and downstream offsets not verified yet (what verify kept)."""
    found = {}
    for name, value in facts.items():
        if not name.startswith(VERIFIED_FACT) or not isinstance(value, str):
            continue
        topic, _, partition = name[len(VERIFIED_FACT) :].rpartition(":")
        upstream, _, downstream = value.partition("/")
        if topic and partition.isdigit() and upstream.isdigit() and downstream.isdigit():
            found[(topic, int(partition))] = (int(upstream), int(downstream))
    return found


def downstream_range(runs: Sequence[Run], start: int, end: int) -> tuple[int, int] | None:
    """The downstream offsets holding the latest copies of upstream ``[start, end)``: from just after the latest copy of
    the last record below ``start`` (so that what was written between it and the range is judged too), else the first
    copy in the range, to just after the last copy below ``end`` (None: no run there)."""
    ordered = sorted(runs)
    inside = [r for r in ordered if r.upstream_end > start and r.upstream < end]
    if not inside:
        return None
    first, last = inside[0], inside[-1]
    below = [r.downstream + min(r.length, start - r.upstream) for r in ordered if r.upstream < start]
    begin = below[-1] if below else first.downstream + max(0, start - first.upstream)
    return begin, last.downstream + min(last.length, end - last.upstream)


def sample_blocks(start: int, end: int, fraction: float, block: int = 1000) -> list[tuple[int, int]]:
    """``fraction`` of ``[start, end)`` in blocks of ``block`` offsets, spread evenly (at least one block)."""
    if end <= start:
        return []
    blocks = [(s, min(end, s + block)) for s in range(start, end, block)]
    if fraction >= 1:
        return blocks
    wanted = max(1, round(len(blocks) * fraction))
    step = len(blocks) / wanted
    return [blocks[int(i * step)] for i in range(wanted)]
