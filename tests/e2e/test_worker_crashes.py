"""`srm run` under crashes, with live traffic: the flow's worker killed (SIGKILL) again and again, then the target and
the source broker bounced. Replication resumes within a stated bound after each fault, and at the end every source
record is on the target. And the watchdog: a mapping whose group is held by a member that never leaves is reported
(log, `srm-control status`) and recovers once that member is gone."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.support.groups import Squatter
from tests.support.kafka import create_topic_with_records, numbered_records, produce, read_topic, unique, wait_for
from tests.support.runtime import srm_run, status_text, wait_log
from tests.support.traffic import RECOVERY_BOUND_S, live_flow, wait_no_loss, worker_pid

pytestmark = pytest.mark.e2e

RATE = 400  # records per second, spread over the partitions


def test_killed_worker_and_bounced_brokers_resume_within_bound_and_lose_nothing(restartable, tmp_path: Path):
    # GIVEN a 4-partition topic replicated a->b while records arrive at RATE per second
    a, b = restartable["a"], restartable["b"]
    topic = "live"
    recoveries: list[tuple[str, float]] = []
    with live_flow(tmp_path, a.bootstrap, b.bootstrap, topic, **{"mirror.delivery.timeout.ms": 5000}) as live:
        # WHEN the worker is killed three times, each time once its replacement has run for a while
        for kill in range(1, 4):
            pid = worker_pid(live.run)
            time.sleep(2)  # mid-stream: batches in flight
            os.kill(pid, signal.SIGKILL)
            recoveries.append((f"worker SIGKILL #{kill}", live.recovery()))

        # … then the target broker, then the source broker, is stopped and started again, records arriving meanwhile
        for name, cluster in (("target", b), ("source", a)):
            time.sleep(3)
            cluster.stop()
            time.sleep(3)
            cluster.start()
            recoveries.append((f"{name} broker bounce", live.recovery()))
        live.stop_traffic()
        duplicates = wait_no_loss(a.bootstrap, topic, b.bootstrap, live.remote)
        assert live.run.alive(), live.run.output()[-3000:]
        output = live.run.output()

    # THEN replication resumed within the bound after every fault
    report = ", ".join(f"{what}: {seconds:.1f}s" for what, seconds in recoveries)
    print(f"\nrecovery (fault → first record produced after it on the target): {report}; duplicates: {duplicates}")
    assert all(seconds <= RECOVERY_BOUND_S for _, seconds in recoveries), report
    # … every source record is on the target, in order (checked above); only re-sent runs are extra
    src = read_topic(a.bootstrap, topic)
    assert sum(len(r) for r in src.values()) > RATE * 30
    # … and the supervisor restarted each killed worker, at once or after its crash-loop back-off (1, 2 s)
    restarts = re.findall(r"a->b worker exited with SIGKILL; restarting it (now|in (\d+)s)", output)
    assert len(restarts) == 3 and all(int(delay or 0) <= 2 for _, delay in restarts), output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def test_mapping_whose_group_is_held_by_another_member_is_reported_stalled_and_recovers(
    clusters, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN srm run replicating a 2-partition topic, with a watchdog bound of 3 s
    monkeypatch.setenv("SRM_STALL_SECONDS", "3")
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("held")
    create_topic_with_records(a, topic, 2, 100)
    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": {"topics": topic}}) as run:
        wait_no_loss(a, topic, b, f"a.{topic}", timeout=120, message="the first records replicated")

        # WHEN a member that never leaves joins the mapping's consumer group and takes a partition from it
        squatter = Squatter(a, f"srm-mirror.a-b.{topic}", topic, assignor="cooperative-sticky")  # the mapping's
        try:
            held = wait_for(squatter.assigned, timeout=30, message="the other member holding a partition")
            joined = len(run.output())  # a start slowed by a busy machine may have had a stall of its own before
            produce(a, topic, numbered_records(100, 2, topic, start=100))

            # THEN srm run reports the stall, naming the partition and who holds it
            stalled = wait_log(run, f"a->b: topic {topic} stalled since", timeout=30, since=joined)
            line = run.output()[stalled:].splitlines()[0]
            assert f"partition {held[0]} of 2 of {topic} not assigned" in line, line
            assert "held by 1 other member(s)" in line, line
            # … and so does srm-control status
            status = wait_for(
                lambda: next((s for s in [status_text(tmp_path)] if "stalled since" in s), None),
                timeout=30,
                interval=1.0,
                message="the stall in srm-control status",
            )
            assert f"a->b: topic {topic} stalled since " in status, status
        finally:
            squatter.leave()

        # WHEN that member leaves, the mapping gets its partition back: the stall ends, and every record is replicated
        wait_log(run, f"a->b: topic {topic} recovered after", timeout=60, since=stalled)
        wait_no_loss(a, topic, b, f"a.{topic}", timeout=60, message="every record replicated")
        wait_for(
            lambda: "stalled since" not in status_text(tmp_path), timeout=30, interval=1.0, message="the stall cleared"
        )
        assert "Traceback" not in run.output(), run.output()[-3000:]
