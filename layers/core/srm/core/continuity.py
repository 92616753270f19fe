"""What cannot be replayed, decided from offsets alone: records purged on the source before they were replicated
(data loss), and a source partition that started over (its topic deleted and recreated: a topic reset).

The mirror sees only the batch an event source delivers, so it compares the batch's first offset ``first`` with the
partition's *replicated end* ``end``: one past the last offset the mirror has dealt with (the end of its last offset
run, or further when the records after it were skipped by the identity loop guard).

* ``first == end``: the batch continues the partition. Nothing to check.
* ``first > end``: an upstream gap. Most gaps are legitimate — offsets compacted away, transaction markers,
  aborted records — and hold nothing the source still has or ever had to deliver. Records were *lost* only when the
  source's log start is past ``end``: the offsets ``end … min(first, log start) − 1`` are gone, purged (retention or
  DeleteRecords) before the mirror read them. Counted in offsets (a purged transaction marker counts too: the
  source cannot say what the offsets held).
* ``first < end``: a redelivery (the event source committed less than the mirror wrote), or the partition started
  over: its topic's id changed, or its log now ends below ``end`` (the event source's committed offset is beyond the
  log end — records there were never written in this incarnation).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ZERO_TOPIC_ID",
    "Loss",
    "LostRange",
    "Reset",
    "covering",
    "known_topic_id",
    "lost_range",
    "reset_reason",
    "skip_reason",
]

# A partition's offsets ``[start, end)`` that have no copy on the target: ``(start, end)`` purged on the source before
# they were replicated (data loss), ``(start, end, reason)`` skipped on purpose (an operator moved the position past
# them; the records are still on the source).
LostRange = tuple[int, int] | tuple[int, int, str]

# What brokers without topic ids (and admin clients of older protocols) report: Kafka's Uuid.ZERO_UUID, base64.
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"


@dataclass(frozen=True)
class Loss:
    """Offsets ``start … end − 1`` of a source partition purged before they were replicated."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start

    def describe(self) -> str:
        return (
            f"data loss: {self.topic}-{self.partition} offsets {self.start}..{self.end - 1} ({self.count} offset"
            f"{'s' if self.count != 1 else ''}) were purged on the source (retention or DeleteRecords) before they "
            "were replicated"
        )


@dataclass(frozen=True)
class Reset:
    """A source partition that started over: its topic was deleted and recreated (or its log truncated)."""

    topic: str
    partition: int
    replicated_end: int  # the old incarnation's replicated end
    reason: str

    def describe(self) -> str:
        return (
            f"topic reset: {self.topic}-{self.partition} started over ({self.reason}); the offset runs of its old "
            f"incarnation (replicated up to offset {self.replicated_end}) are archived and no longer translate, the "
            "new incarnation starts its own"
        )


def known_topic_id(topic_id: object) -> str | None:
    """A topic id as text, or None when the broker does not have ids (the zero id) or none was given."""
    text = None if topic_id is None else str(topic_id)
    return None if not text or text == ZERO_TOPIC_ID else text


def lost_range(end: int, first: int, log_start: int) -> tuple[int, int] | None:
    """The offsets ``[start, stop)`` lost before a batch starting at ``first``, the partition's replicated end being
    ``end`` and its log start ``log_start``; None when the gap (if any) lost nothing."""
    if first <= end or log_start <= end:
        return None
    return end, min(first, log_start)


def reset_reason(end: int, log_end: int | None, recorded_id: str | None, current_id: str | None) -> str | None:
    """Why a batch starting below the replicated end ``end`` belongs to a new incarnation of its partition, or None
    when it is a redelivery. ``log_end``: the partition's log end now (None: unknown); ``recorded_id``: the topic id
    the partition's offset runs were recorded under; ``current_id``: the topic's id now (None where the broker has
    no topic ids)."""
    if recorded_id is not None and current_id is not None and recorded_id != current_id:
        return f"topic id {recorded_id} is now {current_id}"
    if log_end is not None and log_end < end:
        return f"its log ends at {log_end}, below the {end} offsets already replicated"
    return None


def covering(ranges: list[tuple[int, int]] | list[LostRange], offset: int) -> tuple[int, int] | None:
    """The range ``[start, end)`` of ``ranges`` holding ``offset``, if any."""
    for r in ranges:
        if r[0] <= offset < r[1]:
            return r[0], r[1]
    return None


def skip_reason(ranges: list[LostRange], offset: int) -> str | None:
    """Why ``offset`` lies in a skipped range of ``ranges`` (None: in none, or in a purged one)."""
    for r in ranges:
        if len(r) == 3 and r[0] <= offset < r[1]:
            return r[2]
    return None
