"""Where aggregated metrics are kept: the port the aggregation writes through and the metrics API reads through.
Adapters: the metrics table on AWS (:class:`srm.aws.metrics_table.MetricsTable`) and, for ``srm run``, a compacted
topic beside its state (:class:`srm.kafka.metrics_store.KafkaMetrics`).

A point is the whole result of its window: writing it again overwrites it with the same content, so writes are
idempotent (nothing depends on the time of writing). 1-minute points are kept for a retention period (15 days by
default); hourly points are kept."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from srm.metrics.model.series import MetricPoint, Series

__all__ = ["MetricsStore", "MetricsStoreError"]


class MetricsStoreError(RuntimeError):
    """The aggregated metrics could not be read or written."""


class MetricsStore(Protocol):
    minute_retention_s: int  # how long 1-minute points are kept

    def write(self, points: Iterable[MetricPoint]) -> int:
        """Put every point (overwriting what its window held); returns how many were written."""

    def query(self, series: Series, start_ms: int, end_ms: int) -> list[MetricPoint]:
        """The points of ``series`` whose window starts within ``[start_ms, end_ms]``, oldest first."""
