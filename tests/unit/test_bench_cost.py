"""bench.cost and its table: Lambda cost per GB at the handler's measured speed, per memory size and architecture."""

from __future__ import annotations

import pytest

from bench.cost import LAMBDA_GB_S_USD, LAMBDA_REQUEST_USD, lambda_cost
from bench.report import cost_table

GB = 1_000_000_000


def path(cpu_s: float, wall_s: float, records: int = 5_000_000) -> dict[str, float]:
    """A bench result of one GB: ``cpu_s`` seconds of one core's work within ``wall_s``."""
    return {"records": records, "bytes": GB, "cpu_s": cpu_s, "wall_s": wall_s}


def by_memory(cost: dict) -> dict[int, dict]:
    return {row["memory_mb"]: row for row in cost["by_memory"]}


def test_cost_at_one_vcpu_is_the_measured_time_as_before():
    # GIVEN 40 s of CPU within 41 s WHEN priced THEN the top level is the 1,769 MB figure: 41 s × 1,769/1,024 GB
    cost = lambda_cost(path(40.0, 41.0), events_per_gb=500)
    assert (cost["memory_mb"], cost["seconds_per_gb"], cost["gb_seconds_per_gb"]) == (1769, 41.0, 70.8)
    want = 41.0 * 1769 / 1024 * LAMBDA_GB_S_USD["arm64"] + 500 * LAMBDA_REQUEST_USD
    assert cost["usd_per_gb_arm64"] == pytest.approx(want, abs=1e-5)


def test_cost_of_cpu_work_is_the_same_gb_seconds_at_every_size_below_one_vcpu():
    # GIVEN work that never waits WHEN priced at a third of a vCPU THEN it runs 1,769/512 times longer, same GB-s
    rows = by_memory(lambda_cost(path(40.0, 40.0), events_per_gb=500))
    assert rows[512]["seconds_per_gb"] == pytest.approx(40.0 * 1769 / 512, abs=0.05)
    assert rows[512]["gb_seconds_per_gb"] == rows[1024]["gb_seconds_per_gb"] == rows[1769]["gb_seconds_per_gb"]
    assert rows[512]["partition_records_per_s"] == round(5_000_000 / (40.0 * 1769 / 512))


def test_cost_waiting_is_cheaper_with_less_memory_so_the_smallest_arm64_is_cheapest():
    # GIVEN 10 of 50 s spent waiting for acknowledgements WHEN priced THEN the wait does not stretch, and costs less
    cost = lambda_cost(path(40.0, 50.0), events_per_gb=500)
    rows = by_memory(cost)
    assert rows[512]["seconds_per_gb"] == pytest.approx(40.0 * 1769 / 512 + 10.0, abs=0.05)
    assert rows[512]["gb_seconds_per_gb"] < rows[1024]["gb_seconds_per_gb"] < rows[1769]["gb_seconds_per_gb"]
    assert cost["cheapest"]["memory_mb"] == 512 and cost["cheapest"]["architecture"] == "arm64"


def test_cost_table_shows_every_size_names_the_cheapest_and_reads_older_results():
    workloads = {"small": {"label": "small (1,000,000 × 200 B)"}, "large": {"label": "large (100,000 × 2 KB)"}}
    new = {"workloads": workloads, "cost": {w: lambda_cost(path(40.0, 41.0), 500) for w in workloads}}
    text = cost_table(new)
    assert all(f"{m} MB" in text for m in ("512", "1,024", "1,769")) and "cheapest: small 512 MB arm64" in text
    # a results.json written before memory sizes were priced: its one row
    old = {
        "workloads": workloads,
        "cost": {w: {k: v for k, v in c.items() if k not in ("by_memory", "cheapest")} for w, c in new["cost"].items()},
    }
    rows = [line for line in cost_table(old).splitlines() if line[:1].isdigit()]
    assert len(rows) == 1 and rows[0].startswith("1,769 MB (1 vCPU)")
