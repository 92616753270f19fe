"""`srm run --workers 2`: a flow's partitions are shared by two worker processes of one node through the group
protocol, as by two nodes. One of them SIGKILLed mid-stream: its sibling keeps replicating its own partitions while
the supervisor restarts the killed one, which takes its partitions back (a static member); nothing is lost, order is
kept, and only the killed worker's partitions get duplicates (none at all exactly-once)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from tests.support.groups import group_holdings
from tests.support.kafka import assert_no_loss, read_topic, unique, wait_for
from tests.support.traffic import PARTITIONS, RECOVERY_BOUND_S, live_flow, recovery, wait_no_loss, worker_pid

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_killed_worker_process_leaves_its_sibling_replicating_and_loses_nothing(clusters, tmp_path: Path, delivery):
    # GIVEN srm run with two worker processes replicating a 4-partition topic a->b while records arrive
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("shared")
    eos = {"exactly.once.source.support": "enabled"} if delivery == "exactly-once" else {}
    with live_flow(tmp_path, a, b, topic, args=("--workers", "2"), **eos) as live:
        # … each holding some of the partitions: the group has two members of this node
        held = wait_for(
            lambda: (h := group_holdings(a, f"srm-mirror.a-b.{topic}")) and len(h) == 2 and all(h.values()) and h,
            timeout=60,
            message="the partitions shared by both workers",
        )
        node = next(m for m in held if "#" not in m)
        sibling, killed = held[node], held[f"{node}#2"]
        assert sibling | killed == set(range(PARTITIONS)) and not sibling & killed, held

        # WHEN the second worker is SIGKILLed mid-stream
        time.sleep(2)
        killed_at = time.monotonic()
        os.kill(worker_pid(live.run, 1), signal.SIGKILL)

        # THEN its sibling's partitions keep being replicated, and the killed one's resume once it is restarted
        kept_up = recovery(live.traffic, live.arrivals, killed_at, sibling)
        resumed = recovery(live.traffic, live.arrivals, killed_at, killed)
        live.stop_traffic()
        wait_no_loss(a, topic, b, live.remote)
        output = live.run.output()

    print(
        f"\n[{delivery}] after the SIGKILL: the sibling's partitions {kept_up:.1f}s, the killed worker's {resumed:.1f}s"
    )
    assert kept_up <= RECOVERY_BOUND_S and resumed <= RECOVERY_BOUND_S, (kept_up, resumed)
    # … nothing is lost and order is kept in every partition; duplicates only where the killed worker was
    src, dst = read_topic(a, topic), read_topic(b, live.remote)
    duplicates = {p: assert_no_loss(src[p], dst.get(p, [])) for p in range(PARTITIONS)}
    assert sum(len(r) for r in src.values()) > 0
    assert all(duplicates[p] == 0 for p in sibling), duplicates
    if delivery == "exactly-once":  # read_committed: the killed worker's open transactions were aborted
        assert sum(duplicates.values()) == 0, duplicates
    # … and the supervisor restarted the killed worker
    assert re.search(r"a->b worker 2 exited with SIGKILL; restarting it", output), output[-3000:]
    assert "Traceback" not in output, output[-3000:]
