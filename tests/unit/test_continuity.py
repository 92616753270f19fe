"""What cannot be replayed: the pure decisions (srm.core.continuity), translation across lost offsets, and the state
items that record them (moto)."""

from __future__ import annotations

from srm.aws.state import DynamoDBState
from srm.core.continuity import ZERO_TOPIC_ID, Loss, covering, known_topic_id, lost_range, reset_reason
from srm.core.offsets import Origin, Run, translate_checked
from srm.state import StateStore


def test_a_gap_loses_records_only_where_the_log_start_passed_the_replicated_end():
    assert lost_range(10, 10, 50) is None  # the batch continues the partition
    assert lost_range(10, 12, 5) is None  # transaction markers, compacted or aborted records: nothing lost
    assert lost_range(10, 12, 10) is None
    assert lost_range(10, 25, 25) == (10, 25)  # the event source reset to the log start
    assert lost_range(10, 30, 25) == (10, 25)  # offsets 25..29 after the log start were compacted away
    assert lost_range(10, 20, 25) == (10, 20)  # purged further after the batch was read
    assert lost_range(10, 5, 25) is None  # below the replicated end: not a gap
    assert Loss("t", 3, 10, 25).count == 15 and "t-3 offsets 10..24 (15 offsets)" in Loss("t", 3, 10, 25).describe()


def test_a_batch_below_the_replicated_end_is_a_reset_only_on_a_new_topic_id_or_a_shorter_log():
    assert reset_reason(30, 10, None, None) is not None  # the log ends below what was replicated
    assert reset_reason(30, 30, None, None) is None  # a redelivery
    assert reset_reason(30, 50, "id-1", "id-1") is None
    assert "id-1 is now id-2" in (reset_reason(30, 50, "id-1", "id-2") or "")
    assert reset_reason(30, 50, None, "id-2") is None  # no recorded id: only the log end can tell
    assert reset_reason(30, None, "id-1", None) is None


def test_the_zero_topic_id_means_the_broker_has_none():
    assert known_topic_id(ZERO_TOPIC_ID) is None and known_topic_id(None) is None and known_topic_id("") is None
    assert known_topic_id("Xq3WJmXlQ2a7b9zZ1cTtAg") == "Xq3WJmXlQ2a7b9zZ1cTtAg"
    assert covering([(10, 25), (40, 41)], 40) == (40, 41) and covering([(10, 25)], 25) is None


def test_translation_refuses_committed_offsets_in_a_lost_range_and_is_exact_around_it():
    # runs joined downstream across the purged offsets 10..24 (the gap hides no replicated record)
    runs = [Run(0, 0, 10), Run(25, 10, 5)]
    origin = lambda: Origin(0, fresh=True)  # noqa: E731
    for offset in (10, 20, 24):
        downstream, why = translate_checked(runs, offset, origin, None, [(10, 25)])
        assert downstream is None and "10..24 were purged" in why
    assert translate_checked(runs, 9, origin, None, [(10, 25)]) == (9, "")
    assert translate_checked(runs, 25, origin, None, [(10, 25)]) == (10, "")
    assert translate_checked(runs, 17, origin, None) == (10, "")  # what it answered without the record of the loss


def test_state_records_a_loss_once_and_grows_it(state: StateStore):
    assert state.record_loss("a", "b", "t", 0, 10, 20) == 10
    assert state.record_loss("a", "b", "t", 0, 10, 20) == 0  # a retried batch reports it again: not counted twice
    assert state.record_loss("a", "b", "t", 0, 10, 25) == 5  # purged further while the batch was retried
    assert state.record_loss("a", "b", "t", 0, 10, 22) == 0
    state.record_loss("a", "b", "t", 1, 0, 3)
    assert state.lost_ranges("a", "b", "t", 0) == [(10, 25)]
    assert state.flow_lost_ranges("a", "b") == {("t", 0): [(10, 25)], ("t", 1): [(0, 3)]}


def test_replicated_end_reads_the_last_run_and_then_serves_continuations_from_the_cache(state: StateStore):
    assert state.replicated_end("a", "b", "t", 0, 0) is None
    state.record_runs("a", "b", "t", 0, [Run(0, 0, 10)], origin=lambda: Origin(0, True, "id-1"))
    state.record_runs("a", "b", "t", 0, [Run(12, 10, 3)])
    fresh = DynamoDBState(state._db, state.table)  # another container: nothing cached
    assert fresh.replicated_end("a", "b", "t", 0, 40) == 15
    assert fresh.replicated_end("a", "b", "t", 0, 15) == 15
    assert fresh.origin("a", "b", "t", 0) == Origin(0, True, "id-1")


def test_the_processed_mark_never_moves_back(state: StateStore):
    assert state.processed("a", "b", "t", 0) is None
    state.mark_processed("a", "b", "t", 0, 20)
    state.mark_processed("a", "b", "t", 0, 15)
    assert state.processed("a", "b", "t", 0) == 20


def test_archiving_a_partition_hides_its_old_incarnation_from_translation(state: StateStore):
    state.record_runs("a", "b", "t", 0, [Run(0, 0, 30)], origin=lambda: Origin(0, True))
    state.record_runs("a", "b", "t", 1, [Run(0, 0, 5)], origin=lambda: Origin(0, True))
    state.record_loss("a", "b", "t", 0, 30, 40)
    state.mark_processed("a", "b", "t", 0, 45)
    state.archive_partition("a", "b", "t", 0, "123")
    assert state.runs("a", "b", "t", 0) == [] and state.origin("a", "b", "t", 0) is None
    assert state.lost_ranges("a", "b", "t", 0) == [] and state.processed("a", "b", "t", 0) is None
    assert state.runs("a", "b", "t", 1) == [Run(0, 0, 5)]  # the other partition is untouched
    assert [int(i["sk"]["S"]) for i in state._items("old#123#runs#a#b#t#0")] == [0]
    # the next batch starts the partition afresh: new runs with their own origin
    state.record_runs("a", "b", "t", 0, [Run(0, 30, 4)], origin=lambda: Origin(0, True, "id-2"))
    assert state.runs("a", "b", "t", 0) == [Run(0, 30, 4)]
    assert state.origin("a", "b", "t", 0) == Origin(0, True, "id-2")
