"""The metrics API's queries: flows and their topics with recent figures, and metric series over a time range, read
from the config table (which flows exist), the state table (topic mappings, flow status facts) and the metrics table
(aggregated windows). The HTTP side is :mod:`srm.handlers.metrics_api`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from srm.config.settings import SrmConfig
from srm.config.store import ConfigStore
from srm.errors import SrmError
from srm.metrics.model.names import TABLE_DISTRIBUTIONS
from srm.metrics.model.series import RESOLUTIONS, MetricPoint, Series
from srm.metrics.model.store import MetricsStore
from srm.state import StateStore, TopicMappingRecord

__all__ = [
    "METRICS",
    "BadRequestError",
    "Deployment",
    "FlowSummary",
    "MetricName",
    "MetricQueries",
    "MetricSeries",
    "NotFoundError",
    "PeerStatus",
    "Replications",
    "TopicSummary",
    "Topics",
]

MetricName = Literal[
    "record-count",
    "byte-count",
    "record-rate",
    "byte-rate",
    "replication-latency-ms",
    "record-age-ms",
    "checkpoint-latency-ms",
    "replication-records-lag",
    "oldest-unreplicated-age-ms",
    "heartbeat-age-ms",
    "verified-records",
    "verification-differences",
]
# The metrics the API serves (MetricName's, as the metrics table stores them: MM2's and SRM's names) → their unit.
METRICS: Mapping[str, str] = {
    "record-count": "records",
    "byte-count": "bytes",
    "record-rate": "records/s",
    "byte-rate": "bytes/s",
    "replication-latency-ms": "ms",
    "record-age-ms": "ms",
    "checkpoint-latency-ms": "ms",
    "replication-records-lag": "records",
    "oldest-unreplicated-age-ms": "ms",
    "heartbeat-age-ms": "ms",
    "verified-records": "records",  # compared by continuous verification in the window
    "verification-differences": "records",  # missing, extra or different, as the window's runs found them
}
DEFAULT_RANGE_MS = 2 * 3_600_000  # as SRM: the last 2 hours
RECENT_MS = 5 * 60_000  # the window of /v2/replications' figures and of "recent" activity

Status = Literal["ACTIVE", "INACTIVE", "DISABLED", "FAILING"]


class NotFoundError(SrmError, LookupError):
    """An unknown flow, cluster, topic or partition."""


class BadRequestError(SrmError, ValueError):
    """An unknown metric or a bad time range or resolution."""


class Figures(BaseModel):
    """A flow's or topic's numbers over the last 5 minutes (``None``: no data)."""

    records: int
    bytes: int
    record_rate: float  # records/s
    byte_rate: float  # bytes/s
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    lag: int | None  # at the latest window
    failures: int


class TopicSummary(BaseModel):
    upstream_topic: str
    remote_topic: str
    partitions: int
    status: Status
    figures: Figures


class Deployment(BaseModel):
    """A deployment serving the metrics API (remote querying): its advertised name, API base URL and region."""

    name: str
    url: str | None
    region: str | None


class PeerStatus(BaseModel):
    """How a peer deployment answered this request: ``ok``, ``unreachable`` (no answer in time) or ``error`` (it
    answered with an error status or something that is not this API's)."""

    name: str  # its advertised name; its URL when it never said
    url: str
    region: str | None
    found_via: Literal["kafka", "config"]  # an advert on a cluster, or metrics.api.peers
    status: Literal["ok", "unreachable", "error"]
    http_status: int | None = None
    error: str | None = None
    flows: int = 0


class FlowSummary(BaseModel):
    source: str
    target: str
    enabled: bool
    status: Status
    topics: int
    figures: Figures
    heartbeat_age_ms: int | None
    last_checkpoint_ms: int | None
    served_by: Deployment | None = None  # the deployment that runs the flow and answers its queries


class Replications(BaseModel):
    replications: list[FlowSummary]
    served_by: Deployment | None = None  # the deployment that answered
    peers: list[PeerStatus] = []  # a gateway's peers, each with how it answered
    discovery_errors: list[str] = []  # clusters whose adverts a gateway could not read


class Topics(BaseModel):
    source: str
    target: str
    topics: list[TopicSummary]


class Point(BaseModel):
    """One window: ``value`` is its total (counts), rate, lag at its end or, for distributions, the average (then
    ``count`` … ``p99`` are set too)."""

    timestamp: int  # the window's start, epoch ms
    value: float | None
    count: int | None = None
    min: float | None = None
    max: float | None = None
    avg: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


class MetricSeries(BaseModel):
    metric: str
    unit: str
    resolution: Literal["1m", "1h"]
    source: str
    target: str
    upstream_topic: str | None = None
    partition: int | None = None
    from_ms: int
    to_ms: int
    points: list[Point]


@dataclass
class MetricQueries:
    config_store: ConfigStore
    state: StateStore
    metrics: MetricsStore

    def _config(self) -> SrmConfig:
        return self.config_store.load()

    def _flow(self, config: SrmConfig, source: str, target: str) -> None:
        for alias in (source, target):
            if alias not in config.clusters:
                raise NotFoundError(f"unknown cluster {alias!r} (known: {', '.join(config.clusters)})")
        if (source, target) not in config.flows:
            raise NotFoundError(f"unknown flow {source}->{target}: the configuration has no such replication")

    def _mapping(self, source: str, target: str, topic: str) -> TopicMappingRecord:
        mapping = self.state.topic_mappings(source, target).get(topic)
        if mapping is None:
            raise NotFoundError(f"unknown topic {topic!r}: {source}->{target} does not replicate it (upstream name)")
        return mapping

    # -- summaries ----------------------------------------------------------------------------------------------
    def replications(self, now_ms: int | None = None) -> Replications:
        now = _now(now_ms)
        config = self._config()
        flows = []
        for source, target in config.flows:
            enabled = config.settings(source, target).enabled
            recent = self.metrics.query(Series("1m", "flow", source, target), now - RECENT_MS, now)
            figures = _figures(recent)
            facts = self.state.flow_status(source, target)
            heartbeat = _int_fact(facts, "heartbeat_ms")
            heartbeat_seen = _int_fact(facts, "heartbeat_replicated_ms")
            flows.append(
                FlowSummary(
                    source=source,
                    target=target,
                    enabled=enabled,
                    status=_status(enabled, figures, heartbeat_seen, now),
                    topics=len(self.state.topic_mappings(source, target)),
                    figures=figures,
                    heartbeat_age_ms=None if heartbeat is None else max(0, now - heartbeat),
                    last_checkpoint_ms=_int_fact(facts, "last_checkpoint_ms"),
                )
            )
        return Replications(replications=flows)

    def topics(self, source: str, target: str, now_ms: int | None = None) -> Topics:
        now = _now(now_ms)
        config = self._config()
        self._flow(config, source, target)
        enabled = config.settings(source, target).enabled
        topics = []
        for topic, m in sorted(self.state.topic_mappings(source, target).items()):
            figures = _figures(self.metrics.query(Series("1m", "topic", source, target, topic), now - RECENT_MS, now))
            topics.append(
                TopicSummary(
                    upstream_topic=topic,
                    remote_topic=m.remote_topic,
                    partitions=m.partitions,
                    status=_status(enabled, figures, None, now),
                    figures=figures,
                )
            )
        return Topics(source=source, target=target, topics=topics)

    # -- series -------------------------------------------------------------------------------------------------
    def series(
        self,
        metric: str,
        source: str,
        target: str,
        topic: str | None = None,
        partition: int | None = None,
        *,
        from_ms: int | None = None,
        to_ms: int | None = None,
        resolution: str = "1m",
        now_ms: int | None = None,
    ) -> MetricSeries:
        now = _now(now_ms)
        if metric not in METRICS:
            raise BadRequestError(f"unknown metric {metric!r}; valid metrics: {', '.join(METRICS)}")
        if resolution not in RESOLUTIONS:
            raise BadRequestError(f"resolution must be one of {', '.join(RESOLUTIONS)}, got {resolution!r}")
        to = now if to_ms is None else to_ms
        start = to - DEFAULT_RANGE_MS if from_ms is None else from_ms
        if start > to:
            raise BadRequestError(f"from ({start}) is after to ({to})")
        oldest = now - self.metrics.minute_retention_s * 1000
        if resolution == "1m" and start < oldest:
            raise BadRequestError(
                f"from ({start}) is beyond the 1m retention ({self.metrics.minute_retention_s // 86_400} days, "
                f"oldest {oldest}); use resolution=1h for older data"
            )
        self._flow(self._config(), source, target)
        level = "flow"
        if topic is not None:
            mapping = self._mapping(source, target, topic)
            level = "topic"
            if partition is not None:
                if not 0 <= partition < mapping.partitions:
                    raise NotFoundError(f"unknown partition {partition} of {topic!r} ({mapping.partitions} partitions)")
                level = "partition"
        series = Series(resolution, level, source, target, topic, partition)
        # the window holding ``from`` counts too: its start may be before ``from``
        first = start - start % RESOLUTIONS[resolution]
        points = sorted(
            (_point(p, metric) for p in self.metrics.query(series, first, to) if metric in p.values),
            key=lambda p: p.timestamp,
        )
        return MetricSeries(
            metric=metric,
            unit=METRICS[metric],
            resolution="1h" if resolution == "1h" else "1m",
            source=source,
            target=target,
            upstream_topic=topic,
            partition=partition,
            from_ms=start,
            to_ms=to,
            points=points,
        )


def _now(now_ms: int | None) -> int:
    return int(time.time() * 1000) if now_ms is None else now_ms


def _int_fact(facts: Mapping[str, int | str], name: str) -> int | None:
    value = facts.get(name)
    return value if isinstance(value, int) else None


def _point(point: MetricPoint, metric: str) -> Point:
    value: Any = point.values[metric]
    if metric in TABLE_DISTRIBUTIONS and isinstance(value, Mapping):
        return Point(timestamp=point.window_start, value=value.get("avg"), **value)
    return Point(timestamp=point.window_start, value=value)


def _figures(points: Sequence[MetricPoint]) -> Figures:
    records = sum(int(p.values.get("record-count", 0)) for p in points)
    size = sum(int(p.values.get("byte-count", 0)) for p in points)
    latencies = [
        d
        for p in points
        if isinstance(d := p.values.get("replication-latency-ms"), Mapping) and {"p50", "p99"} <= d.keys()
    ]
    lags = [
        p.values["replication-records-lag"]
        for p in sorted(points, key=lambda p: p.window_start)
        if "replication-records-lag" in p.values
    ]
    return Figures(
        records=records,
        bytes=size,
        record_rate=records / (RECENT_MS / 1000),
        byte_rate=size / (RECENT_MS / 1000),
        # windows' quantiles cannot be merged exactly from the table: the p50 is the count-weighted median of the
        # windows' medians, the p99 the largest window p99 (an upper bound)
        latency_p50_ms=_weighted_median([(d["p50"], int(d.get("count", 1))) for d in latencies]),
        latency_p99_ms=max((d["p99"] for d in latencies), default=None),
        lag=int(lags[-1]) if lags else None,
        failures=sum(int(p.values.get("replication-failures", 0)) for p in points),
    )


def _weighted_median(values: Sequence[tuple[float, int]]) -> float | None:
    total = sum(weight for _, weight in values)
    seen = 0
    for value, weight in sorted(values):
        seen += weight
        if 2 * seen >= total:
            return value
    return None


def _status(enabled: bool, figures: Figures, heartbeat_seen_ms: int | None, now: int) -> Status:
    if not enabled:
        return "DISABLED"
    if figures.failures > 0:
        return "FAILING"
    if figures.records > 0 or (heartbeat_seen_ms is not None and now - heartbeat_seen_ms <= RECENT_MS):
        return "ACTIVE"
    return "INACTIVE"
