"""Keeping a flow's event source mappings in step with its topic plan: observe, decide
(:func:`srm.core.plans.decide_mappings`), apply through a port (:class:`EventSourceMappings`) with two implementations:
the Lambda API (:class:`srm.aws.lambda_mappings.LambdaEventSources`, on AWS) and emulated mappings
(``srm.local.mappings.LocalEventSources``, in the local runtime), so both follow the same decisions through the same
code path."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from srm.config.settings import FlowSettings
from srm.core.plans import MappingChange, MappingConfig, ObservedMapping, TopicPlan, decide_mappings
from srm.core.replication_offsets import StartFrom
from srm.errors import RetriableError
from srm.state import EventSourceMappingRecord, StateStore

__all__ = ["EventSourceMappingError", "EventSourceMappings", "MappingSyncResult", "sync_mappings"]

log = logging.getLogger(__name__)


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


class EventSourceMappingError(RetriableError, RuntimeError):
    """Some mapping changes failed; the others were applied. ``errors`` maps the change to its error."""

    def __init__(self, errors: Mapping[str, Exception]) -> None:
        super().__init__("event source mapping changes failed: " + "; ".join(f"{c}: {e}" for c, e in errors.items()))
        self.errors = dict(errors)


@dataclass
class MappingSyncResult:
    applied: list[MappingChange] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # changes the backend was too busy for
    mappings: dict[str, ObservedMapping] = field(default_factory=dict)  # topic → its mapping, afterwards
    problems: dict[str, str] = field(default_factory=dict)  # topic → what keeps its mapping from replicating

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
    before_create: Callable[[str, int], None] | None = None,
    *,
    start_from: StartFrom = "earliest",
) -> MappingSyncResult:
    """Observe, decide, apply; then record the mappings in the state table (only what changed is written).
    ``before_create(topic, partitions)`` runs before a mapping is created (where to start: a take-over);
    ``start_from``: where a new mapping starts reading a partition its group has no committed offset of."""
    config = replace(port.desired_config(settings), start_from=start_from)
    observed = port.observe(source, target)
    # A disabled flow keeps its mappings, paused: enabling it again resumes each from its committed offsets.
    wanted = dict.fromkeys(plan.replicated, config) if settings.enabled else {}
    result = MappingSyncResult()
    after: dict[str, ObservedMapping] = {}
    for m in sorted(observed, key=lambda m: (not m.enabled, m.id)):
        after.setdefault(m.topic, m)
    errors: dict[str, Exception] = {}
    # A topic the state records a mapping of was replicated by srm before: its mapping (re)created after a restart
    # resumes from its own group, so there is nothing to hand over and no cluster to wait for first.
    known = state.event_source_mappings(source, target) if state is not None and before_create is not None else {}
    for change in decide_mappings(wanted, plan.source_topics, observed):
        try:
            if change.action == "create" and before_create is not None and change.topic not in known:
                before_create(change.topic, plan.replicated[change.topic][1])
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
    result.problems = {t: m.problem for t, m in sorted(after.items()) if m.problem}
    for topic, problem in result.problems.items():
        # Lambda retries these by itself, silently; without this line they would show only as lag.
        log.warning("%s->%s: event source mapping of %s (%s): %s", source, target, topic, after[topic].id, problem)
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
            problem=m.problem or "",
            max_payload_bytes=m.config.max_payload_bytes,
        )
        previous = stored.get(topic)
        if previous is None or replace(previous, updated_at_ms=now) != record:
            state.put_event_source_mapping(source, target, record)
    for topic in stored.keys() - mappings.keys():
        state.delete_event_source_mapping(source, target, topic)
