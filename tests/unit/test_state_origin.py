"""srm.state: the origin of a partition's offset runs and the notes of untranslated committed offsets, on DynamoDB
(moto or LocalStack); and where MM2 keeps a flow's offset syncs."""

from __future__ import annotations

import boto3
import pytest

from srm.aws.state import DynamoDBState
from srm.config.settings import FlowSettings
from srm.core.checkpoints import StoredCheckpoint, Untranslated
from srm.core.offsets import Origin, Run
from srm.mm2.policy import DefaultReplicationPolicy
from srm.replication.delivery import offset_syncs_topic
from srm.state import StateError, StateStore


@pytest.mark.aws_adapter
def test_origin_is_recorded_by_the_first_batch_of_a_partition_without_runs_only(state: StateStore) -> None:
    asked = []

    def origin(offset: int, fresh: bool):
        return lambda: asked.append(offset) or Origin(offset, fresh)

    # GIVEN the first batch of a partition, which resumed at 500
    state.record_runs("a", "b", "t", 0, [Run(500, 0, 10)], origin=origin(500, False))
    # WHEN later batches come, from this process or a fresh one (no cached run)
    state.record_runs("a", "b", "t", 0, [Run(510, 10, 10)], origin=origin(510, False))
    fresh = DynamoDBState(boto3.client("dynamodb", region_name="us-east-1"), state.table)
    fresh.record_runs("a", "b", "t", 0, [Run(520, 20, 5)], origin=origin(520, True))

    # THEN the origin is the first batch's, asked for once; other partitions and flows have their own
    assert state.origin("a", "b", "t", 0) == Origin(500, fresh=False)
    assert asked == [500]
    assert state.runs("a", "b", "t", 0) == [Run(500, 0, 25)]
    assert state.origin("a", "b", "t", 1) is None
    assert state.origin("a", "c", "t", 0) is None


@pytest.mark.aws_adapter
def test_origin_recorded_by_a_failed_attempt_stays_when_the_state_has_no_runs_yet(state: StateStore) -> None:
    state._record_origin("a", "b", "t", 0, lambda: Origin(0, fresh=True))  # the attempt's runs were not written

    state.record_runs("a", "b", "t", 0, [Run(0, 3, 10)], origin=lambda: Origin(0, fresh=False))

    assert state.origin("a", "b", "t", 0) == Origin(0, fresh=True)


@pytest.mark.aws_adapter
def test_origin_that_cannot_be_told_fails_the_write_and_records_nothing(state: StateStore) -> None:
    def broken() -> Origin:
        raise RuntimeError("source unreachable")

    with pytest.raises(StateError, match="where the offset runs of t-0 begin: source unreachable"):
        state.record_runs("a", "b", "t", 0, [Run(0, 0, 1)], origin=broken)
    assert state.runs("a", "b", "t", 0) == []
    assert state.origin("a", "b", "t", 0) is None


@pytest.mark.aws_adapter
def test_untranslated_notes_are_kept_beside_checkpoints_and_cleared_by_the_next_one(state: StateStore) -> None:
    checkpoint = StoredCheckpoint(1_000, 1_000, "a.t", "", 5)
    state.put_checkpoints("a", "b", "g", {("t", 0): checkpoint})

    # WHEN a later committed offset of partition 0, and one of partition 1, cannot be translated
    note = Untranslated(100, "the runs begin at 500", 7)
    state.set_untranslated("a", "b", "g", {("t", 0): note, ("t", 1): Untranslated(3, "nothing replicated yet", 8)})

    # THEN both are noted, and partition 0 keeps its last checkpoint
    stored = state.checkpoints("a", "b", "g")
    assert stored.emitted == {("t", 0): checkpoint}
    assert stored.untranslated == {("t", 0): note, ("t", 1): Untranslated(3, "nothing replicated yet", 8)}

    # WHEN partition 0 gets a new checkpoint and partition 1's note is cleared, THEN no note is left
    state.put_checkpoints("a", "b", "g", {("t", 0): StoredCheckpoint(100, 100, "a.t", "", 9)})
    state.set_untranslated("a", "b", "g", {("t", 1): None})
    stored = state.checkpoints("a", "b", "g")
    assert stored.untranslated == {}
    assert set(stored.emitted) == {("t", 0)}


@pytest.mark.parametrize(
    ("location", "cluster", "topic"),
    [("source", "west", "mm2-offset-syncs.east.internal"), ("target", "east", "mm2-offset-syncs.west.internal")],
)
def test_offset_syncs_topic_is_named_after_the_other_cluster_as_mm2_does(location: str, cluster: str, topic: str):
    settings = FlowSettings.model_validate({"offset-syncs.topic.location": location})

    assert offset_syncs_topic("west", "east", settings, DefaultReplicationPolicy()) == (cluster, topic)
