"""A target that stops answering mid-stream (its broker SIGSTOPped, then SIGCONTinued) under `srm run`: nothing lost,
retries spaced out (no storm), the worker's memory bounded."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.kafka import create_topic, read_topic
from tests.support.runtime import child_pids, srm_run
from tests.support.traffic import Batches, produce_replicated, wait_no_loss

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
    flow = {"topics": topic, "mirror.delivery.timeout.ms": TIMEOUT_MS}

    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": flow}) as run:
        produce_replicated(a, b, topic, 200)
        workers = child_pids(run.process.pid)
        baseline_kb = peak_kb = max(rss_kb(pid) for pid in workers)
        with Batches(a, topic, size=20, start=200) as batches:
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
        duplicates = wait_no_loss(a, topic, b, f"a.{topic}")
        assert run.alive(), run.output()[-3000:]
        output = run.output()

    # THEN every partition holds every source record in order (re-sent runs are the only extras)
    src = read_topic(a, topic)
    assert sum(len(r) for r in src.values()) == batches.produced > 200
    retries = [line for line in during if "batch failed, retrying" in line]
    print(
        f"slow target: {batches.produced} records, {duplicates} duplicates, {len(retries)} failed attempts in "
        f"{STOPPED_S}s stopped, worker RSS {baseline_kb // 1024} MB -> peak {peak_kb // 1024} MB"
    )
    # … the batch waited out its delivery timeout and was retried with backoff: one mapping, at most one attempt per
    # timeout (a storm would be one per poll)
    assert 1 <= len(retries) <= STOPPED_S * 1000 // TIMEOUT_MS + 1, "\n".join(retries)
    # … and the worker's memory stayed bounded (the producer queue holds one batch, the event source one event)
    assert peak_kb - baseline_kb < 200 * 1024
    assert "Traceback" not in output, output[-3000:]
