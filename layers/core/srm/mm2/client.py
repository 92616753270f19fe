"""The Python counterpart of MM2's ``RemoteClusterUtils`` / ``MirrorClient``: what one cluster knows about the
clusters replicating into it, read from its own topics — so it works while the source cluster is down.

* :func:`translate_offsets` reads ``<remote alias>.checkpoints.internal`` partition 0 from the beginning, as Java
  clients do, and returns the latest checkpointed (downstream) offsets of a group, keyed by local topic.
* :func:`upstream_clusters`, :func:`replication_hops`, :func:`heartbeat_topics`, :func:`checkpoint_topics` read the
  cluster's topic names through the replication policy.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from srm.errors import RetriableError
from srm.mm2.formats import Checkpoint, FormatError
from srm.mm2.policy import DefaultReplicationPolicy, ReplicationPolicy

__all__ = [
    "CheckpointReadError",
    "CheckpointedOffset",
    "MirrorClient",
    "checkpoint_topics",
    "heartbeat_topics",
    "read_to_end",
    "replication_hops",
    "translate_offsets",
    "upstream_clusters",
]


class CheckpointReadError(RetriableError, RuntimeError):
    """A checkpoints topic could not be read (the broker answered with an error)."""

    def __init__(self, message: str, *, topic: str) -> None:
        super().__init__(message)
        self.topic = topic


@dataclass(frozen=True)
class CheckpointedOffset:
    """A group's translated position on one local partition, as the latest checkpoint states it."""

    topic: str  # on this cluster
    partition: int
    offset: int  # where the group resumes here
    upstream_offset: int  # its committed offset on the remote cluster
    metadata: str


class MirrorClient:
    """Reads one cluster; ``config`` holds the librdkafka settings every client of it needs (bootstrap servers,
    security), as MM2's ``MirrorClientConfig`` does."""

    def __init__(self, config: Mapping[str, str], policy: ReplicationPolicy | None = None) -> None:
        self.config: dict[str, Any] = dict(config)
        self.policy = policy or DefaultReplicationPolicy()

    def list_topics(self, timeout: float = 15.0) -> set[str]:
        return set(AdminClient(self.config).list_topics(timeout=timeout).topics)

    def heartbeat_topics(self) -> set[str]:
        return {t for t in self.list_topics() if self.policy.is_heartbeats_topic(t)}

    def checkpoint_topics(self) -> set[str]:
        return {t for t in self.list_topics() if self.policy.is_checkpoints_topic(t)}

    def upstream_clusters(self) -> set[str]:
        """Every cluster replicating into this one, directly or over several hops, from incoming heartbeats."""
        return {alias for t in self.heartbeat_topics() for alias in self.policy.upstream_clusters(t)}

    def replication_hops(self, upstream_alias: str) -> int:
        """Hops from ``upstream_alias`` to this cluster (1 = direct), or -1 when it does not replicate here."""
        hops = [
            chain.index(upstream_alias) + 1
            for t in self.heartbeat_topics()
            if upstream_alias in (chain := self.policy.upstream_clusters(t))
        ]
        return min(hops, default=-1)

    def remote_topics(self, source: str | None = None) -> set[str]:
        return {
            t
            for t in self.list_topics()
            if not self.policy.is_internal_topic(t)
            and (src := self.policy.topic_source(t)) is not None
            and (source is None or src == source)
        }

    def remote_consumer_offsets(
        self, group: str, remote_alias: str, timeout: float = 30.0
    ) -> dict[tuple[str, int], CheckpointedOffset]:
        """The latest checkpoint of ``group`` per local topic-partition, from ``<remote_alias>.checkpoints.internal``.
        Raises LookupError when that topic does not exist here."""
        topic = self.policy.checkpoints_topic(remote_alias)
        if topic not in self.list_topics(timeout):
            raise LookupError(f"no checkpoints topic {topic}: nothing replicates consumer groups from {remote_alias}")
        consumer = Consumer(
            {
                **self.config,
                "group.id": f"srm-checkpoint-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": "false",
                "auto.offset.reset": "earliest",
            }
        )
        offsets: dict[tuple[str, int], CheckpointedOffset] = {}

        def fail(err: KafkaError) -> None:
            raise CheckpointReadError(f"reading {topic}: {err.str()}", topic=topic)

        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=timeout, cached=False)
            for msg in read_to_end(consumer, {(topic, 0): (low, high)}, timeout, on_error=fail):
                try:
                    c = Checkpoint.decode(msg.key(), msg.value())
                except FormatError:
                    continue  # not a checkpoint (MM2 skips such records too)
                if c.group == group:
                    offsets[(c.topic, c.partition)] = CheckpointedOffset(
                        c.topic, c.partition, c.downstream_offset, c.upstream_offset, c.metadata
                    )
            return offsets
        finally:
            consumer.close()


_DENIED = {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}


def read_to_end(
    consumer: Consumer,
    ranges: Mapping[tuple[str, int], tuple[int, int]],
    timeout: float,
    *,
    batch: int = 1000,
    poll_s: float = 0.5,
    on_error: Callable[[KafkaError], None] | None = None,
) -> Iterator[Message]:
    """Every record of each (topic, partition) from its start up to its end offset (exclusive), read by assignment:
    no group is joined, nothing is committed. Done when every partition's position has reached its end (transaction
    markers count); past ``timeout`` raises TimeoutError. Errors other than a partition's end go to ``on_error``
    (skipped without one); a denied read (the cluster's ACLs) then raises KafkaException at once: waiting would not
    change it. The one reader of internal topics here, in the status probe and in the quiet probe."""
    ends = {tp: end for tp, (start, end) in ranges.items() if end > start}
    if not ends:
        return
    consumer.assign([TopicPartition(t, p, ranges[(t, p)][0]) for t, p in ends])
    deadline = time.monotonic() + timeout
    last_error = ""
    while ends:
        if time.monotonic() >= deadline:
            names = ", ".join(sorted({t for t, _ in ends}))
            raise TimeoutError(f"reading {names} took longer than {timeout:.0f}s{last_error}")
        # the first record ends the wait (a full batch would wait out poll_s), the ones already fetched come with it
        first = consumer.poll(poll_s)
        for msg in [first, *consumer.consume(batch - 1, timeout=0)] if first is not None else []:
            err = msg.error()
            if err is None:
                yield msg
            elif err.code() != KafkaError._PARTITION_EOF:
                last_error = f" (last error: {err.str()})"
                if on_error is not None:
                    on_error(err)
                if err.code() in _DENIED:
                    raise KafkaException(err)
        for tp in consumer.position([TopicPartition(t, p) for t, p in ends]):
            if tp.offset >= ends.get((tp.topic, tp.partition), 0):
                ends.pop((tp.topic, tp.partition), None)


def translate_offsets(
    config: dict[str, str],
    remote_alias: str,
    group: str,
    timeout: float = 30.0,
    policy: ReplicationPolicy | None = None,
) -> dict[TopicPartition, int]:
    """MM2's ``RemoteClusterUtils.translateOffsets``: where ``group`` resumes on this cluster."""
    found = MirrorClient(config, policy).remote_consumer_offsets(group, remote_alias, timeout)
    return {TopicPartition(c.topic, c.partition): c.offset for c in found.values()}


def upstream_clusters(config: dict[str, str], policy: ReplicationPolicy | None = None) -> set[str]:
    return MirrorClient(config, policy).upstream_clusters()


def replication_hops(config: dict[str, str], upstream_alias: str, policy: ReplicationPolicy | None = None) -> int:
    return MirrorClient(config, policy).replication_hops(upstream_alias)


def heartbeat_topics(config: dict[str, str], policy: ReplicationPolicy | None = None) -> set[str]:
    return MirrorClient(config, policy).heartbeat_topics()


def checkpoint_topics(config: dict[str, str], policy: ReplicationPolicy | None = None) -> set[str]:
    return MirrorClient(config, policy).checkpoint_topics()
