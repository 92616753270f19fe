"""Topic and group filters, and the replicate decision: filter ∧ ¬internal ∧ ¬cycle (heartbeats always pass).

Pattern lists follow MM2: a comma-separated list (or a YAML list) of regexes, joined as alternatives and
matched against the whole name; an empty list matches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from srm.errors import PermanentError
from srm.mm2.policy import ReplicationPolicy

__all__ = [
    "DEFAULT_CONFIG_PROPERTIES_EXCLUDE",
    "DEFAULT_GROUPS",
    "DEFAULT_GROUPS_EXCLUDE",
    "DEFAULT_TOPICS",
    "DEFAULT_TOPICS_EXCLUDE",
    "AllowDeny",
    "FilterError",
    "GroupFilter",
    "PatternList",
    "ReplicateDecision",
    "TopicFilter",
    "format_list",
    "is_internal_group",
    "parse_list",
    "should_replicate_topic",
]

DEFAULT_TOPICS = ".*"
DEFAULT_TOPICS_EXCLUDE = r".*[\-\.]internal, .*\.replica, __.*"
DEFAULT_GROUPS = ".*"
DEFAULT_GROUPS_EXCLUDE = "console-consumer-.*, connect-.*, __.*"
DEFAULT_CONFIG_PROPERTIES_EXCLUDE = (
    r"follower\.replication\.throttled\.replicas, leader\.replication\.throttled\.replicas, "
    r"message\.timestamp\.difference\.max\.ms, message\.timestamp\.type, unclean\.leader\.election\.enable, "
    r"min\.insync\.replicas"
)

_COMMA = re.compile(r"\s*,\s*")


class FilterError(PermanentError, ValueError):
    """A pattern in a filter is not a valid regular expression."""

    def __init__(self, key: str, pattern: str, reason: str) -> None:
        super().__init__(f"{key}: {pattern!r} is not a valid regex ({reason})")
        self.key = key
        self.pattern = pattern
        self.reason = reason


def parse_list(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """MM2's LIST type: ``"a, b"`` → ``("a", "b")``; a blank string is the empty list."""
    if value is None:
        return ()
    if isinstance(value, str):
        stripped = value.strip()
        return tuple(_COMMA.split(stripped)) if stripped else ()
    return tuple(str(v).strip() for v in value if str(v).strip())


def format_list(values: Iterable[str]) -> str:
    """MM2's LIST type written back: ``("a", "b")`` → ``"a, b"``, what :func:`parse_list` reads."""
    return ", ".join(values)


@dataclass(frozen=True)
class PatternList:
    """Regexes matched as whole-name alternatives."""

    patterns: tuple[str, ...]
    key: str = "pattern"

    def __post_init__(self) -> None:
        for pattern in self.patterns:
            try:
                re.compile(pattern)
            except re.error as e:
                raise FilterError(self.key, pattern, str(e)) from None
        compiled = re.compile("|".join(f"(?:{p})" for p in self.patterns)) if self.patterns else None
        object.__setattr__(self, "_compiled", compiled)

    @classmethod
    def parse(cls, value: str | Iterable[str] | None, key: str) -> PatternList:
        return cls(parse_list(value), key)

    def matches(self, name: str) -> bool:
        compiled: re.Pattern[str] | None = self._compiled  # type: ignore[attr-defined]
        return compiled is not None and compiled.fullmatch(name) is not None

    def __str__(self) -> str:
        return format_list(self.patterns)


@dataclass(frozen=True)
class AllowDeny:
    """An allow list and a deny list (MM2's ``topics``/``topics.exclude``, ``groups``/``groups.exclude``)."""

    include: PatternList
    exclude: PatternList

    KEYS = ("", "")
    DEFAULTS = ("", "")

    @classmethod
    def of(cls, include: str | Iterable[str] | None = None, exclude: str | Iterable[str] | None = None):
        """From list values; None takes MM2's default for that list."""
        return cls(
            PatternList.parse(cls.DEFAULTS[0] if include is None else include, cls.KEYS[0]),
            PatternList.parse(cls.DEFAULTS[1] if exclude is None else exclude, cls.KEYS[1]),
        )

    def allows(self, name: str) -> bool:
        return self.include.matches(name) and not self.exclude.matches(name)


class TopicFilter(AllowDeny):
    KEYS = ("topics", "topics.exclude")
    DEFAULTS = (DEFAULT_TOPICS, DEFAULT_TOPICS_EXCLUDE)

    def should_replicate_topic(self, topic: str) -> bool:
        return self.allows(topic)


class GroupFilter(AllowDeny):
    KEYS = ("groups", "groups.exclude")
    DEFAULTS = (DEFAULT_GROUPS, DEFAULT_GROUPS_EXCLUDE)

    def should_replicate_group(self, group: str) -> bool:
        return self.allows(group) and not is_internal_group(group)


def is_internal_group(group: str) -> bool:
    """Our own consumer groups (the event source mappings') are bookkeeping, never checkpointed."""
    return group.startswith(("srm-", "__"))


@dataclass(frozen=True)
class ReplicateDecision:
    """MM2's ``shouldReplicateTopic`` bound once for a flow (:meth:`srm.config.settings.SrmConfig.replicate`):
    (filter ∨ heartbeats) ∧ ¬internal ∧ ¬cycle. Every caller — mirror, topic plan, loop guard, status, checkpoint
    translation — passes only the topic, so none can forget a term."""

    target: str
    policy: ReplicationPolicy
    topic_filter: TopicFilter
    heartbeats_replication_enabled: bool = True

    def __call__(self, topic: str) -> bool:
        return should_replicate_topic(
            topic,
            target_alias=self.target,
            policy=self.policy,
            topic_filter=self.topic_filter,
            heartbeats_replication_enabled=self.heartbeats_replication_enabled,
        )


def should_replicate_topic(
    topic: str,
    *,
    target_alias: str,
    policy: ReplicationPolicy,
    topic_filter: TopicFilter,
    heartbeats_replication_enabled: bool = True,
) -> bool:
    """MM2's decision: (filter or heartbeats) and not internal and not a cycle back to the target."""
    wanted = topic_filter.should_replicate_topic(topic) or (
        heartbeats_replication_enabled and policy.is_heartbeats_topic(topic)
    )
    return wanted and not policy.is_internal_topic(topic) and not policy.is_cycle(topic, target_alias)
