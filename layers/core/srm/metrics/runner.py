"""One incremental aggregation run: raw data not read before + the stored partials of the hours it touches → the
metrics table. A run never reads a raw byte twice.

The state beside the raw data:

* the **manifest** (JSON): for every raw file, how many bytes of it were aggregated; for every hour (UTC, by record
  ``ts``) the generation of its stored partials and the segments of its record ids;
* the **partials** (Parquet, :func:`srm.metrics.aggregate.partials`): per hour, one row per partition and minute
  holding sums, mins, maxes, last samples and dense sketches, all mergeable;
* the **ids** (Parquet): the ``id`` of every record aggregated, per hour, one segment per run that touched it.

A run, under the store's lock (a second concurrent run is refused: :class:`ConcurrentRunError`):

1. lists the raw files and reads only their bytes past the manifest's (a local file grows; an S3 object does not);
2. drops records whose id is in the ids of their hour (Firehose delivers at least once), then computes the partials
   of the rest: the *touched* hours are the hours of these records, late data for a closed hour included;
3. merges them with the stored partials of the touched hours and writes a new generation of each;
4. aggregates the merged partials (:func:`srm.metrics.aggregate.aggregate_partials`) and writes the windows that
   received data (the touched minutes and their hours): an overwrite with the complete window, so idempotent;
5. saves the manifest, which switches to the new generations; then removes the replaced ones.

A crash before step 5 leaves the manifest as it was: the next run redoes the same work over the same bytes, and the
half-written generations are never read. Since every partial column is a sum, min, max or per-key sum, the table is
the same whatever order the raw data arrived in and however many runs read it.

A local file still being written may end in a line without its newline: until it has been still for ``settle_ms``
only its complete lines are read; after that the rest counts as a bad line. Bad lines are logged with their file
(and the byte where the part read starts) and the start of their text, once, when read; they never fail the run.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlparse

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from srm.metrics.aggregate import (
    OUTPUT_KEYS,
    aggregate_partials,
    bad_of,
    check_lines,
    partials,
    read_lines,
)
from srm.metrics.model.schema import FIELD_TYPES
from srm.metrics.model.series import RESOLUTIONS, MetricPoint, Series
from srm.metrics.model.store import MetricsStore

__all__ = [
    "ConcurrentRunError",
    "LocalRawStore",
    "RawFile",
    "RawStore",
    "RunReport",
    "S3RawStore",
    "points",
    "run_once",
]

log = logging.getLogger(__name__)

_HOUR = RESOLUTIONS["1h"]
_MINUTE = RESOLUTIONS["1m"]
_MANIFEST_VERSION = 2
_RAW_SUFFIXES = (".jsonl", ".jsonl.gz", ".gz")
# Up to this many records in a run, their ids are held in memory on every executor to find earlier copies.
_BROADCAST_IDS = 200_000


class ConcurrentRunError(RuntimeError):
    """Another run holds the store's lock (``holder``: what it wrote into the lock)."""

    def __init__(self, where: str, holder: str) -> None:
        super().__init__(f"another metrics aggregation holds {where} ({holder}); this run does nothing")
        self.where = where
        self.holder = holder


@dataclass(frozen=True)
class RawFile:
    path: str  # as Spark reads it (a local path or s3://bucket/key)
    size: int
    mtime_ms: int


class RawStore(Protocol):
    """The raw files, the manifest, the partials and the lock of one raw metrics store."""

    def list(self) -> list[RawFile]: ...

    def part(self, file: RawFile, offset: int, settled: bool) -> tuple[str | None, int]:
        """(what Spark reads, the end byte) for ``file``'s bytes from ``offset``; None when there is nothing to read
        (a file still being written reads up to its last newline)."""
        ...

    def origin(self, spark_file: str) -> str:
        """How a log line names the data Spark calls ``spark_file`` (``input_file_name()``)."""
        ...

    def state_uri(self, name: str) -> str:
        """Where Spark keeps the state dataset ``name`` (partials, ids) of this store."""
        ...

    def remove(self, uri: str) -> None:
        """Remove a state dataset (a replaced generation); nothing when absent."""
        ...

    def load_manifest(self) -> dict[str, Any]: ...

    def save_manifest(self, manifest: dict[str, Any]) -> None: ...

    def lock(self, owner: str) -> contextlib.AbstractContextManager[None]:
        """Held for a whole run; raises :class:`ConcurrentRunError` when another run holds it."""
        ...


def _is_raw(name: str) -> bool:
    return name.endswith(_RAW_SUFFIXES)


class LocalRawStore:
    """Raw files under ``root`` (``dt=…/hour=…/*.jsonl[.gz]``, see :class:`srm.metrics.sinks.FileSink`); the state
    beside ``manifest`` (``<manifest stem>.state/``)."""

    def __init__(self, root: Path, manifest: Path, *, lock_ttl_s: float = 3600.0) -> None:
        self.root = root
        self.manifest = manifest
        self.state = manifest.with_name(manifest.stem + ".state")
        self.lock_ttl_s = lock_ttl_s  # a lock older than this was left by a crashed run

    def list(self) -> list[RawFile]:
        found = []
        for path in sorted(self.root.rglob("*")):
            if path.is_file() and _is_raw(path.name):
                stat = path.stat()
                found.append(RawFile(str(path.resolve()), stat.st_size, stat.st_mtime_ns // 1_000_000))
        return found

    def part(self, file: RawFile, offset: int, settled: bool) -> tuple[str | None, int]:
        end = file.size
        if file.path.endswith(".gz"):  # a compressed file is read once, whole: its writer closes it first
            return (file.path, end) if offset == 0 else (None, offset)
        if not settled:
            end = _after_last_newline(Path(file.path), offset, file.size)
        if end <= offset:
            return None, offset
        if offset == 0 and end == file.size:
            return file.path, end
        # Only the unread bytes, copied beside the state: Spark reads whole files, and a line split across the
        # offset cannot happen (an offset is always just after a newline, or the file's end).
        tails = self.state / "tails"
        tails.mkdir(parents=True, exist_ok=True)
        tail = tails / f"{uuid.uuid4().hex}@{offset}.jsonl"
        with open(file.path, "rb") as source, tail.open("wb") as out:
            source.seek(offset)
            _copy(source, out, end - offset)
        (tails / (tail.name + ".origin")).write_text(file.path)
        return str(tail), end

    def origin(self, spark_file: str) -> str:
        path = Path(unquote(urlparse(spark_file).path))
        marker = path.with_name(path.name + ".origin")
        if marker.exists():
            return f"{marker.read_text()} (from byte {path.stem.rsplit('@', 1)[1]})"
        return str(path)

    def state_uri(self, name: str) -> str:
        return str(self.state / name)

    def remove(self, uri: str) -> None:
        shutil.rmtree(uri, ignore_errors=True)

    def load_manifest(self) -> dict[str, Any]:
        if not self.manifest.exists():
            return {}
        return dict(json.loads(self.manifest.read_text()))

    def save_manifest(self, manifest: dict[str, Any]) -> None:
        self.manifest.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.manifest.with_suffix(".tmp")
        temporary.write_text(json.dumps(manifest))
        temporary.replace(self.manifest)
        shutil.rmtree(self.state / "tails", ignore_errors=True)

    @contextlib.contextmanager
    def lock(self, owner: str) -> Iterator[None]:
        path = self.manifest.with_suffix(".lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                holder = path.read_text() if path.exists() else ""
                if time.time() - _mtime_s(path) > self.lock_ttl_s or not _alive(holder):
                    log.warning("metrics aggregation lock %s left by a crashed run (%s): taken over", path, holder)
                    path.unlink(missing_ok=True)
                    continue
                raise ConcurrentRunError(str(path), holder) from None
            with os.fdopen(fd, "w") as f:
                f.write(f"{os.getpid()} {owner}")
            break
        else:
            raise ConcurrentRunError(str(path), "taken over twice")
        try:
            yield
        finally:
            path.unlink(missing_ok=True)


def _alive(holder: str) -> bool:
    """Whether the process that wrote a local lock (``<pid> <owner>``) still runs: one killed mid-run (``srm run``
    stopped) must not hold the aggregation up for the lock's whole TTL."""
    pid = holder.split(" ", 1)[0]
    if not pid.isdigit():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _mtime_s(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _after_last_newline(path: Path, offset: int, size: int) -> int:
    """The byte after the last newline of ``path[offset:size]`` (``offset`` when there is none)."""
    with path.open("rb") as f:
        position = size
        while position > offset:
            start = max(offset, position - 65536)
            f.seek(start)
            found = f.read(position - start).rfind(b"\n")
            if found >= 0:
                return start + found + 1
            position = start
    return offset


def _copy(source: Any, out: Any, length: int) -> None:
    while length > 0:
        chunk = source.read(min(length, 1 << 20))
        if not chunk:
            break
        out.write(chunk)
        length -= len(chunk)


class S3RawStore:
    """Raw objects under ``s3://bucket/prefix`` (the Firehose delivery stream's destination; objects never grow);
    the manifest at ``manifest_key`` and the state under ``<manifest_key>.state/``; the lock is an object created
    only if absent (``If-None-Match: *``), so of two runs started together one is refused."""

    def __init__(self, client: Any, bucket: str, prefix: str, manifest_key: str, *, lock_ttl_s: float = 3600.0) -> None:
        self._s3 = client
        self.bucket = bucket
        self.prefix = prefix
        self.manifest_key = manifest_key
        self.state_prefix = f"{manifest_key}.state/"
        self.lock_key = f"{manifest_key}.lock"
        self.lock_ttl_s = lock_ttl_s

    def _keys(self, prefix: str) -> Iterator[dict[str, Any]]:
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            yield from page.get("Contents", [])

    def list(self) -> list[RawFile]:
        found = []
        for item in self._keys(self.prefix):
            key = item["Key"]
            if key.startswith(self.state_prefix) or not _is_raw(key):
                continue  # the state, markers, the manifest: not raw data, even under the same prefix
            modified = int(item["LastModified"].timestamp() * 1000)
            found.append(RawFile(f"s3://{self.bucket}/{key}", item["Size"], modified))
        return found

    def part(self, file: RawFile, offset: int, settled: bool) -> tuple[str | None, int]:
        if offset == 0:
            return file.path, file.size
        # Firehose writes an object once; one that changed was replaced, and its records carry the ids already seen.
        log.warning(
            "raw object %s changed size after it was read (%d → %d bytes): not read again", file.path, offset, file.size
        )
        return None, file.size

    def origin(self, spark_file: str) -> str:
        parsed = urlparse(spark_file)
        return f"s3://{parsed.netloc}{unquote(parsed.path)}"

    def state_uri(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.state_prefix}{name}"

    def remove(self, uri: str) -> None:
        parsed = urlparse(uri)
        prefix = parsed.path.lstrip("/").rstrip("/") + "/"
        keys = [{"Key": item["Key"]} for item in self._keys(prefix)]
        for start in range(0, len(keys), 1000):
            self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys[start : start + 1000], "Quiet": True})

    def load_manifest(self) -> dict[str, Any]:
        try:
            body = self._s3.get_object(Bucket=self.bucket, Key=self.manifest_key)["Body"].read()
        except self._s3.exceptions.NoSuchKey:
            return {}
        return dict(json.loads(body))

    def save_manifest(self, manifest: dict[str, Any]) -> None:
        self._s3.put_object(Bucket=self.bucket, Key=self.manifest_key, Body=json.dumps(manifest).encode())

    @contextlib.contextmanager
    def lock(self, owner: str) -> Iterator[None]:
        from botocore.exceptions import ClientError

        body = json.dumps({"owner": owner, "since_ms": time.time_ns() // 1_000_000}).encode()
        for _ in range(2):
            try:
                self._s3.put_object(Bucket=self.bucket, Key=self.lock_key, Body=body, IfNoneMatch="*")
                break
            except ClientError as e:
                if e.response.get("Error", {}).get("Code") not in ("PreconditionFailed", "ConditionalRequestConflict"):
                    raise
                holder = self._holder()
                if holder is not None and time.time() * 1000 - holder.get("since_ms", 0) > self.lock_ttl_s * 1000:
                    log.warning(
                        "metrics aggregation lock s3://%s/%s left by a crashed run (%s): taken over",
                        self.bucket,
                        self.lock_key,
                        holder,
                    )
                    self._s3.delete_object(Bucket=self.bucket, Key=self.lock_key)
                    continue
                raise ConcurrentRunError(f"s3://{self.bucket}/{self.lock_key}", json.dumps(holder)) from e
        else:
            raise ConcurrentRunError(f"s3://{self.bucket}/{self.lock_key}", "taken over twice")
        try:
            yield
        finally:
            self._s3.delete_object(Bucket=self.bucket, Key=self.lock_key)

    def _holder(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self._s3.get_object(Bucket=self.bucket, Key=self.lock_key)["Body"].read()))
        except self._s3.exceptions.NoSuchKey:
            return None


@dataclass
class RunReport:
    files_changed: int = 0  # raw files with bytes not read before
    files_read: int = 0  # of them, read in this run (the others are still being written)
    bytes_read: int = 0
    hours: list[int] = field(default_factory=list)  # the touched hours (window starts, epoch ms)
    bad_lines: int = 0
    duplicates: int = 0  # records whose id an earlier run (or this one) had already aggregated
    rows_written: int = 0
    pending_files: int = 0  # files whose last line is still being written
    # where the run's time went, by step: parse (raw lines into staging), duplicates, ids, partials, table
    seconds: dict[str, float] = field(default_factory=dict)


def _empty_manifest() -> dict[str, Any]:
    return {"v": _MANIFEST_VERSION, "files": {}, "hours": {}}


def _load(store: RawStore) -> dict[str, Any]:
    manifest = store.load_manifest()
    if not manifest:
        return _empty_manifest()
    if manifest.get("v") == 1:
        # Written before partials were kept: the table holds its results, but nothing can be merged with them, so
        # this run aggregates all raw data again (the same windows, overwritten with the same values).
        log.warning("metrics manifest v1 (no stored partials): aggregating all raw data again")
        return _empty_manifest()
    if manifest.get("v") != _MANIFEST_VERSION:
        raise ValueError(f"metrics manifest version {manifest.get('v')!r} is unknown (this runner knows 1 and 2)")
    return manifest


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
    run = f"{now_ms}-{uuid.uuid4().hex[:8]}"
    with store.lock(run):
        return _run(spark, store, table, settle_ms, now_ms, run)


def _run(spark: SparkSession, store: RawStore, table: MetricsStore, settle_ms: int, now_ms: int, run: str) -> RunReport:
    manifest = _load(store)
    done: dict[str, int] = manifest["files"]
    changed = [f for f in store.list() if f.size != done.get(f.path, 0)]
    report = RunReport(files_changed=len(changed))
    parts: list[str] = []
    ends: dict[str, int] = {}
    for f in changed:
        offset = done.get(f.path, 0)
        spark_path, end = store.part(f, offset, settled=now_ms - f.mtime_ms >= settle_ms)
        if end < f.size:
            report.pending_files += 1
        if spark_path is not None:
            parts.append(spark_path)
            report.bytes_read += end - offset
        ends[f.path] = end
    report.files_read = len(parts)
    if parts:
        _aggregate(spark, store, table, manifest, parts, run, report)
    done.update(ends)
    replaced = [hour.pop("replaced") for hour in manifest["hours"].values() if "replaced" in hour]
    store.save_manifest(manifest)
    for uri in replaced:
        store.remove(uri)
    return report


def _aggregate(
    spark: SparkSession,
    store: RawStore,
    table: MetricsStore,
    manifest: dict[str, Any],
    parts: list[str],
    run: str,
    report: RunReport,
) -> None:
    """Steps 2–4 of the module docstring over the raw ``parts``, told in ``report`` (rows written, touched hours,
    bad lines, duplicates, each step's seconds)."""
    hours: dict[str, dict[str, Any]] = manifest["hours"]
    step = _Steps(report.seconds)
    hour_of = F.col("ts") - F.col("ts") % _HOUR
    # The raw lines are parsed once, into Parquet beside the state: every pass below reads from there only the
    # columns it needs, and no pass holds the parsed records in memory (caching them would, sketches and all).
    staging = store.state_uri(f"staging/{run}")
    checked = check_lines(read_lines(spark, parts)).withColumn("_hour", F.when(F.col("reason").isNull(), hour_of))
    with _whole_stage_codegen(spark):
        checked.withColumn("_row", F.monotonically_increasing_id()).write.parquet(staging)
    persisted: list[DataFrame] = []
    try:
        checked = spark.read.parquet(staging)
        # One small action for what the run holds: valid records per hour and minute, and the bad lines (no hour).
        minute_of = F.when(F.col("_hour").isNotNull(), F.col("ts") - F.col("ts") % _MINUTE)
        seen = checked.groupBy("_hour", minute_of.alias("_minute")).count().collect()
        bad_lines = sum(row["count"] for row in seen if row["_hour"] is None)
        if bad_lines:
            _log_bad(bad_of(checked), store)
        valid_by_hour: dict[int, int] = {}
        for row in seen:
            if row["_hour"] is not None:
                valid_by_hour[row["_hour"]] = valid_by_hour.get(row["_hour"], 0) + row["count"]
        report.bad_lines = bad_lines
        step.done("parse")
        if not valid_by_hour:
            return
        valid = checked.where(F.col("reason").isNull())
        # A record delivered twice counts once: copies in this run past the first, and records whose id an earlier
        # run aggregated, are dropped (found on the ids alone; the rows dropped are few, so the joins are cheap).
        keys = valid.where(F.col("id").isNotNull()).select("id", "_row", "_hour")
        copies = keys.groupBy("id").agg(F.min("_row").alias("_first"), F.count(F.lit(1)).alias("_n"))
        later = keys.join(copies.where(F.col("_n") > 1), "id").where(F.col("_row") != F.col("_first"))
        drop = later.select("_row", "_hour")
        ids = [
            f"{store.state_uri('ids')}/{segment}/_hour={hour}"
            for hour in valid_by_hour
            for segment in hours.get(str(hour), {}).get("ids", [])
        ]
        if ids:  # an id names one record, whose hour is fixed: the segments of its hour are all it can be in
            earlier_ids = spark.read.parquet(*ids).select("id")
            if sum(valid_by_hour.values()) <= _BROADCAST_IDS:
                # A run over a little new data beside an hour of ids: the hour's ids are scanned against the run's
                # ids held in memory, not shuffled (a shuffle of every id of the hour would cost a run late in
                # the hour more than one early in it).
                earlier_ids = earlier_ids.join(F.broadcast(keys.select("id")), "id", "left_semi")
            seen_before = keys.join(earlier_ids, "id", "left_semi")
            drop = drop.unionByName(seen_before.select("_row", "_hour")).dropDuplicates(["_row"])
        drop = drop.persist()  # the rows dropped (few): computed once, by the count below, for the passes after it
        persisted.append(drop)
        dropped = {row["_hour"]: row["count"] for row in drop.groupBy("_hour").count().collect()}
        report.duplicates = sum(dropped.values())
        touched = sorted(hour for hour, n in valid_by_hour.items() if n > dropped.get(hour, 0))
        step.done("duplicates")
        if not touched:
            return
        records = valid.select(*FIELD_TYPES, "_hour", "_row")
        if report.duplicates:
            records = records.join(drop.select("_row"), "_row", "left_anti")
        # Every touched hour gets a segment (a null id marks one whose records have none), so each listed one exists.
        markers = spark.createDataFrame([(None, hour) for hour in touched], "id string, _hour long")
        segment = records.where(F.col("id").isNotNull()).select("id", "_hour").unionByName(markers)
        segment.write.partitionBy("_hour").parquet(store.state_uri(f"ids/{run}"))
        step.done("ids")
        olds = [
            f"{store.state_uri('partials')}/{hours[str(h)]['partials']}/_hour={h}"
            for h in touched
            if hours.get(str(h), {}).get("partials")
        ]
        earlier = spark.read.parquet(*olds) if olds else None
        merged_uri = store.state_uri(f"partials/{run}")
        hour_of_window = F.col("window_start") - F.col("window_start") % _HOUR
        with _whole_stage_codegen(spark):
            partial = partials(records, earlier).withColumn("_hour", hour_of_window)
            partial.write.partitionBy("_hour").parquet(merged_uri)
        step.done("partials")
        # The minutes of the records read (those of dropped copies too: rewriting a complete window changes nothing).
        minutes = sorted({row["_minute"] for row in seen if row["_hour"] in touched})
        merged = spark.read.parquet(*(f"{merged_uri}/_hour={h}" for h in touched))
        rows = aggregate_partials(merged).where((F.col("resolution") == "1h") | F.col("window_start").isin(minutes))
        report.rows_written = table.write(points(rows.toLocalIterator()))
        report.hours = touched
        step.done("table")
    finally:
        for frame in persisted:
            frame.unpersist()
        store.remove(staging)
    for hour in touched:
        entry = hours.setdefault(str(hour), {"ids": []})
        if entry.get("partials"):
            entry["replaced"] = f"{store.state_uri('partials')}/{entry['partials']}/_hour={hour}"
        entry["partials"] = run
        entry["ids"] = [*entry.get("ids", []), run]


class _Steps:
    """Seconds per step of a run, each from the end of the one before."""

    def __init__(self, seconds: dict[str, float]) -> None:
        self.seconds = seconds
        self._at = time.monotonic()

    def done(self, name: str) -> None:
        now = time.monotonic()
        self.seconds[name] = round(now - self._at, 2)
        self._at = now


@contextlib.contextmanager
def _whole_stage_codegen(spark: SparkSession) -> Iterator[None]:
    """Whole-stage code generation on for one query, then the session's setting back: the parse and the partials
    pass over every record, where compiled code is several times faster than interpreted; the small plans around
    them need no compiling (the local runtime's session turns it off for them)."""
    key = "spark.sql.codegen.wholeStage"
    before = spark.conf.get(key, "true") or "true"
    spark.conf.set(key, "true")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def _log_bad(bad: DataFrame, store: RawStore) -> None:
    for row in bad.orderBy("file").toLocalIterator():
        log.warning("bad raw metric line skipped: %s: %s: %r", store.origin(row["file"]), row["reason"], row["text"])


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
