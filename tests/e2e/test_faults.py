"""Faults around `srm run`: a target broker restart mid-stream, stop signals, an unreachable cluster."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from srm.local.store import free_port
from tests.support.kafka import (
    assert_no_loss,
    create_topic,
    numbered_records,
    produce,
    read_topic,
    record_count,
    topic_partitions,
    unique,
    wait_for,
)
from tests.support.runtime import SrmRun, child_pids, pid_alive, wait_log, write_config

pytestmark = pytest.mark.e2e


def _no_loss_yet(source: str, topic: str, target: str, remote: str) -> int | None:
    """Duplicates per assert_no_loss once every partition of the remote topic holds every source record."""
    src = read_topic(source, topic)
    dst = read_topic(target, remote) if topic_partitions(target, remote) else {}
    try:
        return sum(assert_no_loss(src[p], dst.get(p, [])) for p in src) + 1  # +1: zero duplicates is truthy
    except AssertionError:
        return None


def test_target_broker_restart_mid_stream_loses_nothing_and_run_retries(restartable, tmp_path: Path):
    # GIVEN a 2-partition topic replicated a->b, with batches failing fast when the target does not answer
    a, b = restartable["a"].bootstrap, restartable["b"].bootstrap
    topic = "stream"
    create_topic(a, topic, 2)
    config = write_config(
        tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic, "mirror.delivery.timeout.ms": 2000}}
    )
    produced = 0
    stop_traffic = threading.Event()

    def traffic() -> None:
        nonlocal produced
        while not stop_traffic.is_set():
            produce(a, topic, numbered_records(6, 2, topic, start=produced))
            produced += 6
            time.sleep(0.1)

    with SrmRun(config, tmp_path) as run:
        produce(a, topic, numbered_records(100, 2, topic))
        produced = 100
        wait_for(
            lambda: topic_partitions(b, f"a.{topic}") and record_count(b, f"a.{topic}") >= 100,
            timeout=120,
            message="the first records replicated",
        )
        writer = threading.Thread(target=traffic)
        writer.start()
        try:
            # WHEN the target broker stops while records keep arriving, long enough for batches to fail
            time.sleep(1)
            restartable["b"].stop()
            wait_log(run, "batch failed, retrying", timeout=60)
            time.sleep(3)
            # … and comes back on the same data dir while the stream goes on
            restartable["b"].start()
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

    # THEN every partition holds every source record in order; the only extra records are re-sent runs
    src, dst = read_topic(a, topic), read_topic(b, f"a.{topic}")
    assert sum(len(r) for r in src.values()) == produced > 100
    assert sum(assert_no_loss(src[p], dst[p]) for p in src) == duplicates
    assert sum(len(r) for r in dst.values()) == produced + duplicates
    # … and srm run said why it was retrying, and kept running
    assert "batch failed, retrying" in output
    assert "Traceback" not in output, output[-3000:]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_stop_signal_exits_zero_and_stops_workers(clusters, tmp_path: Path, signum: int):
    # GIVEN srm run replicating a flow, with its worker process running
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("sig")
    create_topic(a, topic, 1)
    produce(a, topic, numbered_records(20, 1, topic))
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    run = SrmRun(config, tmp_path)
    try:
        wait_log(run, f"replicating {topic} (a->b)", timeout=60)
        workers = child_pids(run.process.pid)
        assert workers, "no worker process found"

        # WHEN it receives the signal
        run.process.send_signal(signum)
        returncode = run.process.wait(30)  # a liveness bound: raises TimeoutExpired if it hangs
    finally:
        run.stop()

    # THEN it exits 0, its workers stopped cleanly and are gone, and the local store is closed
    assert returncode == 0, run.output()[-3000:]
    wait_for(lambda: not any(pid_alive(pid) for pid in workers), timeout=10, message="worker processes gone")
    output = run.output()
    assert "a->b: worker stopped" in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert not (tmp_path / ".srm-local" / "store.url").exists()


def test_run_with_unreachable_target_warns_once_naming_cluster_and_keeps_running(clusters, tmp_path: Path):
    # GIVEN a flow whose target bootstrap is a closed loopback port
    a = clusters["a"].bootstrap
    dead = f"127.0.0.1:{free_port()}"
    topic = unique("dead")
    create_topic(a, topic, 1)
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": dead}, {"a->b": {"topics": topic}})

    # WHEN srm run starts
    with SrmRun(config, tmp_path) as run:
        wait_log(run, "a->b: worker started", timeout=60)
        time.sleep(3)  # a few topic refreshes against the dead target

        # THEN it warned on one line naming the cluster and its address, did not crash, and keeps running
        assert run.alive(), run.output()[-3000:]
        output = run.output()
        warnings = [line for line in output.splitlines() if "WARNING" in line and "cluster b" in line]
        assert len(warnings) == 1, output[-3000:]
        assert dead in warnings[0] and "does not answer" in warnings[0]
        assert "Traceback" not in output, output[-3000:]
    # and it stops cleanly, not killed, although topic sync is blocked on the dead cluster
    assert run.process.returncode == 0
    assert "a->b: worker stopped" in run.output(), run.output()[-3000:]
