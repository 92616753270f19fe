"""One incremental, idempotent aggregation run: new raw files → every touched hour recomputed → metrics table.

A manifest (JSON, beside the raw data) remembers each raw file read: its size, how many lines it had and the
hours (UTC, by record ``ts``) its records fall in. A run

1. lists the raw files; a file is *changed* when it is new or its size differs from the manifest's;
2. reads the changed files and finds the hours their records fall in (the *touched* hours);
3. reads every file holding records of a touched hour (changed ones, and old ones by the manifest), keeps the
   records of the touched hours and aggregates them (:func:`srm.metrics.aggregate.aggregate`): each window of a
   touched hour (its hour and its minutes) is recomputed from all its raw data, so late data is included and the
   result equals a from-scratch aggregation;
4. writes the rows (an overwrite of the same items: idempotent), then the manifest. A crash before the manifest
   is written only means the next run does the same work again.

A file still being written may end in a line without its newline: while the file changed within ``settle_ms`` it
is left for the next run (the manifest records no size for it); after that the line counts as bad. Bad lines are
counted and logged with file and line, once, when first read; they never fail the run.

Why a manifest and not Glue's job bookmarks alone: a bookmark hands over new files only, while late data for an
hour must be aggregated with the older files of that hour; the manifest answers both questions on Glue and locally.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from srm.metrics.aggregate import OUTPUT_KEYS, aggregate, bad_of, check_lines, read_lines, records_of
from srm.metrics.model.series import RESOLUTIONS, MetricPoint, Series
from srm.metrics.model.store import MetricsStore

__all__ = ["LocalRawStore", "RawFile", "RawStore", "RunReport", "S3RawStore", "points", "run_once"]

log = logging.getLogger(__name__)

_HOUR = RESOLUTIONS["1h"]
_MANIFEST_VERSION = 1


@dataclass(frozen=True)
class RawFile:
    path: str  # as Spark reads it (a local path or s3://bucket/key)
    size: int
    mtime_ms: int


class RawStore(Protocol):
    def list(self) -> list[RawFile]: ...

    def key(self, spark_file: str) -> str:
        """The ``path`` of the file Spark names ``spark_file`` (``input_file_name()``)."""
        ...

    def load_manifest(self) -> dict[str, Any]: ...

    def save_manifest(self, manifest: dict[str, Any]) -> None: ...


class LocalRawStore:
    """Raw files under ``root`` (``dt=…/hour=…/*.jsonl``, see :class:`srm.metrics.sinks.FileSink`)."""

    def __init__(self, root: Path, manifest: Path) -> None:
        self.root = root
        self.manifest = manifest

    def list(self) -> list[RawFile]:
        found = []
        for path in sorted(self.root.rglob("*.jsonl")):
            stat = path.stat()
            found.append(RawFile(str(path.resolve()), stat.st_size, stat.st_mtime_ns // 1_000_000))
        return found

    def key(self, spark_file: str) -> str:
        return unquote(urlparse(spark_file).path)

    def load_manifest(self) -> dict[str, Any]:
        if not self.manifest.exists():
            return {}
        return dict(json.loads(self.manifest.read_text()))

    def save_manifest(self, manifest: dict[str, Any]) -> None:
        self.manifest.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.manifest.with_suffix(".tmp")
        temporary.write_text(json.dumps(manifest))
        temporary.replace(self.manifest)


class S3RawStore:
    """Raw objects under ``s3://bucket/prefix`` (the Firehose delivery stream's destination)."""

    def __init__(self, client: Any, bucket: str, prefix: str, manifest_key: str) -> None:
        self._s3 = client
        self.bucket = bucket
        self.prefix = prefix
        self.manifest_key = manifest_key

    def list(self) -> list[RawFile]:
        found = []
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
            for item in page.get("Contents", []):
                modified = int(item["LastModified"].timestamp() * 1000)
                found.append(RawFile(f"s3://{self.bucket}/{item['Key']}", item["Size"], modified))
        return found

    def key(self, spark_file: str) -> str:
        parsed = urlparse(spark_file)
        return f"s3://{parsed.netloc}{unquote(parsed.path)}"

    def load_manifest(self) -> dict[str, Any]:
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=self.manifest_key)["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return {}
        return dict(json.loads(body))

    def save_manifest(self, manifest: dict[str, Any]) -> None:
        self._s3.put_object(Bucket=self.bucket, Key=self.manifest_key, Body=json.dumps(manifest).encode())


@dataclass
class RunReport:
    files_changed: int = 0
    files_read: int = 0
    hours: list[int] = field(default_factory=list)  # the touched hours (window starts, epoch ms)
    bad_lines: int = 0
    rows_written: int = 0
    pending_files: int = 0


def _hours(records: DataFrame) -> DataFrame:
    return records.select("file", (F.col("ts") - F.col("ts") % _HOUR).alias("hour"))


def run_once(
    spark: SparkSession,
    store: RawStore,
    table: MetricsStore,
    *,
    settle_ms: int = 300_000,
    now_ms: int | None = None,
) -> RunReport:
    """Aggregate what arrived since the last run (see the module docstring)."""
    now_ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    manifest = store.load_manifest() or {"v": _MANIFEST_VERSION, "files": {}}
    if manifest.get("v") != _MANIFEST_VERSION:
        raise ValueError(f"metrics manifest version {manifest.get('v')!r} is unknown (this runner knows 1)")
    known: dict[str, dict[str, Any]] = manifest["files"]
    listing = store.list()
    changed = [f for f in listing if known.get(f.path, {}).get("size") != f.size]
    report = RunReport(files_changed=len(changed))
    if not changed:
        return report
    unsettled = {f.path for f in changed if now_ms - f.mtime_ms < settle_ms}

    # The changed files are parsed once and kept (valid records without their text) for both steps below.
    checked = check_lines(read_lines(spark, [f.path for f in changed])).cache()
    stats = checked.groupBy("file").agg(F.max("line").alias("n"), F.max(F.col("last").cast("int")).alias("tail"))
    names: dict[str, str] = {}  # Spark's name of a file → the store's
    pending: list[str] = []  # Spark's names of files whose last line is still being written
    line_counts: dict[str, int] = {}
    for row in stats.collect():
        names[row["file"]] = path = store.key(row["file"])
        torn = bool(row["tail"]) and path in unsettled
        if torn:
            pending.append(row["file"])
        line_counts[path] = row["n"] - (1 if torn else 0)
    complete = _without_torn(checked, pending)
    changed_records = records_of(complete)
    per_file = _hours(changed_records).groupBy("file").agg(F.collect_set("hour").alias("hours")).collect()
    new_hours = {names[row["file"]]: set(row["hours"]) for row in per_file}
    report.bad_lines = _log_bad(bad_of(complete), names, known)
    pending_files = {names[name] for name in pending}

    touched = set().union(*new_hours.values()) if new_hours else set()
    old = [
        f.path
        for f in listing
        if f.path not in names.values() and touched & set(known.get(f.path, {}).get("hours", ()))
    ]
    report.files_read, report.hours, report.pending_files = len(changed) + len(old), sorted(touched), len(pending_files)
    try:
        if touched:
            records = changed_records
            if old:  # unchanged files holding records of a touched hour: late data is aggregated with them
                records = records.unionByName(records_of(check_lines(read_lines(spark, old)))).cache()
            in_hours = records.where((F.col("ts") - F.col("ts") % _HOUR).isin(sorted(touched)))
            report.rows_written = table.write(points(aggregate(in_hours).toLocalIterator()))
            records.unpersist()
    finally:
        checked.unpersist()

    for f in changed:
        entry = known.setdefault(f.path, {"hours": []})
        entry["hours"] = sorted(set(entry["hours"]) | new_hours.get(f.path, set()))
        entry["lines"] = line_counts.get(f.path, entry.get("lines", 0))
        if f.path in pending_files:
            entry.pop("size", None)
        else:
            entry["size"] = f.size
    store.save_manifest(manifest)
    return report


def _without_torn(lines: DataFrame, pending: list[str]) -> DataFrame:
    return lines.where(~(F.col("last") & F.col("file").isin(pending))) if pending else lines


def _log_bad(bad: DataFrame, names: dict[str, str], known: dict[str, dict[str, Any]]) -> int:
    """Log the bad lines not logged before (lines past what the manifest saw of the file); return their count."""
    count = 0
    for row in bad.orderBy("file", "line").toLocalIterator():
        path = names[row["file"]]
        if row["line"] > known.get(path, {}).get("lines", 0):
            count += 1
            log.warning("bad raw metric line skipped: %s:%d: %s", path, row["line"], row["reason"])
    return count


def _value(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if v is not None}
    return value


def points(rows: Iterator[Any]) -> Iterator[MetricPoint]:
    """Rows of :func:`srm.metrics.aggregate.aggregate` as table points (metric ``a_b`` → attribute ``a-b``)."""
    for row in rows:
        data = row.asDict(recursive=True)
        series = Series(
            data["resolution"], data["level"], data["source"], data["target"], data["topic"], data["partition"]
        )
        values = {
            name.replace("_", "-"): _value(value)
            for name, value in data.items()
            if name not in OUTPUT_KEYS and value is not None
        }
        yield MetricPoint(series, data["window_start"], values)
