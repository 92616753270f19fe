"""The checkpoint function's Kafka side against real brokers: the quiet probe (only a transaction marker in a range)
and group offset sync (idle groups only, never backwards, never past the end of the remote partition)."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from srm.config.settings import FlowSettings
from srm.core.checkpoints import StoredCheckpoint
from srm.kafka.readers import quiet_probe
from srm.mm2.policy import DefaultReplicationPolicy
from srm.replication.checkpoint import CheckpointContext, sync_group_offsets
from srm.state import StateStore
from tests.e2e.test_failover import committed_on, consume_and_commit, produce_values
from tests.support.clusters import Cluster
from tests.support.kafka import create_topic, end_offsets, unique

pytestmark = [pytest.mark.integration, pytest.mark.compat]  # also run on the compatibility tier's Kafka


def test_quiet_probe_true_over_a_transaction_marker_false_over_a_record(clusters: dict[str, Cluster]) -> None:
    # GIVEN a partition holding 3 records of a committed transaction (offsets 0..2, the marker at 3), then 1 record
    bootstrap = clusters["a"].bootstrap
    topic = unique("tx")
    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx-id")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"r{i}".encode(), partition=0)
    producer.commit_transaction(30)
    produce_values(bootstrap, topic, 0, [b"after"])
    assert end_offsets(bootstrap, topic) == {0: 5}
    probe = quiet_probe(
        {"bootstrap.servers": bootstrap, "group.id": unique("probe"), "isolation.level": "read_committed"}
    )
    # WHEN the source is asked about [3, 4) and [3, 5)
    # THEN only the marker lies in the first; the second holds a record
    assert probe(topic, 0, 3, 4) is True
    assert probe(topic, 0, 3, 5) is False


def context(bootstrap_a: str, bootstrap_b: str, state: StateStore) -> CheckpointContext:
    return CheckpointContext(
        source="a",
        target="b",
        settings=FlowSettings(),
        policy=DefaultReplicationPolicy(),
        source_admin=AdminClient({"bootstrap.servers": bootstrap_a}),
        target_admin=AdminClient({"bootstrap.servers": bootstrap_b}),
        producer=Producer({"bootstrap.servers": bootstrap_b}),
        state=state,
    )


def test_sync_group_offsets_commits_idle_groups_forward_within_the_remote_partition(
    clusters: dict[str, Cluster], state: StateStore
) -> None:
    # GIVEN a remote topic on b with 10 records in each of 2 partitions, and three groups:
    #   idle (never seen on b), behind (already committed 8 and 2 on b), busy (a member is consuming on b)
    b = clusters["b"].bootstrap
    remote = f"a.{unique('orders')}"
    create_topic(b, remote, 2)
    for p in (0, 1):
        produce_values(b, remote, p, [f"{p}-{i}".encode() for i in range(10)])
    idle, behind, busy = unique("idle"), unique("behind"), unique("busy")
    consume_and_commit(b, behind, remote, {0: 8, 1: 2})
    member = Consumer({"bootstrap.servers": b, "group.id": busy, "auto.offset.reset": "earliest"})
    member.subscribe([remote])
    member.consume(1, timeout=10)  # joined: the group has a member now

    def checkpoints(p0: int, p1: int) -> dict[tuple[str, int], StoredCheckpoint]:
        return {("orders", 0): StoredCheckpoint(p0, p0, remote), ("orders", 1): StoredCheckpoint(p1, p1, remote)}

    try:
        # WHEN translated offsets are synced: 5 and 12 (past the end) for idle, 5 and 6 for behind, 5 and 5 for busy
        synced = sync_group_offsets(
            context(clusters["a"].bootstrap, b, state),
            {idle: checkpoints(5, 12), behind: checkpoints(5, 6), busy: checkpoints(5, 5)},
        )
    finally:
        member.close()
    # THEN idle gets partition 0 only, behind only moves forward, busy is left alone
    assert synced == {idle: {(remote, 0): 5}, behind: {(remote, 1): 6}}
    assert committed_on(b, idle, remote, 2) == {0: 5}
    assert committed_on(b, behind, remote, 2) == {0: 8, 1: 6}


def test_a_group_active_on_the_target_is_logged_when_it_becomes_so_not_at_every_sync(
    clusters: dict[str, Cluster], state: StateStore, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a remote topic on b and a group with a member consuming it there
    b = clusters["b"].bootstrap
    remote = f"a.{unique('orders')}"
    create_topic(b, remote, 1)
    produce_values(b, remote, 0, [f"v{i}".encode() for i in range(10)])
    group = unique("busy")
    member = Consumer({"bootstrap.servers": b, "group.id": group, "auto.offset.reset": "earliest"})
    member.subscribe([remote])
    member.consume(1, timeout=10)
    ctx = context(clusters["a"].bootstrap, b, state)  # one container's, kept across its syncs
    latest = {group: {("orders", 0): StoredCheckpoint(5, 5, remote)}}
    caplog.set_level(logging.INFO, logger="srm.replication.checkpoint")
    try:
        # WHEN its offsets are synced five times while it is active
        for _ in range(5):
            assert sync_group_offsets(ctx, latest) == {}
    finally:
        member.close()
    # … and once more after its member left
    synced = sync_group_offsets(ctx, latest)

    # THEN "active" is said once, "idle again" once, and the idle group's offsets are synced
    said = [r.getMessage() for r in caplog.records if group in r.getMessage()]
    assert said == [
        f"group {group} is active on b: its offsets there are left alone",
        f"group {group} is idle on b again: its offsets there are synced",
    ]
    assert synced == {group: {(remote, 0): 5}}
