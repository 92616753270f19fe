"""The demo's chart: throughput and replication latency over the run, as the demo measured them on the target."""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["chart", "latency_by_second", "throughput", "write_chart"]


def throughput(samples: Sequence[tuple[float, int]]) -> list[tuple[float, float]]:
    """(seconds, records on the target) samples → (seconds, records/s between consecutive samples)."""
    return [(t1, (n1 - n0) / (t1 - t0)) for (t0, n0), (t1, n1) in itertools.pairwise(samples) if t1 > t0]


def latency_by_second(samples: Sequence[tuple[float, int]]) -> list[tuple[float, float, float]]:
    """(seconds, latency ms) of each record → (second, p50, p99) per whole second."""
    seconds: dict[int, list[int]] = {}
    for t, ms in samples:
        seconds.setdefault(int(t), []).append(ms)
    out: list[tuple[float, float, float]] = []
    for second, values in sorted(seconds.items()):
        ordered = sorted(values)
        out.append(
            (float(second), statistics.median(ordered), ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)])
        )
    return out


def write_chart(
    path: Path,
    replicated: Sequence[tuple[float, int]],
    latencies: Sequence[tuple[float, int]],
    live_from: float | None = None,
) -> Path:
    """A PNG of records/s replicated (top) and latency p50/p99 of the live records (bottom) over the run."""
    import matplotlib.pyplot as plt

    figure = chart(replicated, latencies, live_from)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def chart(
    replicated: Sequence[tuple[float, int]], latencies: Sequence[tuple[float, int]], live_from: float | None = None
) -> Any:
    """The chart's matplotlib figure (:func:`write_chart`); the caller closes it."""
    import matplotlib

    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    rates = throughput(replicated)
    per_second = latency_by_second(latencies)
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6.5), sharex=True, constrained_layout=True)
    top.plot([t for t, _ in rates], [r for _, r in rates], color="tab:blue", linewidth=1.4)
    top.set_ylabel("records/s replicated")
    top.set_title("srm demo: throughput and replication latency (measured on the target cluster)")
    bottom.plot([t for t, *_ in per_second], [p50 for _, p50, _ in per_second], label="p50", color="tab:green")
    bottom.plot([t for t, *_ in per_second], [p99 for *_, p99 in per_second], label="p99", color="tab:red")
    bottom.set_ylabel("latency of live records (ms)")
    bottom.set_xlabel("seconds since replication started")
    bottom.legend(loc="upper right")
    for axes in (top, bottom):
        axes.grid(alpha=0.3)
        axes.set_ylim(bottom=0)  # from zero: a few ms of jitter on a 600 ms latency is not a sawtooth
        if live_from is not None:
            axes.axvline(live_from, color="grey", linestyle="--", linewidth=1)
    if live_from is not None:
        top.annotate("backlog | live traffic", (live_from, 0.95), xycoords=("data", "axes fraction"), ha="center")
    return figure
