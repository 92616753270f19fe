"""Topic control plane: which source topics a flow replicates, their remote topics, configs, ACLs and mappings.

One topic sync (the topic-sync function, every ``refresh.topics.interval.seconds``) of ``source->target``:

1. **Plan** — list the source's topics and apply the replicate decision, filter ∧ ¬internal ∧ ¬cycle (heartbeats
   always pass), minus what the identity loop guard refuses (:mod:`srm.loops`).
2. **Remote topics** — each replicated topic gets a remote topic with the source's partition count
   (``replication.factor`` replicas) and its explicitly set configs; partitions grow when the source grows and are
   never removed (a target with more partitions is reported and left as is).
3. **Topic configs** (``sync.topic.configs.enabled``, every ``sync.topic.configs.interval.seconds``) — incremental
   alter-configs on the remote topics: SET every config set explicitly on the source topic (dynamic topic config,
   not a default, not sensitive, not read-only) and not matched by ``config.properties.exclude``; DELETE a config
   srm set earlier that the source no longer sets (the remote topic falls back to the target's default). Configs
   set on the target by anyone else and never set by srm are left alone.
4. **Topic ACLs** (``sync.topic.acls.enabled``, every ``sync.topic.acls.interval.seconds``) — :mod:`srm.acls`.
   With a name-preserving policy, configs and ACLs follow only onto remote topics srm created: a same-named topic
   that was on the target before is an origin of its own (one side of an active-active pair) and keeps them.
5. **Topic mappings** — the state table records, per flow, source topic → remote topic, partitions and what srm
   set on it (SRM's ``srm-meta.internal``), so discovery and monitoring work with any policy.
6. **Event source mappings** — one per replicated topic (:mod:`srm.event_sources`).

A step that fails does not hold up the others; the run then fails with :class:`TopicSyncError` naming every failure,
and the next run tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from srm.acls import AclSyncResult, TopicAcls
from srm.config import FlowSettings
from srm.event_sources import EventSourceMappings, MappingSyncResult, mapping_group_id, sync_mappings
from srm.filters import PatternList, should_replicate_topic
from srm.kafka import TopicInfo, create_partitions, describe_topic_configs, ensure_topic, list_topics
from srm.loops import came_from, keeps_name
from srm.policy import ReplicationPolicy
from srm.state import StateStore, TopicMappingRecord

__all__ = [
    "ConfigChanges",
    "EventSourceMappings",
    "RemoteTopics",
    "TopicPlan",
    "TopicSync",
    "TopicSyncError",
    "TopicSyncResult",
    "config_changes",
    "mapping_group_id",
    "plan_topics",
    "replicable_configs",
    "sync_topics",
]

log = logging.getLogger(__name__)


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
    target: str,
    policy: ReplicationPolicy,
    settings: FlowSettings,
    refuse: Mapping[str, str] | None = None,
) -> TopicPlan:
    """The replicate decision (filter ∧ ¬internal ∧ ¬cycle) over the source cluster's topics, minus ``refuse``."""
    topic_filter = settings.topic_filter()
    selected = {
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


def _is_topic_override(entry: Any) -> bool:
    """Set on the topic itself (describe results carry the source as an int, hand-built entries as the enum)."""
    source = entry.source.value if isinstance(entry.source, ConfigSource) else entry.source
    return bool(source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value)


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


def _describe_configs(admin: AdminClient, names: Iterable[str], timeout: float = 30.0) -> dict[str, dict[str, Any]]:
    """Configs of several topics in one request; a topic that cannot be described (just deleted) is left out."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in sorted(set(names))]
    if not resources:
        return {}
    result: dict[str, dict[str, Any]] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            result[resource.name] = future.result(timeout)
        except KafkaException as e:
            log.warning("cannot describe the configs of topic %s: %s", resource.name, e.args[0])
    return result


_UNSUPPORTED = (KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE)


def sync_topic_configs(
    source_admin: AdminClient,
    target_admin: AdminClient,
    remote_topics: Mapping[str, str],
    set_before: Mapping[str, Mapping[str, str]],
    exclude: PatternList,
    timeout: float = 30.0,
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Bring the configs of the remote topics (source topic → remote topic) in line with their source topics.

    Returns, for every topic whose remote topic is in sync now, the configs srm holds on it — topics that could not
    be described or altered are left out (their previous record stands) and retried next time — and the remote
    topics whose configs were changed."""
    source_configs = _describe_configs(source_admin, remote_topics, timeout)
    target_configs = _describe_configs(target_admin, remote_topics.values(), timeout)
    held: dict[str, dict[str, str]] = {}
    resources: dict[str, ConfigResource] = {}
    for topic, remote in remote_topics.items():
        if topic not in source_configs or remote not in target_configs:
            continue
        wanted = replicable_configs(source_configs[topic], exclude)
        changes = config_changes(
            wanted, explicit_configs(target_configs[remote]), set(set_before.get(topic, {})), exclude
        )
        held[topic] = wanted
        if changes:
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.set.items()]
            entries += [
                ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in sorted(changes.delete)
            ]
            resources[topic] = ConfigResource(ConfigResource.Type.TOPIC, remote, incremental_configs=entries)
            log.info(
                "topic %s: config %s%s",
                remote,
                ", ".join(f"{k}={v}" for k, v in changes.set.items()) or "",
                f" (reset: {', '.join(sorted(changes.delete))})" if changes.delete else "",
            )
    if resources:
        futures = target_admin.incremental_alter_configs(list(resources.values()), request_timeout=timeout)
        by_remote = {r.name: t for t, r in resources.items()}
        for resource, future in futures.items():
            try:
                future.result(timeout)
            except KafkaException as e:
                err = e.args[0]
                if isinstance(err, KafkaError) and err.code() in _UNSUPPORTED:
                    raise  # as MM2: a target without IncrementalAlterConfigs cannot have its configs synced
                log.warning("cannot alter the configs of topic %s: %s", resource.name, err)
                held.pop(by_remote[resource.name], None)
    return held, sorted(r.name for t, r in resources.items() if t in held)


# -- remote topics ------------------------------------------------------------------------------------------------
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
        """The mirror's check before writing a batch: cheap when the remote topic is known to be big enough."""
        with self._lock:
            if self._known.get(remote_topic, 0) >= min_partitions:
                return
        source_partitions = list_topics(self._source).get(source_topic)
        wanted = max(min_partitions, source_partitions.partitions if source_partitions else 0)
        self.ensure_partitions(source_topic, remote_topic, wanted)

    def ensure_partitions(
        self,
        source_topic: str,
        remote_topic: str,
        partitions: int,
        target_topics: Mapping[str, TopicInfo] | None = None,
    ) -> bool:
        """Create or grow the remote topic; True when this call created it. ``target_topics`` (the target's topics,
        listed once by the caller) saves a metadata request per topic."""
        current = (target_topics if target_topics is not None else list_topics(self._target)).get(remote_topic)
        created = False
        if current is None:
            configs = replicable_configs(
                describe_topic_configs(self._source, [source_topic]).get(source_topic, {}), self._exclude
            )
            created = ensure_topic(self._target, remote_topic, partitions, self._replication_factor, configs)
            if created:
                log.info("created remote topic %s with %d partitions", remote_topic, partitions)
            current = list_topics(self._target).get(remote_topic) or TopicInfo(remote_topic, partitions)
        if current.partitions < partitions:
            create_partitions(self._target, remote_topic, partitions)
            log.info("grew remote topic %s from %d to %d partitions", remote_topic, current.partitions, partitions)
        elif current.partitions > partitions:
            log.warning(
                "remote topic %s has %d partitions, more than the source's %d; left as is (partitions never shrink)",
                remote_topic,
                current.partitions,
                partitions,
            )
        with self._lock:
            self._known[remote_topic] = max(partitions, current.partitions)
        return created


# -- the use case -------------------------------------------------------------------------------------------------
@dataclass
class TopicSync:
    """The topic-sync function's dependencies for one flow (built by :mod:`srm.app`)."""

    source: str
    target: str
    settings: FlowSettings
    policy: ReplicationPolicy
    source_admin: AdminClient
    remote_topics: RemoteTopics
    event_sources: EventSourceMappings | None = None
    target_admin: AdminClient | None = None  # configs and ACLs are synced only with it
    state: StateStore | None = None  # topic and event source mappings are recorded only with it
    acls: TopicAcls = field(default_factory=TopicAcls)
    flows: tuple[tuple[str, str], ...] = ()  # every flow of the configuration (the identity loop guard)


class TopicSyncError(RuntimeError):
    """Some steps of a topic sync failed (the others were done); ``errors`` names each, ``result`` is the rest."""

    def __init__(self, errors: Mapping[str, Exception], result: TopicSyncResult) -> None:
        super().__init__("topic sync incomplete: " + "; ".join(f"{step}: {e}" for step, e in errors.items()))
        self.errors = dict(errors)
        self.result = result


@dataclass
class TopicSyncResult:
    plan: TopicPlan
    created: list[str] = field(default_factory=list)  # remote topics created by this run
    configs_synced: bool = False
    configs_changed: list[str] = field(default_factory=list)  # remote topics whose configs changed
    acls: AclSyncResult | None = None
    mappings: MappingSyncResult | None = None

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {"replicated": {t: r for t, (r, _) in self.plan.replicated.items()}}
        if self.plan.refused:
            out["refused"] = dict(self.plan.refused)
        if self.created:
            out["createdRemoteTopics"] = list(self.created)
        if self.configs_synced:
            out["configsChanged"] = list(self.configs_changed)
        if self.acls is not None:
            out["acls"] = {"created": self.acls.created, "deleted": self.acls.deleted, "skipped": self.acls.skipped}
        if self.mappings is not None:
            out["eventSourceMappings"] = self.mappings.summary()
        return out


def sync_topics(ctx: TopicSync, now_ms: int | None = None) -> TopicSyncResult:
    """One topic sync of the flow (the steps in the module docstring)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    source, target, settings, state = ctx.source, ctx.target, ctx.settings, ctx.state
    source_topics = list_topics(ctx.source_admin)
    refuse = _loop_guard(ctx, source_topics)
    plan = plan_topics(source_topics, source=source, target=target, policy=ctx.policy, settings=settings, refuse=refuse)
    _warn_refused(source, target, plan)
    result = TopicSyncResult(plan)
    if not settings.enabled:
        # Disabled (`srm-control flows disable`): pause the mappings, touch nothing else.
        if ctx.event_sources is not None:
            result.mappings = sync_mappings(ctx.event_sources, source, target, plan, settings, ctx.state)
        return result
    errors: dict[str, Exception] = {}  # step → its failure; every step runs, the run fails at the end
    stored = state.topic_mappings(source, target) if state is not None else {}
    records = {
        topic: stored.get(topic) or TopicMappingRecord(topic, remote, partitions)
        for topic, (remote, partitions) in plan.replicated.items()
    }
    _ensure_remote_topics(ctx, plan, records, result, errors)
    # Under its own name, a remote topic srm did not create was there before: an origin in its own right (e.g. one
    # side of an active-active pair, where syncing both ways would undo each other's changes). It keeps its configs
    # and ACLs; only replicas srm created follow their source.
    synced = {
        t: r for t, (r, _) in plan.replicated.items() if records[t].created or not keeps_name(ctx.policy, source, t)
    }
    status = state.flow_status(source, target) if state is not None else {}
    facts: dict[str, int | str] = {}
    refresh = settings.refresh_topics_interval_seconds
    if settings.sync_topic_configs_enabled and _due(
        status.get("topic_configs_synced_ms"), settings.sync_topic_configs_interval_seconds, refresh, now
    ):
        _sync_configs(ctx, synced, records, result, errors, now, facts)
    if settings.sync_topic_acls_enabled and _due(
        status.get("topic_acls_synced_ms"), settings.sync_topic_acls_interval_seconds, refresh, now
    ):
        _sync_acls(ctx, synced, records, result, errors, now, facts)
    if state is not None:
        for topic, record in records.items():
            if stored.get(topic) != record:
                state.put_topic_mapping(source, target, record)
        for topic in stored.keys() - records.keys():
            state.delete_topic_mapping(source, target, topic)
        if facts:
            state.update_flow_status(source, target, **facts)
    if ctx.event_sources is not None:
        try:
            result.mappings = sync_mappings(ctx.event_sources, source, target, plan, settings, state)
        except Exception as e:  # EventSourceMappingError, botocore and Kafka errors alike: reported with the rest
            errors["event source mappings"] = e
    if errors:
        raise TopicSyncError(errors, result)
    return result


Records = dict[str, TopicMappingRecord]


def _ensure_remote_topics(
    ctx: TopicSync, plan: TopicPlan, records: Records, result: TopicSyncResult, errors: dict[str, Exception]
) -> None:
    target_topics = list_topics(ctx.target_admin) if ctx.target_admin is not None else None
    for topic, (remote, partitions) in plan.replicated.items():
        try:
            created = ctx.remote_topics.ensure_partitions(topic, remote, partitions, target_topics)
        except KafkaException as e:
            errors[f"remote topic {remote}"] = e
            continue
        if created:
            result.created.append(remote)
        rec = records[topic]
        records[topic] = replace(rec, remote_topic=remote, partitions=partitions, created=rec.created or created)


def _sync_configs(
    ctx: TopicSync,
    remote_topics: Mapping[str, str],
    records: Records,
    result: TopicSyncResult,
    errors: dict[str, Exception],
    now: int,
    facts: dict[str, int | str],
) -> None:
    if ctx.target_admin is None:
        return
    try:
        held, changed = sync_topic_configs(
            ctx.source_admin,
            ctx.target_admin,
            remote_topics,
            {t: r.configs for t, r in records.items()},
            ctx.settings.config_exclude(),
        )
    except KafkaException as e:
        errors["topic configs"] = e
        return
    result.configs_synced, result.configs_changed = True, changed
    for topic, configs in held.items():
        records[topic] = replace(records[topic], configs=configs, synced_at_ms=now)
    facts["topic_configs_synced_ms"] = now


def _sync_acls(
    ctx: TopicSync,
    remote_topics: Mapping[str, str],
    records: Records,
    result: TopicSyncResult,
    errors: dict[str, Exception],
    now: int,
    facts: dict[str, int | str],
) -> None:
    if ctx.target_admin is None:
        return
    try:
        acls = ctx.acls.sync(
            ctx.source,
            ctx.target,
            ctx.source_admin,
            ctx.target_admin,
            remote_topics,
            {t: set(r.acls) for t, r in records.items()},
        )
    except KafkaException as e:
        errors["topic ACLs"] = e
        return
    result.acls = acls
    for topic in remote_topics:
        records[topic] = replace(records[topic], acls=tuple(sorted(acls.synced.get(topic, ()))))
    facts["topic_acls_synced_ms"] = now


def _due(last_ms: int | str | None, interval_s: float, refresh_s: float, now_ms: int) -> bool:
    """A periodic step is due when its interval has passed, give or take half a topic-sync period (the step only
    runs when topic sync does)."""
    if not isinstance(last_ms, int):
        return True
    return now_ms - last_ms >= (interval_s - refresh_s / 2) * 1000


def _loop_guard(ctx: TopicSync, source_topics: Mapping[str, TopicInfo]) -> dict[str, str]:
    """Source topics a name-preserving policy must not replicate: created on the source by replication from the
    target, over any number of hops, per the state table's topic mappings of every flow
    (:func:`srm.loops.came_from`)."""
    candidates = [t for t in source_topics if keeps_name(ctx.policy, ctx.source, t)]
    if ctx.state is None or not candidates:
        return {}
    origins: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for s, t in set(ctx.flows) | {(ctx.target, ctx.source)}:
        for record in ctx.state.topic_mappings(s, t).values():
            if record.created:
                origins.setdefault((t, record.remote_topic), []).append((s, record.topic))
    return {
        topic: f"{topic} on {ctx.source} was created by replication from {ctx.target}: replicating it back would loop"
        for topic in candidates
        if came_from(topic, ctx.source, ctx.target, origins)
    }


_refused_seen: set[tuple[str, str, str]] = set()
_refused_lock = threading.Lock()


def _warn_refused(source: str, target: str, plan: TopicPlan) -> None:
    """Say once per container that a topic is held back by the loop guard."""
    for topic, reason in plan.refused.items():
        with _refused_lock:
            if (source, target, topic) in _refused_seen:
                continue
            _refused_seen.add((source, target, topic))
        log.warning("%s->%s: not replicating %s", source, target, reason)
