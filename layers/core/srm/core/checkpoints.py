"""Checkpoint decisions, pure: how a group's committed offsets translate, which translated offsets to emit, and
which to commit to a group on the target.

For each group of the source cluster that the group filter allows, its committed offsets are translated from the
offset runs the mirror recorded (see :mod:`srm.core.offsets`):

* **forward** — a topic this flow replicates: ``orders`` on the source → ``<source>.orders`` on the target;
* **failback** — a remote topic that came *from the target* (``<target>.orders`` on the source, after a failover
  to it): translated back through the runs of the opposite flow to ``orders`` on the target.

Rules (MM2's, kept):

* A checkpoint is emitted for a group and partition when it is the first, when the upstream group rewound (its
  committed offset went down: the operator reset it, so the checkpoint follows), or when the downstream offset
  advanced. Otherwise it is skipped, so checkpoints never move a consumer backwards on the target.
* A committed offset the state cannot translate exactly gets no checkpoint (never one that skips records); why is
  kept with the group's checkpoints (:class:`Untranslated`) until it translates again.
* Translated offsets are committed to the same group on the target only while that group has no active members
  (the caller checks), never below what the group has already committed there, and never past the end of the
  remote partition.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from srm.core.continuity import LostRange
from srm.core.offsets import Origin, Run, doubt_back, translate_back, translate_checked
from srm.mm2.policy import ReplicationPolicy

__all__ = [
    "CachedRuns",
    "GroupOffsets",
    "PartitionTranslation",
    "QuietProbe",
    "RunsLookup",
    "StoredCheckpoint",
    "Untranslated",
    "is_more_recent",
    "offsets_to_commit",
    "translate_group",
]

TopicPartitionKey = tuple[str, int]
# (topic, partition) → (committed offset, metadata)
GroupOffsets = dict[tuple[str, int], tuple[int, str]]
QuietProbe = Callable[[str, int, int, int], bool]


class RunsLookup(Protocol):
    """Where translation reads the mirror's offset runs (the state table)."""

    def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]: ...

    def runs_around(self, source: str, target: str, topic: str, partition: int, upstream_offset: int) -> list[Run]: ...

    def origin(self, source: str, target: str, topic: str, partition: int) -> Origin | None: ...

    def lost_ranges(self, source: str, target: str, topic: str, partition: int) -> list[LostRange]: ...

    def flow_lost_ranges(self, source: str, target: str) -> dict[tuple[str, int], list[LostRange]]: ...


@dataclass(frozen=True)
class StoredCheckpoint:
    """The last checkpoint emitted for one upstream topic-partition of a group."""

    upstream_offset: int
    downstream_offset: int
    remote_topic: str
    metadata: str = ""
    at_ms: int = 0


@dataclass(frozen=True)
class Untranslated:
    """A group's committed offset on one upstream topic-partition that got no checkpoint, and why."""

    upstream_offset: int
    reason: str
    at_ms: int = 0


def is_more_recent(upstream_offset: int, downstream_offset: int, previous: StoredCheckpoint | None) -> bool:
    if previous is None:
        return True
    if upstream_offset < previous.upstream_offset:
        return True  # the upstream group rewound: follow it
    return downstream_offset > previous.downstream_offset


def offsets_to_commit(
    translated: Mapping[TopicPartitionKey, int],
    committed: Mapping[TopicPartitionKey, int],
    end_offsets: Mapping[TopicPartitionKey, int],
) -> dict[TopicPartitionKey, int]:
    """The target group's offsets worth committing: ahead of what it has, within the remote partition."""
    result = {}
    for tp, offset in translated.items():
        if offset > end_offsets.get(tp, -1):
            continue  # the remote partition does not reach it (yet): committing would point past its end
        current = committed.get(tp)
        if current is not None and current >= offset:
            continue  # never move a group backwards
        result[tp] = offset
    return result


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


def translate_group(
    group: str,
    offsets: GroupOffsets,
    *,
    source: str,
    target: str,
    replicate: Callable[[str], bool],
    policy: ReplicationPolicy,
    state: RunsLookup,
    quiet: QuietProbe | None = None,
    quiet_back: QuietProbe | None = None,
) -> list[PartitionTranslation]:
    """Translate every committed offset of ``group`` that this flow can translate, forward or back. Pure: the
    offset runs come from ``state``, the source's answer about quiet ranges from ``quiet``, and the target's (where
    a failback's upstream topic is) from ``quiet_back``."""
    results = []
    for (topic, partition), (offset, metadata) in sorted(offsets.items()):
        forward = replicate(topic)
        if forward:
            results.append(_forward(group, topic, partition, offset, metadata, source, target, policy, state, quiet))
            continue
        upstream, runs = _failback(topic, source, target, policy, state, partition)
        if upstream is not None:
            back, note = _back(
                runs,
                offset,
                lambda: state.origin(target, source, upstream, partition),  # noqa: B023 (called at once)
                None if quiet_back is None else lambda start, end: quiet_back(upstream, partition, start, end),  # noqa: B023
            )
            results.append(
                PartitionTranslation(group, topic, partition, offset, metadata, upstream, back, "failback", note)
            )
    return results


def _back(
    runs: list[Run], offset: int, origin: Callable[[], Origin | None], quiet: Callable[[int, int], bool] | None
) -> tuple[int | None, str]:
    """:func:`translate_back`, taking nothing on trust: the upstream offset, or None and why."""
    unsure = doubt_back(runs, offset, origin, quiet)
    if unsure is not None:
        return None, unsure
    back = translate_back(runs, offset)
    return back, "" if back is not None else "beyond what was replicated"


def _forward(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    metadata: str,
    source: str,
    target: str,
    policy: ReplicationPolicy,
    state: RunsLookup,
    quiet: QuietProbe | None,
) -> PartitionTranslation:
    remote = policy.format_remote_topic(source, topic)
    runs = state.runs_around(source, target, topic, partition, offset)
    downstream, note = translate_checked(
        runs,
        offset,
        lambda: state.origin(source, target, topic, partition),
        None if quiet is None else lambda start, end: quiet(topic, partition, start, end),
        state.lost_ranges(source, target, topic, partition),
    )
    return PartitionTranslation(group, topic, partition, offset, metadata, remote, downstream, "forward", note)


def _failback(
    topic: str, source: str, target: str, policy: ReplicationPolicy, state: RunsLookup, partition: int
) -> tuple[str | None, list[Run]]:
    """The topic on the target a remote topic on the source came from, if it came from the target, with the runs
    of that partition the opposite flow recorded (read once)."""
    if policy.topic_source(topic) == target:
        upstream = policy.upstream_topic(topic)
        return (upstream, state.runs(target, source, upstream, partition)) if upstream is not None else (None, [])
    if policy.format_remote_topic(target, topic) == topic:
        runs = state.runs(target, source, topic, partition)
        if runs:
            return topic, runs  # a name-keeping policy: the mirror's records say where it came from
    return None, []


class CachedRuns:
    """A :class:`RunsLookup` that reads a partition's full history once per checkpoint run, however many groups
    have offsets there (failback reads it whole)."""

    def __init__(self, state: RunsLookup) -> None:
        self._state = state
        self._runs: dict[tuple[str, str, str, int], list[Run]] = {}
        self._lost: dict[tuple[str, str], dict[tuple[str, int], list[LostRange]]] = {}

    def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]:
        key = (source, target, topic, partition)
        if key not in self._runs:
            self._runs[key] = self._state.runs(source, target, topic, partition)
        return self._runs[key]

    def runs_around(self, source: str, target: str, topic: str, partition: int, upstream_offset: int) -> list[Run]:
        return self._state.runs_around(source, target, topic, partition, upstream_offset)

    def origin(self, source: str, target: str, topic: str, partition: int) -> Origin | None:
        return self._state.origin(source, target, topic, partition)

    def lost_ranges(self, source: str, target: str, topic: str, partition: int) -> list[LostRange]:
        return self.flow_lost_ranges(source, target).get((topic, partition), [])

    def flow_lost_ranges(self, source: str, target: str) -> dict[tuple[str, int], list[LostRange]]:
        """Read once per checkpoint run: one query, however many partitions and groups."""
        if (source, target) not in self._lost:
            self._lost[(source, target)] = self._state.flow_lost_ranges(source, target)
        return self._lost[(source, target)]
