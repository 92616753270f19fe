"""The same scenario against MirrorMaker 2 and against `srm run`, given the same ``mm2.properties``: what Kafka's own
MM2 integration tests check — offset syncs, checkpoints, automatic group offset sync, a restart, a rewound group —
on the same brokers, and where srm deliberately differs, the difference shown: after a failover a group re-reads
records under MM2 (its checkpoints round down to an offset sync) and none under srm.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from srm.local.mirrormaker import MirrorMaker
from srm.mm2.client import MirrorClient, read_to_end
from srm.mm2.formats import OffsetSync
from tests.e2e.test_failover import committed_on, consume_and_commit, consume_rest
from tests.support.kafka import (
    create_topic,
    end_offsets,
    numbered_records,
    produce,
    read_topic,
    rewind,
    unique,
    wait_for,
)
from tests.support.mm2 import mm2_file
from tests.support.runtime import SrmRun

pytestmark = pytest.mark.e2e

PARTITIONS = 2
GROUP_AT = 137  # between two of MM2's offset syncs (every offset.lag.max = 100 records)


def start(kind: str, config: Path, workdir: Path) -> MirrorMaker | SrmRun:
    if kind == "mm2":
        return MirrorMaker(config, workdir / "mm2", heap="512m")
    return SrmRun(config, workdir)


def values(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    return {p: [r.value for r in recs] for p, recs in read_topic(bootstrap, topic).items()}


def offset_syncs(bootstrap: str, topic: str, of: str) -> list[OffsetSync]:
    """The offset syncs of topic ``of`` in the offset-syncs ``topic``."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("syncs"), "enable.auto.commit": False})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
        syncs = [OffsetSync.decode(m.key(), m.value()) for m in read_to_end(consumer, {(topic, 0): (low, high)}, 30)]
    finally:
        consumer.close()
    return [s for s in syncs if s.topic == of]


@pytest.mark.parametrize("kind", ["mm2", "srm"])
def test_same_scenario_on_mirror_maker_2_and_srm(clusters, tmp_path: Path, kind: str):
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    source, target = f"{kind}west", f"{kind}east"  # internal topics of each system's own
    prefix = unique("sbs")
    topic, group = f"{prefix}.orders", f"{prefix}-billing"
    remote = f"{source}.{topic}"
    create_topic(a, topic, PARTITIONS)
    produce(a, topic, numbered_records(300, PARTITIONS, topic))  # 150 per partition
    consume_and_commit(a, group, topic, dict.fromkeys(range(PARTITIONS), GROUP_AT))
    config = mm2_file(tmp_path / "mm2.properties", (source, target), (a, b), prefix)

    # GIVEN the replicator replicating the topic and checkpointing the group
    replicator = start(kind, config, tmp_path)
    try:
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 300, 120, message=f"{kind} replicating {remote}")
        mirror = MirrorClient({"bootstrap.servers": b})
        checkpoints = wait_for(
            lambda: (
                (c := mirror.remote_consumer_offsets(group, source))
                and all(c.get((remote, p)) and c[(remote, p)].upstream_offset == GROUP_AT for p in range(PARTITIONS))
                and c
            ),
            60,
            message=f"{kind}'s checkpoints of the group",
        )
        synced = wait_for(
            lambda: (c := committed_on(b, group, remote, PARTITIONS)) and len(c) == PARTITIONS and c,
            60,
            message=f"{kind}'s group offset sync",
        )

        # THEN offset syncs in MM2's format sit on the source, each naming where a record landed (1:1 here)
        syncs = offset_syncs(a, f"mm2-offset-syncs.{target}.internal", topic)
        assert {s.partition for s in syncs} == set(range(PARTITIONS)), syncs
        assert all(s.upstream_offset == s.downstream_offset for s in syncs), syncs
        # … and the group, synced to the target, resumes at its checkpoint, never past the exact position
        for p in range(PARTITIONS):
            assert synced[p] == checkpoints[(remote, p)].offset <= GROUP_AT

        # WHEN the group fails over to the target
        source_values = values(a, topic)
        after = consume_rest(b, group, remote, PARTITIONS, {p: 150 - GROUP_AT for p in range(PARTITIONS)})

        # THEN it skips nothing; it re-reads what lies between its checkpoint and its position
        rereads = {}
        for p in range(PARTITIONS):
            assert after[p][-(150 - GROUP_AT) :] == source_values[p][GROUP_AT:], f"{kind}: partition {p} skipped"
            rereads[p] = len(after[p]) - (150 - GROUP_AT)
        print(f"\n{kind}: after a failover at offset {GROUP_AT} the group re-reads {rereads} records")
        if kind == "srm":
            assert rereads == dict.fromkeys(range(PARTITIONS), 0)  # exact translation: we differ here on purpose

        # WHEN the replicator is stopped cleanly, records arrive, and it starts again
        replicator.stop()
        produce(a, topic, numbered_records(100, PARTITIONS, topic, start=300))
        replicator = start(kind, config, tmp_path)
        wait_for(lambda: sum(end_offsets(b, remote).values()) >= 400, 120, message=f"{kind} resuming")

        # THEN nothing is lost, and nothing is copied twice
        copied, source_values = values(b, remote), values(a, topic)
        for p in range(PARTITIONS):
            assert set(copied[p]) == set(source_values[p]), f"{kind}: partition {p} lost records"
        duplicates = sum(len(copied[p]) - len(set(copied[p])) for p in range(PARTITIONS))
        print(f"{kind}: duplicates after a clean restart: {duplicates}")
        assert duplicates == 0

        # WHEN the group rewinds on the source
        rewind(a, group, topic, PARTITIONS, 50)

        # THEN the checkpoints follow it back
        def rewound() -> bool:
            c = mirror.remote_consumer_offsets(group, source)
            return all(c.get((remote, p)) and c[(remote, p)].upstream_offset == 50 for p in range(PARTITIONS))

        wait_for(rewound, 30, message=f"{kind}'s checkpoints following the rewind")
    finally:
        replicator.stop()
