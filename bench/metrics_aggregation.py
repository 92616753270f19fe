"""``python -m bench.metrics_aggregation [--rows N]``: the metrics aggregation's run time and the Spark driver's memory.

Writes N raw mirror-batch lines (100 files of ~16 MB; 20 partitions of 4 topics over 2 hours; each line with two
sketches of up to ~150 buckets: pessimistic, real batches are narrower) into a temporary raw store, then times one
:func:`srm.metrics.runner.run_once` from scratch into an in-process (moto) metrics table, sampling the resident
memory of the Spark driver JVM while it runs.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import tempfile
import threading
import time
from pathlib import Path

T0 = 1_700_002_800_000
FILES = 100  # ~16 MB each: the FileSink and Firehose buffer bound (files are read whole)


def write_raw(root: Path, rows: int) -> int:
    from srm.metrics.model.sketch import Sketch
    from srm.metrics.sinks import raw_partition

    rng = random.Random(1)
    sketches = []
    for _ in range(200):
        n = rng.randint(10, 200)
        latency = Sketch.of(float(int(rng.lognormvariate(4, 1.5))) for _ in range(n))
        age = Sketch.of(float(int(rng.lognormvariate(9, 1.5))) for _ in range(n))
        sketches.append((n, json.dumps(latency.to_json()), json.dumps(age.to_json())))
    size = 0
    per_file = rows // FILES
    for f in range(FILES):
        ts0 = T0 + f * (2 * 3_600_000 // FILES)
        path = root / raw_partition(ts0) / f"bench-{f}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as out:
            for i in range(per_file):
                n, latency, age = sketches[rng.randrange(200)]
                topic, partition = f"topic{i % 4}", (i // 4) % 5
                out.write(
                    f'{{"v":1,"kind":"mirror","ts":{ts0 + i * 7},"source":"a","target":"b","topic":"{topic}",'
                    f'"remote_topic":"a.{topic}","partition":{partition},"records":{n},"bytes":{n * 200},'
                    f'"latency":{latency},"age":{age}}}\n'
                )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--driver-memory", default="1g")
    args = parser.parse_args()

    import os

    import boto3
    from moto import mock_aws
    from pyspark.sql import SparkSession

    from srm.aws.metrics_table import MetricsTable, create_metrics_table
    from srm.metrics.runner import LocalRawStore, run_once

    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        root = Path(tmp) / "raw"
        started = time.monotonic()
        size = write_raw(root, args.rows)
        print(f"raw: {args.rows} lines, {size / 1e6:.0f} MB in {FILES} files ({time.monotonic() - started:.0f} s)")
        started = time.monotonic()
        spark = (
            SparkSession.builder.master("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.memory", args.driver_memory)
            .config("spark.sql.session.timeZone", "UTC")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        print(f"SparkSession (JVM start): {time.monotonic() - started:.1f} s")
        db = boto3.client("dynamodb", region_name="us-east-1")
        create_metrics_table(db, "metrics")
        peak: dict[str, int] = {}
        done = threading.Event()

        def sample() -> None:
            while not done.wait(0.5):
                for _, (comm, rss) in descendants_rss_kb(os.getpid()).items():
                    peak[comm] = max(peak.get(comm, 0), rss)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        started = time.monotonic()
        report = run_once(spark, LocalRawStore(root, Path(tmp) / "manifest.json"), MetricsTable(db, "metrics"))
        elapsed = time.monotonic() - started
        done.set()
        sampler.join()
        print(f"run_once: {elapsed:.1f} s, {report}")
        for comm, rss in sorted(peak.items()):
            print(f"peak RSS {comm}: {rss / 1024:.0f} MB")
        spark.stop()


if __name__ == "__main__":
    main()
