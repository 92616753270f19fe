"""`srm run` restarted between two replication phases keeps its translation state (MM2's testRestartReplication +
testOffsetTranslationBehindReplicationFlow): stopped, or its whole process group killed. With its state removed,
a group that rewinds below the restart point gets no checkpoint — not one that skips records — and
`srm-control offsets` says why. And MM2's name for offset syncs kept on the target."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from srm.mm2.client import CheckpointedOffset, MirrorClient
from srm.mm2.formats import OffsetSync
from tests.e2e.test_failover import FAST, consume_and_commit, produce_values
from tests.support.kafka import create_topic, list_topic_names, read_partition, rewind, unique, wait_for
from tests.support.runtime import SrmRun, group_offsets, write_config
from tests.support.state import state_store

pytestmark = pytest.mark.e2e

PARTITIONS = 3
PHASE = 200  # records per partition and phase


def produce_phase(bootstrap: str, topic: str, phase: int) -> None:
    for p in range(PARTITIONS):
        produce_values(bootstrap, topic, p, [value(topic, p, i) for i in range(phase * PHASE, (phase + 1) * PHASE)])


def value(topic: str, partition: int, offset: int) -> bytes:
    return f"{topic}-p{partition}-{offset}".encode()


def wait_copied(source: str, topic: str, target: str, remote: str) -> None:
    """Every source record has a copy on the target (a killed run may have written some twice)."""

    def done() -> bool:
        names = list_topic_names(target)
        return remote in names and all(
            {r.value for r in read_partition(source, topic, p)} <= {r.value for r in read_partition(target, remote, p)}
            for p in range(PARTITIONS)
        )

    wait_for(done, 90, interval=1.0, message=f"{topic} copied to {remote}")


def checkpoints_at(target: str, group: str, upstream: int) -> dict[int, CheckpointedOffset] | None:
    """The group's newest checkpoints per partition, once every partition's is of ``upstream``."""
    latest = MirrorClient({"bootstrap.servers": target}).remote_consumer_offsets(group, "a", 15)
    by_partition = {c.partition: c for c in latest.values()}
    if len(by_partition) == PARTITIONS and all(c.upstream_offset == upstream for c in by_partition.values()):
        return by_partition
    return None


def first_phase(a: str, name: str) -> tuple[str, str]:
    """A topic named after ``name``, kept forever, holding the first phase of records; and a group of its own."""
    topic, group = unique(name), unique("app")
    create_topic(a, topic, PARTITIONS, {"retention.ms": "-1"})
    produce_phase(a, topic, 0)
    return topic, group


def write_flow(workdir: Path, a: str, b: str, topic: str, group: str, **settings: Any) -> Path:
    """A config replicating ``topic`` a->b and checkpointing ``group``, every periodic function at its quickest."""
    flows = {"a->b": {"topics": topic, "groups": group}}
    return write_config(workdir / "srm.yaml", {"a": a, "b": b}, flows, **FAST, **settings)


def restart(run: SrmRun, how: str, config: Path, workdir: Path) -> SrmRun:
    if how == "SIGTERM":
        run.process.send_signal(signal.SIGTERM)
        assert run.process.wait(30) == 0, run.output()[-3000:]
    else:
        run.kill_group()
    run.stop()
    return SrmRun(config, workdir, own_group=True)


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL-group"])
def test_restart_between_phases_keeps_translation_exact_for_a_group_rewound_below_it(
    clusters, tmp_path: Path, how: str
):
    # GIVEN a flow that replicated a first phase of records, and then srm run restarted
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group = first_phase(a, "restart")
    remote = f"a.{topic}"
    config = write_flow(tmp_path, a, b, topic, group)
    run = SrmRun(config, tmp_path, own_group=True)
    try:
        wait_copied(a, topic, b, remote)
        run = restart(run, how, config, tmp_path)
        # ... and a second phase replicated after the restart; a group read everything
        produce_phase(a, topic, 1)
        wait_copied(a, topic, b, remote)
        consume_and_commit(a, group, topic, dict.fromkeys(range(PARTITIONS), 2 * PHASE))
        wait_for(lambda: checkpoints_at(b, group, 2 * PHASE), 60, message="checkpoints of the group's end")

        # WHEN the group rewinds below the restart point
        rewind(a, group, topic, PARTITIONS, 100)
        checkpoints = wait_for(lambda: checkpoints_at(b, group, 100), 60, message="checkpoints of the rewind")
    finally:
        run.stop()

    # THEN each checkpoint points at the copy of upstream record 100 (replicated before the restart), and a consumer
    # resuming there reads every record from 100 on
    for p in range(PARTITIONS):
        copies = read_partition(b, remote, p)
        downstream = checkpoints[p].offset
        at = {r.offset: r.value for r in copies}
        assert at.get(downstream) == value(topic, p, 100), f"partition {p}: checkpoint 100 -> {downstream}"
        rest = {r.value for r in copies if r.offset >= downstream}
        assert {value(topic, p, i) for i in range(100, 2 * PHASE)} <= rest, f"partition {p}: records skipped"


def test_state_removed_rewound_group_gets_no_checkpoint_and_offsets_command_says_why(clusters, tmp_path: Path):
    # GIVEN a first phase replicated, srm run stopped, its state gone (restarted as a cluster of nodes of another name:
    # a state of its own, empty), a second phase
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group = first_phase(a, "lost")
    remote = f"a.{topic}"
    with SrmRun(write_flow(tmp_path, a, b, topic, group), tmp_path) as run:
        wait_copied(a, topic, b, remote)
    assert run.process.returncode == 0
    with SrmRun(write_flow(tmp_path, a, b, topic, group), tmp_path):  # a new config: nodes of another name
        produce_phase(a, topic, 1)
        wait_copied(a, topic, b, remote)
        # the state knows where its runs begin: where the mirror resumed
        state = state_store(tmp_path)
        origins = [state.origin("a", "b", topic, p) for p in range(PARTITIONS)]
        assert [(o.offset, o.fresh) for o in origins] == [(PHASE, False)] * PARTITIONS
        assert len({o.topic_id for o in origins}) == 1 and origins[0].topic_id, "the incarnation is the topic's id"
        consume_and_commit(a, group, topic, dict.fromkeys(range(PARTITIONS), 2 * PHASE))
        # offsets from the restart point on still translate
        wait_for(lambda: checkpoints_at(b, group, 2 * PHASE), 60, message="checkpoints of the group's end")

        # WHEN the group rewinds below the restart point
        rewind(a, group, topic, PARTITIONS, 100)

        # THEN srm-control offsets says, per partition, why the group's offset has no checkpoint
        def why() -> str | None:
            shown = group_offsets(tmp_path, group)
            assert shown.returncode == 0, shown.stderr
            return shown.stderr if shown.stderr.count("committed offset 100 on a has no checkpoint") == 3 else None

        stderr = wait_for(why, 60, interval=1.0, message="srm-control offsets naming the untranslated offsets")
        assert f"the state's offset runs begin at {PHASE}" in stderr and "resumed" in stderr, stderr
        assert f"what a.{topic}-0 shows is its last checkpoint, of offset 400 on a" in stderr, stderr
        # ... and the checkpoint function emitted none for them: the newest are still those of offset 400
        assert checkpoints_at(b, group, 2 * PHASE) is not None


def test_offset_syncs_on_target_use_mm2_name_and_checkpoints_still_flow(clusters, tmp_path: Path):
    # GIVEN offset syncs kept on the target, and a group that read 17 records of each partition
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic, group = unique("syncs"), unique("app")
    create_topic(a, topic, PARTITIONS)
    for p in range(PARTITIONS):
        produce_values(a, topic, p, [value(topic, p, i) for i in range(40)])
    consume_and_commit(a, group, topic, dict.fromkeys(range(PARTITIONS), 17))
    on_target = {"offset-syncs.topic.location": "target", "offset-syncs.topic.replication.factor": 1}
    config = write_flow(tmp_path, a, b, topic, group, **on_target)

    # WHEN the flow replicates and checkpoints
    with SrmRun(config, tmp_path):
        wait_copied(a, topic, b, f"a.{topic}")
        checkpoints = wait_for(lambda: checkpoints_at(b, group, 17), 60, message="checkpoints")

    # THEN the offset syncs are in MM2's topic for that location, on the target and named after the source (other
    # tests' flows on these shared clusters may keep theirs on a, named after b), and checkpoints flowed
    assert "mm2-offset-syncs.b.internal" not in list_topic_names(b)
    syncs = [OffsetSync.decode(r.key, r.value) for r in read_partition(b, "mm2-offset-syncs.a.internal", 0)]
    assert {s.partition for s in syncs if s.topic == topic} == set(range(PARTITIONS))
    assert {p: c.offset for p, c in checkpoints.items()} == dict.fromkeys(range(PARTITIONS), 17)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def test_a_supervisor_killed_outright_leaves_no_process_of_its_own_behind(clusters, tmp_path: Path):
    # GIVEN srm run replicating a topic, with its worker, its metrics API and its metrics aggregation
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("orphan")
    create_topic(a, topic, 1)
    produce_values(a, topic, 0, [b"v0", b"v1"])
    config = write_config(tmp_path / "srm.yaml", {"a": a, "b": b}, {"a->b": {"topics": topic}})
    with SrmRun(config, tmp_path, metrics=True) as run:
        wait_for(lambda: len(read_partition(b, f"a.{topic}", 0)) == 2, 60, message="the records replicated")
        children = _children(run.process.pid)
        assert len(children) >= 3, run.output()[-2000:]  # the worker, the API, the aggregation
        # WHEN the supervisor is killed with SIGKILL, which it cannot pass on
        run.process.send_signal(signal.SIGKILL)
        run.process.wait(10)
        # THEN each process it started notices and stops by itself
        try:
            wait_for(lambda: not [p for p in children if _running(p)], 90, message="the orphaned processes stopped")
        finally:  # none left to the rest of the suite whatever happened
            for pid in filter(_running, children):
                os.kill(pid, signal.SIGKILL)
        assert "supervisor (pid" in run.output() and "is gone: this process stops" in run.output()
