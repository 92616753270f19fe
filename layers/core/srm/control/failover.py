"""``srm-control offsets``: where a consumer group resumes on the other cluster after a failover, read from the
checkpoints there (so it works while the source is down), and the file ``kafka-consumer-groups`` takes."""

from __future__ import annotations

import contextlib
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from srm.config.secrets import SecretResolver
from srm.config.settings import SrmConfig
from srm.errors import PermanentError, SrmError
from srm.flow import Flow
from srm.kafka.admin import KafkaUnavailableError, group_offsets
from srm.kafka.clients import admin_config, build
from srm.mm2.client import CheckpointedOffset, MirrorClient
from srm.state import StateStore

__all__ = ["NoOffsetsError", "export_csv", "failover_offsets", "translated_by", "untranslated_notes"]


class NoOffsetsError(PermanentError, LookupError):
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
    flow = Flow(source, target)
    policy = config.policy(source, target)
    reader = MirrorClient(admin_config(config, target, flow, resolver), policy)
    try:
        found = reader.remote_consumer_offsets(group, source, timeout)
    except LookupError as e:
        raise NoOffsetsError(f"{e}; is {source}->{target} enabled and emitting checkpoints?") from None
    except KafkaException as e:  # the checkpoints are only on the target: without it there is no answer
        raise KafkaUnavailableError(
            f"cluster {target} ({config.bootstrap_servers(target)}) does not answer within {timeout:g}s: {_reason(e)}"
        ) from None
    if found:
        return sorted(found.values(), key=lambda c: (c.topic, c.partition))
    notes: list[str] = []
    if state is not None:
        with contextlib.suppress(SrmError):  # then the source is asked
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


def translated_by(
    state: StateStore, source: str, target: str, group: str, offsets: list[CheckpointedOffset]
) -> dict[tuple[str, int], str]:
    """Who wrote each checkpoint: srm, exactly (the checkpoint its state records having emitted), or another writer
    of the same topic — MirrorMaker 2 before a take-over, whose translation is only as exact as its offset syncs."""
    emitted = {(c.remote_topic, p): c for (_, p), c in state.checkpoints(source, target, group).emitted.items()}
    result = {}
    for c in offsets:
        mine = emitted.get((c.topic, c.partition))
        exact = mine is not None and (mine.upstream_offset, mine.downstream_offset) == (c.upstream_offset, c.offset)
        result[(c.topic, c.partition)] = "srm (exact)" if exact else "MirrorMaker 2 (offset syncs)"
    return result


def _why_no_checkpoint(
    config: SrmConfig, source: str, target: str, group: str, resolver: SecretResolver, timeout: float
) -> str:
    settings = config.settings(source, target)
    if not settings.group_filter().should_replicate_group(group):
        return (
            f"group {group} is not checkpointed by {source}->{target} (groups={settings.groups!r}, "
            f"groups.exclude={settings.groups_exclude!r})"
        )
    admin = build(AdminClient, admin_config(config, source, Flow(source, target), resolver), config, source, "admin")
    try:
        offsets = group_offsets(admin, group, timeout)
    except (KafkaException, SrmError) as e:  # the source may well be down: that is when failover happens
        return f"no checkpoint of group {group} on {target}, and {source} cannot be asked why ({e})"
    if not offsets:
        return f"group {group} has no committed offsets on {source}"
    policy = config.policy(source, target)
    topics = sorted({t for t, _ in offsets})
    replicated = [t for t in topics if config.replicate(source, target)(t) or policy.topic_source(t) == target]
    if not replicated:
        return (
            f"group {group} has offsets on {source} only on topics {source}->{target} does not replicate: "
            f"{', '.join(topics)}"
        )
    return (
        f"no checkpoint of group {group} on {target} yet; they are emitted every "
        f"{settings.emit_checkpoints_interval_seconds:g}s (emit.checkpoints.interval.seconds)"
    )


def _reason(e: KafkaException) -> str:
    error = e.args[0] if e.args else None
    return error.str() if isinstance(error, KafkaError) else str(e)


def export_csv(offsets: list[CheckpointedOffset]) -> str:
    """The file ``kafka-consumer-groups --reset-offsets --from-file`` takes: ``topic,partition,offset`` lines."""
    return "".join(f"{c.topic},{c.partition},{c.offset}\n" for c in offsets)
