"""A target that stops answering mid-stream (its broker SIGSTOPped, then SIGCONTinued) under `srm run`: nothing lost,
retries spaced out (no storm), the worker's memory bounded."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.support.kafka import (
    assert_no_loss,
    create_topic,
    numbered_records,
    produce,
    read_topic,
    record_count,
    topic_partitions,
    wait_for,
)
from tests.support.runtime import SrmRun, child_pids, write_config

pytestmark = pytest.mark.e2e

STOPPED_S = 20
TIMEOUT_MS = 3000  # mirror.delivery.timeout.ms


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def test_target_that_stops_answering_mid_batch_loses_nothing_without_a_retry_storm(restartable, tmp_path: Path):
    # GIVEN a 2-partition topic replicated a->b with a 3 s delivery timeout, records flowing
    a, b = restartable["a"].bootstrap, restartable["b"].bootstrap
    broker = restartable["b"].local
    assert broker is not None and broker.running
    topic = "slow"
    create_topic(a, topic, 2)
    config = write_config(
        tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic, "mirror.delivery.timeout.ms": TIMEOUT_MS}}
    )
    produced = 0
    stop_traffic = threading.Event()

    def traffic() -> None:
        nonlocal produced
        while not stop_traffic.is_set():
            produce(a, topic, numbered_records(20, 2, topic, start=produced))
            produced += 20
            time.sleep(0.1)

    with SrmRun(config, tmp_path) as run:
        produce(a, topic, numbered_records(200, 2, topic))
        produced = 200
        wait_for(
            lambda: topic_partitions(b, f"a.{topic}") and record_count(b, f"a.{topic}") >= 200,
            timeout=120,
            message="the first records replicated",
        )
        workers = child_pids(run.process.pid)
        baseline_kb = max(rss_kb(pid) for pid in workers)
        writer = threading.Thread(target=traffic)
        writer.start()
        peak_kb = baseline_kb
        try:
            # WHEN the target broker stops answering (frozen mid-batch: connections open, no reply) for 20 s
            time.sleep(1)
            os.killpg(broker.node_pids()[0], signal.SIGSTOP)
            stopped_at = len(run.output().splitlines())
            try:
                deadline = time.monotonic() + STOPPED_S
                while time.monotonic() < deadline:
                    peak_kb = max(peak_kb, *(rss_kb(pid) for pid in workers))
                    time.sleep(0.5)
            finally:
                os.killpg(broker.node_pids()[0], signal.SIGCONT)  # … then answers again
            during = run.output().splitlines()[stopped_at:]
            time.sleep(2)
        finally:
            stop_traffic.set()
            writer.join()
        duplicates = (
            wait_for(
                lambda: _no_loss_yet(a, topic, b, f"a.{topic}"),
                timeout=180,
                message="every source record on the target",
            )
            - 1
        )
        assert run.alive(), run.output()[-3000:]
        output = run.output()

    # THEN every partition holds every source record in order (re-sent runs are the only extras)
    src = read_topic(a, topic)
    assert sum(len(r) for r in src.values()) == produced > 200
    retries = [line for line in during if "batch failed, retrying" in line]
    print(
        f"slow target: {produced} records, {duplicates} duplicates, {len(retries)} failed attempts in {STOPPED_S}s "
        f"stopped, worker RSS {baseline_kb // 1024} MB -> peak {peak_kb // 1024} MB"
    )
    # … the batch waited out its delivery timeout and was retried with backoff: one mapping, at most one attempt per
    # timeout (a storm would be one per poll)
    assert 1 <= len(retries) <= STOPPED_S * 1000 // TIMEOUT_MS + 1, "\n".join(retries)
    # … and the worker's memory stayed bounded (the producer queue holds one batch, the event source one event)
    assert peak_kb - baseline_kb < 200 * 1024
    assert "Traceback" not in output, output[-3000:]


def _no_loss_yet(source: str, topic: str, target: str, remote: str) -> int | None:
    src = read_topic(source, topic)
    dst = read_topic(target, remote) if topic_partitions(target, remote) else {}
    try:
        return sum(assert_no_loss(src[p], dst.get(p, [])) for p in src) + 1  # +1: zero duplicates is truthy
    except AssertionError:
        return None
