"""Taking a flow over from MirrorMaker 2: where each partition's replication starts.

An MM2 user stops MM2 and starts srm on the same ``mm2.properties``. Before a topic's event source mapping is
created, each of its partitions the mapping's group has no committed offset for (srm never replicated it) is given
one on the source, where MM2 stood:

1. MM2's committed source position, from its Connect offsets topic (``mm2-offsets.<source>.internal`` on the
   target in dedicated mode; with connector definitions, the Connect cluster's offsets topic, its records keyed by
   the MirrorSourceConnector's name, see :mod:`srm.config.connect_worker`): the record after the last one MM2
   recorded as replicated, where MM2 itself resumes;
2. else MM2's newest offset sync of the partition (its offset-syncs topic): the record after the synced one;
3. else nothing is committed and the mapping starts at the log start, as it always does.

Neither the beginning (everything twice) nor the end (records lost). What MM2 wrote after the position it recorded
is written again: MM2 records its position every ``offset.flush.interval.ms`` (and when it stops cleanly), so a
crash leaves a tail of copies it did not record. That tail is counted from the remote partition's end and the
nearest offset sync (records between a sync and the position are taken to be contiguous, as they are without
compaction or transactions on the source).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Literal, TypeVar, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from srm.config.connect_worker import ConnectOffsets, connect_offsets
from srm.config.connectors import source_connector_name
from srm.config.secrets import SecretResolver
from srm.config.settings import SrmConfig
from srm.core.plans import mapping_group_id, plan_topics
from srm.core.source_offsets import CONNECTOR, offsets_topic
from srm.errors import ConfigError, RetriableError
from srm.flow import Flow
from srm.kafka.admin import end_offsets, list_topics
from srm.kafka.clients import admin_config, build, consumer_config
from srm.kafka.transactions import TransactionError, read_source_offsets
from srm.mm2.client import read_to_end
from srm.mm2.formats import FormatError, OffsetSync
from srm.mm2.policy import ReplicationPolicy
from srm.replication.delivery import offset_syncs_topic

__all__ = ["StartPosition", "Takeover", "TakeoverError", "TakeoverReport", "mm2_tail", "take_over"]

log = logging.getLogger(__name__)
T = TypeVar("T")

StartFrom = Literal["srm", "mm2-offsets", "connect-offsets", "mm2-offset-sync", "log-start"]


class TakeoverError(RetriableError, RuntimeError):
    """MM2's positions could not be read (the mapping is not created: the next topic sync tries again)."""


@dataclass(frozen=True)
class StartPosition:
    """Where replication of one source partition starts, and why."""

    topic: str
    partition: int
    offset: int | None  # the first source offset srm replicates; None: the log start
    start_from: StartFrom
    where: str  # the topic (and cluster) the position was read from, for an operator
    tail: int | None = None  # copies on the target MM2 made past ``offset``: written again (None: unknown)

    @property
    def from_mm2(self) -> bool:
        return self.start_from in ("mm2-offsets", "connect-offsets", "mm2-offset-sync")


def mm2_tail(position: int, remote_end: int, sync: OffsetSync | None) -> int | None:
    """How many records on the remote partition (end ``remote_end``) are copies of source records at or after
    ``position``, by the offset ``sync`` nearest to it: the sync's downstream offset holds the copy of its upstream
    one, and the records between the sync and ``position`` lie contiguously on both sides. None without a sync."""
    if sync is None:
        return None
    below = position - 1 - sync.upstream_offset  # copies between the synced record and the position (< 0: after)
    return max(0, remote_end - 1 - sync.downstream_offset - below)


@dataclass
class Takeover:
    """Reads MM2's positions for a flow and commits them to the flow's mapping groups on the source."""

    source: str
    target: str
    policy: ReplicationPolicy
    source_admin: AdminClient
    target_admin: AdminClient
    source_reader: Mapping[str, Any]  # consumer settings for the source (the mapping groups' offsets)
    target_reader: Mapping[str, Any]  # consumer settings for the target (MM2's offsets topic)
    syncs_reader: Mapping[str, Any]  # consumer settings for the cluster holding the offset-syncs topic
    syncs_admin: AdminClient
    syncs_topic: str
    timeout_s: float = 15.0  # topic sync waits this long at most per read; the CLIs take --timeout
    # Where MM2's source offsets are: dedicated mode's topic on the target unless a Connect cluster's is given
    # (several names: the defaults, whichever exists is read), and the name their keys start with.
    offsets_topics: tuple[str, ...] = ()
    offsets_cluster: str = ""
    offsets_reader: Mapping[str, Any] | None = None
    offsets_admin: AdminClient | None = None
    connector: str = CONNECTOR
    connect: bool = False  # a Connect cluster's offsets topic (not dedicated mode's)

    def __post_init__(self) -> None:
        if not self.offsets_topics:
            self.offsets_topics = (offsets_topic(self.source),)
        self.offsets_cluster = self.offsets_cluster or self.target
        self.offsets_reader = self.target_reader if self.offsets_reader is None else self.offsets_reader
        self.offsets_admin = self.target_admin if self.offsets_admin is None else self.offsets_admin

    @classmethod
    def for_flow(
        cls,
        config: SrmConfig,
        flow: Flow,
        resolver: SecretResolver,
        source_admin: AdminClient | None = None,
        target_admin: AdminClient | None = None,
        connect: ConnectOffsets | None = None,
    ) -> Takeover:
        """The flow's take-over, with the configuration's clients (admins built unless given); from the Connect
        cluster's offsets topic ``connect`` names, else, for a flow of connector definitions, from a default one on
        the target (``srm takeover --worker-config`` commits the positions from any other beforehand), else from
        dedicated mode's."""
        source, target = flow
        if connect is None and source_connector_name(config, flow):
            connect = connect_offsets(config, flow, None)
        settings, policy = config.settings(source, target), config.policy(source, target)
        location, syncs_topic = offset_syncs_topic(source, target, settings, policy)

        def admin(alias: str) -> AdminClient:
            conf = admin_config(config, alias, flow, resolver)
            return cast(AdminClient, build(AdminClient, conf, config, alias, "admin"))

        def reader(alias: str) -> dict[str, Any]:
            return consumer_config(config, alias, flow, group_id="srm-takeover", resolver=resolver)

        # "is None", not "or": an AdminClient is falsy (its len() counts queued requests), so "or" built new ones
        source_admin = admin(source) if source_admin is None else source_admin
        target_admin = admin(target) if target_admin is None else target_admin
        known = {source: source_admin, target: target_admin}
        at = connect.cluster if connect is not None else target
        return cls(
            source=source,
            target=target,
            policy=policy,
            source_admin=source_admin,
            target_admin=target_admin,
            source_reader=reader(source),
            target_reader=reader(target),
            syncs_reader=reader(location),
            syncs_admin=source_admin if location == source else target_admin,
            syncs_topic=syncs_topic,
            offsets_topics=connect.topics if connect is not None else (),
            offsets_cluster=at,
            offsets_reader=reader(at),
            offsets_admin=known[at] if at in known else admin(at),
            connector=connect.connector if connect is not None else CONNECTOR,
            connect=connect is not None,
        )

    def topics(self, config: SrmConfig) -> dict[str, int]:
        """The topics the flow replicates now, by partition count (as topic sync selects them)."""
        plan = plan_topics(
            list_topics(self.source_admin, self.timeout_s),
            source=self.source,
            policy=self.policy,
            replicate=config.replicate(self.source, self.target),
        )
        return {topic: partitions for topic, (_, partitions) in plan.replicated.items()}

    def plan(self, topics: Mapping[str, int]) -> list[StartPosition]:
        """Where each partition of ``topics`` (name → partition count) starts."""
        committed = self._committed(topics)
        open_ = [(t, p) for t, n in sorted(topics.items()) for p in range(n) if (t, p) not in committed]
        offsets, offsets_where = self._mm2_offsets(open_) if open_ else ({}, "")
        syncs = self._offset_syncs({t for t, _ in open_}) if open_ else {}
        remote = [(self.policy.format_remote_topic(self.source, t), p) for t, p in open_]
        ends = end_offsets(self.target_admin, remote) if open_ else {}
        result = []
        for topic, n in sorted(topics.items()):
            for p in range(n):
                if (topic, p) in committed:
                    where = f"{mapping_group_id(self.source, self.target, topic)} on {self.source}"
                    result.append(StartPosition(topic, p, committed[(topic, p)], "srm", where))
                    continue
                end = ends.get((self.policy.format_remote_topic(self.source, topic), p), 0)
                nearest = _nearest(syncs.get((topic, p), []), offsets.get((topic, p)))
                if (topic, p) in offsets:
                    start = offsets[(topic, p)]
                    kind: StartFrom = "connect-offsets" if self.connect else "mm2-offsets"
                    tail = mm2_tail(start, end, nearest)
                    result.append(StartPosition(topic, p, start, kind, offsets_where, tail))
                elif nearest is not None:
                    start = nearest.upstream_offset + 1
                    where = f"{self.syncs_topic} on {self._syncs_location()}"
                    tail = mm2_tail(start, end, nearest)
                    result.append(StartPosition(topic, p, start, "mm2-offset-sync", where, tail))
                else:
                    result.append(StartPosition(topic, p, None, "log-start", "no position recorded"))
        return result

    def apply(self, positions: list[StartPosition]) -> list[StartPosition]:
        """Commit MM2's positions to the mapping groups (their mappings are not running yet); returns those."""
        taken = [s for s in positions if s.from_mm2 and s.offset is not None]
        by_group: dict[str, list[TopicPartition]] = {}
        for s in taken:
            assert s.offset is not None
            group = mapping_group_id(self.source, self.target, s.topic)
            by_group.setdefault(group, []).append(TopicPartition(s.topic, s.partition, s.offset))
        for group, tps in by_group.items():
            consumer = self._group_member(group)
            try:
                commit = partial(consumer.commit, offsets=tps, asynchronous=False)
                # a synchronous commit returns the partitions, each with its error (the stubs say None)
                committed = cast("list[TopicPartition] | None", _coordinated(commit, self.timeout_s)) or []
                for tp in committed:
                    if tp.error is not None:
                        raise KafkaException(tp.error)
            except KafkaException as e:
                if e.args[0].code() in _GROUP_IN_USE:
                    # A member holds the group: a mapping consumes it already (a worker that died a moment ago
                    # still counts until its session expires), so srm replicates this topic and no take-over is due.
                    log.info("%s: not taking over from MirrorMaker 2, the group is in use: %s", group, e.args[0])
                    taken = [s for s in taken if mapping_group_id(self.source, self.target, s.topic) != group]
                    continue
                raise TakeoverError(f"cannot commit MirrorMaker 2's positions to {group}: {e.args[0]}") from None
            finally:
                consumer.close()
        for s in taken:
            tail = "unknown" if s.tail is None else str(s.tail)
            log.warning(
                "%s->%s: taking over %s-%d from MirrorMaker 2 at offset %d (%s); copies MM2 made past it, written "
                "again: %s",
                self.source,
                self.target,
                s.topic,
                s.partition,
                s.offset,
                s.where,
                tail,
            )
        return taken

    def before_create(self, topic: str, partitions: int) -> None:
        """A mapping of ``topic`` is about to be created: start it where MM2 stood."""
        self.apply(self.plan({topic: partitions}))

    # -- reads --------------------------------------------------------------------------------------------------
    def _committed(self, topics: Mapping[str, int]) -> dict[tuple[str, int], int]:
        found: dict[tuple[str, int], int] = {}
        for topic, n in topics.items():
            group = mapping_group_id(self.source, self.target, topic)
            consumer = self._group_member(group)
            tps = [TopicPartition(topic, p) for p in range(n)]
            try:
                answer = _coordinated(partial(consumer.committed, tps, timeout=self.timeout_s), self.timeout_s)
            except KafkaException as e:
                raise TakeoverError(f"cannot read the committed offsets of {group}: {e.args[0]}") from None
            finally:
                consumer.close()
            for tp in answer:
                if tp.error is None and tp.offset >= 0:
                    found[(tp.topic, tp.partition)] = tp.offset
        return found

    def _group_member(self, group: str) -> Consumer:
        """A consumer of ``group`` that never joins it: it asks for and commits offsets only (the group's mapping is
        not running; the broker's group coordinator retries while it loads are librdkafka's)."""
        return Consumer({**self.source_reader, "group.id": group, "enable.auto.commit": "false"})

    def _mm2_offsets(self, wanted: list[tuple[str, int]]) -> tuple[dict[tuple[str, int], int], str]:
        """MM2's next source offset per partition, from its Connect offsets topic (if there is one), and where they
        were read."""
        assert self.offsets_admin is not None and self.offsets_reader is not None  # set by __post_init__
        present = list_topics(self.offsets_admin, self.timeout_s)
        read: dict[str, dict[tuple[str, int], int]] = {}
        for topic in (t for t in self.offsets_topics if t in present):
            try:
                found = read_source_offsets(
                    self.offsets_reader, topic, [(self.source, t, p) for t, p in wanted], self.timeout_s, self.connector
                )
            except TransactionError as e:
                raise TakeoverError(str(e)) from None
            # srm's own exactly-once transactions write to dedicated mode's topic too, with their offset runs: those
            # are no hand-over (srm's exactly-once flow leaves out what they cover by itself)
            positions = {key: offset.next for key, offset in found.items() if not offset.runs}
            if positions:
                read[topic] = positions
        if len(read) > 1:
            raise ConfigError(
                f"{' and '.join(read)} on {self.offsets_cluster} both hold {self.connector}'s offsets of "
                f"{self.source}->{self.target}: give the Connect cluster's worker config (--worker-config FILE) to say "
                "which one its workers use"
            )
        for topic, positions in read.items():
            return positions, f"{topic} on {self.offsets_cluster}"
        return {}, ""

    def _offset_syncs(self, topics: set[str]) -> dict[tuple[str, int], list[OffsetSync]]:
        """Every offset sync of ``topics`` still in the offset-syncs topic, oldest first."""
        if self.syncs_topic not in list_topics(self.syncs_admin, self.timeout_s):
            return {}
        consumer = Consumer({**self.syncs_reader, "group.id": "srm-takeover-reader", "enable.auto.commit": "false"})
        found: dict[tuple[str, int], list[OffsetSync]] = {}

        def denied(err: KafkaError) -> None:
            if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise TakeoverError(
                    f"cannot read {self.syncs_topic} on {self._syncs_location()}: srm's user needs READ on it (a new "
                    "mapping reads the offset syncs there to take over from MirrorMaker 2)"
                )

        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(self.syncs_topic, 0), timeout=self.timeout_s)
            ranges = {(self.syncs_topic, 0): (low, high)}
            for msg in read_to_end(consumer, ranges, self.timeout_s, poll_s=0.1, on_error=denied):
                try:
                    sync = OffsetSync.decode(msg.key(), msg.value())
                except FormatError:
                    continue
                if sync.topic in topics:
                    found.setdefault((sync.topic, sync.partition), []).append(sync)
        except (KafkaException, TimeoutError) as e:
            raise TakeoverError(f"cannot read {self.syncs_topic}: {e}") from None
        finally:
            consumer.close()
        return found

    def _syncs_location(self) -> str:
        return self.source if self.syncs_admin is self.source_admin else self.target


_GROUP_IN_USE = {
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID,
}

_COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._WAIT_COORD,
}


def _coordinated(call: Callable[[], T], timeout_s: float) -> T:
    """``call()``, again while the group's coordinator is still loading or moving (a new cluster, a broker that just
    started): librdkafka gives those answers back instead of retrying them for an offset fetch or commit."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return call()
        except KafkaException as e:
            if e.args[0].code() not in _COORDINATOR_MOVING or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)


def _nearest(syncs: list[OffsetSync], position: int | None) -> OffsetSync | None:
    """The sync to count a tail from: the newest at or below ``position`` (None: the newest of all), else the
    oldest above it."""
    if not syncs:
        return None
    if position is None:
        return syncs[-1]
    below = [s for s in syncs if s.upstream_offset < position]
    if below:
        return max(below, key=lambda s: s.upstream_offset)
    return min(syncs, key=lambda s: s.upstream_offset)


@dataclass(frozen=True)
class TakeoverReport:
    flow: Flow
    positions: list[StartPosition]
    dry_run: bool

    @property
    def from_mm2(self) -> list[StartPosition]:
        return [p for p in self.positions if p.from_mm2]

    @property
    def tail(self) -> int:
        """Copies MM2 made past its recorded positions (known ones): srm writes them again."""
        return sum(p.tail or 0 for p in self.from_mm2)

    def to_dict(self) -> dict[str, Any]:
        return {
            "flow": str(self.flow),
            "dryRun": self.dry_run,
            "partitions": [{**asdict(p), "fromMirrorMaker2": p.from_mm2} for p in self.positions],
            "tail": self.tail,
        }


def take_over(
    config: SrmConfig,
    flow: Flow,
    resolver: SecretResolver,
    *,
    dry_run: bool,
    timeout: float = 30.0,
    connect: ConnectOffsets | None = None,
) -> TakeoverReport:
    """Where each partition of ``flow`` starts; unless ``dry_run``, MM2's positions committed to the mapping groups
    (before the mappings run: a running mapping's group refuses them). ``connect``: MM2 ran as connectors in a
    Connect cluster, whose offsets topic holds their positions."""
    takeover = Takeover.for_flow(config, flow, resolver, connect=connect)
    takeover.timeout_s = timeout
    positions = takeover.plan(takeover.topics(config))
    if not dry_run:
        takeover.apply(positions)
    return TakeoverReport(flow, positions, dry_run)
