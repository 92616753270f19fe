"""``srm-control verify`` on a 1,000,000-record partition: constant memory (peak RSS printed), a sample, a rate limit
that holds, and a run interrupted then resumed where it stopped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.support.kafka import create_topic, record_count, unique, wait_for
from tests.support.runtime import SrmRun, write_config

pytestmark = pytest.mark.e2e

RECORDS = 1_000_000

# srm-control verify run in-process by a child, which then prints its own peak RSS (KiB) on stderr's last line: the
# VmHWM of its own address space (getrusage's ru_maxrss would include the test process's, inherited at fork)
MEASURED = (
    "import re, sys\n"
    "from pathlib import Path\n"
    "from srm.cli.control import main\n"
    "code = main(sys.argv[1:])\n"
    "print(re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def verify_command(topic: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        MEASURED,
        "--local",
        "verify",
        "--source",
        "a",
        "--target",
        "b",
        "--topic",
        topic,
        "--json",
        *args,
    ]


def measured(cwd: Path, topic: str, *args: str) -> tuple[dict[str, Any], int]:
    """The verification's JSON and the process's peak RSS in MiB."""
    done = subprocess.run(verify_command(topic, *args), cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(done.stdout), int(done.stderr.strip().splitlines()[-1]) // 1024


def produce_many(bootstrap: str, topic: str, count: int) -> None:
    """``count`` distinct ~100-byte records with recent timestamps, as fast as a producer goes."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1_000_000})
    base = int(time.time() * 1000) - 60_000
    for i in range(count):
        while True:
            try:
                producer.produce(topic, b"value-%08d-" % i + b"x" * 80, b"key-%d" % i, partition=0, timestamp=base)
                break
            except BufferError:
                producer.poll(0.1)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


@pytest.mark.timeout(1200)
def test_a_million_record_partition_in_constant_memory_sampled_throttled_and_resumed(clusters, tmp_path: Path) -> None:
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("verbig")
    create_topic(a, topic, 1)
    produce_many(a, topic, RECORDS)
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    with SrmRun(config, tmp_path):
        wait_for(lambda: record_count(b, f"a.{topic}") == RECORDS, 600, 2.0, "a million records replicated")

    # GIVEN a small range's peak RSS, WHEN the whole partition is verified, THEN the peak RSS is the same
    small, small_rss = measured(tmp_path, topic, "--from-offset", str(RECORDS - 10_000))
    assert small["identical"] and small["compared"] == 10_000
    full, full_rss = measured(tmp_path, topic, "--from-offset", "0")
    assert full["identical"] and full["compared"] == RECORDS
    print(
        f"\nverify: peak RSS {full_rss} MiB for {RECORDS:,} records ({small_rss} MiB for 10,000); "
        f"{full['recordsPerSecond']:,.0f} records/s"
    )
    assert full_rss < small_rss + 40 and full_rss < 250

    # WHEN a fraction is sampled, THEN that share of the range is compared, in blocks
    sampled = measured(tmp_path, topic, "--sample", "0.01")[0]
    assert sampled["identical"] and sampled["compared"] == 10_000 and sampled["partitions"][0]["sample"] == 0.01

    # WHEN the rate is limited, THEN it never goes faster (how closely it paces is the unit tests' clock's to show:
    # a machine busy with both brokers makes it slower, which says nothing of the limit)
    rate = 4000
    limited = measured(tmp_path, topic, "--from-offset", str(RECORDS - 12_000), "--max-rate", str(rate))[0]
    assert limited["compared"] == 12_000 and limited["recordsPerSecond"] <= 1.2 * rate, limited

    # WHEN a run from the start is interrupted part way
    interrupted = subprocess.Popen(
        verify_command(topic, "--from-offset", "0", "--max-rate", "40000"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(8)  # well past the first saved position (every 50,000 records)
    interrupted.send_signal(signal.SIGINT)
    interrupted.communicate(timeout=60)
    # THEN the next run continues where it stopped, and verifies the rest
    resumed = measured(tmp_path, topic)[0]
    start = resumed["partitions"][0]["sourceRange"][0]
    assert 0 < start < RECORDS and start % 50_000 == 0, resumed["partitions"][0]["sourceRange"]
    assert resumed["identical"] and resumed["compared"] == RECORDS - start
