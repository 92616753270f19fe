"""Event source mappings: one per replicated source topic, kept in step with the topic-sync decision.

An MSK event source mapping reads exactly one topic, so the control plane owns their lifecycle. The decision —
observed mappings and the replicate plan in, changes out — is one pure function, :func:`decide_mappings`, and
:func:`sync_mappings` applies it through a port (:class:`EventSourceMappings`) with two implementations: the Lambda
API (:class:`LambdaEventSources`, on AWS) and emulated mappings (``srm.local.mappings.LocalEventSources``, in the
local runtime). Both therefore follow the same decisions through the same code path.

Lifecycle of the mapping of source topic ``T`` (the decision, in order):

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

import logging
import time
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal, Protocol

from botocore.exceptions import ClientError

from srm.config import FlowSettings

if TYPE_CHECKING:
    from srm.state import StateStore
    from srm.topics import TopicPlan

__all__ = [
    "EventSourceMappingError",
    "EventSourceMappings",
    "LambdaEventSources",
    "MappingChange",
    "MappingConfig",
    "MappingSyncResult",
    "ObservedMapping",
    "decide_mappings",
    "mapping_group_id",
    "sync_mappings",
]

log = logging.getLogger(__name__)

Action = Literal["create", "update", "disable", "delete"]


def mapping_group_id(source: str, target: str, topic: str) -> str:
    """The consumer group of a topic's event source mapping, on AWS and locally (``srm-`` groups are bookkeeping
    and never checkpointed). It also identifies a mapping as this flow's when mappings are listed."""
    return f"srm-mirror.{source}-{target}.{topic}"


@dataclass(frozen=True)
class MappingConfig:
    """The batch settings of a mapping, as the backend holds them (see ``EventSourceMappings.desired_config``)."""

    batch_size: int
    batching_window_ms: int
    max_payload_bytes: int = 6 * 1024 * 1024


@dataclass(frozen=True)
class ObservedMapping:
    """A mapping as it exists now."""

    id: str  # the Lambda mapping UUID, or the local mapping's id
    topic: str
    config: MappingConfig
    enabled: bool
    busy: bool = False  # in a transitional state: no change is attempted until it settles


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


class EventSourceMappings(Protocol):
    """The port: where a flow's mappings live. Methods return the mapping as it is afterwards, or None when the
    backend is busy with it (the next run decides again)."""

    def desired_config(self, settings: FlowSettings) -> MappingConfig:
        """The flow's batch settings as this backend can hold them (e.g. whole seconds of batching window)."""
        ...

    def observe(self, source: str, target: str) -> list[ObservedMapping]: ...

    def create(self, source: str, target: str, topic: str, config: MappingConfig) -> ObservedMapping | None: ...

    def update(
        self, source: str, target: str, mapping: ObservedMapping, config: MappingConfig
    ) -> ObservedMapping | None: ...

    def disable(self, source: str, target: str, mapping: ObservedMapping) -> ObservedMapping | None: ...

    def delete(self, source: str, target: str, mapping: ObservedMapping) -> bool: ...


class EventSourceMappingError(RuntimeError):
    """Some mapping changes failed; the others were applied. ``errors`` maps the change to its error."""

    def __init__(self, errors: Mapping[str, Exception]) -> None:
        super().__init__("event source mapping changes failed: " + "; ".join(f"{c}: {e}" for c, e in errors.items()))
        self.errors = dict(errors)


@dataclass
class MappingSyncResult:
    applied: list[MappingChange] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # changes the backend was too busy for
    mappings: dict[str, ObservedMapping] = field(default_factory=dict)  # topic → its mapping, afterwards

    def summary(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for change in self.applied:
            out.setdefault(change.action, []).append(change.topic)
        return out


def sync_mappings(
    port: EventSourceMappings,
    source: str,
    target: str,
    plan: TopicPlan,
    settings: FlowSettings,
    state: StateStore | None = None,
) -> MappingSyncResult:
    """Observe, decide, apply; then record the mappings in the state table (only what changed is written)."""
    config = port.desired_config(settings)
    observed = port.observe(source, target)
    # A disabled flow keeps its mappings, paused: enabling it again resumes each from its committed offsets.
    wanted = dict.fromkeys(plan.replicated, config) if settings.enabled else {}
    result = MappingSyncResult()
    after: dict[str, ObservedMapping] = {}
    for m in sorted(observed, key=lambda m: (not m.enabled, m.id)):
        after.setdefault(m.topic, m)
    errors: dict[str, Exception] = {}
    for change in decide_mappings(wanted, plan.source_topics, observed):
        try:
            outcome = _apply(port, source, target, change)
        except Exception as e:  # one mapping's failure must not hold up the others; all are reported below
            errors[str(change)] = e
            log.warning("%s->%s: cannot %s: %s", source, target, change, e)
            continue
        if outcome is False:
            result.pending.append(str(change))
            continue
        result.applied.append(change)
        log.info("%s->%s: event source mapping: %s", source, target, change)
        if isinstance(outcome, ObservedMapping):
            after[change.topic] = outcome
        elif change.mapping is not None and after.get(change.topic) == change.mapping:
            del after[change.topic]
    result.mappings = after
    if state is not None:
        _record(state, source, target, after)
    if errors:
        raise EventSourceMappingError(errors)
    return result


def _apply(port: EventSourceMappings, source: str, target: str, change: MappingChange) -> ObservedMapping | bool:
    """The mapping afterwards, True when deleted, False when the backend was busy."""
    if change.action == "create":
        assert change.config is not None
        return port.create(source, target, change.topic, change.config) or False
    assert change.mapping is not None
    if change.action == "update":
        assert change.config is not None
        return port.update(source, target, change.mapping, change.config) or False
    if change.action == "disable":
        return port.disable(source, target, change.mapping) or False
    return port.delete(source, target, change.mapping)


def _record(state: StateStore, source: str, target: str, mappings: Mapping[str, ObservedMapping]) -> None:
    from srm.state import EventSourceMappingRecord

    stored = state.event_source_mappings(source, target)
    now = int(time.time() * 1000)
    for topic, m in mappings.items():
        record = EventSourceMappingRecord(
            topic=topic,
            id=m.id,
            enabled=m.enabled,
            batch_size=m.config.batch_size,
            batching_window_ms=m.config.batching_window_ms,
            updated_at_ms=now,
        )
        previous = stored.get(topic)
        if previous is None or replace(previous, updated_at_ms=now) != record:
            state.put_event_source_mapping(source, target, record)
    for topic in stored.keys() - mappings.keys():
        state.delete_event_source_mapping(source, target, topic)


# ---------------------------------------------------------------------------------------------------------------
# The Lambda API adapter
# ---------------------------------------------------------------------------------------------------------------
_BUSY_STATES = frozenset({"Creating", "Enabling", "Disabling", "Updating", "Deleting"})
_ENABLED_STATES = frozenset({"Creating", "Enabling", "Enabled", "Updating"})
_BUSY_ERRORS = frozenset({"ResourceInUseException", "ResourceConflictException", "TooManyRequestsException"})
# An MSK event is at most the 6 MB invoke payload; not configurable on AWS.
LAMBDA_MAX_PAYLOAD_BYTES = 6 * 1024 * 1024


class LambdaEventSources:
    """MSK event source mappings of the mirror function, through the Lambda API (a boto3 ``lambda`` client).

    A mapping is this flow's when it invokes the mirror function, reads the source cluster and consumes in the group
    :func:`mapping_group_id` names for its one topic; mappings are also tagged ``srm:source``, ``srm:target`` and
    ``srm:topic`` for people and cost reports. They start at ``TRIM_HORIZON`` (the whole retained log) when their
    group has no committed offsets. The batching window is whole seconds on AWS (below one second: MSK's 500 ms
    default, which Lambda cannot set explicitly)."""

    def __init__(
        self, client: Any, function_arn: str, cluster_arn: str, source_auth: tuple[str, str] | None = None
    ) -> None:
        self._lambda = client
        self.function_arn = function_arn
        self.cluster_arn = cluster_arn
        # (SASL_SCRAM_512_AUTH | SASL_SCRAM_256_AUTH | CLIENT_CERTIFICATE_TLS_AUTH, secret ARN); None: IAM or none
        self.source_auth = source_auth

    def desired_config(self, settings: FlowSettings) -> MappingConfig:
        ms = settings.event_source_batching_window_ms
        seconds = 0 if ms < 1000 else round(ms / 1000)
        return MappingConfig(settings.event_source_batch_size, seconds * 1000, LAMBDA_MAX_PAYLOAD_BYTES)

    def observe(self, source: str, target: str) -> list[ObservedMapping]:
        found = []
        pages = self._lambda.get_paginator("list_event_source_mappings").paginate(
            FunctionName=self.function_arn, EventSourceArn=self.cluster_arn
        )
        for page in pages:
            for m in page.get("EventSourceMappings", []):
                topics = m.get("Topics") or []
                group = (m.get("AmazonManagedKafkaEventSourceConfig") or {}).get("ConsumerGroupId")
                if len(topics) != 1 or group != mapping_group_id(source, target, topics[0]):
                    continue  # not one of this flow's mappings
                found.append(self._observed(m, topics[0]))
        return found

    def _access(self) -> dict[str, Any]:
        """How the mapping authenticates to the source (MSK reads the credentials from Secrets Manager)."""
        if self.source_auth is None:
            return {}
        kind, secret = self.source_auth
        return {"SourceAccessConfigurations": [{"Type": kind, "URI": secret}]}

    def _observed(self, m: Mapping[str, Any], topic: str) -> ObservedMapping:
        state = m.get("State", "")
        config = MappingConfig(
            int(m.get("BatchSize") or 100),
            int(m.get("MaximumBatchingWindowInSeconds") or 0) * 1000,
            LAMBDA_MAX_PAYLOAD_BYTES,
        )
        return ObservedMapping(m["UUID"], topic, config, state in _ENABLED_STATES, state in _BUSY_STATES)

    def create(self, source: str, target: str, topic: str, config: MappingConfig) -> ObservedMapping | None:
        window = (
            {"MaximumBatchingWindowInSeconds": config.batching_window_ms // 1000} if config.batching_window_ms else {}
        )
        try:
            m = self._lambda.create_event_source_mapping(
                FunctionName=self.function_arn,
                EventSourceArn=self.cluster_arn,
                Topics=[topic],
                StartingPosition="TRIM_HORIZON",
                Enabled=True,
                BatchSize=config.batch_size,
                AmazonManagedKafkaEventSourceConfig={"ConsumerGroupId": mapping_group_id(source, target, topic)},
                Tags={"srm:source": source, "srm:target": target, "srm:topic": topic},
                **window,
                **self._access(),
            )
        except ClientError as e:
            if _code(e) in _BUSY_ERRORS:  # another run created it meanwhile: the next run adopts it
                log.info("mapping of %s not created now (%s); retried next run", topic, _code(e))
                return None
            raise
        return self._observed(m, topic)

    def update(
        self, source: str, target: str, mapping: ObservedMapping, config: MappingConfig
    ) -> ObservedMapping | None:
        return self._update(
            mapping,
            Enabled=True,
            BatchSize=config.batch_size,
            MaximumBatchingWindowInSeconds=config.batching_window_ms // 1000,
        )

    def disable(self, source: str, target: str, mapping: ObservedMapping) -> ObservedMapping | None:
        return self._update(mapping, Enabled=False)

    def _update(self, mapping: ObservedMapping, **changes: Any) -> ObservedMapping | None:
        try:
            m = self._lambda.update_event_source_mapping(UUID=mapping.id, **changes)
        except ClientError as e:
            if _code(e) in _BUSY_ERRORS:
                log.info("mapping %s of %s is busy (%s); retried next run", mapping.id, mapping.topic, _code(e))
                return None
            raise
        return self._observed(m, mapping.topic)

    def delete(self, source: str, target: str, mapping: ObservedMapping) -> bool:
        try:
            self._lambda.delete_event_source_mapping(UUID=mapping.id)
        except ClientError as e:
            if _code(e) == "ResourceNotFoundException":
                return True
            if _code(e) in _BUSY_ERRORS:
                log.info("mapping %s of %s is busy (%s); retried next run", mapping.id, mapping.topic, _code(e))
                return False
            raise
        return True


def _code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))
