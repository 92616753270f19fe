"""Source offsets as Kafka Connect stores them for MM2's ``MirrorSourceConnector``, in its offsets topic.

MM2's dedicated mode keeps them in ``mm2-offsets.<source>.internal`` on the target (Connect's
``offset.storage.topic``), compacted, one record per source partition, in Connect's JSON (schemas off):

- key: ``["MirrorSourceConnector",{"cluster":"<source alias>","partition":<p>,"topic":"<topic>"}]`` — the
  connector's name, then the source partition map in the order Java's ``HashMap`` writes it;
- value: ``{"offset":<the last source offset replicated>}``; MM2 resumes at ``offset + 1``.

srm writes the same key, and a value MM2 reads alike, with the offset runs of the transaction that wrote it added
under ``"runs"`` (``[[upstream, downstream, length], …]``; Connect ignores unknown fields). So a flow moved between
MM2 and srm resumes where the other stopped, and srm can put back runs a crash kept out of the state table.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from srm.core.offsets import Run

__all__ = [
    "CONNECTOR",
    "SourceOffset",
    "SourceOffsetError",
    "offsets_topic",
    "parse_source_partition",
    "source_offset_key",
]

CONNECTOR = "MirrorSourceConnector"


class SourceOffsetError(ValueError):
    """A record of the offsets topic that is not a source offset of this shape."""


def offsets_topic(source: str) -> str:
    """The name MM2's dedicated mode gives the offsets topic of a ``source->*`` flow (on the target)."""
    return f"mm2-offsets.{source}.internal"


def source_offset_key(source: str, topic: str, partition: int) -> bytes:
    partition_map = {"cluster": source, "partition": partition, "topic": topic}
    return json.dumps([CONNECTOR, partition_map], separators=(",", ":"), ensure_ascii=False).encode()


def parse_source_partition(key: bytes, connector: str = CONNECTOR) -> tuple[str, str, int] | None:
    """``(source, topic, partition)`` of a MirrorSourceConnector key; None for any other key. ``connector`` is the
    connector's name: ``MirrorSourceConnector`` in dedicated mode, the one its definition gives in a Connect
    cluster (whose offsets topic holds every connector's offsets)."""
    try:
        name, partition_map = json.loads(key)
        if name != connector:
            return None
        return str(partition_map["cluster"]), str(partition_map["topic"]), int(partition_map["partition"])
    except (ValueError, TypeError, KeyError):
        return None


@dataclass(frozen=True)
class SourceOffset:
    """A source partition's committed progress: every offset up to ``last`` was replicated; ``runs`` are where the
    records of the transaction that wrote it landed (empty when written by MM2)."""

    source: str
    topic: str
    partition: int
    last: int
    runs: tuple[Run, ...] = ()

    @property
    def next(self) -> int:
        """The first source offset not replicated yet."""
        return self.last + 1

    def key(self) -> bytes:
        return source_offset_key(self.source, self.topic, self.partition)

    def value(self) -> bytes:
        doc: dict[str, Any] = {"offset": self.last}
        if self.runs:
            doc["runs"] = [[r.upstream, r.downstream, r.length] for r in self.runs]
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, key: bytes, value: bytes | None, connector: str = CONNECTOR) -> SourceOffset | None:
        """The offset a record holds; None for a tombstone or another connector's record. Raises SourceOffsetError
        for a MirrorSourceConnector record whose value cannot be read."""
        where = parse_source_partition(key, connector)
        if where is None or value is None:
            return None
        try:
            doc = json.loads(value)
            runs = tuple(Run(int(u), int(d), int(n)) for u, d, n in doc.get("runs", ()))
            return cls(*where, int(doc["offset"]), runs)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SourceOffsetError(f"unreadable source offset {key!r} = {value!r}: {e}") from None
