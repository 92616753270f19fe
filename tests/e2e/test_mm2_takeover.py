"""An MM2 user's migration, end to end, against MirrorMaker 2 itself (dedicated mode, from the same Kafka install):
MM2 replicates live topics and a consumer group with an ``mm2.properties``; srm reads what MM2 wrote; MM2 dies;
``srm run`` on the same file, unchanged, continues where MM2 stood.

The clusters are the session's, under aliases of this test's own (``west``, ``east``): MM2's internal topics and
its heartbeats and checkpoints never meet another test's.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from srm.core.source_offsets import offsets_topic
from srm.kafka.transactions import read_source_offsets
from srm.local.mirrormaker import MirrorMaker
from srm.mm2 import client as mm2_client
from srm.mm2.formats import Heartbeat
from tests.e2e.test_failover import committed_on, consume_and_commit, consume_rest
from tests.support.kafka import (
    create_topic,
    end_offsets,
    numbered_records,
    produce,
    read_topic,
    unique,
    wait_for,
)
from tests.support.mm2 import mm2_file
from tests.support.runtime import SrmRun, run_cli, wait_log

pytestmark = pytest.mark.e2e

SOURCE, TARGET = "west", "east"
PARTITIONS = 2


def mm2_positions(b: str, topic: str) -> dict[int, int]:
    """MM2's recorded position per partition: the next source offset, from its offsets topic on the target."""
    reader = {"bootstrap.servers": b}
    wanted = [(SOURCE, topic, p) for p in range(PARTITIONS)]
    found = read_source_offsets(reader, offsets_topic(SOURCE), wanted, 30)
    return {p: o.next for (_, p), o in found.items()}


def values_by_partition(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    return {p: [r.value for r in recs] for p, recs in read_topic(bootstrap, topic).items()}


def test_srm_reads_mirror_maker_2_then_takes_over_losing_nothing_and_rewriting_only_its_unflushed_tail(
    clusters, tmp_path: Path
):
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    prefix = unique("mig")
    topic, group = f"{prefix}.orders", f"{prefix}-billing"
    remote = f"{SOURCE}.{topic}"
    create_topic(a, topic, PARTITIONS)
    produce(a, topic, numbered_records(400, PARTITIONS, topic))  # 200 per partition
    consume_and_commit(a, group, topic, {p: 100 for p in range(PARTITIONS)})
    # MM2 records its source positions every 10 s (and when it stops cleanly): a crash between two flushes leaves
    # copies it made but did not record. A worker setting, so under the target alias.
    flush = {f"{TARGET}.offset.flush.interval.ms": "10000"}
    config = mm2_file(tmp_path / "mm2.properties", (SOURCE, TARGET), (a, b), prefix, **flush)

    # GIVEN MirrorMaker 2 replicating the topic and checkpointing the group
    mm2 = MirrorMaker(config, tmp_path / "mm2", heap="512m")
    try:
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 400, 120, message=f"MM2 replicating {remote}")
        target = mm2_client.MirrorClient({"bootstrap.servers": b})
        checkpoints = wait_for(
            lambda: (c := target.remote_consumer_offsets(group, SOURCE)) and len(c) == PARTITIONS and c,
            60,
            message="MM2's checkpoints of the group",
        )
        wait_for(lambda: len(committed_on(b, group, remote, PARTITIONS)) == PARTITIONS, 60, message="MM2 group sync")
        # … and one record more per partition, to see MM2 record its positions: its next flush is 10 s away
        produce(a, topic, numbered_records(PARTITIONS, PARTITIONS, topic, start=400))
        recorded = wait_for(
            lambda: (pos := mm2_positions(b, topic)) and all(pos.get(p, 0) == 201 for p in range(PARTITIONS)) and pos,
            30,
            interval=0.05,
            message="MM2 recording its source positions",
        )

        # WHEN more records arrive and MM2 dies before it records their positions (copies it made and will not own)
        produce(a, topic, numbered_records(100, PARTITIONS, topic, start=402))
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 502, 60, interval=0.05, message="MM2's tail")
    finally:
        mm2.stop(graceful=False)
    assert mm2_positions(b, topic) == recorded, "MM2 recorded its positions again before it died: no tail to test"

    # THEN srm's MM2 client reads MM2's records: heartbeats, the checkpoint topic, the remote topic, and the
    # group's checkpoints (MM2 translates through its offset syncs: never past the exact position)
    assert SOURCE in target.upstream_clusters()
    assert target.replication_hops(SOURCE) == 1
    assert f"{SOURCE}.checkpoints.internal" in target.checkpoint_topics()
    assert remote in target.remote_topics(SOURCE)
    for p in range(PARTITIONS):
        c = checkpoints[(remote, p)]
        assert c.upstream_offset == 100
        assert 0 <= c.offset <= 100, c  # the copies are 1:1 here: MM2's answer is at most the exact one
    # … and MM2's heartbeats, in the target's heartbeats topic (beside other flows' there)
    beats = [
        h for r in read_topic(b, "heartbeats")[0] if (h := Heartbeat.decode(r.key, r.value)).source_alias == SOURCE
    ]
    assert beats and {h.target_alias for h in beats} == {TARGET}
    assert all(abs(h.timestamp - time.time() * 1000) < 600_000 for h in beats)

    # … and the take-over's dry run says where each partition starts, where that was read, and MM2's tail
    dry = run_cli("srm", "takeover", "--config", str(config), "--json", cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr
    [report] = json.loads(dry.stdout)
    assert report["dryRun"] is True
    starts = {(s["topic"], s["partition"]): s for s in report["partitions"]}
    for p in range(PARTITIONS):
        s = starts.get((topic, p)) or pytest.fail(f"no start of {topic}-{p}: {report}")
        assert (s["offset"], s["start_from"]) == (201, "mm2-offsets")
        assert s["where"] == f"{offsets_topic(SOURCE)} on {TARGET}"
    tail = sum(starts[(topic, p)]["tail"] for p in range(PARTITIONS))
    assert tail == 100  # the records MM2 copied after its last recorded position
    printed = run_cli("srm", "takeover", "--config", str(config), cwd=tmp_path)
    assert "dry run, nothing written" in printed.stdout, printed.stdout
    row = (
        rf"{re.escape(topic)}\s+0\s+{recorded[0]}\s+{starts[(topic, 0)]['tail']}\s+{offsets_topic(SOURCE)} on {TARGET}"
    )
    assert re.search(row, printed.stdout), printed.stdout

    # WHEN srm run takes over with the same file, unchanged, and more records arrive
    with SrmRun(config, tmp_path) as run:
        wait_log(run, f"taking over {topic}-0 from MirrorMaker 2", timeout=60)
        # … `srm-control takeover --dry-run` now finds srm's own positions: the ones committed from MM2's
        control = run_cli(
            "srm-control",
            "--local",
            "takeover",
            "--source",
            SOURCE,
            "--target",
            TARGET,
            "--dry-run",
            "--json",
            cwd=tmp_path,
        )
        assert control.returncode == 0, control.stderr
        mine = {(s["topic"], s["partition"]): s for s in json.loads(control.stdout)["partitions"]}
        for p in range(PARTITIONS):
            assert mine[(topic, p)]["start_from"] == "srm" and mine[(topic, p)]["offset"] >= 201
        # … `srm-control offsets` shows MM2's checkpoints of the group, saying MM2 translated them
        before = wait_for(lambda: _offsets(tmp_path, group), 60, interval=1.0, message="srm-control offsets")
        for p in range(PARTITIONS):
            assert before[p] == {
                "offset": checkpoints[(remote, p)].offset,
                "upstream": 100,
                "by": "MirrorMaker 2 (offset syncs)",
            }
        produce(a, topic, numbered_records(100, PARTITIONS, topic, start=502))
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 602 + tail, 90, message="srm replicating")
        # … and the group reads on, into what srm replicated
        consume_and_commit(a, group, topic, {p: 175 for p in range(PARTITIONS)}, resume=True)  # now at 275
        offsets = wait_for(
            lambda: (o := _offsets(tmp_path, group)) and all(r["upstream"] == 275 for r in o.values()) and o,
            90,
            message="srm's checkpoints of the group",
        )
        synced = wait_for(
            lambda: (c := committed_on(b, group, remote, PARTITIONS)) and all(c[p] > 100 for p in c) and c,
            60,
            message="srm's group sync",
        )
        time.sleep(1)  # anything more on the target would be a duplicate of srm's own
        assert run.alive(), run.output()[-3000:]
    assert "not a setting serverless-srm knows" not in run.output(), run.output()[-3000:]

    # THEN nothing is lost, and the only records copied twice are MM2's unrecorded tail, as counted beforehand
    source = values_by_partition(a, topic)
    copied = values_by_partition(b, remote)
    for p in range(PARTITIONS):
        assert len(source[p]) == 301
        assert set(copied[p]) == set(source[p]), f"partition {p}: lost {len(set(source[p]) - set(copied[p]))}"
    duplicates = sum(len(copied[p]) - len(set(copied[p])) for p in range(PARTITIONS))
    print(f"\ntake-over: MM2 recorded {recorded}, its tail {tail}; duplicates on the target {duplicates}")
    assert duplicates == tail

    # … the group's offset in srm's range translates exactly (the copy there is its next record), `srm-control
    # offsets` says srm translated it, and the group on the target reads exactly the rest
    for p in range(PARTITIONS):
        row = offsets[p]
        assert row["by"] == "srm (exact)", row
        assert copied[p][row["offset"]] == source[p][275]
        assert synced[p] == row["offset"]
    rest = consume_rest(b, group, remote, PARTITIONS, {p: 26 for p in range(PARTITIONS)})
    assert rest == {p: source[p][275:] for p in range(PARTITIONS)}


def _offsets(workdir: Path, group: str) -> dict[int, dict[str, object]] | None:
    """``srm-control offsets`` of the srm run in ``workdir``: per partition, the offset, upstream offset and who
    translated it."""
    done = run_cli(
        "srm-control", "--local", "offsets", "--source", SOURCE, "--target", TARGET, "--group", group, cwd=workdir
    )
    if done.returncode != 0:
        return None
    rows = {}
    for line in done.stdout.splitlines()[1:]:
        fields = line.split(None, 4)
        rows[int(fields[1])] = {"offset": int(fields[2]), "upstream": int(fields[3]), "by": fields[4].strip()}
    return rows
