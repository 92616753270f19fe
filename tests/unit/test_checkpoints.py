"""srm.core.checkpoints: MM2's monotonic checkpoint rule and the rules for committing offsets to target groups."""

from __future__ import annotations

import pytest

from srm.core.checkpoints import StoredCheckpoint, is_more_recent, offsets_to_commit

PREVIOUS = StoredCheckpoint(upstream_offset=50, downstream_offset=40, remote_topic="a.t")


@pytest.mark.parametrize(
    ("upstream", "downstream", "previous", "emit"),
    [
        (10, 8, None, True),  # first checkpoint of the partition
        (60, 45, PREVIOUS, True),  # downstream advanced
        (50, 41, PREVIOUS, True),  # same upstream, later copy (a redelivered batch)
        (50, 40, PREVIOUS, False),  # repeated
        (55, 40, PREVIOUS, False),  # upstream moved, downstream did not: nothing new to say
        (55, 39, PREVIOUS, False),  # would move the consumer backwards on the target
        (20, 15, PREVIOUS, True),  # the upstream group rewound: follow it
    ],
)
def test_is_more_recent_follows_mm2_monotonic_rule(upstream, downstream, previous, emit):
    assert is_more_recent(upstream, downstream, previous) is emit


def test_offsets_to_commit_never_backwards_never_past_end():
    translated = {("a.t", 0): 10, ("a.t", 1): 20, ("a.t", 2): 30, ("a.t", 3): 40}
    committed = {("a.t", 0): 5, ("a.t", 1): 25, ("a.t", 2): 30}
    ends = {("a.t", 0): 100, ("a.t", 1): 100, ("a.t", 2): 100, ("a.t", 3): 39}

    assert offsets_to_commit(translated, committed, ends) == {("a.t", 0): 10}


def test_offsets_to_commit_new_partition_of_group_is_committed_up_to_end():
    assert offsets_to_commit({("a.t", 0): 7}, {}, {("a.t", 0): 7}) == {("a.t", 0): 7}
    assert offsets_to_commit({("a.t", 0): 7}, {}, {}) == {}
