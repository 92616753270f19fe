"""Aggregated metrics (:class:`srm.metrics.model.store.MetricsStore`) for ``srm run``: a compacted topic beside its
state, read into memory, as the state is (:class:`srm.kafka.state_log.StateLog`). One record per series and window:
key ``["p", series key, window start ms]``, value the window's metrics (JSON; what JSON cannot say — a missing value,
a non-finite number — is left out, as the metrics table leaves it out). The aggregation of the cluster's nodes has
one writer at a time (its elected leader); the metrics API and ``srm-control`` read. A write drops the 1-minute points
past their retention (tombstones), so the topic holds what the metrics table would."""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from srm.config.secrets import SecretResolver, default_secret_resolver
from srm.config.settings import SrmConfig
from srm.kafka.clients import consumer_config, producer_config
from srm.kafka.state_log import Key, StateLog
from srm.metrics.model.series import MetricPoint, Series
from srm.metrics.model.store import MetricsStoreError
from srm.state.records import StateError

__all__ = ["KafkaMetrics", "metrics_store_topic"]

_CHUNK = 500  # records per write


def metrics_store_topic(group_id: str) -> str:
    """The compacted topic of an ``srm run`` cluster's aggregated metrics (under the raw metrics' prefix)."""
    return f"srm-metrics.{group_id}.aggregated.internal"


def _clean(value: Any) -> Any:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): c for k, v in value.items() if (c := _clean(v)) is not None}
    raise TypeError(f"metric values are numbers or maps of numbers, got {type(value).__name__}")


class KafkaMetrics:
    def __init__(
        self,
        topic: str,
        consumer: dict[str, Any],
        producer: dict[str, Any],
        *,
        minute_retention_s: int = 15 * 86_400,
        timeout_s: float = 10.0,
    ) -> None:
        self.minute_retention_s = minute_retention_s
        self._series: dict[str, tuple[list[int], dict[int, dict[str, Any]]]] = {}  # key → (starts in order, values)
        self.log = StateLog(
            topic, consumer, producer, apply=self._apply, transactional_prefix=f"{topic}.", timeout_s=timeout_s
        )
        self._started = False

    @classmethod
    def on_cluster(
        cls, config: SrmConfig, alias: str, topic: str, resolver: SecretResolver = default_secret_resolver
    ) -> KafkaMetrics:
        consumer = consumer_config(config, alias, None, group_id="srm-metrics-store", resolver=resolver)
        producer = producer_config(config, alias, None, delivery_timeout_ms=30_000, resolver=resolver)
        return cls(topic, consumer, producer)

    def start(self, timeout: float | None = None) -> KafkaMetrics:
        try:
            self.log.start(timeout)
        except StateError as e:
            raise MetricsStoreError(f"aggregated metrics ({self.log.topic}): {e}") from None
        self._started = True
        return self

    def stop(self) -> None:
        self.log.stop()

    def _apply(self, key: Key, value: Any) -> None:  # called by the log, under its lock
        if len(key) != 3 or key[0] != "p":
            return
        _, series, start = key
        starts, values = self._series.setdefault(series, ([], {}))
        if value is None:
            if values.pop(start, None) is not None:
                del starts[bisect.bisect_left(starts, start)]
            return
        if start not in values:
            bisect.insort(starts, start)
        values[start] = value

    def _ensure_started(self) -> None:
        if not self._started:
            self.start()

    def write(self, points: Iterable[MetricPoint]) -> int:
        self._ensure_started()
        records: list[tuple[Key, Any]] = [(("p", p.series.key, p.window_start), _clean(p.values)) for p in points]
        records.extend((key, None) for key in self._expired())
        try:
            for i in range(0, len(records), _CHUNK):
                self.log.write(records[i : i + _CHUNK])
        except StateError as e:
            raise MetricsStoreError(f"aggregated metrics ({self.log.topic}): {e}") from None
        return sum(1 for _, v in records if v is not None)

    def _expired(self) -> list[Key]:
        oldest = int(time.time() * 1000) - self.minute_retention_s * 1000
        with self.log.lock:
            return [
                ("p", series, start)
                for series, (starts, _) in self._series.items()
                if series.startswith("1m#")
                for start in starts[: bisect.bisect_left(starts, oldest)]
            ]

    def query(self, series: Series, start_ms: int, end_ms: int) -> list[MetricPoint]:
        self._ensure_started()
        try:
            self.log.sync(2.0)
        except StateError as e:  # answered from memory, as fresh as it could be made
            self.log.note(f"answering from memory: {e}", problem=False)
        with self.log.lock:
            starts, values = self._series.get(series.key, ([], {}))
            window = starts[bisect.bisect_left(starts, start_ms) : bisect.bisect_right(starts, end_ms)]
            return [MetricPoint(series, start, dict(values[start])) for start in window]
