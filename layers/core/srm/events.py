"""The MSK event: parsing what Lambda delivers, and building the same bytes for the local event source.

Lambda's Kafka event (``eventSource`` ``aws:kafka`` for MSK, ``SelfManagedKafka`` otherwise) groups records by
``<topic>-<partition>``; keys and values are base64 and absent when null; header values are arrays of *signed*
Java bytes (older producers of the format send base64 strings; both are accepted). Headers are a list of
one-entry objects, so order and duplicate keys survive — Powertools' ``decoded_headers`` dict would lose them.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.utilities.data_classes import KafkaEvent

__all__ = [
    "EventBuilder",
    "MalformedEventError",
    "PartitionBatch",
    "decode_header_value",
    "local_event_source_arn",
    "parse_event",
]

Header = tuple[str, bytes | None]
EVENT_SOURCES = ("aws:kafka", "SelfManagedKafka")


class MalformedEventError(ValueError):
    """The invocation payload is not a Kafka event as Lambda sends it."""


@dataclass(frozen=True)
class PartitionBatch:
    """The records of one source partition in one event, in offset order."""

    topic: str
    partition: int
    offsets: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int]
    headers: list[list[Header] | None]

    def __len__(self) -> int:
        return len(self.offsets)


def decode_header_value(raw: Any) -> bytes | None:
    """A header value as Lambda encodes it: signed or unsigned byte array, base64 string, or null."""
    if raw is None:
        return None
    if isinstance(raw, list):
        try:
            return bytes(raw)
        except ValueError:
            return bytes(b + 256 if -128 <= b < 0 else b for b in raw)  # Java's signed bytes; others still fail
    if isinstance(raw, str):
        return base64.b64decode(raw, validate=True)
    raise TypeError(f"header value of type {type(raw).__name__}")


def _b64(raw: Any) -> bytes | None:
    return None if raw is None else base64.b64decode(raw, validate=True)


def parse_event(event: Any) -> tuple[KafkaEvent, list[PartitionBatch]]:
    """Validate the event and split it into per-partition batches; raises MalformedEventError."""
    if not isinstance(event, dict):
        raise MalformedEventError(f"expected a Kafka event object, got {type(event).__name__}")
    kafka_event = KafkaEvent(event)
    try:
        source = kafka_event.event_source
    except KeyError:
        raise MalformedEventError("not a Kafka event: no 'eventSource'") from None
    if source not in EVENT_SOURCES:
        raise MalformedEventError(f"not a Kafka event: eventSource is {source!r}, expected aws:kafka")
    groups = event.get("records")
    if not isinstance(groups, dict):
        raise MalformedEventError("Kafka event without a 'records' object")
    batches = []
    for group_key, records in groups.items():
        batches.append(_parse_group(group_key, records))
    return kafka_event, batches


def _parse_group(group_key: str, records: Any) -> PartitionBatch:
    if not isinstance(records, list) or not records:
        raise MalformedEventError(f"records[{group_key!r}] must be a non-empty list")
    topic_part, _, part_text = group_key.rpartition("-")
    offsets, keys, values, timestamps, headers = [], [], [], [], []
    first: dict[str, Any] = records[0] if isinstance(records[0], dict) else {}
    topic, partition = first.get("topic"), first.get("partition")
    if not isinstance(topic, str) or not isinstance(partition, int):
        raise MalformedEventError(f"records[{group_key!r}][0] has no topic/partition")
    if (topic_part, part_text) != (topic, str(partition)):
        raise MalformedEventError(f"records[{group_key!r}] holds records of {topic}-{partition}")
    previous = -1
    for i, rec in enumerate(records):
        where = f"{topic}-{partition} record {i}"
        try:
            if rec["topic"] != topic or rec["partition"] != partition:
                raise MalformedEventError(f"{where}: belongs to {rec['topic']}-{rec['partition']}")
            offset = rec["offset"]
            if type(offset) is not int or offset <= previous:
                raise MalformedEventError(f"{where}: offset {offset!r} is not above {previous}")
            previous = offset
            offsets.append(offset)
            timestamps.append(int(rec["timestamp"]))
            keys.append(_b64(rec.get("key")))
            values.append(_b64(rec.get("value")))
            raw_headers = rec.get("headers")
            headers.append(
                [(name, decode_header_value(v)) for h in raw_headers for name, v in h.items()] if raw_headers else None
            )
        except MalformedEventError:
            raise
        except KeyError as e:
            raise MalformedEventError(f"{where}: missing field {e.args[0]!r}") from None
        except (binascii.Error, ValueError, TypeError, AttributeError) as e:
            raise MalformedEventError(
                f"{where} (offset {rec.get('offset') if isinstance(rec, dict) else '?'}): cannot decode ({e})"
            ) from None
    return PartitionBatch(topic, partition, offsets, keys, values, timestamps, headers)


# ---------------------------------------------------------------------------------------------------------------
# Building events (the local event source)
# ---------------------------------------------------------------------------------------------------------------
def local_event_source_arn(alias: str, region: str = "us-east-1") -> str:
    """The ARN the local event source reports for a cluster (MSK's shape, the alias as cluster name)."""
    return f"arn:aws:kafka:{region}:000000000000:cluster/{alias}/local"


def _signed(data: bytes) -> list[int]:
    return [b - 256 if b > 127 else b for b in data]


def _record_json(
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    timestamp_type: str,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "timestamp": timestamp,
        "timestampType": timestamp_type,
    }
    if key is not None:
        record["key"] = base64.b64encode(key).decode("ascii")
    if value is not None:
        record["value"] = base64.b64encode(value).decode("ascii")
    record["headers"] = [{name: None if v is None else _signed(v)} for name, v in headers or ()]
    return record


class EventBuilder:
    """Accumulates records into one MSK event, keeping under Lambda's invoke payload limit."""

    _ENVELOPE = 200  # bytes of JSON around the records

    def __init__(self, source_arn: str, bootstrap_servers: str, max_bytes: int) -> None:
        self.source_arn = source_arn
        self.bootstrap_servers = bootstrap_servers
        self.max_bytes = max_bytes
        self.groups: dict[str, list[dict[str, Any]]] = {}
        self.count = 0
        self.size = self._ENVELOPE + len(source_arn) + len(bootstrap_servers)

    @staticmethod
    def estimate(key: bytes | None, value: bytes | None, headers: Iterable[Header] | None, topic: str = "") -> int:
        """An upper bound of a record's JSON size, its partition's group key included: the fixed fields with the
        widest numbers take 180 characters, the topic name appears twice, base64 is 4/3, a header name is its
        escaped JSON string and a signed byte is at most 5 characters."""
        size = 180 + 2 * len(json.dumps(topic))
        size += 4 * ((len(key) + 2) // 3) if key is not None else 0
        size += 4 * ((len(value) + 2) // 3) if value is not None else 0
        for name, v in headers or ():
            size += len(json.dumps(name)) + 8 + (5 * len(v) if v is not None else 4)
        return size

    def fits(self, estimate: int) -> bool:
        return self.size + estimate <= self.max_bytes

    def add(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
        estimate: int,
    ) -> None:
        self.groups.setdefault(f"{topic}-{partition}", []).append(
            _record_json(topic, partition, offset, timestamp, timestamp_type, key, value, headers)
        )
        self.count += 1
        self.size += estimate

    def to_bytes(self) -> bytes:
        event = {
            "eventSource": "aws:kafka",
            "eventSourceArn": self.source_arn,
            "bootstrapServers": self.bootstrap_servers,
            "records": self.groups,
        }
        return json.dumps(event, separators=(",", ":")).encode("utf-8")

    def last_offsets(self) -> Iterator[tuple[str, int, int]]:
        """``(topic, partition, last offset)`` of every partition in the event."""
        for records in self.groups.values():
            last = records[-1]
            yield last["topic"], last["partition"], last["offset"]
