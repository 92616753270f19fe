"""`srm run` cut off from a target that stays up: every connection to the target goes through a fault proxy (the
target advertises the proxy's port), which drops them all and blackholes new ones for 30 s under live traffic.
Replication stalls without a crash loop, the stall is reported, and it resumes once the link is back with nothing
lost and order kept (at-least-once: re-sent runs are the only extras)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from srm.local.clusters import Listener, LocalCluster
from srm.local.store import free_port
from tests.e2e.test_broker_failures import all_resumed, started
from tests.support.kafka import create_topic, read_topic, topic_partitions, unique, wait_for
from tests.support.proxy import FaultProxy
from tests.support.runtime import srm_run, status_text, wait_log
from tests.support.traffic import PARTITIONS, RECOVERY_BOUND_S, Arrivals, Traffic, wait_no_loss, worker_pid

pytestmark = pytest.mark.e2e

CUT_S = 30
TIMEOUT_MS = 3000  # mirror.delivery.timeout.ms
# The state topic's clients on the cut cluster, besides the replication's: the worker's reader, its admin and its
# plain producer, a transactional producer per partition held and the leader's; srm-control's reader and admin.
# Each holds up to three connections (bootstrap, broker, coordinator), each tried about twice in the cut (a
# blackholed connect waits out its setup timeout): six attempts a client, where a reconnect loop makes hundreds.
STATE_CLIENTS = 3 + PARTITIONS + 1 + 2
ATTEMPTS_PER_CLIENT = 6
STALL_S = 5  # the worker's watchdog bound (SRM_STALL_SECONDS)


def test_target_cut_off_for_30s_stalls_without_a_crash_loop_and_resumes_losing_nothing(
    clusters, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # GIVEN a target whose every client connection goes through a fault proxy, and a 4-partition topic replicated
    # to it at-least-once while records arrive
    monkeypatch.setenv("SRM_STALL_SECONDS", str(STALL_S))
    source = clusters["a"].bootstrap
    upstream = free_port()
    with FaultProxy(upstream) as proxy:
        listener = Listener("PROXIED", "PLAINTEXT", port=upstream, advertised_port=proxy.port)
        with started(LocalCluster("b", tmp_path / "b" / "data", listeners=[listener])) as target:
            direct = target.bootstrap  # the test's own readers bypass the proxy
            topic = unique("cut")
            remote = f"a.{topic}"
            create_topic(source, topic, PARTITIONS)
            proxied = {"a": source, "b": target.listener_bootstrap("PROXIED")}
            flow = {"topics": topic, "mirror.delivery.timeout.ms": TIMEOUT_MS}
            with srm_run(tmp_path, proxied, {"a->b": flow}) as run:
                wait_for(lambda: topic_partitions(direct, remote) == PARTITIONS, 120, message="the remote topic")
                traffic = Traffic(source, topic)
                try:
                    arrivals = Arrivals(direct, remote)
                    try:
                        all_resumed(traffic, arrivals, time.monotonic())  # replicating
                        worker = worker_pid(run)
                        before = len(run.output().splitlines())

                        # WHEN the link to the target is cut for 30 s: open connections dropped, new ones blackholed
                        proxy.cut("blackhole")
                        cut_at = time.monotonic()
                        # THEN the stall is reported: in the log, and by srm-control status
                        wait_log(run, f"a->b: topic {topic} stalled since", timeout=CUT_S - 5)
                        shown = status_text(tmp_path)
                        reported_after = time.monotonic() - cut_at
                        time.sleep(max(0.0, cut_at + CUT_S - time.monotonic()))
                        during = run.output().splitlines()[before:]
                        proxy.restore()
                        restored_at = time.monotonic()
                        cut_s = restored_at - cut_at

                        # … nothing produced during the cut reached the target before the link was back
                        sent = [v for t, v in traffic.sent[:] if cut_at + 1 < t < restored_at]
                        early = [v for v in sent if arrivals.first_seen.get(v, restored_at) < restored_at]
                        assert sent and not early, f"{len(early)} of {len(sent)} records arrived during the cut"
                        # … and replication resumes once it is, on every partition
                        caught_up = all_resumed(traffic, arrivals, restored_at)
                        resumed = min(t for t in list(arrivals.first_seen.values()) if t > restored_at) - restored_at
                    finally:
                        arrivals.stop()
                finally:
                    traffic.stop()
                duplicates = wait_no_loss(source, topic, direct, remote)
                output = run.output()
                assert run.alive(), output[-3000:]
                assert worker_pid(run) == worker, "the worker was restarted"

    retries = [line for line in during if "batch failed, retrying" in line]
    failed_runs = [line for line in during if "failed (retried next interval)" in line]
    records = sum(len(r) for r in read_topic(source, topic).values())
    print(
        f"\ncut off for {cut_s:.1f}s: stall reported after {reported_after:.1f}s; {len(retries)} batch retries, "
        f"{len(failed_runs)} failed scheduled runs, {proxy.blackholed} connections blackholed during the cut; "
        f"replicating {resumed:.1f}s after the link was back, every partition caught up after {caught_up:.1f}s; "
        f"{records} records, {duplicates} duplicates"
    )
    assert f"a->b: topic {topic} stalled since" in shown, shown
    assert caught_up <= RECOVERY_BOUND_S
    # … the worker retried with backoff, not in a storm: at most one attempt per delivery timeout; its clients waited
    # for their timeouts rather than reconnecting in a loop
    assert 1 <= len(retries) <= CUT_S * 1000 // TIMEOUT_MS + 1, "\n".join(retries)
    assert proxy.blackholed <= 2 * CUT_S + ATTEMPTS_PER_CLIENT * STATE_CLIENTS
    assert "worker exited" not in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
