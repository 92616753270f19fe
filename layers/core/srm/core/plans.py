"""Plans, pure: which source topics a flow replicates and under which names, which topic configs follow them, and
how a flow's event source mappings must change.

Topic plan — the replicate decision, filter ∧ ¬internal ∧ ¬cycle (heartbeats always pass), over the source's topics,
minus what the identity loop guard refuses (:mod:`srm.core.loops`).

Topic configs — SET every config set explicitly on the source topic (dynamic topic config, not a default, not
sensitive, not read-only) and not matched by ``config.properties.exclude``; DELETE a config srm set earlier that the
source no longer sets.

Event source mappings — an MSK event source mapping reads exactly one topic, so the control plane owns their
lifecycle. Lifecycle of the mapping of source topic ``T`` (:func:`decide_mappings`, in order):
1. ``T`` is replicated and has no mapping → **create** it (enabled, with the flow's batch settings).
2. ``T`` is replicated and its mapping is disabled or differs in batch settings → **update** it (enable + settings).
3. ``T`` still exists on the source but is no longer replicated (filter change) → **disable** its mapping; the
   consumer group keeps its offsets, so re-enabling resumes where it stopped.
4. ``T`` no longer exists on the source → **delete** its mapping.
5. A topic with several mappings (two runs raced) keeps one (enabled first, then the lowest id) and deletes the rest.
6. A mapping in a transitional state (Creating, Updating, Enabling, Disabling, Deleting) is left alone; the next run
   decides again. Otherwise a mapping already as wanted is left alone: a second run changes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal

from srm.core.filters import PatternList
from srm.mm2.policy import ReplicationPolicy

__all__ = [
    "ConfigChanges",
    "MappingChange",
    "MappingConfig",
    "ObservedMapping",
    "TopicInfo",
    "TopicPlan",
    "config_changes",
    "decide_mappings",
    "explicit_configs",
    "mapping_group_id",
    "plan_topics",
    "replicable_configs",
]


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int


@dataclass(frozen=True)
class TopicPlan:
    """What a flow replicates: source topic → (remote topic, partitions).

    ``source_topics`` is every topic on the source (a topic outside ``replicated`` but in it has left the filter; a
    topic in neither is gone); ``refused`` maps topics the loop guard keeps back to the reason."""

    replicated: dict[str, tuple[str, int]] = field(default_factory=dict)
    source_topics: frozenset[str] = frozenset()
    refused: dict[str, str] = field(default_factory=dict)


def plan_topics(
    source_topics: Mapping[str, TopicInfo],
    *,
    source: str,
    policy: ReplicationPolicy,
    replicate: Callable[[str], bool],
    refuse: Mapping[str, str] | None = None,
) -> TopicPlan:
    """The flow's replicate decision (filter ∧ ¬internal ∧ ¬cycle) over the source cluster's topics, minus
    ``refuse``."""
    selected = {
        name: (policy.format_remote_topic(source, name), info.partitions)
        for name, info in sorted(source_topics.items())
        if replicate(name)
    }
    refused = {t: reason for t, reason in (refuse or {}).items() if t in selected}
    replicated = {t: v for t, v in selected.items() if t not in refused}
    return TopicPlan(replicated, frozenset(source_topics), refused)


# -- topic configs ------------------------------------------------------------------------------------------------
def replicable_configs(entries: Mapping[str, Any], exclude: PatternList) -> dict[str, str]:
    """The topic configs to copy: set explicitly on the source topic (not defaults, not broker-wide), not secret,
    not read-only, and not excluded by ``config.properties.exclude``."""
    return {
        name: entry.value
        for name, entry in entries.items()
        if _is_topic_override(entry)
        and not entry.is_default
        and not entry.is_read_only
        and not entry.is_sensitive
        and entry.value is not None
        and not exclude.matches(name)
    }


def explicit_configs(entries: Mapping[str, Any]) -> dict[str, str]:
    """The configs set on a topic itself (what incremental alter-configs changes), with their values."""
    return {
        name: entry.value for name, entry in entries.items() if _is_topic_override(entry) and entry.value is not None
    }


# confluent_kafka's ConfigSource.DYNAMIC_TOPIC_CONFIG (Kafka's DescribeConfigs wire value): kept here as the plain
# number so that the decisions stay free of the client library.
_DYNAMIC_TOPIC_CONFIG = 1


def _is_topic_override(entry: Any) -> bool:
    """Set on the topic itself (describe results carry the source as an int, hand-built entries as the enum)."""
    source = getattr(entry.source, "value", entry.source)
    return bool(source == _DYNAMIC_TOPIC_CONFIG)


@dataclass(frozen=True)
class ConfigChanges:
    """Incremental alter-configs operations for one remote topic."""

    set: Mapping[str, str] = field(default_factory=dict)
    delete: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.set or self.delete)


def config_changes(
    wanted: Mapping[str, str], present: Mapping[str, str], set_before: AbstractSet[str], exclude: PatternList
) -> ConfigChanges:
    """SET what the source sets and the remote topic lacks or holds differently; DELETE what srm set before, the
    source no longer sets and the remote topic still holds — unless it is excluded now (excluded configs are not
    srm's to touch). ``wanted``: :func:`replicable_configs` of the source topic; ``present``:
    :func:`explicit_configs` of the remote topic; ``set_before``: the configs srm set on it earlier."""
    return ConfigChanges(
        {k: v for k, v in sorted(wanted.items()) if present.get(k) != v},
        frozenset(k for k in set_before if k not in wanted and k in present and not exclude.matches(k)),
    )


# -- event source mappings ----------------------------------------------------------------------------------------
Action = Literal["create", "update", "disable", "delete"]


MAX_GROUP_ID = 200  # Lambda's limit on an MSK mapping's ConsumerGroupId (Kafka allows topic names of 249)


def mapping_group_id(source: str, target: str, topic: str) -> str:
    """The consumer group of a topic's event source mapping, on AWS and locally (``srm-`` groups are bookkeeping
    and never checkpointed). It also identifies a mapping as this flow's when mappings are listed.

    A name longer than Lambda takes keeps its first characters and ends in a hash of the whole name: still unique,
    and every name that fits stays what it always was (a mapping's group cannot change once it is created)."""
    name = f"srm-mirror.{source}-{target}.{topic}"
    if len(name) <= MAX_GROUP_ID:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f"{name[: MAX_GROUP_ID - len(digest) - 1]}.{digest}"


@dataclass(frozen=True)
class MappingConfig:
    """The batch settings of a mapping, as the backend holds them (see ``EventSourceMappings.desired_config``)."""

    batch_size: int
    batching_window_ms: int
    max_payload_bytes: int = 6 * 1024 * 1024
    # Where a batch goes once retries are spent (``event.source.on.failure = dead-letter``); None: retried until
    # it succeeds. ``max_retries`` -1: the backend's default bound.
    on_failure: str | None = None
    max_retries: int = -1
    # (minimum, maximum) event pollers in Lambda's provisioned mode; None: on-demand polling.
    provisioned_pollers: tuple[int, int] | None = None
    # Where a new mapping reads a partition its group has no committed offset of (auto.offset.reset; Lambda's
    # StartingPosition). Set at creation only, so no reason to update a mapping: left out of comparisons.
    start_from: Literal["earliest", "latest"] = field(default="earliest", compare=False)


# How Lambda words a change someone asked for (the API), as opposed to one Lambda made itself.
_USER_REASONS = frozenset({"", "USER_INITIATED", "USER ACTION", "USER_ACTION"})


@dataclass(frozen=True)
class ObservedMapping:
    """A mapping as it exists now."""

    id: str  # the Lambda mapping UUID, or the local mapping's id
    topic: str
    config: MappingConfig
    enabled: bool
    busy: bool = False  # in a transitional state: no change is attempted until it settles
    # As Lambda reports them: the state, who or what changed it last, how the last poll or invocation went.
    state: str = ""
    state_reason: str = ""
    last_result: str = ""

    @property
    def problem(self) -> str | None:
        """What keeps the mapping from replicating, as Lambda says it (``PROBLEM: …``: authentication, network,
        permissions, the function failing), or a state Lambda changed by itself; None when it is fine."""
        for text in (self.last_result, self.state_reason):
            if text.strip().upper().startswith("PROBLEM"):
                return text.strip()
        if self.state == "Disabled" and self.state_reason.strip().upper() not in _USER_REASONS:
            return f"disabled by Lambda: {self.state_reason.strip()}"
        return None


@dataclass(frozen=True)
class MappingChange:
    action: Action
    topic: str
    mapping: ObservedMapping | None = None  # the mapping changed (None for create)
    config: MappingConfig | None = None  # the wanted settings (create and update)

    def __str__(self) -> str:
        return f"{self.action} {self.topic}" + (f" ({self.mapping.id})" if self.mapping else "")


def decide_mappings(
    wanted: Mapping[str, MappingConfig], source_topics: AbstractSet[str], observed: Iterable[ObservedMapping]
) -> list[MappingChange]:
    """What to change so that the observed mappings match the plan (the lifecycle in the module docstring).

    ``wanted``: replicated source topic → its settings; ``source_topics``: every topic now on the source."""
    by_topic: dict[str, list[ObservedMapping]] = {}
    for m in observed:
        by_topic.setdefault(m.topic, []).append(m)
    changes: list[MappingChange] = []
    for topic in sorted(by_topic):
        kept, *extra = sorted(by_topic[topic], key=lambda m: (not m.enabled, m.id))
        changes += [MappingChange("delete", topic, m) for m in extra if not m.busy]
        if kept.busy:
            continue
        if topic in wanted:
            config = wanted[topic]
            if not kept.enabled or kept.config != config:
                changes.append(MappingChange("update", topic, kept, config))
        elif topic in source_topics:
            if kept.enabled:
                changes.append(MappingChange("disable", topic, kept))
        else:
            changes.append(MappingChange("delete", topic, kept))
    changes += [
        MappingChange("create", topic, None, wanted[topic]) for topic in sorted(wanted) if topic not in by_topic
    ]
    return changes
