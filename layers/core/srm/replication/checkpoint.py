"""The checkpoint function's use case: translate the source's consumer groups, emit MM2-format checkpoints, and
sync idle groups on the target.

Checkpoints go to ``<source alias>.checkpoints.internal`` on the target (MM2's wire format), and — while the group
has no active members there — the translated offsets are committed to the same group on the target. The decisions
are pure (:mod:`srm.core.checkpoints`); this module does the reading and writing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    ConsumerGroupState,
    KafkaException,
    Producer,
)
from confluent_kafka.admin import AdminClient

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
from srm.core.plans import mapping_group_id
from srm.core.said import Said
from srm.errors import RetriableError
from srm.kafka.admin import alter_group_offsets, end_offsets, group_offsets
from srm.kafka.clients import produce_and_wait
from srm.metrics.model.schema import CheckpointRun, HeartbeatSample, LagSample, SketchData
from srm.metrics.model.sketch import Sketch
from srm.metrics.sinks import Emitter, NullEmitter
from srm.mm2.formats import Checkpoint
from srm.mm2.policy import ReplicationPolicy
from srm.state import StateStore, read_stalls_fact, stalls_fact

__all__ = [
    "EMITTER_HEADER",
    "CheckpointContext",
    "CheckpointError",
    "CheckpointResult",
    "emit_checkpoints",
    "sync_group_offsets",
]

log = logging.getLogger(__name__)
_said = Said()  # per container: a group's problem on the target is said when it starts or changes
_NOT_COMMITTED = "could not commit offsets of group %s on %s: %s"

# (topic, partition) → [start, end) of the source: the timestamp of each range's first record (left out: unread)
AgeProbe = Callable[[Mapping[tuple[str, int], tuple[int, int]]], dict[tuple[str, int], int]]

# A checkpoint record's header naming who wrote it: MM2's readers ignore headers; an operator (or a test) tells the
# emitters apart by it, e.g. that two leaders never wrote at once.
EMITTER_HEADER = "srm.emitter"


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
    quiet: QuietProbe | None = None  # asks the source (see translate_group)
    quiet_back: QuietProbe | None = None  # asks the target, where a failback's upstream topic is
    # the timestamp of the first record in each (topic, partition)'s [start, end) of the source (see sample_flow)
    first_timestamps: AgeProbe | None = None
    now_ms: Callable[[], int] = field(default=lambda: int(time.time() * 1000))
    metrics: Emitter = field(default_factory=NullEmitter)
    emitter: str = ""  # who writes the checkpoints (a node, a function): their ``srm.emitter`` header


@dataclass
class CheckpointResult:
    groups: int = 0
    checkpoints: int = 0
    untranslatable: int = 0
    synced: dict[str, dict[tuple[str, int], int]] = field(default_factory=dict)
    checkpointed: int = 0  # groups with new checkpoints
    skipped: dict[str, int] = field(default_factory=dict)  # groups not checkpointed this run, by reason
    latency: Sketch = field(default_factory=Sketch)  # checkpoint-latency-ms of every checkpoint written

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
        # The commit's own time is not in the admin API's answer (only in __consumer_offsets): a checkpoint's latency
        # is measured from this read of the committed offsets, at most one checkpoint interval after the commit.
        observed_ms = ctx.now_ms()
        translations = translate_group(
            group,
            group_offsets(ctx.source_admin, group),
            source=ctx.source,
            target=ctx.target,
            replicate=replicate,
            policy=ctx.policy,
            state=runs,
            quiet=ctx.quiet,
            quiet_back=ctx.quiet_back,
        )
        if not translations:
            _skip(result, "no replicated topics")
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
            result.latency.add(max(0, ctx.now_ms() - observed_ms), len(new))
            ctx.state.put_checkpoints(ctx.source, ctx.target, group, new)  # replaces the items: clears their notes
            result.checkpoints += len(new)
            result.checkpointed += 1
        else:
            _skip(result, "untranslatable" if all(t.downstream_offset is None for t in translations) else "unchanged")
        if notes:
            ctx.state.set_untranslated(ctx.source, ctx.target, group, notes)
        latest[group] = {**previous, **new}
    facts: dict[str, int | str] = {"last_checkpoint_ms": now}
    if ctx.settings.sync_group_offsets_enabled and _sync_due(ctx, now):
        result.synced = sync_group_offsets(ctx, latest)
        facts["last_group_sync_ms"] = now
    ctx.state.update_flow_status(ctx.source, ctx.target, **facts)
    ctx.metrics.emit(
        CheckpointRun(
            ts=ctx.now_ms(),
            source=ctx.source,
            target=ctx.target,
            latency=SketchData.of(result.latency) if result.latency.n else None,
            groups_checkpointed=result.groups
            - sum(result.skipped.values())
            + result.skipped.get("no replicated topics", 0),
            groups_skipped=result.skipped,
        )
    )
    return result


def _skip(result: CheckpointResult, reason: str) -> None:
    result.skipped[reason] = result.skipped.get(reason, 0) + 1


@dataclass
class FlowSample:
    """What :func:`sample_flow` saw: lag per topic (summed over partitions), the age of each topic's oldest record
    not yet replicated (its partitions' largest; 0 when none lags), the topics stalled, and the heartbeat's age and
    latency."""

    lag: dict[str, int] = field(default_factory=dict)
    oldest_age_ms: dict[str, int] = field(default_factory=dict)
    stalled: dict[str, int] = field(default_factory=dict)  # topic → since when a partition of it has made no progress
    heartbeat_age_ms: int | None = None
    heartbeat_latency_ms: int | None = None


def sample_flow(ctx: CheckpointContext) -> FlowSample:
    """Sample the flow on the checkpoint schedule (a batch event knows no high watermark): per replicated source
    partition, ``replication-records-lag`` = log end − the committed offset of the topic's event source mapping
    group, and how old the first record past that offset is (the oldest not yet replicated, by its timestamp); and
    the newest replicated heartbeat's age and latency (from the flow status the mirror keeps).

    A topic is stalled when one of its partitions has lagged without its committed offset moving for
    ``topic.stalled.threshold.seconds``: progress, not the records' timestamps, decides, so a copy of old records
    (a replay, a chain of flows keeping the original timestamps) is not taken for a stall. Where each lagging
    partition stood and since when is kept in the flow status (``lagging``: ``topic/partition`` → committed offset,
    since); the stalled topics too (``topics_stalled``: topic → since, reason)."""
    now = ctx.now_ms()
    sample = FlowSample()
    status = ctx.state.flow_status(ctx.source, ctx.target)
    mappings = ctx.state.topic_mappings(ctx.source, ctx.target)
    ends = end_offsets(ctx.source_admin, [(t, p) for t, m in mappings.items() for p in range(m.partitions)])
    lags: list[tuple[str, int, int, int | None, int]] = []
    for topic in sorted(mappings):
        committed = group_offsets(ctx.source_admin, mapping_group_id(ctx.source, ctx.target, topic))
        for (_, partition), end in sorted((k, v) for k, v in ends.items() if k[0] == topic):
            offset = committed.get((topic, partition), (None, ""))[0]
            # Without a commit the mapping reads from the log start: everything up to the end is still to come.
            lag = max(0, end - (offset if offset is not None else 0))
            sample.lag[topic] = sample.lag.get(topic, 0) + lag
            sample.oldest_age_ms.setdefault(topic, 0)
            lags.append((topic, partition, end, offset, lag))
    oldest = _oldest_unreplicated(ctx, lags)
    for topic, partition, end, offset, lag in lags:
        age = max(0, now - oldest[(topic, partition)]) if (topic, partition) in oldest else None
        if age is not None:
            sample.oldest_age_ms[topic] = max(sample.oldest_age_ms[topic], age)
        ctx.metrics.emit(
            LagSample(
                ts=now,
                source=ctx.source,
                target=ctx.target,
                topic=topic,
                partition=partition,
                log_end=end,
                committed=offset,
                lag=lag,
                oldest_age_ms=age if age is not None else (0 if lag == 0 else None),
            )
        )
    _record_stalls(ctx, sample, status, [lag for lag in lags if (lag[0], lag[1]) in oldest], now)
    if "heartbeat_ms" in status:
        sample.heartbeat_age_ms = max(0, now - int(status["heartbeat_ms"]))
        latency = status.get("heartbeat_latency_ms")
        sample.heartbeat_latency_ms = int(latency) if latency is not None else None
        ctx.metrics.emit(
            HeartbeatSample(
                ts=now,
                source=ctx.source,
                target=ctx.target,
                age_ms=float(sample.heartbeat_age_ms),
                latency_ms=float(latency) if latency is not None else None,
            )
        )
    return sample


def _oldest_unreplicated(
    ctx: CheckpointContext, lags: list[tuple[str, int, int, int | None, int]]
) -> dict[tuple[str, int], int]:
    """The timestamp of the first record not yet replicated of each lagging partition (one read of the source for
    all of them; a partition the probe could not read is left out)."""
    lagging = {(t, p): (OFFSET_BEGINNING if offset is None else offset, end) for t, p, end, offset, lag in lags if lag}
    if not lagging or ctx.first_timestamps is None:
        return {}
    return ctx.first_timestamps(lagging)


def _record_stalls(
    ctx: CheckpointContext,
    sample: FlowSample,
    status: Mapping[str, int | str],
    lags: list[tuple[str, int, int, int | None, int]],
    now: int,
) -> None:
    """Find the stalled topics among the partitions with a record to replicate past their committed offset (``lags``:
    one whose lag is only a transaction marker has none, and is never stalled) and note them in the flow status, where
    ``srm status`` shows them; log when a topic stalls and when it replicates again. Each fact is written only when it
    changes."""
    threshold_ms = ctx.settings.topic_stalled_threshold_seconds * 1000
    before = _json_object(status.get("lagging"))
    lagging: dict[str, list[int]] = {}
    stuck: dict[str, list[tuple[int, int, int]]] = {}  # topic → (partition, since, lag) of its stalled partitions
    for topic, partition, _, offset, lag in lags:
        if not lag:
            continue
        position = -1 if offset is None else offset
        seen = before.get(f"{topic}/{partition}")
        since = int(seen[1]) if isinstance(seen, list) and len(seen) == 2 and seen[0] == position else now
        lagging[f"{topic}/{partition}"] = [position, since]
        if now - since >= threshold_ms:
            stuck.setdefault(topic, []).append((partition, since, lag))
    stalled: dict[str, tuple[int, str]] = {}
    for topic, partitions in sorted(stuck.items()):
        since = min(s for _, s, _ in partitions)
        sample.stalled[topic] = since
        named = ", ".join(f"{p} ({lag} records behind)" for p, _, lag in partitions)
        stalled[topic] = (
            since,
            f"no record replicated for {(now - since) / 1000:.0f}s from partition(s) {named}; its oldest "
            f"record not yet replicated is {sample.oldest_age_ms[topic] / 1000:.0f}s old "
            f"(topic.stalled.threshold.seconds = {threshold_ms / 1000:g})",
        )
    facts: dict[str, int | str] = {
        "lagging": json.dumps(lagging, sort_keys=True) if lagging else "",
        "topics_stalled": stalls_fact(stalled),
    }
    changed = {name: value for name, value in facts.items() if status.get(name, "") != value}
    if changed:
        ctx.state.update_flow_status(ctx.source, ctx.target, **changed)
    was = set(read_stalls_fact(status.get("topics_stalled")))
    for topic in sorted(set(stalled) - was):
        log.warning("%s->%s: topic %s stalled: %s", ctx.source, ctx.target, topic, stalled[topic][1])
    for topic in sorted(was - set(stalled)):
        log.info("%s->%s: topic %s replicates again", ctx.source, ctx.target, topic)


def _json_object(value: int | str | None) -> dict[str, object]:
    try:
        found = json.loads(str(value or "{}"))
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


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
    headers: list[tuple[str, str | bytes | None]] | None = [(EMITTER_HEADER, ctx.emitter)] if ctx.emitter else None
    acks = produce_and_wait(ctx.producer, topic, [(r.key(), r.value(), None) for r in records], timeout_s, headers)
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
            _said.say(
                (ctx.target, group, "describe"),
                str(e),
                log.warning,
                "cannot describe group %s on %s: %s",
                group,
                ctx.target,
                e,
            )
            continue
        _said.ended((ctx.target, group, "describe"))
        if description.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD) or description.members:
            # a state, not a problem: said when it starts being true, and when it ends
            if _said.tell((ctx.target, group, "active"), True, again_after_s=None) is not None:
                log.info("group %s is active on %s: its offsets there are left alone", group, ctx.target)
            continue
        if _said.ended((ctx.target, group, "active")):
            log.info("group %s is idle on %s again: its offsets there are synced", group, ctx.target)
        idle[group] = {(c.remote_topic, p): c.downstream_offset for (_, p), c in checkpoints.items()}
    # One request for the end offsets of every remote partition involved, not one per group.
    ends = end_offsets(ctx.target_admin, [tp for translated in idle.values() for tp in translated])
    synced = {}
    for group, translated in idle.items():
        committed = {k: v for k, (v, _) in group_offsets(ctx.target_admin, group).items()}
        commit = offsets_to_commit(translated, committed, ends)
        if not commit:
            continue
        try:
            failed = alter_group_offsets(ctx.target_admin, group, commit)
        except KafkaException as e:  # e.g. a consumer joined meanwhile: the broker refuses, and that is right
            _said.say((ctx.target, group, "commit"), str(e), log.warning, _NOT_COMMITTED, group, ctx.target, e)
            continue
        if failed:  # tried again next time, and not counted as synced
            reason = "; ".join(f"{t}-{p}: {e.str()}" for (t, p), e in sorted(failed.items()))
            _said.say((ctx.target, group, "commit"), reason, log.warning, _NOT_COMMITTED, group, ctx.target, reason)
        else:
            _said.ended((ctx.target, group, "commit"))
        if done := {k: v for k, v in commit.items() if k not in failed}:
            synced[group] = done
    return synced
