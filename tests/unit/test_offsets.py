"""srm.core.offsets: runs of exact upstream → downstream mappings, and translation of committed offsets.

The property tests replay random deliveries of an event source (upstream gaps, downstream gaps, a truncated log
start, failed batches redelivered from the committed offset) and check the module docstring's invariants and
``translate`` against a brute-force oracle over the explicit ``(upstream, downstream)`` pairs.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from srm.core.offsets import (
    Origin,
    Run,
    doubt,
    doubt_back,
    in_flux,
    merge_runs,
    runs_from_pairs,
    translate,
    translate_back,
    translate_checked,
)

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
    records: list[int] = field(default_factory=list)  # the upstream offsets holding a record to replicate
    log_start: int = 0


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
    return History(deliveries, draw(st.integers(0, 5)), records, log_start)


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
    assert not in_flux(runs)  # settled runs are never refused
    last_downstream = max(latest.values())
    for position in range(0, last_downstream + 4):
        back = translate_back(runs, position)
        assert back == back_oracle(latest, position), position
        if back is not None:
            # never skips: every record whose latest copy the consumer had not reached is at or after the answer
            assert all(u >= back for u, d in latest.items() if d >= position)


# ---------------------------------------------------------------------------------------------------------------
# Origins and doubts: translation never takes a lost or restored state on trust
# ---------------------------------------------------------------------------------------------------------------
def records_at(*spans: range) -> list[int]:
    return [u for span in spans for u in span]


def quiet_over(records: list[int]):
    """The source as the failover asks it: no record in [start, end)."""
    return lambda start, end: not any(start <= u < end for u in records)


def no_origin_asked() -> Origin | None:
    raise AssertionError("the origin is asked for only below the first run")


def test_translate_checked_mm2_restart_scenario_state_kept_maps_rewind_exactly():
    # GIVEN 500 records replicated, srm run restarted with its state kept, 500 more replicated
    runs = merge_runs([Run(0, 0, 500)], [Run(500, 500, 500)])
    source = quiet_over(records_at(range(1000)))

    # WHEN the group rewinds to 100, THEN it translates to the real copy of record 100
    assert translate_checked(runs, 100, no_origin_asked, source) == (100, "")
    assert translate_checked(runs, 1000, no_origin_asked, source) == (1000, "")


def test_translate_checked_state_lost_offsets_below_resumed_origin_get_none_and_why():
    # GIVEN the state was lost after 500 records: the mirror resumed at 500 from its committed offset
    runs = [Run(500, 500, 500)]
    origin = Origin(500, fresh=False)
    source = quiet_over(records_at(range(1000)))

    # WHEN the group rewinds to 100, THEN no translation (not 500: that would skip 400 records), and why
    downstream, why = translate_checked(runs, 100, lambda: origin, source)
    assert downstream is None
    assert "begin at 500" in why and "resumed" in why
    # offsets from the origin on translate as before
    assert translate_checked(runs, 500, lambda: origin, source) == (500, "")
    assert translate_checked(runs, 700, lambda: origin, source) == (700, "")
    # nothing to ask the source: no translation either
    assert translate_checked(runs, 100, lambda: origin, None)[0] is None
    # once retention deleted the records below the origin, nothing is skipped any more
    assert translate_checked(runs, 100, lambda: origin, quiet_over(records_at(range(500, 1000)))) == (500, "")


def test_translate_checked_fresh_origin_below_first_run_resumes_at_first_copy():
    # GIVEN the mirror started at the log start 1000 (older records deleted before it started)
    runs = [Run(1_000, 7, 3)]

    assert translate_checked(runs, 0, lambda: Origin(1_000, fresh=True), None) == (7, "")
    assert translate_checked(runs, 1_001, no_origin_asked, None) == (8, "")


def test_translate_checked_without_origin_below_first_run_asks_the_source():
    runs = [Run(1_000, 7, 3)]

    assert translate_checked(runs, 0, lambda: None, quiet_over(records_at(range(1_000, 1_003)))) == (7, "")
    downstream, why = translate_checked(runs, 0, lambda: None, quiet_over(records_at(range(0, 1_003))))
    assert downstream is None and "does not record where" in why


def test_translate_checked_gap_with_downstream_writes_is_checked_against_the_source():
    # GIVEN a state restored from an older backup: the runs of 500..999 are gone, their copies are downstream
    runs = [Run(0, 0, 500), Run(1_000, 1_000, 500)]
    source = quiet_over(records_at(range(1_500)))

    downstream, why = translate_checked(runs, 700, no_origin_asked, source)
    assert downstream is None and "500..999" in why and "500 record(s)" in why
    assert translate_checked(runs, 499, no_origin_asked, source) == (499, "")
    assert translate_checked(runs, 1_000, no_origin_asked, source) == (1_000, "")
    # a failed attempt's copies across transaction markers: the source has nothing there, the answer stands
    markers = [Run(0, 100, 10), Run(12, 120, 5)]
    assert translate_checked(markers, 10, no_origin_asked, quiet_over(records_at(range(10), range(12, 17)))) == (
        120,
        "",
    )


def test_doubt_gap_without_downstream_writes_needs_no_check():
    # upstream 10..14 compacted away or markers; nothing was written downstream across them
    runs = [Run(0, 100, 10), Run(15, 110, 5)]

    assert [doubt(runs, c, None) for c in (0, 9, 10, 14, 15, 20, 25)] == [None] * 7


def test_doubt_back_below_first_run_only_when_origin_resumed_or_unknown():
    runs = [Run(500, 1_000, 10)]

    assert doubt_back(runs, 1_000, no_origin_asked) is None
    assert doubt_back(runs, 999, lambda: Origin(500, fresh=True)) is None
    assert "resumed" in (doubt_back(runs, 999, lambda: Origin(500, fresh=False)) or "")
    assert doubt_back(runs, 999, lambda: None) is not None


def test_doubt_back_between_runs_only_where_upstream_records_are_unaccounted_for():
    # GIVEN upstream 0..9 and 20..29 copied to 0..9 and 10..19 (downstream contiguous), upstream 10..19 not in the runs
    runs = [Run(0, 0, 10), Run(20, 10, 10)]
    quiet_asked: list[tuple[int, int]] = []

    def holds_records(start: int, end: int) -> bool:
        quiet_asked.append((start, end))
        return False

    # THEN inside a run nothing is asked; between the runs (none here: downstream is contiguous) neither
    assert [doubt_back(runs, d, no_origin_asked, holds_records) for d in (0, 9, 10, 19, 20)] == [None] * 5
    assert quiet_asked == []

    # GIVEN the same upstream runs written downstream with a gap (EOS commit markers, or a run not read yet)
    gapped = [Run(0, 0, 10), Run(20, 15, 10)]
    # THEN a consumer in the downstream gap would resume at upstream 20: sure only if upstream 10..19 holds no record
    assert "10..19 are missing" in (doubt_back(gapped, 12, no_origin_asked, holds_records) or "")
    assert quiet_asked == [(10, 20)]
    assert doubt_back(gapped, 12, no_origin_asked, lambda start, end: True) is None
    assert "missing" in (doubt_back(gapped, 12, no_origin_asked) or "")  # the source cannot be asked: unsure
    # … while a gap of markers on both sides (upstream contiguous up to the next run) needs no question
    markers = [Run(0, 0, 10), Run(10, 11, 10)]
    assert doubt_back(markers, 10, no_origin_asked, holds_records) is None and translate_back(markers, 10) == 10


def test_translate_back_refuses_runs_read_mid_rewrite():
    # GIVEN upstream 0..19 were copied to 0..19 in runs split by a marker at 10, and a redelivery of upstream 0..19
    # to 100..119 has re-pointed the first run but not yet the second
    settled = [Run(0, 0, 10), Run(11, 10, 9)]
    mid_rewrite = [Run(0, 100, 10), Run(11, 10, 9)]

    # THEN the consumer at downstream 5 (upstream 5) is never sent to upstream 11, skipping 5..9
    assert translate_back(settled, 5) == 5
    assert translate_back(mid_rewrite, 5) is None
    assert "rewritten" in (doubt_back(mid_rewrite, 5, no_origin_asked) or "")
    assert doubt_back(settled, 5, no_origin_asked) is None
    assert not in_flux(settled) and in_flux(mid_rewrite)


def replay(history: History, restore_before: int, restore_to: int):
    """The state as the mirror writes it, with the state replaced before delivery ``restore_before`` by the state
    after delivery ``restore_to`` (-1: lost entirely). Returns the final runs and origin, and every copy ever
    written downstream of each upstream record (the truth, whatever the state says)."""
    runs: list[Run] = []
    origin: Origin | None = None
    snapshots: list[tuple[list[Run], Origin | None]] = []
    copies: dict[int, list[int]] = defaultdict(list)
    for i, batch in enumerate(history.deliveries):
        if i == restore_before:
            runs, origin = snapshots[restore_to] if restore_to >= 0 else ([], None)
        if not runs and origin is None:  # what StateStore.record_runs does with the mirror's origin
            first = batch[0][0]
            origin = Origin(first, fresh=first == 0 or first <= history.log_start)
        runs = merge_runs(runs, runs_from_pairs(batch))
        for u, d in batch:
            copies[u].append(d)
        snapshots.append((runs, origin))
    if restore_before == len(history.deliveries):
        runs, origin = snapshots[restore_to] if restore_to >= 0 else ([], None)
    return runs, origin, copies


@st.composite
def lossy_histories(draw: st.DrawFn) -> tuple[History, int, int]:
    history = draw(histories())
    restore_before = draw(st.integers(0, len(history.deliveries)))
    return history, restore_before, draw(st.integers(-1, restore_before - 1))


@settings(max_examples=300, deadline=None)
@given(lossy_histories())
def test_translate_checked_never_skips_a_replicated_record_whatever_state_was_lost(case):
    # GIVEN a history whose state was lost, or restored from an older snapshot, at some point
    history, restore_before, restore_to = case
    runs, origin, copies = replay(history, restore_before, restore_to)
    source = quiet_over(history.records)

    for committed in range(0, max(history.records) + 4):
        # WHEN a committed offset is translated
        downstream, why = translate_checked(runs, committed, lambda: origin, source)

        # THEN a consumer resuming there downstream finds a copy of every record at or after the committed offset
        if downstream is None:
            assert why
            continue
        skipped = [u for u, ds in copies.items() if u >= committed and max(ds) < downstream]
        assert not skipped, (committed, downstream, skipped)


@settings(max_examples=150, deadline=None)
@given(histories())
def test_translate_checked_with_nothing_lost_is_exact(history):
    # GIVEN a complete state of a history the event source delivered to its end
    runs, origin, _ = replay(history, len(history.deliveries) + 1, -1)
    latest = expand(runs)
    source = quiet_over(history.records)

    for committed in range(0, max(history.records) + 4):
        # THEN checking never withholds an answer: it is the brute-force one (the source is quiet past the end)
        assert translate_checked(runs, committed, lambda: origin, source) == (oracle(latest, committed, 10**9), "")
