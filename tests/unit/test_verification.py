"""The pure comparison of a source partition with its copy: pairing through offset runs and by content, and each
kind of finding named by offset."""

from __future__ import annotations

import time

from srm.core.offsets import Run
from srm.core.transforms import Record, build_chain
from srm.core.verification import (
    Content,
    ContentAlignment,
    Expectations,
    PartitionReport,
    RunsAlignment,
    content_of,
    downstream_range,
    sample_blocks,
)

NOW = int(time.time() * 1000)


def rec(offset: int, value: bytes | None = None, headers: list | None = None) -> Record:
    return Record("t", 0, offset, NOW + offset, b"k%d" % offset, value or b"v%d" % offset, headers)


def expect(records, chain=None, keeps_name=False):
    return Expectations("a", "b", keeps_name, chain or build_chain({})).items(iter(records))


def copies(records, start=0):
    return [(start + i, content_of(r)) for i, r in enumerate(records)]


def by_runs(source, target, runs, lost=(), span=None):
    span = span or (runs[0].upstream, runs[-1].upstream_end)
    report = PartitionReport("t", 0, "a.t", "offset runs", span, downstream_range(runs, *span) or (0, 0))
    return RunsAlignment(report, runs, list(lost), target_compacted=False).verify(expect(source), target)


def test_identical_copy_verifies_with_a_stable_digest() -> None:
    source = [rec(i) for i in range(10)]
    first = by_runs(source, copies(source), [Run(0, 0, 10)])
    again = by_runs(source, copies(source), [Run(0, 0, 10)])
    assert first.identical and first.compared == 10 and first.digest == again.digest


def test_runs_findings_are_named_by_offset() -> None:
    source = [rec(i) for i in range(10)]
    target = copies(source)
    target[3] = (3, content_of(rec(3, b"changed")))  # overwritten
    target[5], target[6] = (5, target[6][1]), (6, target[5][1])  # reordered
    del target[8]  # deleted
    target.append((10, content_of(source[1])))  # a copy after its replicated copy
    report = by_runs(source, target, [Run(0, 0, 10)])
    assert [o for o, _ in report.different.first] == [3, 5, 6]
    assert "out of order" in report.different.first[1][1]
    assert [o for o, _ in report.missing.first] == [8]
    assert not report.identical


def test_superseded_copies_are_duplicates_and_an_appended_copy_is_extra() -> None:
    source = [rec(i) for i in range(6)]
    # GIVEN a batch 3..5 written twice (the first copy at 3..5 superseded, the latest at 6..8), then record 1 again
    target = copies(source[:6]) + copies(source[3:6], 6) + [(9, content_of(source[1])), *copies([rec(6)], 10)]
    source.append(rec(6))
    report = by_runs(source, target, [Run(0, 0, 3), Run(3, 6, 3), Run(6, 10, 1)])
    assert sorted(o for o, _ in report.duplicates.first) == [3, 4, 5]
    assert [o for o, _ in report.extra.first] == [9] and "duplicate of source offset 1" in report.extra.first[0][1]


def test_absences_are_counted_apart() -> None:
    chain = build_chain(
        {
            "transforms": ("drop", "transforms"),
            "transforms.drop.type": ("Filter", "x"),
            "transforms.drop.predicate": ("tomb", "x"),
            "predicates": ("tomb", "x"),
            "predicates.tomb.type": ("RecordIsTombstone", "x"),
        }
    )
    source = [rec(0), Record("t", 0, 1, NOW, b"k", None, None), rec(4), rec(5)]
    target = copies([source[0]]) + copies(source[2:], 1)
    report = PartitionReport("t", 0, "a.t", "offset runs", (0, 6), (0, 3))
    runs = [Run(0, 0, 1), Run(4, 1, 2)]
    items = Expectations("a", "b", False, chain).items(iter(source))
    done = RunsAlignment(report, runs, [(2, 3)], target_compacted=False).verify(items, target)
    assert done.identical and done.compared == 3
    assert (done.absences.transform, done.absences.lost, done.absences.offset_gaps) == (1, 1, 1)


def test_content_alignment_names_missing_extra_and_duplicates() -> None:
    source = [rec(i) for i in range(8)]
    target = copies(source[:2]) + copies([source[3], rec(99, b"x"), source[3], *source[4:6]], 2)
    report = PartitionReport("t", 0, "a.t", "content", (0, 8), (0, 7))
    done = ContentAlignment(report, []).verify(expect(source), target)
    assert [o for o, _ in done.missing.first] == [2]
    assert [o for o, _ in done.extra.first] == [3]
    assert [o for o, _ in done.duplicates.first] == [4]
    assert done.source_range == (0, 6)  # records 6 and 7 not reached by the copy yet


def test_provenance_header_is_left_out() -> None:
    stamped = content_of(rec(0, headers=[("h", b"1"), ("srm-provenance", b"a")]))
    assert stamped == Content(b"k0", b"v0", (("h", b"1"),), NOW)


def test_sample_blocks_spread_over_the_range() -> None:
    assert sample_blocks(0, 10_000, 0.3) == [(0, 1000), (3000, 4000), (6000, 7000)]
    assert sample_blocks(0, 500, 0.01) == [(0, 500)]


def test_throttle_sleeps_to_hold_the_rate() -> None:
    from srm.control.verify import Throttle

    slept: list[float] = []
    throttle = Throttle(1000, sleep=slept.append)
    throttle.take(500)
    throttle.take(500)
    # GIVEN 1,000 records a second WHEN 1,000 are taken at once THEN it sleeps until a second has passed since the
    # first (the recorded sleeps do not pass time: each is until then)
    assert 0.4 < slept[0] <= 0.5 and 0.9 < slept[-1] <= 1.0


def test_resumed_range_starts_after_the_last_copy_below_it() -> None:
    # GIVEN records 10..19 replicated twice (first copies at 10..19, the latest at 20..29)
    runs = [Run(0, 0, 10), Run(10, 20, 10)]
    assert downstream_range(runs, 0, 20) == (0, 30)
    assert downstream_range(runs, 10, 20) == (10, 30)  # the superseded copies are judged too
    assert downstream_range(runs, 15, 20) == (25, 30)
    assert downstream_range(runs, 20, 20) is None
