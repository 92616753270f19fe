"""Dead letters: source records the target refuses for what they are, kept with the reason instead of replicated.

With ``errors.tolerance = all`` (Kafka Connect's key) a record larger than the remote topic's ``max.message.bytes``
is written to the flow's dead-letter destination (S3 on AWS, a directory in ``srm run``) and replication goes on;
its offset becomes an upstream gap with no downstream record, as a record the identity loop guard skips. One JSON
object per record, named after its flow, topic, partition and offset, so a redelivered batch rewrites the same
objects: key, value and header values base64 (they are bytes), the rest as is.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from srm.errors import RetriableError

__all__ = ["DeadLetter", "DeadLetterError", "DeadLetters", "record_batch_size"]

Header = tuple[str, bytes | None]


class DeadLetterError(RetriableError):
    """A dead letter could not be written; the batch is not replicated and is retried."""


@dataclass(frozen=True)
class DeadLetter:
    source: str
    target: str
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header] | None
    remote_topic: str
    reason: str
    size: int  # the record as the target would count it (a one-record batch)

    @property
    def name(self) -> str:
        """``<source>-><target>/<topic>/<partition>/<offset>.json``; the offset zero-padded so names sort by it."""
        return f"{self.source}->{self.target}/{self.topic}/{self.partition}/{self.offset:020d}.json"

    def to_json(self, dead_lettered_ms: int) -> bytes:
        return json.dumps(
            {
                "source": self.source,
                "target": self.target,
                "topic": self.topic,
                "partition": self.partition,
                "offset": self.offset,
                "timestamp": self.timestamp,
                "key": _b64(self.key),
                "value": _b64(self.value),
                "headers": [[name, _b64(value)] for name, value in self.headers or ()],
                "remoteTopic": self.remote_topic,
                "reason": self.reason,
                "size": self.size,
                "deadLetteredAt": dead_lettered_ms,
            },
            separators=(",", ":"),
        ).encode()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


class DeadLetters(Protocol):
    """Where a flow's dead letters go. ``write`` returns once every letter is stored, or raises DeadLetterError."""

    location: str  # for log lines: s3://bucket/prefix, or a directory

    def write(self, letters: Sequence[DeadLetter]) -> None: ...


def _varint_size(n: int) -> int:
    """Bytes of a zigzag varint, as record fields are encoded in a v2 record batch."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


_BATCH_OVERHEAD = 61  # a v2 record batch's header


def record_batch_size(key: bytes | None, value: bytes | None, headers: Sequence[Header] | None) -> int:
    """The size of a batch holding only this record, uncompressed: what a broker compares with the topic's
    ``max.message.bytes`` (timestamp and offset deltas are 0 in a one-record batch)."""
    body = 1 + 1 + 1  # attributes, timestamp delta, offset delta
    body += _varint_size(-1 if key is None else len(key)) + (len(key) if key is not None else 0)
    body += _varint_size(-1 if value is None else len(value)) + (len(value) if value is not None else 0)
    headers = headers or ()
    body += _varint_size(len(headers))
    for name, header_value in headers:
        encoded = name.encode()
        body += _varint_size(len(encoded)) + len(encoded)
        body += _varint_size(-1 if header_value is None else len(header_value)) + len(header_value or b"")
    return _BATCH_OVERHEAD + _varint_size(body) + body
