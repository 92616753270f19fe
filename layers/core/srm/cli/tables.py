"""The plain-text tables the CLIs print: columns as wide as their widest cell, two spaces apart."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from srm.control.nodes import NodesStatus
from srm.control.replication_offsets import MoveReport
from srm.core.replication_offsets import PartitionPosition, StartFrom
from srm.flow import Flow
from srm.replication.takeover import TakeoverReport

__all__ = ["age", "flow_nodes", "move_lines", "node_lines", "position_lines", "table", "takeover_lines"]


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


def position_lines(flow: Flow, positions: Sequence[PartitionPosition], start_from: StartFrom) -> list[str]:
    """Where replication of each source partition stands: the next record replicated, and what is left to do."""
    rows = [
        [
            p.topic,
            str(p.partition),
            f"- ({start_from})" if p.committed is None else str(p.committed),
            str(p.log_start),
            str(p.log_end),
            str(max(0, p.log_end - p.effective(start_from))),
        ]
        for p in positions
    ]
    where = f"the mapping groups' committed offsets on {flow.source} (the next record each replicates)"
    return [*table(["TOPIC", "PARTITION", "POSITION", "LOG START", "LOG END", "LAG"], rows), f"{flow}: {where}"]


def move_lines(report: MoveReport) -> list[str]:
    """Each partition's old and new position and what the move does on the target; a summary line."""
    rows = []
    for m in report.moves:
        skipped = m.skipped
        if skipped is not None:
            effect = f"skips {skipped[1] - skipped[0]} (offsets {skipped[0]}..{skipped[1] - 1}, never replicated)"
        elif m.replayed or m.first_copies:
            effect = f"replicates {m.replayed} again (duplicates on {report.flow.target})"
            if m.first_copies:
                effect += f" and {m.first_copies} an earlier move skipped (first copies)"
        else:
            effect = "unchanged"
        if m.note:
            effect += f"; {m.note}"
        rows.append([m.topic, str(m.partition), "-" if m.old is None else str(m.old), str(m.new), effect])
    done = (
        "dry run, nothing moved"
        if report.dry_run
        else "moved" + (" (the flow was stopped for it and started again)" if report.paused else "")
    )
    summary = (
        f"{report.flow}: {done}, to {report.to}: {report.skipped} records skipped (never replicated: a consumer "
        f"group's offset among them gets no checkpoint), {report.replayed} replicated again (duplicates on "
        f"{report.flow.target}, by design)"
    )
    return [*table(["TOPIC", "PARTITION", "OLD", "NEW", "EFFECT"], rows), summary]


def age(ms: int | None, now_ms: float) -> str:
    """How long ago, in the largest whole unit: ``12s ago``, ``3m ago``; ``-`` for never."""
    if not ms:
        return "-"
    seconds = max(0.0, (now_ms - ms) / 1000)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit} ago"
    return f"{seconds:.0f}s ago"


def node_lines(status: NodesStatus, now_ms: float | None = None) -> list[str]:
    """The nodes of the cluster: alive or not, what each leads and holds, its last rebalance."""
    now = time.time() * 1000 if now_ms is None else now_ms
    rows = []
    for n in status.nodes:
        held = "; ".join(
            f"{flow} {topic} {','.join(map(str, parts))}"
            for flow, topics in sorted(n.partitions.items())
            for topic, parts in sorted(topics.items())
        )
        alive = "yes" if n.alive else f"no (seen {age(n.record.seen_ms, now)})"
        if n.fenced_by:
            alive = f"fenced by {n.fenced_by}"
        rows.append(
            [
                n.node_id,
                alive,
                f"{n.record.host}:{n.record.pid}",
                ", ".join(n.leads) or "-",
                held or "-",
                age(n.last_rebalance_ms, now),
            ]
        )
    leaders = ", ".join(f"{flow} {node or 'none (being elected)'}" for flow, node in sorted(status.leaders.items()))
    return [
        f"NODES of {status.group} ({sum(n.alive for n in status.nodes)} alive); leaders: {leaders or '-'}",
        *table(["NODE", "ALIVE", "HOST:PID", "LEADS", "PARTITIONS", "LAST REBALANCE"], rows),
    ]


def flow_nodes(status: NodesStatus, flow: str) -> dict[str, Any]:
    """A flow's leader and the partitions each live node holds of it (``srm-control status --json``)."""
    return {
        "leader": status.leaders.get(flow),
        "nodes": [
            {
                "node": n.node_id,
                "leader": flow in n.leads,
                "partitions": {t: list(p) for t, p in n.partitions.get(flow, {}).items()},
                "lastRebalance": n.to_dict()["lastRebalance"],
            }
            for n in status.nodes
            if n.alive
        ],
    }
