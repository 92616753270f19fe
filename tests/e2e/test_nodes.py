"""`srm run` on several nodes (processes with the same config, each in a directory of its own): they share each
topic's partitions through Kafka's group protocol, elect one leader per flow for the scheduled functions, and keep
their state in Kafka. Under live traffic one node is SIGKILLed, one stopped and restarted, one added later: nothing
is lost, order is kept, duplicates are only the killed node's unacknowledged batches (none exactly-once), the
checkpoints come from one leader at a time, and a group failed over afterwards resumes exactly. A second node with
the same config splits the work; one given a running node's id refuses to start."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from srm.cli.tables import flow_nodes
from srm.control.nodes import nodes_status
from srm.flow import Flow
from srm.replication.checkpoint import EMITTER_HEADER
from tests.support.groups import group_holdings
from tests.support.kafka import (
    assert_no_loss,
    create_topic,
    read_partition,
    read_topic,
    topic_partitions,
    unique,
    wait_for,
)
from tests.support.runtime import SrmRun, run_cli, write_config
from tests.support.state import nodes_store
from tests.support.traffic import Arrivals, Traffic, recovery

pytestmark = pytest.mark.e2e

PARTITIONS = 6
BATCH = 100  # event.source.batch.size
# What a killed node may have replicated and not committed, per partition: the batch being written, and the one before
# it, whose source offsets are committed asynchronously while the next is collected (srm.local.event_source).
IN_FLIGHT = 2 * BATCH


def nodes(workdir: Path) -> dict[str, dict[str, Any]]:
    """The live nodes as the state in a node's store records them: node id → leader?, partitions (what ``srm
    status`` shows; asked of the store directly, not through a CLI per poll)."""
    try:
        status = nodes_status(nodes_store(workdir), [Flow("a", "b")])
    except Exception:  # the node is not up yet, or gone
        return {}
    flow = flow_nodes(status, "a->b")
    return {n["node"]: n for n in flow["nodes"]}


def holding(workdir: Path, topic: str) -> dict[str, set[int]]:
    return {node: set(n["partitions"].get(topic, [])) for node, n in nodes(workdir).items()}


def leader(workdir: Path) -> str | None:
    return next((node for node, n in nodes(workdir).items() if n["leader"]), None)


def emitter_segments(bootstrap: str, topic: str, group: str) -> list[tuple[str, int, int]]:
    """A group's checkpoints as runs of one emitter: (emitter, first timestamp, last timestamp), in log order."""
    segments: list[tuple[str, int, int]] = []
    for rec in read_partition(bootstrap, topic, 0):
        if rec.key is None or group.encode() not in rec.key:
            continue  # another test's group (the clusters are shared)
        emitter = dict(rec.headers).get(EMITTER_HEADER, b"").decode()
        if segments and segments[-1][0] == emitter:
            segments[-1] = (emitter, segments[-1][1], rec.timestamp)
        else:
            segments.append((emitter, rec.timestamp, rec.timestamp))
    return segments


def nodes_config(tmp_path: Path, a: str, b: str, topic: str, group: str, delivery: str) -> Path:
    """The nodes' shared config: ``topic`` and ``group`` replicated a->b, sessions of 6 s, batches of BATCH records,
    checkpoints and group offsets synced every second."""
    return write_config(
        tmp_path / "srm.yaml",
        {"a": a, "b": b},
        {
            "a->b": {
                "topics": topic,
                "groups": group,
                "exactly.once.source.support": "enabled" if delivery == "exactly-once" else "disabled",
            }
        },
        **{
            "nodes.session.timeout.ms": 6000,
            "event.source.batch.size": BATCH,
            "emit.checkpoints.interval.seconds": 1,
            "sync.group.offsets.interval.seconds": 1,
            "heartbeats.replication.enabled": "false",
        },
    )


class Group:
    """A consumer group on the source reading the topic and committing as it goes."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "log_level": 0}
        )
        self.consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        self.topic = topic

    def read_and_commit(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.consumer.consume(200, 0.2):
                self.consumer.commit(asynchronous=False)

    def committed(self) -> dict[int, int]:
        tps = [TopicPartition(self.topic, p) for p in range(PARTITIONS)]
        return {tp.partition: tp.offset for tp in self.consumer.committed(tps, timeout=10)}

    def close(self) -> dict[int, int]:
        committed = self.committed()
        self.consumer.close()
        return committed


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_three_nodes_lose_nothing_when_one_is_killed_one_restarted_and_one_added(clusters, tmp_path, delivery):
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group = unique("nodes"), unique("nodes-group")
    remote = f"a.{topic}"
    create_topic(a, topic, PARTITIONS)
    config = nodes_config(tmp_path, a, b, topic, group, delivery)
    dirs = [tmp_path / f"node{i}" for i in (1, 2, 3)]
    for d in dirs:
        d.mkdir()
    runs: list[SrmRun] = []
    traffic = arrivals = None
    consumers = Group(a, topic, group)
    try:
        # GIVEN two nodes replicating a six-partition topic, the first one the flow's leader, records arriving
        runs.append(SrmRun(config, dirs[0], own_group=True))
        wait_for(lambda: leader(dirs[0]), 60, message="node 1 leading")
        first_leader = leader(dirs[0])
        runs.append(SrmRun(config, dirs[1], own_group=True))
        wait_for(lambda: topic_partitions(b, remote) == PARTITIONS, 60, message="the remote topic")
        wait_for(
            lambda: all(len(h) for h in holding(dirs[0], topic).values()) and len(holding(dirs[0], topic)) == 2,
            60,
            message="both nodes holding partitions",
        )
        traffic = Traffic(a, topic, PARTITIONS, rate=600)
        arrivals = Arrivals(b, remote, PARTITIONS)
        # (the group reads and commits until the leader checkpointed it)
        wait_for(
            lambda: (
                consumers.read_and_commit(1)
                or first_leader in {e for e, _, _ in emitter_segments(b, "a.checkpoints.internal", group)}
            ),
            60,
            message="a checkpoint of the group from the first leader",
        )
        killed_held = holding(dirs[0], topic)[first_leader]

        # WHEN the leader is killed (SIGKILL, its whole process group)
        runs[0].kill_group()
        killed_at = time.monotonic()
        # THEN its partitions replicate again once its session expired, from another node that now leads
        resumed = recovery(traffic, arrivals, killed_at, killed_held)
        wait_for(lambda: (n := leader(dirs[1])) and n != first_leader, 60, message="another node leading")
        print(
            f"\n[{delivery}] node killed: its partitions {sorted(killed_held)} replicate again "
            f"{resumed:.1f}s later; leader {first_leader} → {leader(dirs[1])}"
        )
        consumers.read_and_commit(2)

        # WHEN the second node is stopped (SIGTERM) and started again, and a third node with the same config joins
        runs[1].stop()
        runs[1] = SrmRun(config, dirs[1], own_group=True)
        runs.append(SrmRun(config, dirs[2], own_group=True))
        # THEN the work is split between them (the first node's directory is dead: ask the second's)
        wait_for(
            lambda: len([h for h in holding(dirs[1], topic).values() if h]) == 2,
            90,
            message="the restarted and the added node each holding partitions",
        )
        # … and `srm status` says so, in a node's directory and, from the config alone, anywhere
        shown = json.loads(run_cli("srm", "status", "--json", cwd=dirs[2], timeout=60).stdout)
        assert shown[0]["leader"] and {n["node"] for n in shown[0]["nodes"]} == set(holding(dirs[1], topic))
        anywhere = run_cli("srm", "status", "--config", str(config), cwd=tmp_path, timeout=60)
        assert anywhere.returncode == 0 and "NODES of" in anywhere.stdout and "3 alive" not in anywhere.stdout
        consumers.read_and_commit(2)
        traffic.stop()
        committed = consumers.close()
        # THEN the group failed over to the target (its offsets synced there) resumes at the record after the one it
        # committed on the source: nothing read again, nothing skipped
        src = wait_failed_over(a, b, topic, group, committed, delivery)
    finally:
        for stopper in (traffic, arrivals):
            if stopper is not None:
                stopper.stop()
        for run in runs:
            run.stop()

    # THEN nothing is lost and the order is kept; duplicates are only the killed node's in-flight batches
    src, dst = read_topic(a, topic), read_topic(b, remote)
    duplicates = {p: assert_no_loss(src[p], dst[p]) for p in range(PARTITIONS)}
    print(f"[{delivery}] {sum(len(r) for r in src.values())} records, duplicates per partition: {duplicates}")
    if delivery == "exactly-once":
        assert sum(duplicates.values()) == 0, duplicates
    else:
        assert all(d == 0 for p, d in duplicates.items() if p not in killed_held), duplicates
        assert all(d <= IN_FLIGHT for d in duplicates.values()), duplicates
    # the checkpoints came from one leader at a time: its runs of records never overlap in time
    segments = emitter_segments(b, "a.checkpoints.internal", group)
    assert len({emitter for emitter, _, _ in segments}) >= 2, segments
    for before, after in itertools.pairwise(segments):
        assert before[2] <= after[1], f"two leaders emitted at once: {before} and {after}"


def wait_failed_over(a: str, b: str, topic: str, group: str, committed: dict[int, int], delivery: str) -> dict:
    """Once every record is on the target: the source's records, after the group's offsets on the target were seen
    to resume exactly where it committed on the source (:func:`failed_over_exactly`)."""
    remote = f"a.{topic}"
    wait_for(
        lambda: all(len(read_partition(b, remote, p)) >= len(read_partition(a, topic, p)) for p in range(PARTITIONS)),
        120,
        message="every record replicated",
    )
    src = read_topic(a, topic)
    wait_for(
        lambda: failed_over_exactly(b, remote, group, src, committed, delivery),
        60,
        message="the group's offsets on the target translated exactly",
    )
    return src


def failed_over_exactly(
    bootstrap: str, remote: str, group: str, src: dict[int, list], committed: dict[int, int], delivery: str
) -> bool:
    """Whether the group's offsets on the target resume each partition at the copy of the source record it would
    read next: the first record from there is that record and every source record after it follows (exactly-once:
    nothing else)."""
    target = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        wanted = [TopicPartition(remote, p) for p in range(PARTITIONS)]
        offsets = {tp.partition: tp.offset for tp in target.committed(wanted, timeout=10)}
    finally:
        target.close()
    for p, next_source in committed.items():
        if offsets.get(p, -1) < 0:
            return False
        rest = [r.content() for r in read_partition(bootstrap, remote, p) if r.offset >= offsets[p]]
        want = [r.content() for r in src[p][next_source:]]
        if delivery == "exactly-once" and rest != want:
            return False
        if (rest[:1] != want[:1]) or not set(want) <= set(rest):
            return False
    return True


def test_a_node_given_a_running_nodes_id_refuses_to_start(clusters, tmp_path):
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("same-id")
    create_topic(a, topic, 2)
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    with SrmRun(config, tmp_path / "one", ("--node-id", "twin")) as first:
        wait_for(lambda: "twin" in nodes(tmp_path / "one"), 60, message="the first node running")
        second = run_cli(
            "srm", "run", "--config", str(config), "--node-id", "twin", "--no-metrics", cwd=tmp_path / "two", timeout=60
        )
        assert first.alive()
    assert second.returncode == 2, second.stderr
    lines = [line for line in second.stderr.splitlines() if line.startswith("srm:")]
    assert len(lines) == 1 and "node id twin is in use by a running node" in lines[0], second.stderr
    assert str(tmp_path / "one") in lines[0]


@pytest.mark.parametrize("delivery", ["at-least-once", "exactly-once"])
def test_a_frozen_node_woken_mid_stream_writes_nothing_stale(clusters, tmp_path, delivery):
    """A zombie: the leading node is frozen (SIGSTOP, every process of it) past its session timeout, its partitions
    and its leadership move to the other node, and it is woken (SIGCONT) while records keep arriving. Its writes of
    the state it no longer owns fail at the broker: nothing is lost or reordered, a group committed on the source
    translates exactly, and exactly-once has no duplicate (at-least-once may have a late copy of the batch the node
    was frozen in)."""
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group = unique("zombie"), unique("zombie-group")
    remote, mirror_group = f"a.{topic}", f"srm-mirror.a-b.{topic}"
    create_topic(a, topic, PARTITIONS)
    config = nodes_config(tmp_path, a, b, topic, group, delivery)
    dirs = [tmp_path / f"node{i}" for i in (1, 2)]
    for d in dirs:
        d.mkdir()
    runs: list[SrmRun] = []
    traffic = arrivals = None
    consumers = Group(a, topic, group)
    try:
        # GIVEN two nodes replicating a six-partition topic, the first one leading, records arriving
        runs.append(SrmRun(config, dirs[0], own_group=True))
        wait_for(lambda: leader(dirs[0]), 60, message="node 1 leading")
        zombie = leader(dirs[0])
        runs.append(SrmRun(config, dirs[1], own_group=True))
        wait_for(
            lambda: (m := group_holdings(a, mirror_group)) and len(m) == 2 and all(m.values()),
            90,
            message="both nodes holding partitions",
        )
        traffic = Traffic(a, topic, PARTITIONS, rate=600)
        arrivals = Arrivals(b, remote, PARTITIONS)
        consumers.read_and_commit(3)
        frozen_held = holding(dirs[1], topic).get(zombie, set())

        # WHEN the leader is frozen past its session timeout: its partitions and the leadership move
        os.killpg(runs[0].process.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        wait_for(
            lambda: (m := group_holdings(a, mirror_group)) and len(m) == 1 and set(range(PARTITIONS)) in m.values(),
            90,
            message="the other node holding every partition",
        )
        wait_for(lambda: (n := leader(dirs[1])) and n != zombie, 60, message="the other node leading")
        moved = recovery(traffic, arrivals, frozen_at, frozen_held or None)
        consumers.read_and_commit(3)
        # … and it is woken mid-stream: it goes on with what it was doing, then rejoins
        os.killpg(runs[0].process.pid, signal.SIGCONT)
        wait_for(
            lambda: (m := group_holdings(a, mirror_group)) and len(m) == 2 and all(m.values()),
            90,
            message="the woken node holding partitions again",
        )
        consumers.read_and_commit(3)
        traffic.stop()
        committed = consumers.close()
        # THEN the group failed over to the target resumes exactly after what it consumed on the source
        src = wait_failed_over(a, b, topic, group, committed, delivery)
        zombie_output = runs[0].output()
    finally:
        for stopper in (traffic, arrivals):
            if stopper is not None:
                stopper.stop()
        for run in runs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.process.pid, signal.SIGCONT)
            run.stop()

    # THEN nothing is lost and order is kept; exactly-once: no duplicate at all. At-least-once fences the woken
    # node's state writes, not its data: it may finish the batch it was frozen in, a stale copy after newer records
    dst = read_topic(b, remote)
    stale = delivery == "at-least-once"
    duplicates = {p: assert_no_loss(src[p], dst[p], stale_runs=stale) for p in range(PARTITIONS)}
    print(
        f"\n[{delivery}] frozen node's partitions {sorted(frozen_held)} replicated again {moved:.1f}s after the "
        f"freeze; {sum(len(r) for r in src.values())} records, duplicates per partition: {duplicates}"
    )
    if delivery == "exactly-once":
        assert sum(duplicates.values()) == 0, duplicates
    assert "Traceback" not in zombie_output, zombie_output[-3000:]
