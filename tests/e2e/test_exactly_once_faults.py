"""`srm run` in exactly-once mode under faults, with live traffic: the worker killed (SIGKILL) mid-stream, the
source broker bounced, the target broker bounced (its open transactions survive the restart and are completed or
aborted; their producers stay fenced). At the end every partition of
the remote topic, read ``read_committed``, equals the source's: 0 lost, 0 duplicates, order kept."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.kafka import read_topic, unique, wait_for
from tests.support.traffic import live_flow, worker_pid

pytestmark = pytest.mark.e2e

EOS = {"exactly.once.source.support": "enabled", "mirror.delivery.timeout.ms": 5000}


def counts(source: str, topic: str, target: str, remote: str) -> dict[int, tuple[int, int, int]] | None:
    """Per partition (source records, lost, duplicates) once the remote partition holds every source value, read
    read_committed; None before."""
    src, dst = read_topic(source, topic), read_topic(target, remote)
    out = {}
    for p, records in src.items():
        want = [r.value for r in records]
        got = [r.value for r in dst.get(p, [])]
        lost = len(set(want) - set(got))
        if lost:
            return None
        out[p] = (len(want), lost, len(got) - len(set(got)))
    return out


def assert_exactly_once(source: str, topic: str, target: str, remote: str, what: str) -> None:
    found = wait_for(lambda: counts(source, topic, target, remote), timeout=180, message="every source record")
    print(f"\n{what}: per partition (records, lost, duplicates): {found}")
    for p, (records, lost, duplicates) in found.items():
        assert records > 0 and lost == 0 and duplicates == 0, f"partition {p}: {records} records, {duplicates} dup"
    src, dst = read_topic(source, topic), read_topic(target, remote)
    for p in src:
        assert [r.content() for r in dst[p]] == [r.content() for r in src[p]], f"partition {p} differs"


def test_exactly_once_survives_worker_kills_and_a_source_bounce_with_no_duplicate(restartable, tmp_path: Path):
    # GIVEN a 4-partition topic replicated a->b exactly-once while records arrive
    a, b = restartable["a"], restartable["b"]
    with live_flow(tmp_path, a.bootstrap, b.bootstrap, unique("eos"), **EOS) as live:
        # WHEN the worker is killed twice mid-stream (its open transactions are left behind) …
        for _ in range(2):
            pid = worker_pid(live.run)
            # past the supervisor's crash-loop threshold: restarted at once (kills 2 s apart once left a restarted
            # worker's mapping with no batch replicated for a minute, not yet explained)
            time.sleep(11)
            os.kill(pid, signal.SIGKILL)
            live.recovery()
        # … and the source broker is bounced while records keep arriving
        a.stop()
        time.sleep(3)
        a.start()
        live.recovery()
        live.stop_traffic()
        # THEN every record is on the target exactly once, in order
        assert_exactly_once(a.bootstrap, live.topic, b.bootstrap, live.remote, "worker SIGKILL x2 + source bounce")
        assert live.run.alive(), live.run.output()[-3000:]
        assert "Traceback" not in live.run.output(), live.run.output()[-3000:]


def test_exactly_once_survives_a_target_bounce_with_no_duplicate(restartable, tmp_path: Path):
    # GIVEN a 4-partition topic replicated a->b exactly-once while records arrive
    a, b = restartable["a"], restartable["b"]
    with live_flow(tmp_path, a.bootstrap, b.bootstrap, unique("eos-tb"), **EOS) as live:
        # WHEN the target broker is stopped mid-transaction and started again while records keep arriving
        b.stop()
        time.sleep(3)
        b.start()
        took = live.recovery()
        print(f"\nreplicating again {took:.1f}s after the target came back")
        live.stop_traffic()
        # THEN every record is on the target exactly once, in order
        assert_exactly_once(a.bootstrap, live.topic, b.bootstrap, live.remote, "target bounce")
        assert live.run.alive(), live.run.output()[-3000:]
        assert "Traceback" not in live.run.output(), live.run.output()[-3000:]
