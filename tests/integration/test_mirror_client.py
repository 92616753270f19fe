"""srm.mm2.client (MM2's RemoteClusterUtils / MirrorClient) against a real cluster: checkpoints read back from
``<alias>.checkpoints.internal``, the upstream clusters and hops told by heartbeats topics."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer, TopicPartition

from srm.mm2 import client as remote_cluster
from srm.mm2.client import CheckpointedOffset, MirrorClient
from srm.mm2.formats import Checkpoint
from tests.support.clusters import Cluster
from tests.support.kafka import create_topic, unique

pytestmark = pytest.mark.integration


def write_checkpoints(bootstrap: str, topic: str, checkpoints: list[Checkpoint]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for c in checkpoints:
        producer.produce(topic, c.value(), c.key(), partition=0)
    producer.produce(topic, b"not a checkpoint", b"garbage", partition=0)  # skipped, as MM2 does
    assert producer.flush(30) == 0


def test_remote_consumer_offsets_are_the_latest_checkpoint_per_partition(clusters: dict[str, Cluster]) -> None:
    # GIVEN a cluster holding checkpoints from an upstream alias of its own (unique, so the shared cluster is clean)
    bootstrap = clusters["c"].bootstrap
    alias, group, other = unique("up"), unique("app"), unique("other")
    topic = f"{alias}.checkpoints.internal"
    create_topic(bootstrap, topic, 1)
    remote = f"{alias}.orders"
    write_checkpoints(
        bootstrap,
        topic,
        [
            Checkpoint(group, remote, 0, 10, 110, "m0"),
            Checkpoint(group, remote, 1, 7, 207),
            Checkpoint(other, remote, 0, 99, 199),
            Checkpoint(group, remote, 0, 12, 112, "m1"),  # newer: wins
        ],
    )
    client = MirrorClient({"bootstrap.servers": bootstrap})
    # WHEN the group's offsets are asked for
    found = client.remote_consumer_offsets(group, alias, timeout=20)
    # THEN the newest checkpoint of each partition of that group, downstream offsets with their upstream ones
    assert found == {
        (remote, 0): CheckpointedOffset(remote, 0, 112, 12, "m1"),
        (remote, 1): CheckpointedOffset(remote, 1, 207, 7, ""),
    }
    assert remote_cluster.translate_offsets({"bootstrap.servers": bootstrap}, alias, group, timeout=20) == {
        TopicPartition(remote, 0): 112,
        TopicPartition(remote, 1): 207,
    }
    assert topic in client.checkpoint_topics()


def test_remote_consumer_offsets_without_a_checkpoints_topic_raises_lookup_error(clusters: dict[str, Cluster]) -> None:
    client = MirrorClient({"bootstrap.servers": clusters["c"].bootstrap})
    with pytest.raises(LookupError, match="nothing replicates consumer groups from"):
        client.remote_consumer_offsets("app", unique("nobody"), timeout=10)


def test_upstream_clusters_and_hops_come_from_heartbeats_topics(clusters: dict[str, Cluster]) -> None:
    # GIVEN heartbeats replicated from x directly (x.heartbeats) and from z only through y (y.z.heartbeats)
    bootstrap = clusters["c"].bootstrap
    x, y, z = unique("x"), unique("y"), unique("z")
    create_topic(bootstrap, f"{x}.heartbeats", 1)
    create_topic(bootstrap, f"{y}.{z}.heartbeats", 1)
    config = {"bootstrap.servers": bootstrap}
    # THEN x and y are upstream clusters; x and y are one hop away, z two; an unknown alias none (-1)
    assert {x, y} <= remote_cluster.upstream_clusters(config)
    assert remote_cluster.replication_hops(config, x) == 1
    assert remote_cluster.replication_hops(config, y) == 1
    assert remote_cluster.replication_hops(config, z) == 2
    assert remote_cluster.replication_hops(config, unique("nowhere")) == -1
    assert {f"{x}.heartbeats", f"{y}.{z}.heartbeats"} <= remote_cluster.heartbeat_topics(config)
