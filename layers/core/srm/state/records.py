"""The records of srm's state, as replication and control see them (how an adapter lays them out is its own
business: :mod:`srm.aws.state`, :mod:`srm.kafka.state`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.core.continuity import LostRange
from srm.errors import RetriableError

__all__ = [
    "EventSourceMappingRecord",
    "GroupCheckpoints",
    "LossRecord",
    "ResetRecord",
    "StateError",
    "StateFencedError",
    "TopicMappingRecord",
    "read_stalls_fact",
    "stalls_fact",
]

DEFAULT_MAX_PAYLOAD_BYTES = 6 * 1024 * 1024  # Lambda's invoke payload


def stalls_fact(stalls: Mapping[str, tuple[int, str]]) -> str:
    """What is stalled (what → since when, epoch ms, and why) as the flow status's facts keep it (``stalled`` of a
    node's watchdog, ``topics_stalled`` of the checkpoint function): a JSON object of ``{"since", "reason"}`` by
    what, or "" when nothing is."""
    if not stalls:
        return ""
    found = {what: {"since": since, "reason": reason} for what, (since, reason) in sorted(stalls.items())}
    return json.dumps(found, separators=(",", ":"))


def read_stalls_fact(value: int | str | None) -> dict[str, tuple[int, str]]:
    """The stalls of a :func:`stalls_fact`; none when it is absent or cannot be read."""
    try:
        found = json.loads(str(value or "{}"))
        return {str(what): (int(s["since"]), str(s["reason"])) for what, s in found.items()}
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


class StateError(RetriableError, RuntimeError):
    """The state could not be read or written (retriable)."""


class StateFencedError(StateError):
    """This process no longer owns what it tried to write (a partition moved, another node leads the flow): the
    write did not land. Retried, it fails again until ownership comes back."""


@dataclass(frozen=True)
class LossRecord:
    """Offsets ``start … end − 1`` of a partition purged on the source before they were replicated, or, with a
    ``reason``, skipped on purpose (an operator moved the partition's position past them)."""

    topic: str
    partition: int
    start: int
    end: int
    at_ms: int
    reason: str = ""

    @property
    def purged(self) -> bool:
        return not self.reason

    @property
    def range(self) -> LostRange:
        return (self.start, self.end, self.reason) if self.reason else (self.start, self.end)


@dataclass(frozen=True)
class ResetRecord:
    """A partition that started over: what its old incarnation had replicated, why, and its archive's label."""

    topic: str
    partition: int
    at_ms: int
    replicated_end: int
    reason: str
    label: str


@dataclass(frozen=True)
class TopicMappingRecord:
    """A replicated source topic and its remote topic, as the flow's last topic sync left them: what SRM keeps in
    ``srm-meta.internal``, so discovery and monitoring work whatever the policy. ``created``: srm created the remote
    topic (the identity loop guard's notion of "came from"); ``configs``/``acls``: what srm set on it."""

    topic: str
    remote_topic: str
    partitions: int
    created: bool = False
    synced_at_ms: int = 0
    configs: Mapping[str, str] = field(default_factory=dict)
    acls: tuple[str, ...] = ()


@dataclass(frozen=True)
class EventSourceMappingRecord:
    """The event source mapping of a source topic."""

    topic: str
    id: str
    enabled: bool
    batch_size: int
    batching_window_ms: int
    updated_at_ms: int = 0
    problem: str = ""  # what keeps it from replicating, as Lambda reported it at the last topic sync ("": none)
    max_payload_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES  # the invoke payload a batch is cut at (srm run's setting)


@dataclass(frozen=True)
class GroupCheckpoints:
    """A group's checkpoints, by upstream topic-partition: the last one emitted, and the committed offsets that got
    none (with why)."""

    emitted: dict[tuple[str, int], StoredCheckpoint]
    untranslated: dict[tuple[str, int], Untranslated]
