"""Source topics that change while `srm run` runs: new partitions, new topics."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from srm.core.plans import mapping_group_id
from tests.support.kafka import (
    assert_identical,
    create_partitions,
    create_topic_with_records,
    numbered_records,
    produce,
    read_topic,
    topic_partitions,
    unique,
    wait_for,
    wait_replicated,
)
from tests.support.runtime import replicating, srm_run, wait_log

pytestmark = pytest.mark.e2e


def _diagnosis(source: str, topic: str, target: str, remote: str) -> str:
    """Per-partition counts on both sides and the mapping's committed offsets, for a failure message."""
    src, dst = read_topic(source, topic), read_topic(target, remote)
    consumer = Consumer({"bootstrap.servers": source, "group.id": mapping_group_id("a", "b", topic)})
    try:
        committed = consumer.committed([TopicPartition(topic, p) for p in src], timeout=10)
    finally:
        consumer.close()
    return (
        f"records per partition: source { ({p: len(r) for p, r in src.items()}) }, "
        f"target { ({p: len(r) for p, r in dst.items()}) }; "
        f"committed offsets { ({tp.partition: tp.offset for tp in committed}) }"
    )


def test_source_partitions_added_while_running_grow_remote_and_replicate_same_partition(clusters, tmp_path: Path):
    # GIVEN a replicated topic with 2 partitions
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    topic = unique("grow")
    create_topic_with_records(a, topic, 2, 60)

    with replicating(tmp_path, a, b, topic) as run:
        # WHEN the source grows to 4 partitions and records go to every partition, the new ones included
        create_partitions(a, topic, 4)
        wait_for(lambda: topic_partitions(b, f"a.{topic}") == 4, timeout=60, message=f"a.{topic} grown to 4")
        produce(a, topic, numbered_records(200, 4, topic, start=60))
        try:
            wait_replicated(a, topic, b, f"a.{topic}", timeout=120)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_diagnosis(a, topic, b, f'a.{topic}')}\n{run.output()[-3000:]}") from None
        assert run.alive(), run.output()[-2000:]

    # THEN the remote topic has 4 partitions, each equal to the same-numbered source partition
    assert assert_identical(a, topic, b, f"a.{topic}") == {0: 80, 1: 80, 2: 50, 3: 50}


def test_topic_created_while_running_matching_filter_is_replicated_identically(clusters, tmp_path: Path):
    # GIVEN srm run with a flow whose filter matches no topic yet
    a, b = clusters["a"].bootstrap, clusters["b"].bootstrap
    p = unique("late")
    topic = f"{p}.new"

    with srm_run(tmp_path, {"a": a, "b": b}, {"a->b": {"topics": f"{p}\\..*"}}) as run:
        wait_log(run, "a->b: worker started", timeout=60)

        # WHEN a matching topic appears on the source and records arrive
        create_topic_with_records(a, topic, 2, 150)

        # THEN it is picked up by the next topic refresh and replicated identically
        try:
            wait_replicated(a, topic, b, f"a.{topic}", timeout=120)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{_diagnosis(a, topic, b, f'a.{topic}')}\n{run.output()[-3000:]}") from None
        assert run.alive(), run.output()[-2000:]
    assert assert_identical(a, topic, b, f"a.{topic}") == {0: 75, 1: 75}
