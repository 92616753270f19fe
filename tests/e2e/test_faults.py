"""Faults around `srm run`: a target broker restart mid-stream, stop signals, an unreachable cluster."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from srm.local.store import free_port, lock_state_dir
from tests.support.kafka import assert_no_loss, create_topic, create_topic_with_records, read_topic, unique, wait_for
from tests.support.runtime import child_pids, pid_alive, srm_run, wait_log
from tests.support.traffic import Batches, produce_replicated, wait_no_loss

pytestmark = pytest.mark.e2e


def test_target_broker_restart_mid_stream_loses_nothing_and_run_retries(restartable, tmp_path: Path):
    # GIVEN a 2-partition topic replicated a->b, with batches failing fast when the target does not answer
    a, b = restartable["a"].bootstrap, restartable["b"].bootstrap
    topic = "stream"
    create_topic(a, topic, 2)
    flow = {"topics": topic, "mirror.delivery.timeout.ms": 2000}

    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": flow}) as run:
        produce_replicated(a, b, topic, 100)
        with Batches(a, topic, size=6, start=100) as batches:
            # WHEN the target broker stops while records keep arriving, long enough for batches to fail
            time.sleep(1)
            restartable["b"].stop()
            wait_log(run, "batch failed, retrying", timeout=60)
            time.sleep(3)
            # … and comes back on the same data dir while the stream goes on
            restartable["b"].start()
            time.sleep(2)
        duplicates = wait_no_loss(a, topic, b, f"a.{topic}")
        assert run.alive(), run.output()[-3000:]
        output = run.output()

    # THEN every partition holds every source record in order; the only extra records are re-sent runs
    src, dst = read_topic(a, topic), read_topic(b, f"a.{topic}")
    assert sum(len(r) for r in src.values()) == batches.produced > 100
    assert sum(assert_no_loss(src[p], dst[p]) for p in src) == duplicates
    assert sum(len(r) for r in dst.values()) == batches.produced + duplicates
    # … and srm run said why it was retrying, and kept running
    assert "batch failed, retrying" in output
    assert "Traceback" not in output, output[-3000:]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_run_stop_signal_exits_zero_and_stops_workers(clusters, tmp_path: Path, signum: int):
    # GIVEN srm run replicating a flow, with its worker process running
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("sig")
    create_topic_with_records(a, topic, 1, 20)
    run = srm_run(tmp_path, {"a": a, "b": b}, {"a->b": {"topics": topic}})
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
    lock_state_dir(tmp_path / ".srm-local").close()  # its directory is free: another srm run may start there


def test_run_with_unreachable_target_warns_once_naming_cluster_and_keeps_running(clusters, tmp_path: Path):
    # GIVEN a flow whose target bootstrap is a closed loopback port
    a = clusters["a"].bootstrap
    dead = f"127.0.0.1:{free_port()}"
    topic = unique("dead")
    create_topic(a, topic, 1)

    # WHEN srm run starts
    with srm_run(tmp_path, {"a": a, "b": dead}, {"a->b": {"topics": topic}}) as run:
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
