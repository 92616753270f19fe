"""Exact upstream → downstream offset mapping, kept as runs, and translation of committed offsets.

A *run* says: the ``length`` records at upstream offsets ``upstream … upstream+length-1`` of a source partition
were written, in order, at downstream offsets ``downstream … downstream+length-1`` of the remote partition.

Invariants of a partition's run list (what :func:`merge_runs` keeps and :func:`translate` relies on):

A. Runs are sorted by ``upstream`` and do not overlap upstream: every replicated upstream offset is in at most
   one run, and its mapping is the *latest* write of that record (a redelivered batch replaces older mappings).
B. Consecutive runs are consecutive deliveries of the event source: the upstream offsets between two runs
   hold no record the source would deliver (compacted away, transaction markers, aborted or deleted records), or
   only records the mirror left out on purpose (the loop guard's, dead letters, records a transform dropped), which
   a group resumes past.
C. A run is extended only while both sides stay contiguous; any gap on either side starts a new run, so a
   steady partition is one run and state costs one write per batch, not per record.
D. The first run starts at or after the partition's :class:`Origin`: the first offset of the first batch the mirror
   recorded while the state had no run of the partition, and whether that was the log start (*fresh*: no record
   below it was ever there to replicate) or an offset the event source resumed from (records below it may have
   been replicated by a mirror whose runs are gone).

Invariants B and D hold while the state is complete. A state that was lost, or restored from an older backup,
breaks them: the runs then miss records that were replicated, and translating across the gap would skip them.
:func:`doubt` names what translation takes on trust — the offsets below a resumed origin, and an upstream gap
across which records were written downstream — and the caller checks that span against the source (it must hold
no record the mirror would replicate) before it uses the answer. A gap with no downstream writes across it hides
no replicated record, so B needs no check there; the same holds inside a batch, whose runs are consecutive
deliveries by construction.

Translation of a committed upstream offset ``C`` (the next record the group would read) is the downstream
offset of the latest copy of the first replicated record at or after ``C`` — exact, never rounded down. With no
redeliveries that is just after the last replicated record below ``C``; after a redelivery it skips the
superseded first copies, so a consumer that fails over reads every record once. Past the last replicated
record the answer is "unknown" (None) unless the caller has proven there is no record there to replicate.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from operator import attrgetter

from srm.core.continuity import LostRange, covering, skip_reason

__all__ = [
    "Doubt",
    "Origin",
    "Run",
    "doubt",
    "doubt_back",
    "in_flux",
    "merge_runs",
    "runs_from_pairs",
    "translate",
    "translate_back",
    "translate_checked",
]


@dataclass(frozen=True, order=True)
class Run:
    upstream: int
    downstream: int
    length: int

    def __post_init__(self) -> None:
        if self.length < 1 or self.upstream < 0 or self.downstream < 0:
            raise ValueError(f"invalid run {self!r}")

    @property
    def upstream_end(self) -> int:
        """One past the last upstream offset of the run."""
        return self.upstream + self.length

    @property
    def downstream_end(self) -> int:
        """One past the last downstream offset of the run."""
        return self.downstream + self.length

    def follows(self, other: Run) -> bool:
        """True when this run continues ``other`` on both sides without a gap."""
        return self.upstream == other.upstream_end and self.downstream == other.downstream_end

    def cut_before(self, upstream: int) -> Run | None:
        """The part of this run below ``upstream`` (None if nothing is left)."""
        if upstream <= self.upstream:
            return None
        return Run(self.upstream, self.downstream, min(self.length, upstream - self.upstream))


@dataclass(frozen=True)
class Origin:
    """Where a partition's offset runs begin (invariant D)."""

    offset: int  # the first offset of the first batch recorded while the partition had no run
    fresh: bool  # that offset was the partition's log start: there was nothing below it to replicate
    topic_id: str | None = None  # the source topic's id then (None: the broker has none), telling incarnations apart


@dataclass(frozen=True)
class Doubt:
    """An upstream span ``[start, end)`` the runs do not account for: :func:`translate`'s answer is exact only if
    the source holds no record there that the mirror would replicate."""

    start: int
    end: int
    reason: str  # why the runs cannot vouch for it, for an operator


def runs_from_pairs(pairs: Iterable[tuple[int, int]]) -> list[Run]:
    """Compress ``(upstream, downstream)`` pairs, in delivery order, into runs (invariant C)."""
    runs: list[Run] = []
    start_u = start_d = prev_u = prev_d = -2
    length = 0
    for u, d in pairs:
        if length and u == prev_u + 1 and d == prev_d + 1:
            length += 1
        else:
            if length:
                runs.append(Run(start_u, start_d, length))
            start_u, start_d, length = u, d, 1
        prev_u, prev_d = u, d
    if length:
        runs.append(Run(start_u, start_d, length))
    return runs


def merge_runs(existing: Sequence[Run], new: Sequence[Run]) -> list[Run]:
    """Apply a batch's runs (in delivery order, upstream-ascending) to the stored runs around them.

    ``existing`` must hold every stored run that ends after the batch's first upstream offset, plus the run just
    before it (for extension). Returns the replacement for that region: older runs cut where the batch begins,
    runs the batch re-delivered dropped (invariant A), and the first new run joined to its predecessor when it
    follows it (invariant C).
    """
    if not new:
        return list(existing)
    first = new[0].upstream
    kept = [cut for run in existing if (cut := run.cut_before(first)) is not None]
    result = list(kept)
    for run in new:
        if result and run.follows(result[-1]):
            last = result.pop()
            result.append(Run(last.upstream, last.downstream, last.length + run.length))
        else:
            result.append(run)
    return result


def translate(runs: Sequence[Run], upstream_offset: int, *, quiet_until: int | None = None) -> int | None:
    """The downstream offset a consumer should resume from, having committed ``upstream_offset`` upstream.

    ``runs`` must be sorted and satisfy the invariants above: a partition's full history, or every run that ends
    after ``upstream_offset`` together with the run before them. ``quiet_until`` is an upstream offset up to which
    the caller knows the source holds no record after the last run (e.g. only transaction markers). Returns
    None when the answer is unknown.
    """
    return _along(runs, upstream_offset, _UPSTREAM, _DOWNSTREAM, quiet_until)


def translate_back(runs: Sequence[Run], downstream_offset: int) -> int | None:
    """The upstream offset a consumer should resume from on the source cluster, having committed
    ``downstream_offset`` on the remote topic (failback).

    Downstream offsets grow with upstream ones (each batch is appended after the previous one), so the runs are
    sorted on both sides. The answer is the upstream offset of the first replicated record at or after
    ``downstream_offset``: a consumer that read records of a failed, superseded attempt may read them again, but
    never skips one. Past the last replicated record the answer is unknown (None) unless the consumer stopped
    exactly there, and it is unknown while the runs are :func:`in_flux`.
    """
    if in_flux(runs):
        return None
    return _along(runs, downstream_offset, _DOWNSTREAM, _UPSTREAM)


def in_flux(runs: Sequence[Run]) -> bool:
    """Whether ``runs`` were read while a redelivered batch rewrote them. Settled runs grow downstream as they grow
    upstream (a redelivery replaces every run from its first offset on and appends after all of them), but the
    rewrite is several writes, and a reader between them sees a re-pointed run beside runs it has not replaced
    yet: a search along the downstream side would then land past records not yet re-copied."""
    return any(later.downstream < earlier.downstream_end for earlier, later in pairwise(runs))


_UPSTREAM = attrgetter("upstream")
_DOWNSTREAM = attrgetter("downstream")


def _along(
    runs: Sequence[Run],
    offset: int,
    side: Callable[[Run], int],
    other: Callable[[Run], int],
    quiet_until: int | None = None,
) -> int | None:
    """Map ``offset`` on one side of the runs to the other: into the first run holding a record at or after it;
    past the last run only when it stopped exactly there (or the caller knows the source is quiet up to there)."""
    if not runs:
        return None
    i = bisect.bisect_right([side(r) + r.length for r in runs], offset)
    if i < len(runs):
        run = runs[i]
        return other(run) + max(0, offset - side(run))
    last = runs[-1]
    if offset == side(last) + last.length or (quiet_until is not None and offset <= quiet_until):
        return other(last) + last.length
    return None  # past the last replicated record: records there may not be replicated yet


def _inside_run(runs: Sequence[Run], upstream_offset: int) -> bool:
    return any(r.upstream <= upstream_offset < r.upstream_end for r in runs)


def doubt(runs: Sequence[Run], upstream_offset: int, origin: Origin | None) -> Doubt | None:
    """What :func:`translate` takes on trust for ``upstream_offset``, or None when its answer rests on the runs.

    ``runs`` as for :func:`translate`. ``origin`` is the partition's origin (None: not recorded), consulted only
    when ``upstream_offset`` is below the first run. An offset inside a run, or past the last one (where translate
    has its own rule), takes nothing on trust.
    """
    if not runs:
        return None
    i = bisect.bisect_right([r.upstream_end for r in runs], upstream_offset)
    if i == len(runs) or upstream_offset >= runs[i].upstream:
        return None
    run = runs[i]
    if i == 0:  # below the first run
        if origin is None:
            return Doubt(upstream_offset, run.upstream, "the state does not record where its offset runs begin")
        if origin.fresh or upstream_offset >= origin.offset:
            return None
        return Doubt(
            upstream_offset,
            origin.offset,
            f"the state's offset runs begin at {origin.offset}, where the mirror resumed from a committed offset: "
            "records below it were replicated by an earlier run whose offset runs srm does not have (MirrorMaker 2 "
            "before a take-over, or a state lost or restored from an older backup)",
        )
    before = runs[i - 1]
    if run.downstream == before.downstream_end:
        return None  # nothing was written downstream across the gap: it hides no replicated record
    return Doubt(
        upstream_offset,
        run.upstream,
        f"offsets {before.upstream_end}..{run.upstream - 1} are missing from the state's offset runs while "
        f"{run.downstream - before.downstream_end} record(s) were written downstream across them (a state restored "
        "from an older backup?)",
    )


def doubt_back(
    runs: Sequence[Run],
    downstream_offset: int,
    origin: Callable[[], Origin | None],
    quiet: Callable[[int, int], bool] | None = None,
) -> str | None:
    """Why :func:`translate_back` has no sure answer for ``downstream_offset``, or None when it has one (or none at
    all): runs read mid-rewrite; a position below the first run when the runs begin where the mirror resumed
    (copies of earlier records may lie below it) or do not say where they begin; or a position between two runs
    whose upstream offsets are not all accounted for — the answer, the next run's start, would skip records there
    unless the source holds none (``quiet(start, end)``, as for :func:`translate_checked`; None: it cannot be asked).
    ``origin()`` is the partition's origin (see :func:`doubt`), asked for only below the first run."""
    if in_flux(runs):
        return "its offset runs were being rewritten (a redelivered batch): translated on the next run"
    if not runs:
        return None
    if downstream_offset < runs[0].downstream:
        found = origin()
        if found is None:
            return "the state does not record where its offset runs begin"
        if found.fresh:
            return None
        return (
            f"the state's offset runs begin at upstream offset {found.offset}, where the mirror resumed from a "
            "committed offset: earlier records were replicated by a run whose state is gone"
        )
    i = bisect.bisect_right([r.downstream_end for r in runs], downstream_offset)
    if i == len(runs) or downstream_offset >= runs[i].downstream:
        return None  # inside a run, or past the last one (translate_back has its own rule there)
    before, run = runs[i - 1], runs[i]
    if run.upstream == before.upstream_end or (quiet is not None and quiet(before.upstream_end, run.upstream)):
        return None  # no record upstream between the two runs: nothing to skip
    return (
        f"upstream offsets {before.upstream_end}..{run.upstream - 1} are missing from the state's offset runs (being "
        "written, or lost): translated once they are there"
    )


def translate_checked(
    runs: Sequence[Run],
    upstream_offset: int,
    origin: Callable[[], Origin | None],
    quiet: Callable[[int, int], bool] | None,
    lost: Sequence[LostRange] = (),
) -> tuple[int | None, str]:
    """:func:`translate`, taking nothing on trust: the downstream offset, or None and why.

    ``origin()`` is the partition's origin, asked for only below the first run. ``quiet(start, end)`` says whether
    the source holds no record the mirror would replicate in ``[start, end)`` (None: the source cannot be asked);
    it settles a :func:`doubt`, and a committed offset past the last run (a trailing transaction marker).
    ``lost`` are the partition's offset ranges ``[start, end)`` that have no copy on the target: purged before they
    were replicated, or skipped on purpose (``(start, end, reason)``: an operator moved the position past them). An
    offset in one has no downstream counterpart (the gap's runs join downstream, so :func:`doubt` cannot see it) —
    unless a run holds it: a skipped range replicated after all, the position moved back over it.
    """
    ranges = list(lost)
    gone = covering(ranges, upstream_offset)
    skipped = skip_reason(ranges, upstream_offset)
    if gone is not None and skipped is not None and _inside_run(runs, upstream_offset):
        gone = None
    if gone is not None and skipped is not None:
        return None, (
            f"offsets {gone[0]}..{gone[1] - 1} were never replicated ({skipped}): the group's next records are on "
            "the source only"
        )
    if gone is not None:
        return None, (
            f"offsets {gone[0]}..{gone[1] - 1} were purged on the source before they were replicated (data loss): "
            "the group's next records exist on neither cluster"
        )
    if not runs:
        return None, "nothing replicated yet"
    downstream = translate(runs, upstream_offset)
    if downstream is None:
        end = runs[-1].upstream_end
        if quiet is not None and upstream_offset > end and quiet(end, upstream_offset):
            return translate(runs, upstream_offset, quiet_until=upstream_offset), ""
        return None, "records below the committed offset are not replicated yet"
    unsure = doubt(runs, upstream_offset, origin() if upstream_offset < runs[0].upstream else None)
    if unsure is not None and not (quiet is not None and quiet(unsure.start, unsure.end)):
        return None, unsure.reason
    return downstream, ""
