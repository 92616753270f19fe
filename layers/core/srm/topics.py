"""Topic control plane: which source topics a flow replicates, and their remote topics on the target.

Remote topics are created with the source's partition count (``replication.factor`` replicas) and grown when
the source grows; a target with more partitions than the source is reported, never shrunk.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka.admin import AdminClient, ConfigSource

from srm.config import FlowSettings
from srm.filters import PatternList, should_replicate_topic
from srm.kafka import TopicInfo, create_partitions, describe_topic_configs, ensure_topic, list_topics
from srm.policy import ReplicationPolicy

__all__ = [
    "EventSourceMappings",
    "RemoteTopics",
    "TopicPlan",
    "TopicSync",
    "TopicSyncResult",
    "plan_topics",
    "sync_topics",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicPlan:
    """What a flow replicates: source topic → (remote topic, partitions)."""

    replicated: dict[str, tuple[str, int]] = field(default_factory=dict)


def plan_topics(
    source_topics: Mapping[str, TopicInfo],
    *,
    source: str,
    target: str,
    policy: ReplicationPolicy,
    settings: FlowSettings,
) -> TopicPlan:
    """The replicate decision (filter ∧ ¬internal ∧ ¬cycle) over the source cluster's topics."""
    topic_filter = settings.topic_filter()
    replicated = {
        name: (policy.format_remote_topic(source, name), info.partitions)
        for name, info in sorted(source_topics.items())
        if should_replicate_topic(
            name,
            target_alias=target,
            policy=policy,
            topic_filter=topic_filter,
            heartbeats_replication_enabled=settings.heartbeats_replication_enabled,
        )
    }
    return TopicPlan(replicated)


def replicable_configs(entries: Mapping[str, Any], exclude: PatternList) -> dict[str, str]:
    """The topic configs to copy: set explicitly on the source topic (not defaults, not broker-wide), not secret,
    not read-only, and not excluded by ``config.properties.exclude``."""
    return {
        name: entry.value
        for name, entry in entries.items()
        if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        and not entry.is_default
        and not entry.is_read_only
        and not entry.is_sensitive
        and entry.value is not None
        and not exclude.matches(name)
    }


class RemoteTopics:
    """Ensures remote topics exist with enough partitions; remembers what it has seen (per container).

    A remote topic is created with the source topic's partition count and its explicitly set configs (so, say,
    ``retention.ms`` or ``cleanup.policy=compact`` hold on the target from the first record)."""

    def __init__(
        self, source_admin: AdminClient, target_admin: AdminClient, replication_factor: int, config_exclude: PatternList
    ) -> None:
        self._source = source_admin
        self._target = target_admin
        self._replication_factor = replication_factor
        self._exclude = config_exclude
        self._known: dict[str, int] = {}
        self._lock = threading.Lock()

    def ensure(self, source_topic: str, remote_topic: str, min_partitions: int) -> None:
        with self._lock:
            if self._known.get(remote_topic, 0) >= min_partitions:
                return
        source_partitions = list_topics(self._source).get(source_topic)
        wanted = max(min_partitions, source_partitions.partitions if source_partitions else 0)
        self.ensure_partitions(source_topic, remote_topic, wanted)

    def ensure_partitions(self, source_topic: str, remote_topic: str, partitions: int) -> None:
        current = list_topics(self._target).get(remote_topic)
        if current is None:
            configs = replicable_configs(
                describe_topic_configs(self._source, [source_topic]).get(source_topic, {}), self._exclude
            )
            if ensure_topic(self._target, remote_topic, partitions, self._replication_factor, configs):
                log.info("created remote topic %s with %d partitions", remote_topic, partitions)
            current = list_topics(self._target).get(remote_topic) or TopicInfo(remote_topic, partitions)
        if current.partitions < partitions:
            create_partitions(self._target, remote_topic, partitions)
            log.info("grew remote topic %s from %d to %d partitions", remote_topic, current.partitions, partitions)
        elif current.partitions > partitions:
            log.warning(
                "remote topic %s has %d partitions, more than the source's %d; left as is",
                remote_topic,
                current.partitions,
                partitions,
            )
        with self._lock:
            self._known[remote_topic] = max(partitions, current.partitions)


class EventSourceMappings(Protocol):
    """Where each replicated topic gets its event source mapping: the Lambda API on AWS, threads locally."""

    def sync(self, source: str, target: str, plan: TopicPlan) -> None: ...


@dataclass
class TopicSync:
    """The topic-sync function's dependencies for one flow."""

    source: str
    target: str
    settings: FlowSettings
    policy: ReplicationPolicy
    source_admin: AdminClient
    remote_topics: RemoteTopics
    event_sources: EventSourceMappings | None = None


@dataclass(frozen=True)
class TopicSyncResult:
    plan: TopicPlan

    def summary(self) -> dict[str, object]:
        return {"replicated": {t: r for t, (r, _) in self.plan.replicated.items()}}


def sync_topics(ctx: TopicSync) -> TopicSyncResult:
    """List the source's topics, decide what is replicated, make every remote topic exist with the source's
    partition count, then align the event source mappings with the decision."""
    plan = plan_topics(
        list_topics(ctx.source_admin), source=ctx.source, target=ctx.target, policy=ctx.policy, settings=ctx.settings
    )
    for topic, (remote, partitions) in plan.replicated.items():
        ctx.remote_topics.ensure_partitions(topic, remote, partitions)
    if ctx.event_sources is not None:
        ctx.event_sources.sync(ctx.source, ctx.target, plan)
    return TopicSyncResult(plan)
