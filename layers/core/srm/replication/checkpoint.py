"""The checkpoint function's use case: translate the source's consumer groups, emit MM2-format checkpoints, and
sync idle groups on the target.

Checkpoints go to ``<source alias>.checkpoints.internal`` on the target (MM2's wire format), and — while the group
has no active members there — the translated offsets are committed to the same group on the target. The decisions
are pure (:mod:`srm.core.checkpoints`); this module does the reading and writing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from srm.aws.state import StateStore
from srm.config.settings import FlowSettings
from srm.core.checkpoints import (
    CachedRuns,
    QuietProbe,
    StoredCheckpoint,
    Untranslated,
    is_more_recent,
    offsets_to_commit,
    translate_group,
)
from srm.errors import RetriableError
from srm.kafka.admin import end_offsets, group_offsets
from srm.kafka.clients import produce_and_wait
from srm.mm2.formats import Checkpoint
from srm.mm2.policy import ReplicationPolicy

__all__ = ["CheckpointContext", "CheckpointError", "CheckpointResult", "emit_checkpoints", "sync_group_offsets"]

log = logging.getLogger(__name__)


class CheckpointError(RetriableError, RuntimeError):
    """Checkpoints of a group were not acknowledged by the target (the next run emits them again)."""

    def __init__(self, message: str, *, group: str, topic: str) -> None:
        super().__init__(message)
        self.group = group
        self.topic = topic


@dataclass
class CheckpointContext:
    """The checkpoint function's dependencies for one flow, built by :mod:`srm.app`."""

    source: str
    target: str
    settings: FlowSettings
    policy: ReplicationPolicy
    source_admin: AdminClient
    target_admin: AdminClient
    producer: Producer  # to the target's checkpoints topic
    state: StateStore
    quiet: QuietProbe | None = None
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))


@dataclass
class CheckpointResult:
    groups: int = 0
    checkpoints: int = 0
    untranslatable: int = 0
    synced: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        return {
            "groups": self.groups,
            "checkpoints": self.checkpoints,
            "untranslatable": self.untranslatable,
            "syncedGroups": sorted(self.synced),
        }


def emit_checkpoints(ctx: CheckpointContext) -> CheckpointResult:
    """Translate, emit checkpoints (monotonic), and sync idle target groups when it is time to."""
    result = CheckpointResult()
    if not ctx.settings.enabled:
        return result  # a disabled flow emits no checkpoints
    group_filter = ctx.settings.group_filter()
    groups = sorted(
        g.group_id
        for g in ctx.source_admin.list_consumer_groups(request_timeout=30).result().valid
        if group_filter.should_replicate_group(g.group_id)
    )
    latest: dict[str, dict[tuple[str, int], StoredCheckpoint]] = {}
    now = ctx.now_ms()
    replicate = ctx.settings.replicate_decision(ctx.target, ctx.policy)
    runs = CachedRuns(ctx.state)
    for group in groups:
        translations = translate_group(
            group,
            group_offsets(ctx.source_admin, group),
            source=ctx.source,
            target=ctx.target,
            replicate=replicate,
            policy=ctx.policy,
            state=runs,
            quiet=ctx.quiet,
        )
        if not translations:
            continue
        result.groups += 1
        stored = ctx.state.checkpoints(ctx.source, ctx.target, group)
        previous = stored.emitted
        new: dict[tuple[str, int], StoredCheckpoint] = {}
        notes: dict[tuple[str, int], Untranslated | None] = {}
        for t in translations:
            key = (t.topic, t.partition)
            noted = stored.untranslated.get(key)
            if t.downstream_offset is None:
                result.untranslatable += 1
                if noted is None or (noted.upstream_offset, noted.reason) != (t.upstream_offset, t.note):
                    since = noted.at_ms if noted is not None and noted.reason == t.note else now
                    notes[key] = Untranslated(t.upstream_offset, t.note, since)
                continue
            if is_more_recent(t.upstream_offset, t.downstream_offset, previous.get(key)):
                new[key] = StoredCheckpoint(t.upstream_offset, t.downstream_offset, t.remote_topic, t.metadata, now)
            elif noted is not None:
                notes[key] = None  # translates again, with no newer checkpoint to emit: the note is stale
        if new:
            _write_checkpoints(ctx, group, new)
            ctx.state.put_checkpoints(ctx.source, ctx.target, group, new)  # replaces the items: clears their notes
            result.checkpoints += len(new)
        if notes:
            ctx.state.set_untranslated(ctx.source, ctx.target, group, notes)
        latest[group] = {**previous, **new}
    facts: dict[str, int | str] = {"last_checkpoint_ms": now}
    if ctx.settings.sync_group_offsets_enabled and _sync_due(ctx, now):
        result.synced = sync_group_offsets(ctx, latest)
        facts["last_group_sync_ms"] = now
    ctx.state.update_flow_status(ctx.source, ctx.target, **facts)
    return result


def _sync_due(ctx: CheckpointContext, now: int) -> bool:
    last = ctx.state.flow_status(ctx.source, ctx.target).get("last_group_sync_ms", 0)
    return now - int(last) >= ctx.settings.sync_group_offsets_interval_seconds * 1000 - 500


def _write_checkpoints(
    ctx: CheckpointContext, group: str, checkpoints: dict[tuple[str, int], StoredCheckpoint]
) -> None:
    topic = ctx.policy.checkpoints_topic(ctx.source)
    records = [
        Checkpoint(group, c.remote_topic, partition, c.upstream_offset, c.downstream_offset, c.metadata)
        for (_, partition), c in checkpoints.items()
    ]
    timeout_s = ctx.settings.mirror_delivery_timeout_ms / 1000.0
    acks = produce_and_wait(ctx.producer, topic, [(r.key(), r.value(), None) for r in records], timeout_s)
    if acks.error is not None or not acks.settled:
        reason = acks.error.str() if acks.error is not None else f"{acks.unsettled} not acknowledged in time"
        raise CheckpointError(
            f"checkpoints of {group} to {topic} on {ctx.target} failed: {reason}", group=group, topic=topic
        )


def sync_group_offsets(
    ctx: CheckpointContext, latest: dict[str, dict[tuple[str, int], StoredCheckpoint]]
) -> dict[str, dict[tuple[str, int], int]]:
    """Commit translated offsets to idle groups on the target: never an active group, never backwards, never past
    the end of the remote partition. Returns what was committed, per group."""
    if not latest:
        return {}
    described = ctx.target_admin.describe_consumer_groups(list(latest), request_timeout=30)
    idle: dict[str, dict[tuple[str, int], int]] = {}
    for group, checkpoints in latest.items():
        try:
            description = described[group].result()
        except KafkaException as e:  # a group the target cannot describe is left alone this round
            log.warning("cannot describe group %s on %s: %s", group, ctx.target, e)
            continue
        if description.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD) or description.members:
            log.info("group %s is active on %s: its offsets there are left alone", group, ctx.target)
            continue
        idle[group] = {(c.remote_topic, p): c.downstream_offset for (_, p), c in checkpoints.items()}
    # One request for the end offsets of every remote partition involved, not one per group.
    ends = end_offsets(ctx.target_admin, [tp for translated in idle.values() for tp in translated])
    synced = {}
    for group, translated in idle.items():
        committed = {k: v for k, (v, _) in group_offsets(ctx.target_admin, group).items()}
        commit = offsets_to_commit(translated, committed, ends)
        if not commit:
            continue
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in commit.items()])
        try:
            ctx.target_admin.alter_consumer_group_offsets([request], request_timeout=30)[group].result()
        except KafkaException as e:  # e.g. a consumer joined meanwhile: the broker refuses, and that is right
            log.warning("could not commit offsets of group %s on %s: %s", group, ctx.target, e)
            continue
        synced[group] = commit
    return synced
