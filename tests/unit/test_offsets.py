"""srm.core.offsets: runs of exact upstream → downstream mappings, and translation of committed offsets.

The property tests replay random deliveries of an event source (upstream gaps, downstream gaps, a truncated log
start, failed batches redelivered from the committed offset) and check the module docstring's invariants and
``translate`` against a brute-force oracle over the explicit ``(upstream, downstream)`` pairs.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srm.core.offsets import Run, merge_runs, runs_from_pairs, translate, translate_back

Pairs = list[tuple[int, int]]


def expand(runs: list[Run]) -> dict[int, int]:
    """Every upstream offset the runs map, with its downstream offset."""
    return {r.upstream + i: r.downstream + i for r in runs for i in range(r.length)}


def oracle(latest: dict[int, int], committed: int, quiet_until: int | None = None) -> int | None:
    """Brute force: the latest downstream copy of the first replicated upstream record >= ``committed``; past the
    last replicated record, just after its copy when ``committed`` is right after it (or known quiet), else None."""
    at_or_after = [u for u in latest if u >= committed]
    if at_or_after:
        return latest[min(at_or_after)]
    if not latest:
        return None
    last = max(latest)
    if committed == last + 1 or (quiet_until is not None and committed <= quiet_until):
        return latest[last] + 1
    return None


def assert_sorted_and_disjoint(runs: list[Run]) -> None:
    for before, after in itertools.pairwise(runs):
        assert before.upstream_end <= after.upstream, f"overlap or disorder: {before} then {after}"
        assert not after.follows(before), f"{after} continues {before} on both sides but is a separate run"


# ---------------------------------------------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------------------------------------------
def test_run_invalid_length_or_negative_offsets_raise():
    for bad in ((0, 0, 0), (-1, 0, 1), (0, -1, 1)):
        with pytest.raises(ValueError):
            Run(*bad)


def test_runs_from_pairs_splits_at_every_gap_on_either_side():
    pairs = [(0, 0), (1, 1), (2, 5), (3, 6), (5, 7), (6, 8)]

    assert runs_from_pairs(pairs) == [Run(0, 0, 2), Run(2, 5, 2), Run(5, 7, 2)]
    assert runs_from_pairs([]) == []


def test_merge_runs_contiguous_batch_extends_the_last_run():
    assert merge_runs([Run(0, 0, 10)], [Run(10, 10, 5)]) == [Run(0, 0, 15)]
    assert merge_runs([Run(0, 0, 10)], [Run(10, 11, 5)]) == [Run(0, 0, 10), Run(10, 11, 5)]
    assert merge_runs([Run(0, 0, 10)], []) == [Run(0, 0, 10)]


def test_merge_runs_redelivered_batch_replaces_older_copies():
    # GIVEN 0..9 written at 0..9, then 5..9 redelivered and written again at 10..14
    runs = merge_runs([Run(0, 0, 10)], runs_from_pairs([(5, 10), (6, 11), (7, 12), (8, 13), (9, 14)]))

    # THEN the older copies of 5..9 are gone and translation points at the latest ones
    assert runs == [Run(0, 0, 5), Run(5, 10, 5)]
    assert translate(runs, 3) == 3
    assert translate(runs, 5) == 10
    assert translate(runs, 10) == 15


def test_translate_exact_across_upstream_gap_and_past_the_end():
    # GIVEN upstream 10..14 compacted away (or transaction markers)
    runs = [Run(0, 100, 10), Run(15, 110, 5)]

    assert [translate(runs, c) for c in (0, 5, 9, 10, 12, 15, 19, 20)] == [100, 105, 109, 110, 110, 110, 114, 115]
    assert translate(runs, 21) is None
    assert translate(runs, 21, quiet_until=25) == 115
    assert translate(runs, 25, quiet_until=25) == 115
    assert translate(runs, 26, quiet_until=25) is None
    assert translate([], 0) is None


def test_translate_below_truncated_log_start_resumes_at_first_copy():
    assert translate([Run(1_000, 7, 3)], 0) == 7
    assert translate([Run(1_000, 7, 3)], 1_001) == 8


# ---------------------------------------------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------------------------------------------
@dataclass
class History:
    deliveries: list[Pairs]  # in delivery order; each one batch of the event source
    quiet: int  # how far past the last record the source is known to be quiet


@st.composite
def histories(draw: st.DrawFn) -> History:
    """An event source replaying a partition: batches from the committed offset; failed batches are redelivered."""
    log_start = draw(st.integers(0, 30))
    gaps = draw(st.lists(st.sampled_from([0, 0, 0, 0, 1, 2, 7]), min_size=1, max_size=60))
    records, u = [], log_start
    for gap in gaps:
        u += gap  # compaction, transaction markers, deleted records
        records.append(u)
        u += 1
    downstream = draw(st.integers(0, 20))
    deliveries: list[Pairs] = []
    committed = 0
    for _ in range(draw(st.integers(0, 12))):
        if committed >= len(records):
            break
        k = draw(st.integers(1, len(records) - committed))
        batch = []
        for upstream in records[committed : committed + k]:
            downstream += draw(st.sampled_from([0, 0, 0, 0, 0, 1, 3]))  # markers / other writers downstream
            batch.append((upstream, downstream))
            downstream += 1
        deliveries.append(batch)
        failed = draw(st.booleans())
        committed += draw(st.integers(0, k - 1)) if failed else k
    if committed < len(records) or not deliveries:
        # the source keeps going: the rest is delivered, past anything a failed batch reached
        batch = []
        for upstream in records[committed:]:
            batch.append((upstream, downstream))
            downstream += 1
        deliveries.append(batch)
    return History(deliveries, draw(st.integers(0, 5)))


def region_for(runs: list[Run], first: int) -> tuple[int, int]:
    """The slice merge_runs needs: every run ending after ``first`` plus the run just before them."""
    i = bisect.bisect_right([r.upstream_end for r in runs], first)
    return max(0, i - 1), len(runs)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_merge_runs_any_history_keeps_invariants_and_latest_write_wins(history):
    runs: list[Run] = []
    for batch in history.deliveries:
        before = expand(runs)
        new = runs_from_pairs(batch)
        lo, hi = region_for(runs, batch[0][0])

        merged = merge_runs(runs, new)

        # A: sorted, disjoint; C: maximal runs
        assert_sorted_and_disjoint(merged)
        # the batch replaces every mapping from its first offset on; older ones below it are kept
        expected = {u: d for u, d in before.items() if u < batch[0][0]} | dict(batch)
        assert expand(merged) == expected
        # merging only the documented region gives the same runs
        assert runs[:lo] + merge_runs(runs[lo:hi], new) == merged
        runs = merged


@settings(max_examples=150, deadline=None)
@given(histories())
def test_translate_every_committed_offset_equals_brute_force(history):
    # GIVEN the runs of a history and every pair ever written (latest write of each upstream offset wins)
    runs: list[Run] = []
    latest: dict[int, int] = {}
    frontier = -1
    for batch in history.deliveries:
        runs = merge_runs(runs, runs_from_pairs(batch))
        latest.update(batch)
        reached = batch[-1][0]
        if reached < frontier:
            continue  # a shorter redelivery: older copies past it are superseded later, the oracle would differ
        frontier = reached
        assert expand(runs) == latest
        last = max(latest)
        quiet_until = last + 1 + history.quiet

        for committed in range(0, last + history.quiet + 4):
            # WHEN a group's committed offset is translated, THEN it is exactly the brute-force answer
            assert translate(runs, committed) == oracle(latest, committed), committed
            assert translate(runs, committed, quiet_until=quiet_until) == oracle(latest, committed, quiet_until)
            # and the runs from the one before the first that ends after it are enough
            lo, _ = region_for(runs, committed)
            assert translate(runs[lo:], committed) == translate(runs, committed)


@settings(max_examples=100, deadline=None)
@given(
    start=st.tuples(st.integers(0, 10**12), st.integers(0, 10**12)),
    sizes=st.lists(st.integers(1, 500), min_size=1, max_size=30),
)
def test_merge_runs_steady_contiguous_stream_stays_one_run(start, sizes):
    upstream, downstream = start
    runs: list[Run] = []
    for size in sizes:
        batch = [(upstream + i, downstream + i) for i in range(size)]
        runs = merge_runs(runs, runs_from_pairs(batch))
        upstream, downstream = upstream + size, downstream + size

    assert runs == [Run(start[0], start[1], sum(sizes))]
    assert translate(runs, upstream) == downstream


# ---------------------------------------------------------------------------------------------------------------
# Failback: translating a position on the remote topic back to the source
# ---------------------------------------------------------------------------------------------------------------
def back_oracle(latest: dict[int, int], downstream_offset: int) -> int | None:
    """Brute force: the upstream offset of the first latest copy at or after the position; past the last copy,
    right after its record when the position is right after it, else None."""
    at_or_after = sorted((d, u) for u, d in latest.items() if d >= downstream_offset)
    if at_or_after:
        return at_or_after[0][1]
    if not latest:
        return None
    last = max(latest)
    return last + 1 if downstream_offset == latest[last] + 1 else None


def test_translate_back_exact_inside_runs_and_across_gaps():
    # GIVEN upstream 10..14 were markers, and downstream 110..119 hold a failed attempt's copies
    runs = [Run(0, 100, 10), Run(15, 120, 5)]

    assert [translate_back(runs, d) for d in (0, 100, 105, 109, 110, 115, 120, 124, 125)] == [
        0,
        0,
        5,
        9,
        15,
        15,
        15,
        19,
        20,
    ]
    assert translate_back(runs, 126) is None
    assert translate_back([], 0) is None


@settings(max_examples=150, deadline=None)
@given(histories())
def test_translate_back_every_position_equals_brute_force_and_never_skips(history):
    runs: list[Run] = []
    latest: dict[int, int] = {}
    for batch in history.deliveries:
        runs = merge_runs(runs, runs_from_pairs(batch))
        latest.update(batch)
    latest = expand(runs)
    last_downstream = max(latest.values())
    for position in range(0, last_downstream + 4):
        back = translate_back(runs, position)
        assert back == back_oracle(latest, position), position
        if back is not None:
            # never skips: every record whose latest copy the consumer had not reached is at or after the answer
            assert all(u >= back for u, d in latest.items() if d >= position)
