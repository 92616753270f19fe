"""Where replication of a flow's source partitions stands, and where an operator moves it: pure decisions.

A source partition's *position* is the committed offset of its event source mapping's consumer group on the source
(:func:`srm.core.plans.mapping_group_id`): the next record the mapping hands the mirror. Moving it is what Kafka
Connect's offsets API (KIP-875) does for a ``MirrorSourceConnector``, and what ``kafka-consumer-groups
--reset-offsets`` does for a consumer: ``earliest`` (the log start), ``latest`` (the log end), a time (the first
record at or after it) or an offset, each kept within the partition's log.

Moving a position is never silent about what it does to the target:

* **forward** skips records: ``[from, to)`` is never replicated. The skipped range is recorded in the state with
  its reason (:data:`SKIPPED_REASON`), so offset translation never maps a committed offset inside it past records
  the target lacks (:func:`srm.core.offsets.translate_checked`);
* **backward** replicates ``[to, from)`` again: those records land on the target a second time (duplicates, by
  design; a consumer on the target reads them twice) — but for those an earlier move skipped, which arrive for the
  first time (:func:`first_copies`).

A partition without a committed offset starts where the source consumer's ``auto.offset.reset`` says (MM2's
setting, ``earliest`` by default, as MirrorMaker 2's consumers): ``from`` is then the log start or the log end.

In Connect's shape (``{"partition": {"cluster", "topic", "partition"}, "offset": {"offset": N}}``) ``N`` is what
MirrorMaker 2 stores: the last replicated record's offset, so the next record replicated is ``N + 1``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from srm.core.continuity import LostRange
from srm.core.offsets import Run
from srm.flow import Flow

__all__ = [
    "SKIPPED_REASON",
    "ConnectOffsetsError",
    "Move",
    "MoveTo",
    "PartitionPosition",
    "StartFrom",
    "connect_offsets",
    "connector_flow",
    "connector_names",
    "first_copies",
    "parse_connect_offsets",
    "parse_datetime",
    "plan_moves",
]

StartFrom = Literal["earliest", "latest"]  # auto.offset.reset: where a partition without a committed offset starts
SKIPPED_REASON = "skipped by srm-control replication-offsets"  # the reason of a skipped range in the state
CONNECTOR_CLASS = "MirrorSourceConnector"


@dataclass(frozen=True)
class PartitionPosition:
    """A source partition's position, read from its mapping group, beside the partition's log."""

    topic: str
    partition: int
    committed: int | None  # the mapping group's committed offset; None: none (the partition starts per start_from)
    log_start: int
    log_end: int

    def effective(self, start_from: StartFrom) -> int:
        """The next record the mapping reads: the committed offset (within the log, as a consumer resets an offset
        out of range to ``start_from``), else where ``start_from`` says."""
        if self.committed is None or not self.log_start <= self.committed <= self.log_end:
            return self.log_start if start_from == "earliest" else self.log_end
        return self.committed


@dataclass(frozen=True)
class MoveTo:
    """Where to move positions: ``earliest``, ``latest``, ``datetime`` (``timestamp_ms``) or ``offset``."""

    kind: Literal["earliest", "latest", "datetime", "offset"]
    offset: int | None = None  # kind "offset": the next record to replicate
    timestamp_ms: int | None = None  # kind "datetime"

    def __str__(self) -> str:
        if self.kind == "offset":
            return f"offset {self.offset}"
        if self.kind == "datetime":
            assert self.timestamp_ms is not None
            when = datetime.fromtimestamp(self.timestamp_ms / 1000, UTC)
            return f"the first record at or after {when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')}"
        return self.kind


@dataclass(frozen=True)
class Move:
    """One partition's move: from where it stands to where it goes."""

    topic: str
    partition: int
    old: int | None  # the committed offset before (None: none)
    start: int  # where the mapping would have read next (the committed offset, or per auto.offset.reset)
    new: int
    note: str = ""  # e.g. an offset outside the log, kept within it
    first_copies: int = 0  # of a move backward: offsets an earlier move skipped, replicated now for the first time

    @property
    def skipped(self) -> tuple[int, int] | None:
        """The offsets ``[start, new)`` never replicated because of this move (a move forward)."""
        return (self.start, self.new) if self.new > self.start else None

    @property
    def replayed(self) -> int:
        """How many records are replicated again (a move backward): duplicates on the target."""
        return max(0, self.start - self.new - self.first_copies)

    def to_dict(self) -> dict[str, Any]:
        skipped = self.skipped
        return {
            "topic": self.topic,
            "partition": self.partition,
            "old": self.old,
            "new": self.new,
            "skipped": None if skipped is None else skipped[1] - skipped[0],
            "replayed": self.replayed,
            "firstCopies": self.first_copies,
            "note": self.note,
        }


def plan_moves(
    positions: Iterable[PartitionPosition],
    to: MoveTo,
    start_from: StartFrom,
    *,
    at_time: Mapping[tuple[str, int], int | None] | None = None,
) -> list[Move]:
    """Where each partition goes. ``at_time`` (kind ``datetime``): per partition, the offset of its first record at
    or after the time, None when there is none (the partition then goes to its log end, as Kafka's tools do)."""
    moves = []
    for p in sorted(positions, key=lambda p: (p.topic, p.partition)):
        note = ""
        if to.kind == "earliest":
            new = p.log_start
        elif to.kind == "latest":
            new = p.log_end
        elif to.kind == "datetime":
            found = (at_time or {}).get((p.topic, p.partition))
            new = p.log_end if found is None else found
            if found is None:
                note = "no record at or after that time: the log end"
        else:
            assert to.offset is not None
            new = to.offset
        if new < p.log_start:
            new, note = p.log_start, f"offset {new} is below the log start: the log start"
        elif new > p.log_end:
            new, note = p.log_end, f"offset {new} is past the log end: the log end"
        moves.append(Move(p.topic, p.partition, p.committed, p.effective(start_from), new, note))
    return moves


def first_copies(move: Move, skipped: Sequence[LostRange], runs: Sequence[Run]) -> int:
    """How many offsets a move backward replicates for the first time: those of ``[new, start)`` in a range an
    earlier move skipped (``(start, end, reason)`` of the partition's lost ranges) that no offset run holds (runs do
    not overlap: invariant A of :mod:`srm.core.offsets`)."""
    count = 0
    for r in skipped:
        if len(r) != 3:
            continue  # purged: gone from the source too, so not replicated now either
        low, high = max(move.new, r[0]), min(move.start, r[1])
        if low < high:
            count += high - low - sum(max(0, min(high, run.upstream_end) - max(low, run.upstream)) for run in runs)
    return count


def parse_datetime(text: str) -> int:
    """An ISO 8601 date-time as epoch milliseconds; without a zone, UTC. ValueError when it is not one."""
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    parsed = datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


# -- Kafka Connect's offsets API (KIP-875), as a MirrorSourceConnector answers it ----------------------------------
class ConnectOffsetsError(ValueError):
    """A Connect offsets request srm cannot apply (its message says why)."""


def connector_flow(name: str, flows: Sequence[Flow], names: Mapping[Flow, str] | None = None) -> Flow:
    """The flow a connector name means: ``<source>-><target>`` (the flow's own spelling), the name of the flow's
    MirrorSourceConnector where ``names`` gives one (a flow of connector definitions: a Connect script keeps using
    it), or ``MirrorSourceConnector`` where there is one flow, as in a Connect cluster of MirrorMaker 2's dedicated
    mode, which runs that connector once per flow. LookupError (its message lists the names) otherwise."""
    names = names or {}
    for flow in flows:
        if name == str(flow):
            return flow
    for flow in flows:
        if names.get(flow) == name:
            return flow
    if name == CONNECTOR_CLASS and len(flows) == 1:
        return flows[0]
    listed = ", ".join(connector_names(flows, names)) or "none"
    if name == CONNECTOR_CLASS:
        raise LookupError(
            f"connector {name} is ambiguous here: {len(flows)} flows; name one as <source>-><target>: {listed}"
        )
    raise LookupError(
        f"unknown connector {name!r}: connectors are named after their flow, <source>-><target>, or as their "
        f"definitions name them: {listed}"
    )


def connector_names(flows: Sequence[Flow], names: Mapping[Flow, str] | None = None) -> list[str]:
    """``GET /connectors``: each flow's MirrorSourceConnector by name, as Kafka Connect lists its connectors: the
    name its definition gives, else ``<source>-><target>``."""
    return [(names or {}).get(flow) or str(flow) for flow in flows]


def connect_offsets(source: str, positions: Iterable[PartitionPosition]) -> dict[str, Any]:
    """``GET /connectors/<name>/offsets``: each partition with a committed position, as MirrorMaker 2 stores it."""
    return {
        "offsets": [
            {
                "partition": {"cluster": source, "topic": p.topic, "partition": p.partition},
                "offset": {"offset": p.committed - 1},
            }
            for p in sorted(positions, key=lambda p: (p.topic, p.partition))
            if p.committed is not None
        ]
    }


def parse_connect_offsets(source: str, body: Any) -> dict[tuple[str, int], int | None]:
    """A ``PATCH /connectors/<name>/offsets`` body: per partition, the next offset to replicate (the given offset
    plus one, as MirrorMaker 2 resumes), or None for ``"offset": null`` (Connect's reset of that partition)."""
    if not isinstance(body, Mapping) or not isinstance(body.get("offsets"), list) or not body["offsets"]:
        raise ConnectOffsetsError('the body must be {"offsets": [{"partition": {…}, "offset": {"offset": N}}, …]}')
    wanted: dict[tuple[str, int], int | None] = {}
    for i, entry in enumerate(body["offsets"]):
        where = f"offsets[{i}]"
        partition = entry.get("partition") if isinstance(entry, Mapping) else None
        if not isinstance(partition, Mapping):
            raise ConnectOffsetsError(f'{where}: "partition" must be {{"cluster", "topic", "partition"}}')
        cluster, topic, number = partition.get("cluster"), partition.get("topic"), partition.get("partition")
        if cluster != source:
            raise ConnectOffsetsError(f'{where}: "cluster" must be {source!r}, this flow\'s source, not {cluster!r}')
        if not isinstance(topic, str) or not topic:
            raise ConnectOffsetsError(f'{where}: "topic" must be a topic name')
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ConnectOffsetsError(f'{where}: "partition" must be a partition number')
        offset = entry.get("offset")
        if offset is None:
            wanted[(topic, number)] = None
            continue
        value = offset.get("offset") if isinstance(offset, Mapping) else None
        if not isinstance(value, int) or isinstance(value, bool) or value < -1:
            raise ConnectOffsetsError(f'{where}: "offset" must be {{"offset": N}} with N >= -1, or null')
        wanted[(topic, number)] = value + 1
    return wanted
