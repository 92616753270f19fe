"""``python -m bench.metrics_aggregation [--rows N]``: the metrics aggregation at fleet scale, as ratios measured side
by side in one Spark session (never absolute times: the machine's speed cancels out).

Writes N raw mirror-batch lines into one hour (20 partitions of 4 topics; each line with two sketches of up to ~150
buckets: pessimistic, real batches are narrower) as gzip JSON lines in ``FILES`` objects, as Firehose delivers them
with ``CompressionFormat: GZIP``; then, in one SparkSession:

* ``baseline``: a bare ``spark.read`` of the same files and ``groupBy(flow, minute).count()``;
* ``first``: :func:`srm.metrics.runner.run_once` over them, from scratch, into a metrics store that keeps the points
  in memory (moto's DynamoDB takes ~30 ms a point, which would time moto; the real table takes a batch of 25 a call);
* ``incremental``: 1 % more rows of the same hour in new files, and ``run_once`` again (it reads the new files and
  the hour's stored partials);

while sampling the resident memory of the Spark JVM (in local mode the driver and the executor). The last line:
``aggregation: incremental=<incremental/first> throughput=<baseline/first> bytes_per_row=<gzip bytes on disk per
row> driver_peak_mb=<the JVM's peak RSS>``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

T0 = 1_700_002_800_000
FILES = 40  # Firehose objects: 16 MB buffers of ~1.3 KB lines, gzip'd to ~2.5 MB each at 1,000,000 rows


def write_raw(root: Path, rows: int, *, files: int = FILES, seed: int = 1, name: str = "bench") -> int:
    """``rows`` lines spread over one hour in ``files`` gzip objects; returns their bytes on disk."""
    from srm.metrics.model.sketch import Sketch
    from srm.metrics.sinks import raw_partition

    rng = random.Random(seed)
    sketches = []
    for _ in range(2000):  # many distinct sketches: repeats within gzip's window would flatter the compression
        n = rng.randint(10, 200)
        latency = Sketch.of(float(int(rng.lognormvariate(4, 1.5))) for _ in range(n))
        age = Sketch.of(float(int(rng.lognormvariate(9, 1.5))) for _ in range(n))
        compact = {"separators": (",", ":")}
        sketches.append((n, json.dumps(latency.to_json(), **compact), json.dumps(age.to_json(), **compact)))  # type: ignore[arg-type]
    size = 0
    per_file = max(1, rows // files)
    written = 0
    for f in range(files):
        count = per_file if f < files - 1 else rows - written
        path = root / raw_partition(T0) / f"{name}-{f}.jsonl.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt", compresslevel=6) as out:
            for _ in range(count):
                n, latency, age = sketches[rng.randrange(len(sketches))]
                i = rng.randrange(rows)
                topic, partition = f"topic{i % 4}", (i // 4) % 5
                out.write(
                    f'{{"v":1,"id":"{name}:{written}","kind":"mirror","ts":{T0 + i * 3_600_000 // rows},'
                    f'"source":"a","target":"b","topic":"{topic}","remote_topic":"a.{topic}","partition":{partition},'
                    f'"records":{n},"bytes":{n * 200},"latency":{latency},"age":{age}}}\n'
                )
                written += 1
        size += path.stat().st_size
    return size


def descendants_rss_kb(pid: int) -> dict[int, tuple[str, int]]:
    out = subprocess.run(["ps", "-eo", "pid=,ppid=,rss=,comm="], capture_output=True, text=True, check=True).stdout
    rows = [line.split(None, 3) for line in out.splitlines()]
    children: dict[int, list[int]] = {}
    info = {}
    for p, pp, rss, comm in rows:
        children.setdefault(int(pp), []).append(int(p))
        info[int(p)] = (comm, int(rss))
    found, todo = {}, [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = info[child]
            todo.append(child)
    return found


class PeakRss:
    """The peak resident memory of this process's java descendants (the Spark JVM), sampled every 0.2 s."""

    def __init__(self) -> None:
        self.peak_kb = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._done.wait(0.2):
            for comm, rss in descendants_rss_kb(os.getpid()).values():
                if comm.startswith("java"):
                    self.peak_kb = max(self.peak_kb, rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_: Any) -> None:
        self._done.set()
        self._thread.join()


class MemoryMetrics:
    """A metrics store keeping the last point of each window in memory."""

    minute_retention_s = 15 * 86400

    def __init__(self) -> None:
        self.points: dict[tuple[Any, int], Any] = {}

    def write(self, points: Any) -> int:
        count = 0
        for point in points:
            self.points[(point.series, point.window_start)] = point
            count += 1
        return count

    def query(self, series: Any, start_ms: int, end_ms: int) -> list[Any]:
        return [
            p
            for (s, w), p in sorted(self.points.items(), key=lambda i: i[0][1])
            if s == series and start_ms <= w <= end_ms
        ]


def baseline_seconds(spark: Any, root: Path) -> float:
    """A bare read of the raw files and a count per flow and minute: the floor any aggregation stands on."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    raw = spark.read.schema("source string, target string, ts long").json(str(root))
    flow = F.concat_ws("->", "source", "target")
    raw.groupBy(flow.alias("flow"), (F.col("ts") - F.col("ts") % 60_000).alias("minute")).count().collect()
    return time.monotonic() - started


def measure(rows: int) -> dict[str, float]:
    """Run this benchmark in a process (and JVM) of its own; its output is printed as it comes; returns the figures
    of its last line."""
    import sys

    command = [sys.executable, "-m", "bench.metrics_aggregation", "--rows", str(rows)]
    last = ""
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(f"  metrics {rows:,} rows: {line}", end="", flush=True)
            last = line
    if process.returncode or not last.startswith("aggregation: "):
        raise RuntimeError(f"bench.metrics_aggregation --rows {rows} failed (exit {process.returncode})")
    return {k: float(v) for k, v in (pair.split("=") for pair in last.split()[1:])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--driver-memory", default="1g")
    args = parser.parse_args()

    from srm.local.aggregator import spark_session
    from srm.metrics.runner import LocalRawStore, run_once

    with tempfile.TemporaryDirectory(prefix="srm-bench-metrics-") as tmp:
        root = Path(tmp) / "raw"
        started = time.monotonic()
        size = write_raw(root, args.rows)
        print(
            f"raw: {args.rows:,} rows, {size / 1e6:.0f} MB gzip JSON lines in {FILES} files "
            f"({time.monotonic() - started:.0f} s to write)",
            flush=True,
        )
        table = MemoryMetrics()
        store = LocalRawStore(root, Path(tmp) / "manifest.json")
        with PeakRss() as rss:
            spark = spark_session(args.driver_memory, cores=2, app_name="srm-bench-metrics")
            try:
                baseline = baseline_seconds(spark, root)
                print(f"baseline (spark.read + groupBy(flow, minute).count()): {baseline:.1f} s", flush=True)
                started = time.monotonic()
                first = run_once(spark, store, table, settle_ms=0)
                first_s = time.monotonic() - started
                print(f"first run: {first_s:.1f} s, {first}", flush=True)
                extra = max(1, args.rows // 100)
                write_raw(root, extra, files=max(1, FILES // 10), seed=2, name="late")
                started = time.monotonic()
                second = run_once(spark, store, table, settle_ms=0)
                second_s = time.monotonic() - started
                print(f"incremental run (+{extra:,} rows, same hour): {second_s:.1f} s, {second}", flush=True)
            finally:
                spark.stop()
        print(
            f"aggregation: incremental={second_s / first_s:.3f} throughput={baseline / first_s:.3f} "
            f"bytes_per_row={size / args.rows:.0f} driver_peak_mb={rss.peak_kb / 1024:.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
