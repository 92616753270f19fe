"""The local runtime's emulated MSK event source mapping against a real broker: a backlog is delivered once, in
order, as MSK events; a mapping read to the end is caught up and still delivers what arrives later,
once; committed offsets follow the handler."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, TopicPartition

from srm.local.event_source import EmulatedMapping, MappingSettings
from tests.support.groups import Squatter
from tests.support.kafka import create_topic, numbered_records, produce, unique, wait_for
from tests.support.mappings import Recorder, running_mapping

pytestmark = pytest.mark.integration


@pytest.fixture
def mapping(clusters) -> Iterator[tuple[EmulatedMapping, Recorder, str, str, str]]:
    bootstrap, topic, group = clusters["a"].bootstrap, unique("esm-rest"), unique("esm-group")
    create_topic(bootstrap, topic, 3)
    settings = MappingSettings(batch_size=500, batching_window_ms=100)
    with running_mapping(bootstrap, topic, group, settings) as (m, recorder):
        yield m, recorder, bootstrap, topic, group


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = c.committed([TopicPartition(topic, p) for p in range(partitions)], 10)
        return {tp.partition: tp.offset for tp in found}
    finally:
        c.close()


def test_idle_mapping_catches_up_and_delivers_later_records_once_in_order(mapping) -> None:
    m, recorder, bootstrap, topic, group = mapping
    # GIVEN a backlog of 3,000 records over 3 partitions, delivered
    backlog = numbered_records(3000, 3, "backlog")
    produce(bootstrap, topic, backlog)
    wait_for(lambda: len(recorder.delivered) >= 3000, 60, message="backlog delivered")

    # WHEN nothing more arrives, the mapping is caught up
    wait_for(lambda: m.caught_up, 30, message="mapping caught up once read to the end")

    # AND records arrive while it idles
    late = numbered_records(30, 3, "late")
    produce(bootstrap, topic, late)
    wait_for(lambda: len(recorder.delivered) >= 3030, 30, message="late records delivered")

    # THEN every record was delivered exactly once, each partition in offset order, none invented
    expected = sorted((p, r.value) for p, r in backlog + late)
    assert sorted((p, v) for p, _o, v in recorder.delivered) == expected
    for p in range(3):
        offsets = [o for q, o, _v in recorder.delivered if q == p]
        assert offsets == list(range(len(offsets))), f"partition {p} out of order or with gaps"
    # AND the source offsets committed are the partition ends
    wait_for(lambda: committed(bootstrap, group, topic, 3) == {0: 1010, 1: 1010, 2: 1010}, 30, message="commits")
    # AND it is caught up again
    wait_for(lambda: m.caught_up, 30, message="mapping caught up again")


def test_partitions_kept_through_an_incremental_revoke_are_not_read_again(clusters) -> None:
    # GIVEN a member of a cooperative-sticky group (as srm run's) that replicated a backlog over 6 partitions
    bootstrap, topic, group = clusters["a"].bootstrap, unique("esm-coop"), unique("esm-group")
    create_topic(bootstrap, topic, 6)
    produce(bootstrap, topic, numbered_records(600, 6, "backlog"))
    settings = MappingSettings(batch_size=50, batching_window_ms=0)
    with running_mapping(bootstrap, topic, group, settings, assignor="cooperative-sticky") as (m, recorder):
        wait_for(lambda: committed(bootstrap, group, topic, 6) == dict.fromkeys(range(6), 100), 60, message="backlog")
        members = [Squatter(bootstrap, group, topic, assignor="cooperative-sticky")]
        try:
            wait_for(lambda: len(m.assigned) == 3 and len(members[0].assigned()) == 3, 60, message="shared by two")
            # … whose committed offsets lag what it replicated (as while its asynchronous commits are under way, or
            # when the rebalance refused them): the group has them at 0 for the partitions it holds
            held = m.assigned
            members[0].commit([TopicPartition(topic, p, 0) for p in held])
            wait_for(lambda: all(committed(bootstrap, group, topic, 6)[p] == 0 for p in held), 30, message="lagging")

            # WHEN a third member joins and takes one of its partitions, leaving it the other two
            members.append(Squatter(bootstrap, group, topic, assignor="cooperative-sticky"))
            wait_for(lambda: [len(m.assigned), *(len(o.assigned()) for o in members)] == [2, 2, 2], 60, message="3")
            time.sleep(2)  # what it would read again, read
        finally:
            for other in members:
                other.leave()

    # THEN it read none of them again: each record was delivered once, in order
    for p in range(6):
        offsets = [o for q, o, _v in recorder.delivered if q == p]
        assert offsets == list(range(100)), f"partition {p}: {len(offsets)} records, {len(set(offsets))} distinct"


def test_a_record_too_big_for_one_invocation_holds_its_partition_and_is_named(clusters) -> None:
    # GIVEN a mapping whose invoke payload holds a few small records, and a partition where one record among small
    # ones needs more than that on its own
    bootstrap, topic, group = clusters["a"].bootstrap, unique("esm-big"), unique("esm-group")
    create_topic(bootstrap, topic, 1)
    before, after = numbered_records(20, 1, "before"), numbered_records(5, 1, "after", start=21)
    big = numbered_records(1, 1, "big", start=20)[0]
    big = (0, dataclasses.replace(big[1], value=b"x" * 5000))
    produce(bootstrap, topic, [*before, big, *after])
    settings = MappingSettings(batch_size=500, batching_window_ms=0, max_payload_bytes=4000)

    # WHEN it runs
    with running_mapping(bootstrap, topic, group, settings) as (m, recorder):
        wait_for(lambda: m.stats.last_error is not None, 60, message="the oversized record reported")

        # THEN the records before it are delivered, in several events, and committed; it and those after wait
        assert [o for _p, o, _v in recorder.delivered] == list(range(20))
        wait_for(lambda: committed(bootstrap, group, topic, 1) == {0: 20}, 30, message="commit up to the big record")
        assert m.stats.batches > 1
        # AND the error names the record and the limit
        assert f"{topic}-0@20: record needs ~" in m.stats.last_error
        assert "more than the 4000-byte Lambda invoke limit" in m.stats.last_error
