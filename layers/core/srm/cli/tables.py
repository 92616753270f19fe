"""The plain-text tables the CLIs print: columns as wide as their widest cell, two spaces apart."""

from __future__ import annotations

from collections.abc import Sequence

from srm.replication.takeover import TakeoverReport

__all__ = ["table", "takeover_lines"]


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, figures_from: int | None = None) -> list[str]:
    """The header line and one line per row; columns from ``figures_from`` on (figures) are right-aligned."""
    widths = [max(len(str(row[i])) for row in (headers, *rows)) for i in range(len(headers))]
    right = len(headers) if figures_from is None else figures_from
    return [
        "  ".join(
            cell.rjust(w) if i >= right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in (headers, *rows)
    ]


def takeover_lines(report: TakeoverReport) -> list[str]:
    """Where each partition starts, and a summary line saying what was (or, in a dry run, would be) committed."""
    rows = [
        [
            p.topic,
            str(p.partition),
            "log start" if p.offset is None else str(p.offset),
            "-" if not p.from_mm2 else "?" if p.tail is None else str(p.tail),
            p.where,
        ]
        for p in report.positions
    ]
    unknown = sum(1 for p in report.from_mm2 if p.tail is None)
    summary = (
        f"{len(report.from_mm2)} of {len(report.positions)} partitions start where MirrorMaker 2 stood; {report.tail} "
        "copies it made past its recorded positions will be written again"
        + (f" ({unknown} partitions: unknown)" if unknown else "")
    )
    done = "dry run, nothing written" if report.dry_run else f"committed to the mapping groups on {report.flow.source}"
    return [*table(["TOPIC", "PARTITION", "START", "TAIL", "READ FROM"], rows), f"{report.flow}: {done}: {summary}"]
