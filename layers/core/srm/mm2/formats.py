"""MM2's wire formats for heartbeats, checkpoints and offset syncs, byte for byte.

MM2 writes each as a Kafka protocol ``Struct``: big-endian integers and STRING = INT16 length + UTF-8 bytes.
Heartbeat and checkpoint values start with an INT16 version header (0); offset-sync values have none.
Each value object owns its format (``key()``, ``value()``, ``decode()``), as MM2's classes do.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from srm.errors import PermanentError

__all__ = ["Checkpoint", "FormatError", "Heartbeat", "OffsetSync"]

VERSION = 0
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


class FormatError(PermanentError, ValueError):
    """Bytes that do not decode as the MM2 record they claim to be."""


def _string(s: str) -> bytes:
    data = s.encode("utf-8")
    if len(data) > 0x7FFF:
        raise FormatError(f"string of {len(data)} bytes does not fit an MM2 STRING field")
    return _INT16.pack(len(data)) + data


class _Reader:
    def __init__(self, data: bytes | None, what: str) -> None:
        if data is None:
            raise FormatError(f"{what}: missing bytes")
        self.data, self.pos, self.what = data, 0, what

    def _take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise FormatError(f"{self.what}: truncated at byte {self.pos}")
        chunk = self.data[self.pos : self.pos + n]
        self.pos += n
        return chunk

    def int16(self) -> int:
        return _INT16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _INT32.unpack(self._take(4))[0]

    def int64(self) -> int:
        return _INT64.unpack(self._take(8))[0]

    def string(self) -> str:
        length = self.int16()
        if length < 0:
            raise FormatError(f"{self.what}: null STRING where MM2 never writes one")
        try:
            return self._take(length).decode("utf-8")
        except UnicodeDecodeError as e:
            raise FormatError(f"{self.what}: STRING is not UTF-8 ({e.reason})") from None

    def version(self) -> None:
        version = self.int16()
        if version != VERSION:
            raise FormatError(f"{self.what}: unsupported version {version}")


@dataclass(frozen=True)
class Heartbeat:
    source_alias: str
    target_alias: str
    timestamp: int

    def key(self) -> bytes:
        return _string(self.source_alias) + _string(self.target_alias)

    def value(self) -> bytes:
        return _INT16.pack(VERSION) + _INT64.pack(self.timestamp)

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Heartbeat:
        k, v = _Reader(key, "heartbeat key"), _Reader(value, "heartbeat value")
        v.version()
        return cls(k.string(), k.string(), v.int64())


@dataclass(frozen=True)
class Checkpoint:
    group: str
    topic: str  # the downstream (remote) topic
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _string(self.group) + _string(self.topic) + _INT32.pack(self.partition)

    def value(self) -> bytes:
        return (
            _INT16.pack(VERSION)
            + _INT64.pack(self.upstream_offset)
            + _INT64.pack(self.downstream_offset)
            + _string(self.metadata)
        )

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> Checkpoint:
        k, v = _Reader(key, "checkpoint key"), _Reader(value, "checkpoint value")
        v.version()
        group, topic, partition = k.string(), k.string(), k.int32()
        return cls(group, topic, partition, v.int64(), v.int64(), v.string())


@dataclass(frozen=True)
class OffsetSync:
    topic: str  # the upstream topic
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _string(self.topic) + _INT32.pack(self.partition)

    def value(self) -> bytes:
        return _INT64.pack(self.upstream_offset) + _INT64.pack(self.downstream_offset)

    @classmethod
    def decode(cls, key: bytes | None, value: bytes | None) -> OffsetSync:
        k, v = _Reader(key, "offset sync key"), _Reader(value, "offset sync value")
        return cls(k.string(), k.int32(), v.int64(), v.int64())
