"""Single Message Transforms on raw records: Kafka Connect's keys, class names and semantics, applied to the bytes the
mirror replicates.

Configured as Connect configures a connector's (at any level of srm's hierarchy, resolved key by key)::

    transforms = drop-tombstones, origin
    transforms.drop-tombstones.type = org.apache.kafka.connect.transforms.Filter
    transforms.drop-tombstones.predicate = is-tombstone
    transforms.origin.type = org.apache.kafka.connect.transforms.InsertHeader
    transforms.origin.header = origin
    transforms.origin.value.literal = us-west
    predicates = is-tombstone
    predicates.is-tombstone.type = org.apache.kafka.connect.transforms.predicates.RecordIsTombstone

A stage with a predicate applies to a record only where the predicate's answer differs from ``negate`` (Connect's
``TransformationStage``); a stage returning None drops the record. Built in, on bytes: ``Filter``, ``InsertHeader``
(the literal as UTF-8), ``DropHeaders``, and the predicates ``TopicNameMatches`` (a full match), ``HasHeaderKey``,
``RecordIsTombstone``; each by its Java name or its simple name, as Connect's plugin aliases allow. Refused, each with
why: the routers (the remote topic's name is the replication policy's: offset translation, checkpoints and remote
topic detection rely on it), ``HeaderFrom`` and the other field transforms (they read fields of converted records;
replication moves bytes, with no converter). Anything else is a Python class named by its dotted path, with the
built-ins' small interface: a no-argument constructor, ``configure(dict[str, str])`` (optional) and ``apply(Record)
-> Record | None`` (a transform) or ``test(Record) -> bool`` (a predicate).

A chain never changes a record's topic, partition or offset (order and partition are replication's promise), and a
record it drops is an upstream gap the caller accounts for. The chain is applied a batch at a time: with none
configured the caller does not call it at all.
"""

from __future__ import annotations

import importlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

from srm.core.events import PartitionBatch
from srm.errors import RetriableError

__all__ = [
    "BUILT_IN_PREDICATES",
    "BUILT_IN_TRANSFORMS",
    "DropHeaders",
    "Filter",
    "HasHeaderKey",
    "InsertHeader",
    "Predicate",
    "Record",
    "RecordIsTombstone",
    "TopicNameMatches",
    "TransformChain",
    "TransformConfigError",
    "TransformError",
    "Transformation",
    "build_chain",
    "is_transform_key",
]

Header = tuple[str, bytes | None]
_CONNECT = "org.apache.kafka.connect.transforms."


class Record(NamedTuple):
    """One source record as a transform sees it. Immutable: a transform returns a new one (``record._replace``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[Header] | None  # in order, duplicates kept; None when the record has none


# A record from its fields in order, without Record.__new__'s argument handling (on the per-record path).
_new_record: Callable[[tuple[Any, ...]], Record] = partial(tuple.__new__, Record)  # type: ignore[assignment]
_OFFSET, _TIMESTAMP, _KEY, _VALUE, _HEADERS = (itemgetter(i) for i in (2, 3, 4, 5, 6))
_NAME = itemgetter(0)  # a header's


def _with_headers(record: Record, headers: list[Header]) -> Record:
    topic, partition, offset, timestamp, key, value, _ = record
    return _new_record((topic, partition, offset, timestamp, key, value, headers))


class TransformConfigError(ValueError):
    """A chain that cannot be built: ``key`` is the setting at fault (``transforms.<name>.<param>`` …)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class TransformError(RetriableError):
    """A transform or predicate raised on a record: its batch fails (and is retried)."""

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic, self.partition, self.offset = topic, partition, offset


# ---------------------------------------------------------------------------------------------------------------
# The interface (Connect's Transformation and Predicate, on raw records)
# ---------------------------------------------------------------------------------------------------------------
class Transformation(ABC):
    """A transform: ``apply`` returns the record (changed or not) or None to drop it."""

    def configure(self, config: Mapping[str, str]) -> None:  # noqa: B027 (optional, as in Connect)
        """The stage's own keys (``transforms.<name>.<param>`` without the prefix); raise ValueError when wrong."""

    @abstractmethod
    def apply(self, record: Record) -> Record | None: ...

    def describe(self) -> str:
        """What the stage does, for ``srm check``."""
        return type(self).__name__


class Predicate(ABC):
    """A predicate: whether a stage applies to a record."""

    def configure(self, config: Mapping[str, str]) -> None:  # noqa: B027 (optional, as in Connect)
        """The predicate's own keys (``predicates.<name>.<param>``); raise ValueError when wrong."""

    @abstractmethod
    def test(self, record: Record) -> bool: ...

    def describe(self) -> str:
        return type(self).__name__


class _ParamError(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def _required(config: Mapping[str, str], param: str) -> str:
    value = config.get(param)
    if value is None or not value.strip():
        raise _ParamError(param, "missing: this class needs it")
    return value


# ---------------------------------------------------------------------------------------------------------------
# Built-ins
# ---------------------------------------------------------------------------------------------------------------
class Filter(Transformation):
    """Drops every record it applies to: used with a predicate (Connect's ``Filter``)."""

    def apply(self, record: Record) -> Record | None:
        return None

    def describe(self) -> str:
        return "Filter"


class InsertHeader(Transformation):
    """Appends the header ``header`` with ``value.literal``, as UTF-8 bytes (what Connect's header converter writes
    for a literal)."""

    def configure(self, config: Mapping[str, str]) -> None:
        self.header = _required(config, "header")
        if "value.literal" not in config:
            raise _ParamError("value.literal", "missing: this class needs it")
        self.literal = config["value.literal"]
        self._pair: Header = (self.header, self.literal.encode())

    def apply(self, record: Record) -> Record | None:
        headers = record[6]
        return _with_headers(record, [*headers, self._pair] if headers else [self._pair])

    def describe(self) -> str:
        return f"InsertHeader {self.header}={self.literal}"


class DropHeaders(Transformation):
    """Removes every header named in ``headers`` (a comma-separated list), the others kept in order."""

    def configure(self, config: Mapping[str, str]) -> None:
        names = [n.strip() for n in _required(config, "headers").split(",") if n.strip()]
        if not names:
            raise _ParamError("headers", "missing: list the header names to drop")
        self.names = frozenset(names)
        self._shown = ", ".join(names)

    def apply(self, record: Record) -> Record | None:
        headers = record[6]
        if not headers:
            return record
        names = self.names
        kept = [h for h in headers if h[0] not in names]
        return record if len(kept) == len(headers) else _with_headers(record, kept)

    def describe(self) -> str:
        return f"DropHeaders {self._shown}"


class TopicNameMatches(Predicate):
    """True for records of a topic the regex ``pattern`` matches whole."""

    def configure(self, config: Mapping[str, str]) -> None:
        self.pattern = _required(config, "pattern")
        try:
            self._match = re.compile(self.pattern).fullmatch
        except re.error as e:
            raise _ParamError("pattern", f"{self.pattern!r} is not a valid regex ({e})") from None

    def test(self, record: Record) -> bool:
        return self._match(record[0]) is not None

    def describe(self) -> str:
        return f"TopicNameMatches {self.pattern}"


class HasHeaderKey(Predicate):
    """True for records with at least one header named ``name``."""

    def configure(self, config: Mapping[str, str]) -> None:
        self.name = _required(config, "name")

    def test(self, record: Record) -> bool:
        headers = record[6]
        return bool(headers) and any(map(self.name.__eq__, map(_NAME, headers)))  # type: ignore[arg-type]

    def describe(self) -> str:
        return f"HasHeaderKey {self.name}"


class RecordIsTombstone(Predicate):
    """True for records with a null value."""

    def test(self, record: Record) -> bool:
        return record[5] is None

    def describe(self) -> str:
        return "RecordIsTombstone"


BUILT_IN_TRANSFORMS: Mapping[str, type[Transformation]] = {
    f"{_CONNECT}Filter": Filter,
    f"{_CONNECT}InsertHeader": InsertHeader,
    f"{_CONNECT}DropHeaders": DropHeaders,
}
BUILT_IN_PREDICATES: Mapping[str, type[Predicate]] = {
    f"{_CONNECT}predicates.TopicNameMatches": TopicNameMatches,
    f"{_CONNECT}predicates.HasHeaderKey": HasHeaderKey,
    f"{_CONNECT}predicates.RecordIsTombstone": RecordIsTombstone,
}
_ROUTING = (
    "routing renames the remote topic, which is the replication policy's job (offset translation, checkpoints and "
    "remote topic detection rely on its names): set replication.policy.class and replication.policy.separator instead"
)
_FIELDS = (
    "it works on fields of converted records, and replication moves raw bytes (no converter, no fields): use "
    "InsertHeader, or a Python class that parses the bytes"
)
# Connect's own transforms srm does not run, each with why (the $Key/$Value variants share their class's reason).
_REFUSED: Mapping[str, str] = {
    "RegexRouter": _ROUTING,
    "TimestampRouter": _ROUTING,
    **{
        name: _FIELDS
        for name in (
            "HeaderFrom",
            "Cast",
            "ExtractField",
            "Flatten",
            "HoistField",
            "InsertField",
            "MaskField",
            "ReplaceField",
            "SetSchemaMetadata",
            "TimestampConverter",
            "ValueToKey",
        )
    },
}


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _supported(kind: str) -> str:
    built_ins = BUILT_IN_TRANSFORMS if kind == "transforms" else BUILT_IN_PREDICATES
    return ", ".join(_short(name) for name in built_ins)


def _class_of(kind: str, key: str, name: str) -> type:
    """The class ``name`` stands for: a built-in by its Java or simple name, or a Python class by dotted path."""
    built_ins: Mapping[str, type] = BUILT_IN_TRANSFORMS if kind == "transforms" else BUILT_IN_PREDICATES
    by_short = {_short(full): cls for full, cls in built_ins.items()}
    found = built_ins.get(name) or by_short.get(name)
    if found is not None:
        return found
    others: Mapping[str, type] = BUILT_IN_PREDICATES if kind == "transforms" else BUILT_IN_TRANSFORMS
    if name in others or name in {_short(full) for full in others}:
        other = "a predicate" if kind == "transforms" else "a transform"
        raise TransformConfigError(key, f"{name} is {other}, not one of the {kind} ({_supported(kind)})")
    refused = _REFUSED.get(_short(name).split("$")[0]) if name.startswith(_CONNECT) or "." not in name else None
    if refused is not None:
        raise TransformConfigError(key, f"{name} is not supported: {refused}")
    if name.startswith(_CONNECT):
        raise TransformConfigError(key, f"{name} is not one srm runs on raw bytes; built in: {_supported(kind)}")
    module_name, _, attr = name.rpartition(".")
    why = "not a dotted path"
    if module_name:
        try:
            cls = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            why = f"no Python class there: {str(e).split(';')[0]}"
        else:
            method = "apply" if kind == "transforms" else "test"
            if not isinstance(cls, type) or not callable(getattr(cls, method, None)):
                raise TransformConfigError(key, f"{name} is not a class with an {method}() method")
            return cls
    raise TransformConfigError(
        key,
        f"unknown class {name} ({why}); built in: {_supported(kind)} (org.apache.kafka.connect.transforms.*), or "
        "name a Python class by its dotted path",
    )


def _instance(kind: str, name: str, params: Mapping[str, str], prefix: str, defined: Callable[[str], str]) -> Any:
    """The configured instance of a stage's (or predicate's) class: one-line errors name the key at fault."""

    def key_of(param: str) -> str:
        return defined(prefix + param)

    cls = _class_of(kind, key_of("type"), name)
    try:
        instance = cls()
        configure = getattr(instance, "configure", None)
        if configure is not None:
            configure(dict(params))
    except _ParamError as e:
        raise TransformConfigError(key_of(e.param), str(e)) from None
    except Exception as e:  # a custom class's constructor or configure: its message, on one line
        text = " ".join(str(e).split()) or type(e).__name__
        raise TransformConfigError(key_of("type"), f"{name} cannot be configured: {text}") from None
    return instance


# ---------------------------------------------------------------------------------------------------------------
# The chain
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Stage:
    name: str
    transform: Any  # a Transformation, or any class with its interface
    predicate: Any | None
    predicate_name: str | None
    negate: bool

    def describe(self) -> str:
        what = _described(self.transform)
        if self.predicate is None:
            return f"{self.name}: {what}"
        condition = f"{self.predicate_name} ({_described(self.predicate)})"
        return f"{self.name}: {what} {'unless' if self.negate else 'if'} {condition}"


def _described(instance: Any) -> str:
    describe = getattr(instance, "describe", None)
    if callable(describe):
        return str(describe())
    cls = type(instance)
    return f"{cls.__module__}.{cls.__qualname__}"


class TransformChain:
    """A flow's transforms, in order. Falsy when empty: the mirror then skips it once per batch."""

    def __init__(self, stages: tuple[_Stage, ...] = ()) -> None:
        self.stages = stages
        # Bound methods looked up once, not per record
        self._calls = tuple(
            (s.transform.apply, s.predicate.test if s.predicate is not None else None, s.negate) for s in stages
        )

    def __bool__(self) -> bool:
        return bool(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def describe(self) -> list[str]:
        """One line per stage, in order."""
        return [stage.describe() for stage in self.stages]

    def apply(self, batch: PartitionBatch) -> tuple[PartitionBatch, int]:
        """The batch with every record through the chain, in order, and how many records it dropped. Raises
        :class:`TransformError` naming the record and stage when a transform or predicate raises, or changes a
        record's topic, partition or offset."""
        topic, partition, calls = batch.topic, batch.partition, self._calls
        # The hot path of a configured chain, shaped for CPython: the records built by map/zip in C, one loop over
        # them with one call per stage, one append per kept record, and the columns taken apart in C at the end.
        records = map(
            _new_record,
            zip(
                repeat(topic),
                repeat(partition),
                batch.offsets,
                batch.timestamps,
                batch.keys,
                batch.values,
                batch.headers,
            ),
        )
        kept: list[Record] = []
        keep = kept.append
        source: Any = None
        apply: Any = None
        try:
            for source in records:
                record = source
                for apply, test, negate in calls:
                    if test is not None and (not test(record)) is not negate:  # applies on test(record) XOR negate
                        continue
                    record = apply(record)
                    if record is None:
                        break
                else:
                    if record is not source and (
                        record.__class__ is not Record
                        or record[2] != source[2]
                        or record[1] != partition
                        or record[0] != topic
                    ):
                        raise _Moved(record)
                    keep(record)
        except _Moved as e:
            raise TransformError(
                f"{topic}-{partition}@{source[2]}: the transforms returned {_shown(e.record)}: a transform may change "
                "a record's key, value, headers and timestamp, never its topic, partition or offset (routing is the "
                "replication policy's)",
                topic=topic,
                partition=partition,
                offset=source[2],
            ) from None
        except Exception as e:
            failed = next(stage for stage, call in zip(self.stages, calls, strict=True) if call[0] is apply)
            text = " ".join(str(e).split())
            raise TransformError(
                f"{topic}-{partition}@{source[2]}: transform {failed.describe()} failed: {type(e).__name__}: {text}",
                topic=topic,
                partition=partition,
                offset=source[2],
            ) from e
        out = PartitionBatch(
            topic,
            partition,
            list(map(_OFFSET, kept)),
            list(map(_KEY, kept)),
            list(map(_VALUE, kept)),
            list(map(_TIMESTAMP, kept)),
            list(map(_HEADERS, kept)),
        )
        return out, len(batch) - len(kept)


class _Moved(Exception):
    def __init__(self, record: Any) -> None:
        self.record = record


def _shown(record: Any) -> str:
    if isinstance(record, Record):
        return f"a record of {record.topic}-{record.partition}@{record.offset}"
    return f"a {type(record).__name__}, not a Record"


# ---------------------------------------------------------------------------------------------------------------
# Building a chain from Connect's keys
# ---------------------------------------------------------------------------------------------------------------
def is_transform_key(key: str) -> bool:
    """A key of Connect's transforms configuration (``transforms``, ``transforms.*``, ``predicates``, …)."""
    return key in ("transforms", "predicates") or key.startswith(("transforms.", "predicates."))


def _names(value: str) -> list[str]:
    return [n.strip() for n in value.split(",") if n.strip()]


def build_chain(settings: Mapping[str, tuple[str, str]]) -> TransformChain:
    """The chain Connect's keys describe. ``settings`` maps each transform key (``transforms``,
    ``transforms.<name>.type`` …, already resolved across the levels) to ``(value, the key that set it)``; errors
    (:class:`TransformConfigError`) name that key."""

    def value(key: str) -> str | None:
        found = settings.get(key)
        return found[0] if found is not None else None

    def defined(key: str) -> str:
        found = settings.get(key)
        return found[1] if found is not None else key

    def params(prefix: str) -> dict[str, str]:
        return {k[len(prefix) :]: v for k, (v, _) in settings.items() if k.startswith(prefix)}

    names = _names(value("transforms") or "")
    predicate_names = _names(value("predicates") or "")
    for kind, listed in (("transforms", names), ("predicates", predicate_names)):
        twice = sorted({n for n in listed if listed.count(n) > 1})
        if twice:
            raise TransformConfigError(defined(kind), f"{twice[0]!r} is listed twice")

    predicates: dict[str, Any] = {}
    for name in predicate_names:
        prefix = f"predicates.{name}."
        cls_name = value(prefix + "type")
        if not cls_name or not cls_name.strip():
            raise TransformConfigError(defined(prefix + "type"), f"missing: predicate {name!r} is listed in predicates")
        own = {k: v for k, v in params(prefix).items() if k != "type"}
        predicates[name] = _instance("predicates", cls_name.strip(), own, prefix, defined)

    stages: list[_Stage] = []
    for name in names:
        prefix = f"transforms.{name}."
        cls_name = value(prefix + "type")
        if not cls_name or not cls_name.strip():
            raise TransformConfigError(defined(prefix + "type"), f"missing: transform {name!r} is listed in transforms")
        own = {k: v for k, v in params(prefix).items() if k not in ("type", "predicate", "negate")}
        predicate_name = (value(prefix + "predicate") or "").strip() or None
        predicate = None
        if predicate_name is not None:
            if predicate_name not in predicates:
                known = ", ".join(predicates) or "none"
                raise TransformConfigError(
                    defined(prefix + "predicate"),
                    f"no predicate {predicate_name!r}: list it in predicates and set predicates.{predicate_name}.type "
                    f"(predicates listed: {known})",
                )
            predicate = predicates[predicate_name]
        negate_text = (value(prefix + "negate") or "false").strip().lower()
        if negate_text not in ("true", "false"):
            raise TransformConfigError(defined(prefix + "negate"), f"expected true or false, got {negate_text!r}")
        transform = _instance("transforms", cls_name.strip(), own, prefix, defined)
        # Connect ignores negate without a predicate; so does srm
        stages.append(_Stage(name, transform, predicate, predicate_name, negate_text == "true"))
    return TransformChain(tuple(stages))
