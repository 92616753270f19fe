"""The MSK event: parsing what Lambda delivers, and building the same bytes for the local event source.

Lambda's Kafka event (``eventSource`` ``aws:kafka`` for MSK, ``SelfManagedKafka`` otherwise) groups records by
``<topic>-<partition>``; keys and values are base64 and absent when null; header values are arrays of *signed*
Java bytes (older producers of the format send base64 strings; both are accepted). Headers are a list of
one-entry objects, so order and duplicate keys survive — Powertools' ``decoded_headers`` dict would lose them.

Both directions are on the per-record path of every batch, so each does its per-record work in C where it can:
parsing validates and decodes a partition's records field by field (``pybase64`` for base64, ``bytes``/``array``
for header byte arrays) and only on a failure walks the records one by one to say which record is wrong and why;
building writes each record's JSON text once, when it is added, and joins the texts into the payload.
"""

from __future__ import annotations

import binascii
import json
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice, repeat
from operator import add, floordiv, itemgetter, lt, methodcaller
from typing import Any, NamedTuple

import pybase64

from srm.errors import PermanentError

__all__ = [
    "DecodedEvent",
    "DecodedEventBuilder",
    "EventBuilder",
    "EventInfo",
    "MalformedEventError",
    "PartitionBatch",
    "RecordColumns",
    "decode_header_value",
    "local_event_source_arn",
    "parse_event",
    "record_json",
    "record_json_size",
    "run_json_size",
]

Header = tuple[str, bytes | None]
EVENT_SOURCES = ("aws:kafka", "SelfManagedKafka")


# base64 on the per-record path: pybase64 (SIMD; several times faster than binascii on kilobyte values, the same
# alphabet, padding rules and errors). Decoding is called (text, None, True): no altchars, validate — only the
# standard alphabet with proper padding is accepted.
_b64decode: Callable[[Any, None, bool], bytes] = pybase64.b64decode
_b64_text: Callable[[bytes], str] = pybase64.b64encode_as_string


@dataclass(frozen=True)
class DecodedEvent:
    """What :func:`parse_event` makes of an MSK event, handed to the handler as is by the local event source.

    Lambda invokes with the JSON event; ``srm run`` builds this from the records it consumed, cut at the same
    records as the JSON event would be (:class:`DecodedEventBuilder`), and skips writing JSON text and parsing it
    back, the bulk of a batch's cost on one machine. The handler's result is the same for both."""

    event_source_arn: str
    bootstrap_servers: str
    batches: tuple[PartitionBatch, ...]
    event_source: str = "aws:kafka"


@dataclass(frozen=True)
class EventInfo:
    """Where an event came from (``eventSource``: ``aws:kafka`` or ``SelfManagedKafka``; ``eventSourceArn``)."""

    event_source: str
    event_source_arn: str | None = None


class MalformedEventError(PermanentError, ValueError):
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
            return bytes(raw)  # unsigned, and the signed arrays of ASCII text
        except ValueError:
            try:
                return array("b", raw).tobytes()  # Java's signed bytes
            except OverflowError:  # signed and unsigned mixed; anything else still fails
                return bytes(b + 256 if -128 <= b < 0 else b for b in raw)
    if isinstance(raw, str):
        return _b64decode(raw, None, True)
    raise TypeError(f"header value of type {type(raw).__name__}")


def _b64(raw: Any) -> bytes | None:
    return None if raw is None else _b64decode(raw, None, True)


def _headers(raw: list[Any]) -> list[Header]:
    """A record's headers, order and duplicates kept; byte arrays of non-negative ints (text) take the short way."""
    decode = decode_header_value
    try:
        return [(name, bytes(v) if v.__class__ is list else decode(v)) for h in raw for name, v in h.items()]
    except ValueError:  # signed (negative) bytes
        return [(name, decode(v)) for h in raw for name, v in h.items()]


def parse_event(event: Any) -> tuple[EventInfo, list[PartitionBatch]]:
    """Validate the event and split it into per-partition batches; raises MalformedEventError."""
    if isinstance(event, DecodedEvent):  # built from consumed records by the local event source: nothing to decode
        return EventInfo(event.event_source, event.event_source_arn), list(event.batches)
    if not isinstance(event, dict):
        raise MalformedEventError(f"expected a Kafka event object, got {type(event).__name__}")
    if "eventSource" not in event:
        raise MalformedEventError("not a Kafka event: no 'eventSource'")
    source = event["eventSource"]
    if source not in EVENT_SOURCES:
        raise MalformedEventError(f"not a Kafka event: eventSource is {source!r}, expected aws:kafka")
    groups = event.get("records")
    if not isinstance(groups, dict):
        raise MalformedEventError("Kafka event without a 'records' object")
    batches = []
    for group_key, records in groups.items():
        batches.append(_parse_group(group_key, records))
    return EventInfo(source, event.get("eventSourceArn")), batches


def _parse_group(group_key: str, records: Any) -> PartitionBatch:
    if not isinstance(records, list) or not records:
        raise MalformedEventError(f"records[{group_key!r}] must be a non-empty list")
    topic_part, _, part_text = group_key.rpartition("-")
    first: dict[str, Any] = records[0] if isinstance(records[0], dict) else {}
    topic, partition = first.get("topic"), first.get("partition")
    if not isinstance(topic, str) or not isinstance(partition, int):
        raise MalformedEventError(f"records[{group_key!r}][0] has no topic/partition")
    if (topic_part, part_text) != (topic, str(partition)):
        raise MalformedEventError(f"records[{group_key!r}] holds records of {topic}-{partition}")
    try:
        batch = _decode_group(topic, partition, records)
    except Exception:  # whatever broke the fast path, the record-by-record walk names it
        batch = None
    return batch if batch is not None else _checked_group(topic, partition, records)


_OFFSET, _TIMESTAMP, _TOPIC, _PARTITION = (itemgetter(f) for f in ("offset", "timestamp", "topic", "partition"))
_KEY, _VALUE, _HEADERS = (methodcaller("get", f) for f in ("key", "value", "headers"))


def _decode_group(topic: str, partition: int, records: list[Any]) -> PartitionBatch | None:
    """The batch, decoded field by field (``map`` over the records, C-level where the field allows); None (or an
    exception) when anything is off, for :func:`_checked_group` to report."""
    offsets = list(map(_OFFSET, records))
    if (
        set(map(_TOPIC, records)) != {topic}
        or set(map(_PARTITION, records)) != {partition}
        or set(map(type, offsets)) != {int}
        or offsets[0] < 0
        or not all(map(lt, offsets, islice(offsets, 1, None)))
    ):
        return None
    timestamps = list(map(_TIMESTAMP, records))
    if set(map(type, timestamps)) != {int}:
        timestamps = [int(t) for t in timestamps]
    keys = _decode_all(list(map(_KEY, records)))
    values = _decode_all(list(map(_VALUE, records)))
    decode = decode_header_value
    try:  # byte arrays of non-negative ints (text) by ``bytes``; anything else by decode_header_value
        headers = [
            [(name, bytes(v) if v.__class__ is list else decode(v)) for h in raw for name, v in h.items()]
            if raw
            else None
            for raw in map(_HEADERS, records)
        ]
    except ValueError:  # Java's signed (negative) bytes somewhere: record by record
        headers = [_headers(raw) if raw else None for raw in map(_HEADERS, records)]
    return PartitionBatch(topic, partition, offsets, keys, values, timestamps, headers)


def _decode_all(texts: list[Any]) -> list[bytes | None]:
    """base64 texts decoded by ``map`` (no Python frame per record) unless some are null."""
    try:
        return list(map(_b64decode, texts, repeat(None), repeat(True)))
    except TypeError:  # a null key or value
        b64decode = _b64decode
        return [None if t is None else b64decode(t, None, True) for t in texts]


def _checked_group(topic: str, partition: int, records: list[Any]) -> PartitionBatch:
    """Record by record, raising MalformedEventError naming the first bad one."""
    offsets, keys, values, timestamps, headers = [], [], [], [], []
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


_SIGNED = tuple(str(b - 256 if b > 127 else b) for b in range(256))  # a byte as the Java byte JSON holds
_JSON_STRINGS: dict[str, str] = {}  # topic and header names (a few distinct ones) as JSON strings


def _json_string(text: str) -> str:
    found = _JSON_STRINGS.get(text)
    if found is None:
        found = json.dumps(text)
        if len(_JSON_STRINGS) < 10_000:
            _JSON_STRINGS[text] = found
    return found


def _headers_json(headers: Iterable[Header]) -> str:
    signed = _SIGNED.__getitem__
    return ",".join(
        [
            f"{{{_json_string(name)}:null}}" if v is None else f"{{{_json_string(name)}:[{','.join(map(signed, v))}]}}"
            for name, v in headers
        ]
    )


def record_json(
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    timestamp_type: str,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
) -> str:
    """One record of the event as JSON text: exactly ``json.dumps`` of the record object with ``(",", ":")``
    separators (key and value base64 and absent when null, header values signed byte arrays)."""
    text = (
        f'{{"topic":{_json_string(topic)},"partition":{partition},"offset":{offset},"timestamp":{timestamp},'
        f'"timestampType":{_json_string(timestamp_type)},'
    )
    if key is not None:
        text += f'"key":"{_b64_text(key)}",'
    if value is not None:
        text += f'"value":"{_b64_text(value)}",'
    return f'{text}"headers":[{_headers_json(headers) if headers else ""}]}}'


_SIGNED_SIZE = bytes(len(text) for text in _SIGNED)  # characters of each byte as a signed decimal
_NAME_SIZES: dict[str, int] = {}  # header names (a few distinct ones): the length of their JSON strings


def record_json_size(
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    timestamp_type: str,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[Header] | None,
) -> int:
    """``len(record_json(...))``, counted without writing the text (on the per-record path: kept flat)."""
    size = 76 + len(_json_string(topic)) + len(_json_string(timestamp_type))  # the fixed fields' names and marks
    size += len(str(partition)) + len(str(offset)) + len(str(timestamp))
    if key is not None:
        size += 9 + 4 * ((len(key) + 2) // 3)  # "key":"<base64>",
    if value is not None:
        size += 11 + 4 * ((len(value) + 2) // 3)
    if headers:
        size += len(headers) - 1  # the commas between them
        for name, v in headers:
            n = _NAME_SIZES.get(name) or _json_name_size(name)
            # {"name":null}, {"name":[]}, or {"name":[b,b,…]}: each byte's signed decimal and a comma between
            size += n + 7 if v is None else n + 4 + len(v) + sum(v.translate(_SIGNED_SIZE)) if v else n + 5
    return size


class RecordColumns(NamedTuple):
    """Consecutive records of one partition, a list per field (as the local event source reads a fetch)."""

    offsets: list[int]
    timestamps: list[int]
    timestamp_types: list[str]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[list[Header] | None]

    def slice(self, start: int, stop: int) -> RecordColumns:
        return RecordColumns(
            self.offsets[start:stop],
            self.timestamps[start:stop],
            self.timestamp_types[start:stop],
            self.keys[start:stop],
            self.values[start:stop],
            self.headers[start:stop],
        )


def run_json_size(topic: str, partition: int, run: RecordColumns) -> int:
    """The sum of :func:`record_json_size` over consecutive records of one partition, given as columns, counted a
    column at a time with C loops (``map``, ``count``, ``translate``): no Python runs per record."""
    size = len(run.offsets) * (76 + len(_json_string(topic)) + len(str(partition)))
    for name in set(run.timestamp_types):
        size += run.timestamp_types.count(name) * len(_json_string(name))
    size += _digits(run.offsets) + _digits(run.timestamps)
    size += _base64_fields_size(run.keys, 9) + _base64_fields_size(run.values, 11)  # "key":"…",  "value":"…",
    if any(run.headers):
        size += _headers_size(run.headers)
    return size


def _digits(numbers: list[int]) -> int:
    """The characters of the numbers in decimal: their count times one width when the smallest and the largest
    have the same (a run's offsets and timestamps, nearly always)."""
    low, high = len(str(min(numbers))), len(str(max(numbers)))
    return len(numbers) * low if low == high else sum(map(len, map(str, numbers)))


def _base64_fields_size(column: list[bytes | None], marks: int) -> int:
    present = len(column) - column.count(None)
    lengths = map(len, filter(None, column))  # an empty one is present but encodes to nothing
    return marks * present + 4 * sum(map(floordiv, map(add, lengths, repeat(2)), repeat(3)))


_SIGNED_SIZE_CLASSES = tuple(bytes([n]) for n in (2, 3, 4))


def _headers_size(headers: list[list[Header] | None]) -> int:
    """The headers' share of :func:`record_json_size`, summed over records: per record the commas between its
    headers; per header its name's JSON string and ``{:null}`` (7 more), ``{:[]}`` (5) or ``{:[b,…]}`` (4, the
    bytes' signed decimals and a comma each but the last)."""
    lists = list(filter(None, headers))
    flat = list(chain.from_iterable(lists))
    names = list(map(itemgetter(0), flat))
    header_values = list(map(itemgetter(1), flat))
    name_sizes = {name: _json_name_size(name) for name in set(names)}
    size = len(flat) - len(lists) + sum(map(name_sizes.__getitem__, names)) + 4 * len(flat)
    present = list(filter(None, header_values))
    joined = b"".join(present)
    if missing := len(header_values) - len(present):  # null ({:null}: 3 more) or empty ({:[]}: 1 more)
        nulls = header_values.count(None)
        size += 3 * nulls + missing - nulls
    classes = joined.translate(_SIGNED_SIZE)  # each byte as the characters of its decimal: 1 to 4
    size += 2 * len(joined) + sum(n * classes.count(c) for n, c in enumerate(_SIGNED_SIZE_CLASSES, 1))
    return size


def _json_name_size(name: str) -> int:
    n = _NAME_SIZES.get(name)
    if n is None:
        n = len(_json_string(name))
        if len(_NAME_SIZES) < 10_000:
            _NAME_SIZES[name] = n
    return n


class EventBuilder:
    """Accumulates records into one MSK event, keeping under Lambda's invoke payload limit.

    ``size`` is an upper bound of the payload: the envelope plus what each record was charged. :meth:`cost` charges
    a record exactly (its JSON text, a separator and, for a new partition, the partition's group); the older
    :meth:`estimate` bounds it without building the text."""

    _ENVELOPE = 200  # bytes of JSON around the records

    def __init__(self, source_arn: str, bootstrap_servers: str, max_bytes: int) -> None:
        self.source_arn = source_arn
        self.bootstrap_servers = bootstrap_servers
        self.max_bytes = max_bytes
        self.groups: dict[str, list[str]] = {}  # "<topic>-<partition>" → the records' JSON texts
        self._last: dict[str, tuple[str, int, int]] = {}  # "<topic>-<partition>" → (topic, partition, last offset)
        self.count = 0
        self.size = self._ENVELOPE + len(source_arn) + len(bootstrap_servers)
        self.newest_timestamp = -1

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

    record = staticmethod(record_json)

    def cost(self, topic: str, partition: int, text: str) -> int:
        """The bytes a record's JSON text adds to the payload."""
        group = f"{topic}-{partition}"
        return len(text) + 1 + (0 if group in self.groups else len(_json_string(group)) + 4)

    def fits(self, estimate: int) -> bool:
        return self.size + estimate <= self.max_bytes

    def append(self, topic: str, partition: int, offset: int, text: str, cost: int) -> None:
        """Add a record's JSON text (see :meth:`record`), charged ``cost`` bytes."""
        group = f"{topic}-{partition}"
        texts = self.groups.get(group)
        if texts is None:
            texts = self.groups[group] = []
        texts.append(text)
        self._last[group] = (topic, partition, offset)
        self.count += 1
        self.size += cost

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
        text = record_json(topic, partition, offset, timestamp, timestamp_type, key, value, headers)
        self.append(topic, partition, offset, text, estimate)

    def offer(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
    ) -> int:
        """Add the record if it fits: 0; else (nothing added) the bytes of payload it needs."""
        text = record_json(topic, partition, offset, timestamp, timestamp_type, key, value, headers)
        cost = self.cost(topic, partition, text)
        if not self.fits(cost):
            return cost
        self.append(topic, partition, offset, text, cost)
        self.newest_timestamp = max(self.newest_timestamp, timestamp)
        return 0

    def offer_run(self, topic: str, partition: int, run: RecordColumns) -> int:
        """Add consecutive records of one partition, in order, up to the first that does not fit: how many."""
        return _offer_each(self, topic, partition, run, 0)

    def payload(self) -> bytes:
        """What the handler is invoked with (after ``json.loads``, as the Lambda runtime does)."""
        return self.to_bytes()

    def to_bytes(self) -> bytes:
        """The payload: the same bytes as ``json.dumps`` of the event object with ``(",", ":")`` separators."""
        records = ",".join(f"{_json_string(group)}:[{','.join(texts)}]" for group, texts in self.groups.items())
        return (
            f'{{"eventSource":"aws:kafka","eventSourceArn":{_json_string(self.source_arn)},'
            f'"bootstrapServers":{_json_string(self.bootstrap_servers)},"records":{{{records}}}}}'
        ).encode()

    def last_offsets(self) -> Iterator[tuple[str, int, int]]:
        """``(topic, partition, last offset)`` of every partition in the event."""
        yield from self._last.values()


class DecodedEventBuilder:
    """:class:`EventBuilder`'s twin that builds a :class:`DecodedEvent`: the same records per event (each charged
    the exact size of its JSON text, so an event holds what the 6 MB JSON event would), no text written."""

    def __init__(self, source_arn: str, bootstrap_servers: str, max_bytes: int) -> None:
        self.source_arn = source_arn
        self.bootstrap_servers = bootstrap_servers
        self.max_bytes = max_bytes
        self._groups: dict[tuple[str, int], _Columns] = {}
        self.count = 0
        self.size = EventBuilder._ENVELOPE + len(source_arn) + len(bootstrap_servers)
        self.newest_timestamp = -1

    def offer(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: str,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[Header] | None,
    ) -> int:
        """Add the record if it fits: 0; else (nothing added) the bytes of JSON payload it would need."""
        columns = self._groups.get((topic, partition))
        cost = record_json_size(topic, partition, offset, timestamp, timestamp_type, key, value, headers) + 1
        if columns is None:
            cost += len(_json_string(f"{topic}-{partition}")) + 4
        if self.size + cost > self.max_bytes:
            return cost
        if columns is None:
            columns = self._groups[(topic, partition)] = _Columns([], [], [], [], [])
        columns.offsets.append(offset)
        columns.keys.append(key)
        columns.values.append(value)
        columns.timestamps.append(timestamp)
        columns.headers.append(list(headers) if headers else None)
        self.count += 1
        self.size += cost
        if timestamp > self.newest_timestamp:
            self.newest_timestamp = timestamp
        return 0

    def offer_run(self, topic: str, partition: int, run: RecordColumns) -> int:
        """Add consecutive records of one partition, in order, up to the first that does not fit: how many. The
        columns are taken over.

        Charged a column at a time (:func:`run_json_size`): the whole run when it fits (every batch but the one the
        payload limit cuts); else the share that fits by the run's average record, shrunk until it does, and the
        records after it one by one (:meth:`offer`) up to the first that does not fit."""
        columns = self._groups.get((topic, partition))
        marks = 0 if columns is not None else len(_json_string(f"{topic}-{partition}")) + 4  # a new group's
        room = self.max_bytes - self.size - marks
        count = len(run.offsets)
        take, cost = count, run_json_size(topic, partition, run) + count
        while take and cost > room:
            take = min(take - 1, take * room // cost) if room > 0 else 0
            cost = run_json_size(topic, partition, run.slice(0, take)) + take if take else 0
        if take:
            if columns is None:
                columns = self._groups[(topic, partition)] = _Columns([], [], [], [], [])
            self._add_columns(columns, run.slice(0, take) if take < count else run)
            self.size += marks + cost
        return _offer_each(self, topic, partition, run, take)

    def _add_columns(self, columns: _Columns, run: RecordColumns) -> None:
        headers = run.headers
        if [] in headers:  # no headers is None, as offer keeps it
            headers = [h or None for h in headers]
        columns.offsets += run.offsets
        columns.keys += run.keys
        columns.values += run.values
        columns.timestamps += run.timestamps
        columns.headers += headers
        self.count += len(run.offsets)
        self.newest_timestamp = max(self.newest_timestamp, *run.timestamps)

    def payload(self) -> DecodedEvent:
        batches = tuple(
            PartitionBatch(topic, partition, c.offsets, c.keys, c.values, c.timestamps, c.headers)
            for (topic, partition), c in self._groups.items()
        )
        return DecodedEvent(self.source_arn, self.bootstrap_servers, batches)

    def last_offsets(self) -> Iterator[tuple[str, int, int]]:
        """``(topic, partition, last offset)`` of every partition in the event."""
        for (topic, partition), c in self._groups.items():
            yield topic, partition, c.offsets[-1]


def _offer_each(
    builder: EventBuilder | DecodedEventBuilder, topic: str, partition: int, run: RecordColumns, start: int
) -> int:
    """Offer the run's records from ``start`` one by one, up to the first that does not fit: how many of the run
    the builder holds then."""
    for added, record in enumerate(zip(*run.slice(start, len(run.offsets)), strict=True), start):
        if builder.offer(topic, partition, *record):
            return added
    return len(run.offsets)


@dataclass
class _Columns:
    offsets: list[int]
    keys: list[bytes | None]
    values: list[bytes | None]
    timestamps: list[int]
    headers: list[list[Header] | None]
