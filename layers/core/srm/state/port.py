"""The state port: every operation replication, control and the handlers need on srm's state, in srm's terms.

Each key has one writer. The member that holds a source partition writes what is kept per partition (its offset runs,
their origin, lost ranges, what was skipped past the last run, its topic resets); the flow's leader writes the rest
(checkpoints, topic and event source mappings); a flow status fact has one writer each. An adapter makes a stale
writer's write fail (:class:`~srm.state.records.StateFencedError`) rather than land: DynamoDB by conditional writes,
the Kafka adapter by the broker (:meth:`StateStore.claim_partitions`, :meth:`StateStore.claim_leadership`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.core.continuity import LostRange
from srm.core.offsets import Origin, Run
from srm.state.records import EventSourceMappingRecord, GroupCheckpoints, LossRecord, ResetRecord, TopicMappingRecord

__all__ = ["StateStore"]


class StateStore(Protocol):
    """srm's state of every flow; every method raises :class:`~srm.state.records.StateError` (retriable) when the
    state cannot be read or written."""

    # -- ownership ---------------------------------------------------------------------------------------------
    def claim_partitions(self, source: str, target: str, topic: str, partitions: Sequence[int]) -> None:
        """This process holds these source partitions now: earlier holders can no longer write their state, and
        what they wrote is read before this returns."""

    def release_partitions(self, source: str, target: str, topic: str, partitions: Sequence[int]) -> None:
        """This process gives these partitions up (the group moves them): their next holder need not fence it."""

    def claim_leadership(self, source: str, target: str) -> None:
        """This process leads the flow now: an earlier leader can no longer write the flow's state."""

    def release_leadership(self, source: str, target: str) -> None:
        """This process no longer leads the flow."""

    # -- offset runs (see srm.core.offsets) ----------------------------------------------------------------------
    def record_runs(
        self,
        source: str,
        target: str,
        topic: str,
        partition: int,
        new: Sequence[Run],
        *,
        origin: Callable[[], Origin] | None = None,
    ) -> None:
        """Store a batch's runs for one partition (merged with :func:`srm.core.offsets.merge_runs`). When the
        partition has no run yet, ``origin()`` is recorded first, unless an origin is there already."""

    def origin(self, source: str, target: str, topic: str, partition: int) -> Origin | None:
        """Where the partition's runs begin, if recorded."""

    def runs(self, source: str, target: str, topic: str, partition: int) -> list[Run]:
        """Every run of a partition, in upstream order."""

    def runs_around(self, source: str, target: str, topic: str, partition: int, upstream_offset: int) -> list[Run]:
        """What :func:`srm.core.offsets.translate` needs for one offset: the run starting at or below it and the
        first run after it."""

    # -- what cannot be replayed -----------------------------------------------------------------------------------
    def replicated_end(self, source: str, target: str, topic: str, partition: int, first: int) -> int | None:
        """The end of the partition's last offset run (None: no run), for a batch starting at ``first``."""

    def mark_processed(self, source: str, target: str, topic: str, partition: int, next_offset: int) -> None:
        """The mirror dealt with the partition up to ``next_offset`` though its runs end below (the batch's last
        records were skipped); never moves back."""

    def processed(self, source: str, target: str, topic: str, partition: int) -> int | None:
        """What :meth:`mark_processed` last noted, if anything."""

    def record_loss(
        self, source: str, target: str, topic: str, partition: int, start: int, end: int, reason: str = ""
    ) -> int:
        """Record offsets ``[start, end)`` as lost; how many of them were not recorded yet (0 when a retried batch
        reports the same loss again). ``reason`` empty: purged on the source before they were replicated; else why
        they were skipped on purpose (an operator moved the partition's position past them)."""

    def losses(self, source: str, target: str) -> list[LossRecord]:
        """Every lost range of the flow's current incarnations, by topic, partition and offset."""

    def lost_ranges(self, source: str, target: str, topic: str, partition: int) -> list[LostRange]:
        """The lost ranges ``[start, end)`` of one partition (``(start, end, reason)`` for a skipped one)."""

    def flow_lost_ranges(self, source: str, target: str) -> dict[tuple[str, int], list[LostRange]]:
        """Every lost range of the flow, by topic-partition."""

    def archive_partition(self, source: str, target: str, topic: str, partition: int, label: str) -> None:
        """Set aside what the state holds about a partition's current incarnation (runs, origin, lost ranges, what
        was skipped) under ``label``: translation no longer sees it, the next batch starts the partition afresh."""

    def record_reset(self, source: str, target: str, reset: ResetRecord) -> None: ...

    def resets(self, source: str, target: str) -> list[ResetRecord]:
        """Every topic reset recorded for the flow, oldest first per partition."""

    # -- checkpoints -------------------------------------------------------------------------------------------------
    def checkpoints(self, source: str, target: str, group: str) -> GroupCheckpoints: ...

    def put_checkpoints(
        self, source: str, target: str, group: str, checkpoints: dict[tuple[str, int], StoredCheckpoint]
    ) -> None: ...

    def set_untranslated(
        self, source: str, target: str, group: str, changes: Mapping[tuple[str, int], Untranslated | None]
    ) -> None:
        """Note (or, for None, clear) why a group's committed offset got no checkpoint, leaving the checkpoint."""

    # -- flow status -------------------------------------------------------------------------------------------------
    def flow_status(self, source: str, target: str) -> dict[str, int | str]:
        """Facts about a flow written by its functions (e.g. ``last_checkpoint_ms``)."""

    def update_flow_status(self, source: str, target: str, **facts: int | str) -> None:
        """Set some facts about a flow, leaving the others as they are."""

    # -- topic mappings and event source mappings (the topic control plane) ---------------------------------------
    def topic_mappings(self, source: str, target: str) -> dict[str, TopicMappingRecord]:
        """Every topic ``source->target`` replicates (as of its last topic sync), by source topic."""

    def put_topic_mapping(self, source: str, target: str, record: TopicMappingRecord) -> None: ...

    def delete_topic_mapping(self, source: str, target: str, topic: str) -> None: ...

    def event_source_mappings(self, source: str, target: str) -> dict[str, EventSourceMappingRecord]:
        """The event source mapping of every source topic of ``source->target`` that has one."""

    def put_event_source_mapping(self, source: str, target: str, record: EventSourceMappingRecord) -> None: ...

    def delete_event_source_mapping(self, source: str, target: str, topic: str) -> None: ...
