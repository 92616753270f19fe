"""The table ``make bench`` prints, and its JSON twin (``bench/results.json``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["compare", "cost_table", "table", "write_json"]


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def table(results: dict[str, Any]) -> str:
    """Rows: the paths; per workload: records/s, MB/s, records per core-second and the ratio to the limit."""
    workloads = list(results["workloads"])
    # a pinned path (replicator and brokers on cores of their own) against the limit pinned the same way
    rows = [
        (results["labels"][key], cells, "limit_pinned" if key.endswith("_pinned") else "limit")
        for key, cells in results["paths"].items()
    ]
    if not rows:  # --only state or coldstart
        return "no throughput path measured"
    width = max(len(label) for label, _, _ in rows) + 1
    head = f"{'path':<{width}}"
    sub = f"{'':<{width}}"
    for w in workloads:
        label = results["workloads"][w]["label"]
        head += f"| {label:<38}"
        sub += f"| {'records/s':>10} {'MB/s':>6} {'rec/core-s':>10} {'× limit':>8} "
    lines = [head, sub, "-" * len(sub)]
    for name, cells, limit_key in rows:
        limit = results["paths"].get(limit_key, {})
        line = f"{name:<{width}}"
        for w in workloads:
            cell = cells.get(w)
            if not cell:
                line += f"| {'-':>10} {'-':>6} {'-':>10} {'-':>8} "
                continue
            base = (limit.get(w) or {}).get("records_per_s")
            ratio = cell["records_per_s"] / base if base else None
            line += (
                f"| {_fmt(cell['records_per_s']):>10} {_fmt(cell['mb_per_s'], 1):>6} "
                f"{_fmt(cell['records_per_core_s']):>10} {_fmt(ratio, 2):>8} "
            )
        lines.append(line)
    return "\n".join(lines)


def cost_table(results: dict[str, Any]) -> str:
    """Lambda cost per GB replicated at the handler's measured speed: per memory size and architecture, per workload
    (``results["cost"]``, :func:`bench.cost.lambda_cost`), and the cheapest. A results file from before memory sizes
    were priced gives its one 1,769 MB row."""
    costs = results.get("cost", {})
    if not costs:
        return ""
    workloads = [w for w in results["workloads"] if w in costs]
    width = 19
    head, sub = f"{'memory':<{width}}", f"{'':<{width}}"
    for w in workloads:
        head += f"| {results['workloads'][w]['label']:<43}"
        sub += f"| {'s/GB':>6} {'GB-s/GB':>7} {'rec/s/part':>10} {'x86_64 $':>8} {'arm64 $':>8} "
    lines = [
        "Lambda cost per GB replicated (keys + values) at the measured speed of the handler + JSON decode row; "
        "rec/s/part: one partition's rate (one invocation at a time):",
        head,
        sub,
        "-" * len(sub),
    ]
    rows = {w: {row["memory_mb"]: row for row in costs[w].get("by_memory") or [costs[w]]} for w in workloads}
    for memory_mb in sorted({m for by_memory in rows.values() for m in by_memory}):
        line = f"{f'{memory_mb:,} MB' + (' (1 vCPU)' if memory_mb == 1769 else ''):<{width}}"
        for w in workloads:
            row = rows[w].get(memory_mb)
            if row is None:
                line += f"| {'-':>6} {'-':>7} {'-':>10} {'-':>8} {'-':>8} "
                continue
            line += (
                f"| {_fmt(row['seconds_per_gb'], 1):>6} {_fmt(row['gb_seconds_per_gb'], 1):>7} "
                f"{_fmt(row.get('partition_records_per_s')):>10} {row['usd_per_gb_x86_64']:>8.5f} "
                f"{row['usd_per_gb_arm64']:>8.5f} "
            )
        lines.append(line)
    cheapest = [
        f"{w} {c['memory_mb']:,} MB {c['architecture']} (${c['usd_per_gb']:.5f}/GB)"
        for w in workloads
        if (c := costs[w].get("cheapest"))
    ]
    if cheapest:
        lines.append("cheapest: " + "; ".join(cheapest))
    invocations = ", ".join(f"{w} {costs[w]['invocations_per_gb']:,.0f}" for w in workloads)
    lines.append(
        "assumed: below 1,769 MB a function has that share of one vCPU, so the measured CPU time stretches by "
        "1,769/memory and the waiting (wall − CPU time) does not; arm64 as fast as this machine (Graviton is not "
        f"measured here); US East first-tier prices; requests included (invocations per GB: {invocations})."
    )
    return "\n".join(lines)


REGRESSION = 0.15  # a path this much slower than the last run is flagged when it is made


def compare(results: dict[str, Any], previous: dict[str, Any] | None) -> str:
    """records/s against the last run's, per path and workload; a path more than :data:`REGRESSION` slower (or a
    live p99 that much higher) is flagged, and counted on the last line."""
    if not previous:
        return "no earlier bench/results.json to compare with"
    lines = [f"change since the last run ({previous.get('when', '?')}, {previous.get('commit', '?')}):"]
    flagged = []
    for key, cells in results["paths"].items():
        for w, cell in cells.items():
            before = previous.get("paths", {}).get(key, {}).get(w)
            if cell and before and before.get("records_per_s"):
                change = cell["records_per_s"] / before["records_per_s"] - 1
                slower = change < -REGRESSION
                if slower:
                    flagged.append(f"{key} {w}")
                lines.append(
                    f"  {key:<22} {w:<6} {before['records_per_s']:>10,.0f} → {cell['records_per_s']:>10,.0f} "
                    f"records/s ({change:+.0%})" + ("  << SLOWER" if slower else "")
                )
    for key, live in results.get("live", {}).items():
        before = previous.get("live", {}).get(key)
        if before:
            higher = live["p99_ms"] > before["p99_ms"] * (1 + REGRESSION)
            if higher:
                flagged.append(f"live {key} p99")
            lines.append(
                f"  live {key:<17} p99 {before['p99_ms']:,.0f} → {live['p99_ms']:,.0f} ms, "
                f"p50 {before['p50_ms']:,.0f} → {live['p50_ms']:,.0f} ms" + ("  << SLOWER" if higher else "")
            )
    for name, cell in results.get("cold_start", {}).items():
        before = previous.get("cold_start", {}).get(name)
        if before:
            slower = cell["layer_s"] > before["layer_s"] * (1 + REGRESSION)
            if slower:
                flagged.append(f"cold start {name}")
            lines.append(
                f"  cold start {name:<11} {before['layer_s']:.2f} → {cell['layer_s']:.2f} s"
                + ("  << SLOWER" if slower else "")
            )
    if flagged:
        lines.append(
            f"REGRESSION: {len(flagged)} more than {REGRESSION:.0%} slower than the last run: {', '.join(flagged)}"
        )
    else:
        lines.append(f"no path more than {REGRESSION:.0%} slower than the last run")
    return "\n".join(lines)


def write_json(path: Path, results: dict[str, Any]) -> None:
    path.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
