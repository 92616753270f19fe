"""Reading records back: whether a range of a partition holds anything deliverable (the quiet probe), the first record
not yet replicated of each lagging partition (the age probe), and the tails ``srm-control status`` reads."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    OffsetSpec,
)

from srm.config.secrets import SecretResolver, default_secret_resolver
from srm.config.settings import SrmConfig
from srm.core.plans import TopicInfo, mapping_group_id
from srm.core.said import Said
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.admin import KafkaUnavailableError, list_topics
from srm.kafka.clients import admin_config, build, consumer_config
from srm.mm2.client import read_to_end
from srm.mm2.formats import FormatError, Heartbeat

__all__ = ["KafkaStatusProbe", "age_probe", "quiet_probe"]

log = logging.getLogger(__name__)
_said = Said()  # per container: a probe that keeps failing is said when it starts or changes


def quiet_probe(
    consumer_config: dict[str, str], timeout: float = 5.0, skips: Callable[[str, Any], bool] | None = None
) -> Callable[[str, int, int, int], bool]:
    """Asks the source whether a partition holds no record to replicate in ``[start, end)`` — e.g. only a
    transaction marker — by reading it with the mirror's isolation level; records ``skips(topic, headers)`` says the
    mirror leaves out (the identity loop guard) are read past. Unsure means no."""

    def probe(topic: str, partition: int, start: int, end: int) -> bool:
        consumer = Consumer({**consumer_config, "enable.auto.commit": "false"})
        try:
            for msg in read_to_end(consumer, {(topic, partition): (start, end)}, timeout, batch=500, poll_s=0.2):
                if (msg.offset() or 0) >= end:
                    return True
                if skips is None or not skips(topic, msg.headers()):
                    return False  # the first record the mirror would replicate decides
            return True
        except TimeoutError:
            return False
        except KafkaException as e:
            # asked at every checkpoint run while the source does not answer: said when it starts or changes
            message = "cannot tell whether %s-%d is quiet in [%d, %d): %s"
            _said.say((topic, partition, "quiet"), str(e), log.warning, message, topic, partition, start, end, e)
            return False
        finally:
            consumer.close()

    return probe


def age_probe(
    consumer_config: dict[str, str], timeout: float = 5.0
) -> Callable[[Mapping[tuple[str, int], tuple[int, int]]], dict[tuple[str, int], int]]:
    """Reads the first record of each partition's ``[start, end)`` (``start`` OFFSET_BEGINNING: the log start) with
    the mirror's isolation level and answers its timestamp: for the range a mapping has not committed yet, the oldest
    record not yet replicated. A partition is paused once its first record is read, so a long backlog costs one
    fetch; a partition not read in time is left out of the answer."""

    def probe(ranges: Mapping[tuple[str, int], tuple[int, int]]) -> dict[tuple[str, int], int]:
        found: dict[tuple[str, int], int] = {}
        left = {tp: end for tp, (start, end) in ranges.items() if end > start}
        if not left:
            return found
        consumer = Consumer({**consumer_config, "enable.auto.commit": "false"})
        deadline = time.monotonic() + timeout
        try:
            consumer.assign([TopicPartition(t, p, ranges[(t, p)][0]) for t, p in left])
            while left and time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    tp = (msg.topic() or "", msg.partition() or 0)
                    if left.pop(tp, None) is not None:
                        found[tp] = msg.timestamp()[1]
                        consumer.pause([TopicPartition(*tp)])
                # a range of transaction markers or aborted records only holds nothing to wait for
                for position in consumer.position([TopicPartition(t, p) for t, p in left]):
                    if position.offset >= left.get((position.topic, position.partition), 0):
                        left.pop((position.topic, position.partition), None)
        except KafkaException as e:
            _said.say("oldest", str(e), log.info, "the oldest unreplicated records not read: %s", e)
        finally:
            consumer.close()
        return found

    return probe


class KafkaStatusProbe:
    """:class:`StatusProbe` over the clusters' own APIs. It only reads: listing offsets and a group's committed
    offsets joins no group, and tails are read by assignment without committing."""

    # The answer is the exception: librdkafka's own retry chatter would bury the status table.
    _QUIET = {"log_level": "0"}

    def __init__(self, resolver: SecretResolver = default_secret_resolver, timeout: float = 10.0) -> None:
        self._resolver = resolver
        self._timeout = timeout
        self._topics: dict[str, dict[str, TopicInfo]] = {}
        self._admins: dict[str, AdminClient] = {}
        self._unreachable: dict[str, Exception] = {}
        # per flow, the source range each lagging partition's mapping has not committed yet (what lag() found)
        self._lagging: dict[tuple[str, str], dict[tuple[str, int], tuple[int, int]]] = {}

    def _admin(self, config: SrmConfig, alias: str) -> AdminClient:
        if alias not in self._admins:
            conf = {**admin_config(config, alias, None, self._resolver), **self._QUIET}
            self._admins[alias] = build(AdminClient, conf, config, alias, "admin")
        return self._admins[alias]

    def topics(self, config: SrmConfig, alias: str) -> Mapping[str, TopicInfo]:
        if alias in self._unreachable:  # asked once per status: a dead cluster costs one timeout, not one per flow
            raise self._unreachable[alias]
        if alias not in self._topics:
            try:
                self._topics[alias] = list_topics(self._admin(config, alias), timeout=self._timeout)
            except (KafkaUnavailableError, ConfigError) as e:
                self._unreachable[alias] = e
                raise
        return self._topics[alias]

    def lag(self, config: SrmConfig, source: str, target: str, topics: Mapping[str, int]) -> dict[str, int | None]:
        if source in self._unreachable:
            raise self._unreachable[source]
        admin = self._admin(config, source)
        tps = [TopicPartition(t, p) for t, n in topics.items() for p in range(n)]
        latest = admin.list_offsets({tp: OffsetSpec.latest() for tp in tps}, request_timeout=self._timeout)
        earliest = admin.list_offsets({tp: OffsetSpec.earliest() for tp in tps}, request_timeout=self._timeout)
        committed = {}
        for topic, n in topics.items():  # one group per request (librdkafka); the requests run concurrently
            group = mapping_group_id(source, target, topic)
            request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(n)])
            committed[topic] = admin.list_consumer_group_offsets([request], request_timeout=self._timeout)[group]
        result: dict[str, int | None] = {}
        lagging = self._lagging.setdefault((source, target), {})
        for topic, n in topics.items():
            try:
                done = {tp.partition: tp.offset for tp in committed[topic].result(self._timeout).topic_partitions}
                lag = 0
                for p in range(n):
                    tp = TopicPartition(topic, p)
                    low = earliest[tp].result(self._timeout).offset
                    high = latest[tp].result(self._timeout).offset
                    # Nothing committed yet: the mapping starts at the log start; records below it are gone anyway.
                    start = max(done.get(p, -1), low)
                    lag += max(0, high - start)
                    if high > start:
                        lagging[(topic, p)] = (start, high)
                result[topic] = lag
            except (KafkaException, OSError) as e:
                log.info("lag of %s unknown: %s", topic, e)
                result[topic] = None
        return result

    def oldest_unreplicated(self, config: SrmConfig, source: str, target: str) -> dict[str, int]:
        """Per topic, the timestamp of the oldest record not yet replicated, in the lagging partitions :meth:`lag`
        found (a topic nothing lags in is left out)."""
        lagging = self._lagging.get((source, target))
        if not lagging or source in self._unreachable:
            return {}
        conf = consumer_config(
            config, source, Flow(source, target), group_id="srm-control-status", resolver=self._resolver
        )
        found = age_probe({**conf, **self._QUIET}, timeout=self._timeout)(lagging)
        oldest: dict[str, int] = {}
        for (topic, _), timestamp in found.items():
            oldest[topic] = min(oldest.get(topic, timestamp), timestamp)
        return oldest

    def last_heartbeat(self, config: SrmConfig, source: str, target: str) -> int | None:
        policy = config.policy(source, target)
        remote = policy.format_remote_topic(source, policy.heartbeats_topic())
        newest = None
        for key, value, _ in self._tail(config, source, target, remote):
            try:
                beat = Heartbeat.decode(key, value)
            except FormatError:
                continue
            if beat.source_alias == source:
                newest = max(newest or 0, beat.timestamp)
        return newest

    def last_checkpoint(self, config: SrmConfig, source: str, target: str) -> int | None:
        topic = config.policy(source, target).checkpoints_topic(source)
        stamps = [timestamp for _, _, timestamp in self._tail(config, source, target, topic)]
        return max(stamps) if stamps else None

    def _tail(
        self, config: SrmConfig, source: str, target: str, topic: str, last: int = 20
    ) -> list[tuple[bytes | None, bytes | None, int]]:
        """The last records of every partition of a topic on the target (none when it does not exist)."""
        info = self.topics(config, target).get(topic)
        if info is None:
            return []
        conf = consumer_config(
            config, target, Flow(source, target), group_id="srm-control-status", resolver=self._resolver
        )
        conf.update(self._QUIET)
        consumer = build(Consumer, conf, config, target, "consumer")
        out: list[tuple[bytes | None, bytes | None, int]] = []
        try:
            ranges = {}
            for p in range(info.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self._timeout)
                ranges[(topic, p)] = (max(low, high - last), high)
            for m in read_to_end(consumer, ranges, self._timeout, batch=500):
                out.append((m.key(), m.value(), m.timestamp()[1]))
        except TimeoutError:
            pass  # what was read in time is the answer
        except KafkaException as e:
            log.info("%s on %s not read: %s", topic, target, e)
        finally:
            consumer.close()
        return out
