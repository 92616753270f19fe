"""Consumer group failover and failback: exact translation of committed offsets, MM2-format checkpoints, and
automatic group offset sync.

For each group of the source cluster that the group filter allows, its committed offsets are translated from the
offset runs the mirror recorded (see :mod:`srm.offsets`):

* **forward** — a topic this flow replicates: ``orders`` on the source → ``<source>.orders`` on the target;
* **failback** — a remote topic that came *from the target* (``<target>.orders`` on the source, after a failover
  to it): translated back through the runs of the opposite flow to ``orders`` on the target.

Checkpoints go to ``<source alias>.checkpoints.internal`` on the target (MM2's wire format), and — while the group
has no active members there — the translated offsets are committed to the same group on the target.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from botocore.exceptions import BotoCoreError
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from srm.checkpoints import StoredCheckpoint, Untranslated, is_more_recent, offsets_to_commit
from srm.config import FlowSettings, SrmConfig
from srm.filters import should_replicate_topic
from srm.formats import Checkpoint
from srm.kafka import SecretResolver, admin_config, build
from srm.loops import stamp_provenance
from srm.offsets import doubt_back, translate_back, translate_checked
from srm.policy import ReplicationPolicy
from srm.remote_cluster import CheckpointedOffset, MirrorClient
from srm.state import StateError, StateStore

__all__ = [
    "CheckpointContext",
    "CheckpointResult",
    "NoOffsetsError",
    "PartitionTranslation",
    "emit_checkpoints",
    "export_csv",
    "failover_offsets",
    "group_offsets",
    "mirror_skips",
    "quiet_probe",
    "translate_group",
    "untranslated_notes",
]

log = logging.getLogger(__name__)

# (topic, partition) → (committed offset, metadata)
GroupOffsets = dict[tuple[str, int], tuple[int, str]]
QuietProbe = Callable[[str, int, int, int], bool]


@dataclass(frozen=True)
class PartitionTranslation:
    group: str
    topic: str  # on the source cluster
    partition: int
    upstream_offset: int
    metadata: str
    remote_topic: str  # on the target cluster
    downstream_offset: int | None  # None: not translatable (yet)
    direction: Literal["forward", "failback"]
    note: str = ""


def group_offsets(admin: AdminClient, group: str, timeout: float = 30.0) -> GroupOffsets:
    """A group's committed offsets (partitions without a committed offset are left out)."""
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group]
    result = future.result()
    return {
        (tp.topic, tp.partition): (tp.offset, tp.metadata or "")
        for tp in result.topic_partitions or []
        if tp.offset is not None and tp.offset >= 0
    }


def translate_group(
    group: str,
    offsets: GroupOffsets,
    *,
    source: str,
    target: str,
    settings: FlowSettings,
    policy: ReplicationPolicy,
    state: StateStore,
    quiet: QuietProbe | None = None,
) -> list[PartitionTranslation]:
    """Translate every committed offset of ``group`` that this flow can translate, forward or back."""
    topic_filter = settings.topic_filter()
    results = []
    for (topic, partition), (offset, metadata) in sorted(offsets.items()):
        forward = should_replicate_topic(
            topic,
            target_alias=target,
            policy=policy,
            topic_filter=topic_filter,
            heartbeats_replication_enabled=settings.heartbeats_replication_enabled,
        )
        if forward:
            results.append(_forward(group, topic, partition, offset, metadata, source, target, policy, state, quiet))
            continue
        upstream = _failback_topic(topic, source, target, policy, state, partition)
        if upstream is not None:
            runs = state.runs(target, source, upstream, partition)
            back = translate_back(runs, offset)
            note = "" if back is not None else "beyond what was replicated"
            if back is not None and runs and offset < runs[0].downstream:
                unsure = doubt_back(runs, offset, state.origin(target, source, upstream, partition))
                if unsure is not None:
                    back, note = None, unsure
            results.append(
                PartitionTranslation(group, topic, partition, offset, metadata, upstream, back, "failback", note)
            )
    return results


def _forward(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    metadata: str,
    source: str,
    target: str,
    policy: ReplicationPolicy,
    state: StateStore,
    quiet: QuietProbe | None,
) -> PartitionTranslation:
    remote = policy.format_remote_topic(source, topic)
    runs = state.runs_around(source, target, topic, partition, offset)
    downstream, note = translate_checked(
        runs,
        offset,
        lambda: state.origin(source, target, topic, partition),
        None if quiet is None else lambda start, end: quiet(topic, partition, start, end),
    )
    return PartitionTranslation(group, topic, partition, offset, metadata, remote, downstream, "forward", note)


def _failback_topic(
    topic: str, source: str, target: str, policy: ReplicationPolicy, state: StateStore, partition: int
) -> str | None:
    """The topic on the target a remote topic on the source came from, if it came from the target."""
    if policy.topic_source(topic) == target:
        return policy.upstream_topic(topic)
    if policy.format_remote_topic(target, topic) == topic and state.runs_around(target, source, topic, partition, 0):
        return topic  # a name-keeping policy: the mirror's records say where it came from
    return None


# ---------------------------------------------------------------------------------------------------------------
# The checkpoint function
# ---------------------------------------------------------------------------------------------------------------
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
    for group in groups:
        translations = translate_group(
            group,
            group_offsets(ctx.source_admin, group),
            source=ctx.source,
            target=ctx.target,
            settings=ctx.settings,
            policy=ctx.policy,
            state=ctx.state,
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
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for (_, partition), c in checkpoints.items():
        record = Checkpoint(group, c.remote_topic, partition, c.upstream_offset, c.downstream_offset, c.metadata)
        ctx.producer.produce(topic, record.value(), record.key(), partition=0, on_delivery=on_delivery)
    remaining = ctx.producer.flush(ctx.settings.mirror_delivery_timeout_ms / 1000.0)
    if errors or remaining:
        reason = errors[0].str() if errors else f"{remaining} not acknowledged in time"
        raise RuntimeError(f"checkpoints of {group} to {topic} on {ctx.target} failed: {reason}")


def sync_group_offsets(
    ctx: CheckpointContext, latest: dict[str, dict[tuple[str, int], StoredCheckpoint]]
) -> dict[str, dict[tuple[str, int], int]]:
    """Commit translated offsets to idle groups on the target: never an active group, never backwards, never past
    the end of the remote partition. Returns what was committed, per group."""
    if not latest:
        return {}
    described = ctx.target_admin.describe_consumer_groups(list(latest), request_timeout=30)
    synced = {}
    for group, checkpoints in latest.items():
        try:
            description = described[group].result()
        except Exception as e:  # a group the target cannot describe is left alone this round
            log.warning("cannot describe group %s on %s: %s", group, ctx.target, e)
            continue
        if description.state not in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD) or description.members:
            log.info("group %s is active on %s: its offsets there are left alone", group, ctx.target)
            continue
        translated = {(c.remote_topic, p): c.downstream_offset for (_, p), c in checkpoints.items()}
        committed = {k: v for k, (v, _) in group_offsets(ctx.target_admin, group).items()}
        ends = _end_offsets(ctx.target_admin, translated)
        commit = offsets_to_commit(translated, committed, ends)
        if not commit:
            continue
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in commit.items()])
        try:
            ctx.target_admin.alter_consumer_group_offsets([request], request_timeout=30)[group].result()
        except Exception as e:  # e.g. a consumer joined meanwhile: the broker refuses, and that is right
            log.warning("could not commit offsets of group %s on %s: %s", group, ctx.target, e)
            continue
        synced[group] = commit
    return synced


def _end_offsets(admin: AdminClient, partitions: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}, request_timeout=30)
    ends = {}
    for tp, future in futures.items():
        try:
            ends[(tp.topic, tp.partition)] = future.result().offset
        except Exception as e:  # a missing remote partition: nothing to commit there
            log.warning("no end offset for %s-%d: %s", tp.topic, tp.partition, e)
    return ends


def quiet_probe(
    consumer_config: dict[str, str], timeout: float = 5.0, skips: Callable[[str, Any], bool] | None = None
) -> QuietProbe:
    """Asks the source whether a partition holds no record to replicate in ``[start, end)`` — e.g. only a
    transaction marker — by reading it with the mirror's isolation level; records ``skips(topic, headers)`` says the
    mirror leaves out (the identity loop guard) are read past. Unsure means no."""

    def probe(topic: str, partition: int, start: int, end: int) -> bool:
        consumer = Consumer({**consumer_config, "enable.auto.commit": "false"})
        try:
            tp = TopicPartition(topic, partition, start)
            consumer.assign([tp])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for msg in consumer.consume(500, timeout=0.2):
                    if msg.error() is not None:
                        continue
                    if (msg.offset() or 0) >= end:
                        return True
                    if skips is None or not skips(topic, msg.headers()):
                        return False
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    return True
            return False
        finally:
            consumer.close()

    return probe


def mirror_skips(source: str, target: str, policy: ReplicationPolicy) -> Callable[[str, Any], bool]:
    """Whether the mirror of ``source->target`` leaves a record of ``topic`` with these headers out (see
    :mod:`srm.mirror`): only where the remote topic keeps the name, for records that visited ``target``."""

    def skips(topic: str, headers: Any) -> bool:
        return policy.format_remote_topic(source, topic) == topic and stamp_provenance(headers, source, target) is None

    return skips


# ---------------------------------------------------------------------------------------------------------------
# Failover tooling (srm-control offsets)
# ---------------------------------------------------------------------------------------------------------------
class NoOffsetsError(LookupError):
    """There is nothing to fail the group over with; the message says why."""


def failover_offsets(
    config: SrmConfig,
    source: str,
    target: str,
    group: str,
    resolver: SecretResolver,
    timeout: float = 30.0,
    state: StateStore | None = None,
) -> list[CheckpointedOffset]:
    """Where ``group`` resumes on ``target``, from the checkpoints there — so it works while ``source`` is down.

    When there is no checkpoint, says why: the reasons the checkpoint function kept in ``state`` for offsets it
    could not translate, else the answer of ``source`` (unknown group, or no topic ``source->target`` replicates),
    in NoOffsetsError."""
    config.check_flow(source, target)
    flow = (source, target)
    policy = config.policy(source, target)
    reader = MirrorClient(admin_config(config, target, flow, resolver), policy)
    try:
        found = reader.remote_consumer_offsets(group, source, timeout)
    except LookupError as e:
        raise NoOffsetsError(f"{e}; is {source}->{target} enabled and emitting checkpoints?") from None
    if found:
        return sorted(found.values(), key=lambda c: (c.topic, c.partition))
    notes: list[str] = []
    if state is not None:
        with contextlib.suppress(StateError, BotoCoreError):  # then the source is asked
            notes = untranslated_notes(state, source, target, group)
    if notes:
        raise NoOffsetsError(f"no checkpoint of group {group} on {target}: {'; '.join(notes)}")
    raise NoOffsetsError(_why_no_checkpoint(config, source, target, group, resolver, timeout))


def untranslated_notes(state: StateStore, source: str, target: str, group: str) -> list[str]:
    """One line per source partition whose newest committed offset got no checkpoint, saying why — so an operator
    knows that the checkpoint shown for it (if any) is older than the group's position."""
    stored = state.checkpoints(source, target, group)
    lines = []
    for (topic, partition), note in sorted(stored.untranslated.items()):
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(note.at_ms / 1000))
        line = (
            f"{topic}-{partition}: the group's committed offset {note.upstream_offset} on {source} has no "
            f"checkpoint (since {since}): {note.reason}"
        )
        last = stored.emitted.get((topic, partition))
        if last is not None:
            line += (
                f"; what {last.remote_topic}-{partition} shows is its last checkpoint, of offset "
                f"{last.upstream_offset} on {source}"
            )
        lines.append(line)
    return lines


def _why_no_checkpoint(
    config: SrmConfig, source: str, target: str, group: str, resolver: SecretResolver, timeout: float
) -> str:
    settings = config.settings(source, target)
    if not settings.group_filter().should_replicate_group(group):
        return (
            f"group {group} is not checkpointed by {source}->{target} (groups={settings.groups!r}, "
            f"groups.exclude={settings.groups_exclude!r})"
        )
    admin = build(AdminClient, admin_config(config, source, (source, target), resolver), config, source, "admin")
    try:
        offsets = group_offsets(admin, group, timeout)
    except Exception as e:  # the source may well be down: that is when failover happens
        return f"no checkpoint of group {group} on {target}, and {source} cannot be asked why ({e})"
    if not offsets:
        return f"group {group} has no committed offsets on {source}"
    policy = config.policy(source, target)
    topics = sorted({t for t, _ in offsets})
    replicated = [
        t
        for t in topics
        if should_replicate_topic(
            t,
            target_alias=target,
            policy=policy,
            topic_filter=settings.topic_filter(),
            heartbeats_replication_enabled=settings.heartbeats_replication_enabled,
        )
        or policy.topic_source(t) == target
    ]
    if not replicated:
        return (
            f"group {group} has offsets on {source} only on topics {source}->{target} does not replicate: "
            f"{', '.join(topics)}"
        )
    return (
        f"no checkpoint of group {group} on {target} yet; they are emitted every "
        f"{settings.emit_checkpoints_interval_seconds:g}s (emit.checkpoints.interval.seconds)"
    )


def export_csv(offsets: list[CheckpointedOffset]) -> str:
    """The file ``kafka-consumer-groups --reset-offsets --from-file`` takes: ``topic,partition,offset`` lines."""
    return "".join(f"{c.topic},{c.partition},{c.offset}\n" for c in offsets)
