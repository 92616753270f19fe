"""Topic control plane: which source topics a flow replicates, their remote topics, configs, ACLs and mappings.

One topic sync (the topic-sync function, every ``refresh.topics.interval.seconds``) of ``source->target``:

1. **Plan** — list the source's topics and apply the replicate decision, filter ∧ ¬internal ∧ ¬cycle (heartbeats
   always pass), minus what the identity loop guard refuses (:mod:`srm.core.loops`).
2. **Remote topics** — each replicated topic gets a remote topic with the source's partition count
   (``replication.factor`` replicas) and its explicitly set configs; partitions grow when the source grows and are
   never removed (a target with more partitions is reported and left as is).
3. **Topic configs** (``sync.topic.configs.enabled``, every ``sync.topic.configs.interval.seconds``) — incremental
   alter-configs on the remote topics: SET every config set explicitly on the source topic (dynamic topic config,
   not a default, not sensitive, not read-only) and not matched by ``config.properties.exclude``; DELETE a config
   srm set earlier that the source no longer sets (the remote topic falls back to the target's default). Configs
   set on the target by anyone else and never set by srm are left alone.
4. **Topic ACLs** (``sync.topic.acls.enabled``, every ``sync.topic.acls.interval.seconds``) — :mod:`srm.kafka.acls`.
   With a name-preserving policy, configs and ACLs follow only onto remote topics srm created: a same-named topic
   that was on the target before is an origin of its own (one side of an active-active pair) and keeps them.
5. **Topic mappings** — the state table records, per flow, source topic → remote topic, partitions and what srm
   set on it (SRM's ``srm-meta.internal``), so discovery and monitoring work with any policy.
6. **Event source mappings** — one per replicated topic (:mod:`srm.replication.mappings`).

A step that fails does not hold up the others; the run then fails with :class:`TopicSyncError` naming every failure,
and the next run tries again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from srm.config.settings import FlowSettings
from srm.core.loops import came_from, keeps_name
from srm.core.plans import TopicInfo, TopicPlan, plan_topics
from srm.core.replication_offsets import StartFrom
from srm.errors import RetriableError
from srm.flow import Flow
from srm.kafka.acls import AclSyncResult, TopicAcls
from srm.kafka.admin import RemoteTopics, list_topics, sync_topic_configs
from srm.metrics.model.schema import TopicSyncRun
from srm.metrics.sinks import Emitter, NullEmitter
from srm.mm2.policy import ReplicationPolicy
from srm.replication.mappings import EventSourceMappings, MappingSyncResult, sync_mappings
from srm.replication.takeover import Takeover
from srm.state import StateStore, TopicMappingRecord

__all__ = ["TopicSyncContext", "TopicSyncError", "TopicSyncResult", "sync_topics"]

log = logging.getLogger(__name__)


class SeenOnce:
    """Keys seen before, safe across threads: what is said once per container."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, ...]] = set()
        self._lock = threading.Lock()

    def first(self, key: tuple[str, ...]) -> bool:
        with self._lock:
            if key in self._seen:
                return False
            self._seen.add(key)
            return True


@dataclass
class TopicSyncContext:
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
    flows: tuple[Flow, ...] = ()  # every flow of the configuration (the identity loop guard)
    warned: SeenOnce = field(default_factory=lambda: SeenOnce())  # per container, held by the App
    metrics: Emitter = field(default_factory=NullEmitter)
    takeover: Takeover | None = None  # a partition srm never replicated starts where MirrorMaker 2 stood
    # where a partition with no committed position starts (the source consumer's auto.offset.reset): a new topic's
    # mapping starts there (Lambda's StartingPosition)
    start_from: StartFrom = "earliest"


class TopicSyncError(RetriableError, RuntimeError):
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
            if self.mappings.problems:
                out["mappingProblems"] = dict(self.mappings.problems)
        return out


def sync_topics(ctx: TopicSyncContext, now_ms: int | None = None) -> TopicSyncResult:
    """One topic sync of the flow (the steps in the module docstring)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    source, target, settings, state = ctx.source, ctx.target, ctx.settings, ctx.state
    source_topics = list_topics(ctx.source_admin)
    refuse = _loop_guard(ctx, source_topics)
    replicate = settings.replicate_decision(target, ctx.policy)
    plan = plan_topics(source_topics, source=source, policy=ctx.policy, replicate=replicate, refuse=refuse)
    _warn_refused(ctx, plan)
    result = TopicSyncResult(plan)
    if not settings.enabled:
        # Disabled (`srm-control flows disable`): pause the mappings, touch nothing else.
        if ctx.event_sources is not None:
            result.mappings = sync_mappings(ctx.event_sources, source, target, plan, settings, ctx.state)
        return result
    stored = state.topic_mappings(source, target) if state is not None else {}
    records = {
        topic: stored.get(topic) or TopicMappingRecord(topic, remote, partitions)
        for topic, (remote, partitions) in plan.replicated.items()
    }
    run = _Run(now, result, records)
    _ensure_remote_topics(ctx, plan, run)
    # Under its own name, a remote topic srm did not create was there before: an origin in its own right (e.g. one
    # side of an active-active pair, where syncing both ways would undo each other's changes). It keeps its configs
    # and ACLs; only replicas srm created follow their source.
    synced = {
        t: r for t, (r, _) in plan.replicated.items() if records[t].created or not keeps_name(ctx.policy, source, t)
    }
    status = state.flow_status(source, target) if state is not None else {}
    refresh = settings.refresh_topics_interval_seconds
    if settings.sync_topic_configs_enabled and _due(
        status.get("topic_configs_synced_ms"), settings.sync_topic_configs_interval_seconds, refresh, now
    ):
        _sync_configs(ctx, run, synced)
    if settings.sync_topic_acls_enabled and _due(
        status.get("topic_acls_synced_ms"), settings.sync_topic_acls_interval_seconds, refresh, now
    ):
        _sync_acls(ctx, run, synced)
    if state is not None:
        for topic, record in records.items():
            if stored.get(topic) != record:
                state.put_topic_mapping(source, target, record)
        for topic in stored.keys() - records.keys():
            state.delete_topic_mapping(source, target, topic)
        if run.facts:
            state.update_flow_status(source, target, **run.facts)
    if ctx.event_sources is not None:
        try:
            before_create = ctx.takeover.before_create if ctx.takeover is not None else None
            result.mappings = sync_mappings(
                ctx.event_sources, source, target, plan, settings, state, before_create, start_from=ctx.start_from
            )
        except Exception as e:  # EventSourceMappingError, botocore and Kafka errors alike: reported with the rest
            run.errors["event source mappings"] = e
    ctx.metrics.emit(
        TopicSyncRun(
            ts=int(time.time() * 1000),
            source=source,
            target=target,
            topics_created=len(result.created),
            configs_changed=len(result.configs_changed),
            acls_changed=(result.acls.created + result.acls.deleted) if result.acls is not None else 0,
            failed={step: 1 for step in run.errors},
            mapping_problems=len(result.mappings.problems) if result.mappings is not None else 0,
        )
    )
    if run.errors:
        raise TopicSyncError(run.errors, result)
    return result


@dataclass
class _Run:
    """What the steps of one topic sync share: the flow's topic mappings as the steps update them, the result, each
    failed step's error (every step runs; the run fails at the end) and the flow status facts to record."""

    now: int
    result: TopicSyncResult
    records: dict[str, TopicMappingRecord]  # source topic → its mapping
    errors: dict[str, Exception] = field(default_factory=dict)  # step → its failure
    facts: dict[str, int | str] = field(default_factory=dict)


def _ensure_remote_topics(ctx: TopicSyncContext, plan: TopicPlan, run: _Run) -> None:
    records = run.records
    target_topics = list_topics(ctx.target_admin) if ctx.target_admin is not None else None
    for topic, (remote, partitions) in plan.replicated.items():
        try:
            created_with = ctx.remote_topics.ensure_partitions(topic, remote, partitions, target_topics)
        except KafkaException as e:
            run.errors[f"remote topic {remote}"] = e
            continue
        rec = replace(records[topic], remote_topic=remote, partitions=partitions)
        if created_with is not None:
            run.result.created.append(remote)
            # the configs it was created with are srm's: one the source drops before the next config sync is reset
            rec = replace(rec, created=True, configs=created_with)
        records[topic] = rec


def _sync_configs(ctx: TopicSyncContext, run: _Run, remote_topics: Mapping[str, str]) -> None:
    if ctx.target_admin is None:
        return
    records = run.records
    try:
        held, changed = sync_topic_configs(
            ctx.source_admin,
            ctx.target_admin,
            remote_topics,
            {t: r.configs for t, r in records.items()},
            ctx.settings.config_exclude(),
        )
    except KafkaException as e:
        run.errors["topic configs"] = e
        return
    run.result.configs_synced, run.result.configs_changed = True, changed
    for topic, configs in held.items():
        records[topic] = replace(records[topic], configs=configs, synced_at_ms=run.now)
    run.facts["topic_configs_synced_ms"] = run.now


def _sync_acls(ctx: TopicSyncContext, run: _Run, remote_topics: Mapping[str, str]) -> None:
    if ctx.target_admin is None:
        return
    records = run.records
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
        run.errors["topic ACLs"] = e
        return
    run.result.acls = acls
    for topic in remote_topics:
        records[topic] = replace(records[topic], acls=tuple(sorted(acls.synced.get(topic, ()))))
    run.facts["topic_acls_synced_ms"] = run.now


def _due(last_ms: int | str | None, interval_s: float, refresh_s: float, now_ms: int) -> bool:
    """A periodic step is due when its interval has passed, give or take half a topic-sync period (the step only
    runs when topic sync does)."""
    if not isinstance(last_ms, int):
        return True
    return now_ms - last_ms >= (interval_s - refresh_s / 2) * 1000


def _loop_guard(ctx: TopicSyncContext, source_topics: Mapping[str, TopicInfo]) -> dict[str, str]:
    """Source topics a name-preserving policy must not replicate: created on the source by replication from the
    target, over any number of hops, per the state table's topic mappings of every flow
    (:func:`srm.core.loops.came_from`)."""
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


def _warn_refused(ctx: TopicSyncContext, plan: TopicPlan) -> None:
    """Say once per container that a topic is held back by the loop guard."""
    for topic, reason in plan.refused.items():
        if ctx.warned.first((ctx.source, ctx.target, topic)):
            log.warning("%s->%s: not replicating %s", ctx.source, ctx.target, reason)
