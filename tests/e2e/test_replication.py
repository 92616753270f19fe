"""`srm run` replicates topics between two real clusters: every partition identical, record by record."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.support.kafka import Rec, assert_identical, create_topic, produce, unique, wait_replicated
from tests.support.runtime import SrmRun, write_config

pytestmark = [pytest.mark.e2e, pytest.mark.compat]  # also run on the compatibility tier's Kafka

OLD = 1_000_000_000_000  # 2001-09-09: far older than any default retention


def tricky_records(n: int, partitions: int, seed: int) -> list[tuple[int, Rec]]:
    """Null keys, null values, duplicate header keys, binary and null header values, old timestamps."""
    out = []
    for i in range(n):
        key = None if i % 7 == 0 else f"k{seed}-{i}".encode()
        value = None if i % 11 == 0 else bytes([i % 256, 0, 255]) + f"v{seed}-{i}".encode()
        headers = (("h", b"1"), ("h", b"\x00\xff\x80"), ("nil", None), ("utf8", "ë".encode())) if i % 3 else ()
        out.append((i % partitions, Rec(key, value, headers, OLD + i * 1000)))
    return out


def test_run_replicates_three_topics_identically_including_live_traffic(clusters, tmp_path: Path):
    # GIVEN three topics with 1, 2 and 3 partitions holding awkward records, and a flow a->b selecting them
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("rep")
    topics = {f"{prefix}.one": 1, f"{prefix}.two": 2, f"{prefix}.three": 3}
    for seed, (topic, partitions) in enumerate(topics.items()):
        create_topic(a, topic, partitions, {"retention.ms": "-1"})
        produce(a, topic, tricky_records(600, partitions, seed))
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": f"{prefix}\\..*"}})

    # WHEN srm run replicates while a producer keeps writing
    stop = threading.Event()

    def live_traffic():
        seed = 100
        while not stop.is_set():
            for topic, partitions in topics.items():
                produce(a, topic, tricky_records(30, partitions, seed))
            seed += 1
            time.sleep(0.1)

    with SrmRun(config, tmp_path) as run:
        writer = threading.Thread(target=live_traffic)
        writer.start()
        time.sleep(3)
        stop.set()
        writer.join()
        for topic in topics:
            wait_replicated(a, topic, b, f"a.{topic}", timeout=90)
        assert run.alive(), run.output()[-2000:]

    # THEN every partition of every remote topic equals its source: same records, order, keys, values, headers,
    # timestamps; nothing lost, nothing duplicated
    for topic, partitions in topics.items():
        counts = assert_identical(a, topic, b, f"a.{topic}")
        assert len(counts) == partitions
        assert sum(counts.values()) >= 600
