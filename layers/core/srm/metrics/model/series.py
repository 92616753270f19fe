"""The series of the metrics table: one flow, topic of a flow or partition of a topic at one resolution, and the
metrics of one window of it (pure: the table itself is :mod:`srm.aws.metrics_table`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["LEVELS", "RESOLUTIONS", "MetricPoint", "Series"]

RESOLUTIONS: Mapping[str, int] = {"1m": 60_000, "1h": 3_600_000}
LEVELS = ("flow", "topic", "partition")


@dataclass(frozen=True)
class Series:
    """One time series: a flow, a topic of a flow or a partition of a topic, at one resolution."""

    resolution: str
    level: str
    source: str
    target: str
    topic: str | None = None
    partition: int | None = None

    def __post_init__(self) -> None:
        if self.resolution not in RESOLUTIONS:
            raise ValueError(f"resolution must be one of {', '.join(RESOLUTIONS)}, got {self.resolution!r}")
        expected = {"flow": (False, False), "topic": (True, False), "partition": (True, True)}.get(self.level)
        if expected != (self.topic is not None, self.partition is not None):
            raise ValueError(f"a {self.level!r} series needs exactly the fields of its level: {self}")

    @property
    def key(self) -> str:
        parts = [self.resolution, self.level, self.source, self.target]
        if self.topic is not None:
            parts.append(self.topic)
        if self.partition is not None:
            parts.append(str(self.partition))
        return "#".join(parts)

    @classmethod
    def parse(cls, key: str) -> Series:
        resolution, level, source, target, *rest = key.split("#")
        topic = rest[0] if rest else None
        partition = int(rest[1]) if len(rest) > 1 else None
        return cls(resolution, level, source, target, topic, partition)


@dataclass(frozen=True)
class MetricPoint:
    """The metrics of one series in one window (``values``: attribute name → number or map of numbers)."""

    series: Series
    window_start: int
    values: Mapping[str, Any]
