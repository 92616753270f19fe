"""Checkpoint decisions, pure: which translated offsets to emit, and which to commit to a group on the target.

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

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["StoredCheckpoint", "Untranslated", "is_more_recent", "offsets_to_commit"]

TopicPartitionKey = tuple[str, int]


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
