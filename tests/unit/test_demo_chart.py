"""The demo's chart: throughput and latency series from known samples, and a PNG written."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pytest

from srm.local.demo_chart import chart, latency_by_second, throughput, write_chart


def test_throughput_is_records_per_second_between_samples() -> None:
    assert throughput([(0.0, 0), (0.5, 1000), (1.0, 1000), (2.0, 4000)]) == [(0.5, 2000), (1.0, 0), (2.0, 3000)]


def test_latency_by_second_gives_each_seconds_median_and_p99() -> None:
    samples = [(3.1, ms) for ms in range(1, 101)] + [(4.9, 7)]
    assert latency_by_second(samples) == [(3.0, 50.5, 100), (4.0, 7, 7)]


def test_the_chart_is_a_png(tmp_path: Path) -> None:
    path = write_chart(tmp_path / "out" / "demo.png", [(0.0, 0), (1.0, 500), (2.0, 900)], [(1.5, 20), (1.6, 40)], 1.2)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


@pytest.mark.parametrize("samples", [[], [(1.0, 5)]])
def test_too_few_samples_give_no_rates(samples: list[tuple[float, int]]) -> None:
    assert throughput(samples) == []


def test_both_axes_start_at_zero_so_that_jitter_looks_like_jitter() -> None:
    # GIVEN a live latency between 604 and 622 ms and a steady rate WHEN charted
    latencies = [(1.0 + i / 10, 604 + (i * 7) % 19) for i in range(60)]
    figure = chart([(0.0, 0), (1.0, 5000), (2.0, 10000)], latencies, 0.5)
    try:
        top, bottom = figure.axes
        # THEN both axes start at zero (18 ms of jitter is 3 % of the axis, not all of it)
        assert top.get_ylim()[0] == 0 and bottom.get_ylim()[0] == 0
        assert bottom.get_ylim()[1] >= 622
    finally:
        plt.close(figure)
