"""Admin requests srm makes: topics, partitions, topic configs, consumer group offsets, remote topics."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from srm.core.filters import PatternList
from srm.core.plans import TopicInfo, config_changes, explicit_configs, replicable_configs
from srm.core.said import Said
from srm.errors import RetriableError

__all__ = [
    "ClusterMetadata",
    "ConnectionErrors",
    "GroupOffsets",
    "KafkaAccessError",
    "KafkaUnavailableError",
    "RemoteTopics",
    "alter_group_offsets",
    "broker_count",
    "create_partitions",
    "describe_topic_configs",
    "end_offsets",
    "ensure_topic",
    "group_offsets",
    "list_topics",
    "max_message_bytes",
    "probe_cluster",
    "sync_topic_configs",
]

log = logging.getLogger(__name__)
_said = Said()  # per container: a topic's config refused by the target is said when it starts or changes


def list_topics(admin: AdminClient, timeout: float = 15.0) -> dict[str, TopicInfo]:
    """Every topic of the cluster with its partition count (one metadata request)."""
    return _metadata(admin, timeout).topics


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None  # None: a broker too old to tell
    topics: dict[str, TopicInfo]


def _metadata(admin: AdminClient, timeout: float) -> ClusterMetadata:
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        raise KafkaUnavailableError(f"cannot list topics: {e.args[0]}") from e
    topics = {
        name: TopicInfo(name, len(t.partitions))
        for name, t in md.topics.items()
        if t.error is None or t.error.code() == KafkaError.NO_ERROR
    }
    return ClusterMetadata(md.cluster_id or None, topics)


def broker_count(admin: AdminClient, timeout: float = 15.0) -> int:
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException as e:
        raise KafkaUnavailableError(f"cannot read cluster metadata: {e.args[0]}") from e


class KafkaUnavailableError(RetriableError, RuntimeError):
    """A cluster did not answer in time (retriable)."""


class KafkaAccessError(KafkaUnavailableError):
    """A cluster answered and refused the client: its SASL credentials, or the TLS handshake (a certificate one side
    does not trust). Retrying the same settings fails the same way; a rotated secret or certificate may cure it."""


# librdkafka's own suffix to a connection error, and what the TLS errors mean to someone configuring srm.
_STATE_SUFFIX = re.compile(r"\s*\(after \d+ms in state \w+\)$")
_TLS_HINTS = (
    (
        "certificate verify failed",
        "the broker's certificate is not trusted: it must be signed by a CA of ssl.truststore.location and name the "
        "host connected to",
    ),
    ("alert bad certificate", "the broker refused the client certificate (ssl.keystore.location)"),
    ("alert unknown ca", "the broker refused the client certificate (ssl.keystore.location)"),
    ("alert certificate required", "the broker wants a client certificate (ssl.keystore.location)"),
)


class ConnectionErrors:
    """A client's ``error_cb``: the connection errors librdkafka reports (served by ``poll``), to tell a cluster
    that refuses the client (:meth:`refusal`) from one that does not answer (:meth:`last`)."""

    def __init__(self) -> None:
        self._errors: deque[KafkaError] = deque(maxlen=32)

    def __call__(self, error: KafkaError) -> None:
        self._errors.append(error)

    def refusal(self) -> str | None:
        """What the cluster refused, in one line, if it did: the SASL credentials, or a certificate in the TLS
        handshake."""
        for error in reversed(self._errors):
            text = _STATE_SUFFIX.sub("", error.str())
            if error.code() == KafkaError._AUTHENTICATION:
                return f"{text}; check the SASL username and password"
            # certificates only: a TLS connection cut short (a broker restarting) is not a refusal
            hint = next((h for marker, h in _TLS_HINTS if marker in text), None)
            if hint is not None:
                text = text.split(", verify that ssl.ca.location")[0]  # librdkafka's advice names its own keys
                return f"{text}; {hint}"
        return None

    def last(self) -> str | None:
        """The last connection error, if any (e.g. "Connection refused")."""
        errors = [e for e in self._errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
        return _STATE_SUFFIX.sub("", errors[-1].str()) if errors else None


def probe_cluster(admin: AdminClient, errors: ConnectionErrors, timeout: float) -> ClusterMetadata:
    """The cluster's id and topics (:func:`list_topics`), asked of a client built with ``errors`` as its ``error_cb``;
    gives up as soon as the cluster refuses it (:class:`KafkaAccessError`: librdkafka would retry until ``timeout``,
    and only say "transport failure"), or with :class:`KafkaUnavailableError` naming the last connection error after
    ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return _metadata(admin, timeout=max(0.05, min(0.5, deadline - time.monotonic())))
        except KafkaUnavailableError as e:
            admin.poll(0)  # serves the error callback
            refusal = errors.refusal()
            if refusal is not None:
                raise KafkaAccessError(refusal) from None
            if time.monotonic() >= deadline:
                raise KafkaUnavailableError(errors.last() or str(e)) from None


def ensure_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> bool:
    """Create the topic if it does not exist; True when this call created it. The replication factor is capped
    at the number of brokers (a single-broker dev cluster cannot hold 3 replicas). A topic that exists needs no
    CREATE right (an ACL) on it."""
    brokers = broker_count(admin, timeout)
    rf = replication_factor if replication_factor == -1 else max(1, min(replication_factor, brokers))
    if rf != replication_factor:
        log.warning(
            "topic %s: replication factor %d capped at the %d broker(s) available", name, replication_factor, brokers
        )
    future = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=rf, config=dict(configs or {}))],
        operation_timeout=timeout,
        request_timeout=timeout,
    )[name]
    try:
        future.result()
        return True
    except KafkaException as e:
        code = e.args[0].code()
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            return False
        # Kafka checks CREATE before existence: a topic created beforehand needs no CREATE ACL for srm's user
        if code == KafkaError.TOPIC_AUTHORIZATION_FAILED and name in list_topics(admin, timeout):
            return False
        raise


def create_partitions(admin: AdminClient, name: str, total: int, timeout: float = 30.0) -> None:
    future = admin.create_partitions([NewPartitions(name, total)], operation_timeout=timeout, request_timeout=timeout)[
        name
    ]
    try:
        future.result()
    except KafkaException as e:
        if e.args[0].code() != KafkaError.INVALID_PARTITIONS:  # someone else grew it first
            raise


def describe_topic_configs(
    admin: AdminClient, names: Iterable[str], timeout: float = 30.0, *, skip_failed: bool = False
) -> dict[str, dict[str, Any]]:
    """Configs of several topics in one request. A topic that cannot be described (just deleted) raises, or with
    ``skip_failed`` is logged and left out."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in sorted(set(names))]
    if not resources:
        return {}
    result: dict[str, dict[str, Any]] = {}
    for resource, future in admin.describe_configs(resources, request_timeout=timeout).items():
        try:
            result[resource.name] = future.result(timeout)
        except KafkaException as e:
            if not skip_failed:
                raise
            _said.say(
                (resource.name, "describe"),
                str(e.args[0]),
                log.warning,
                "cannot describe the configs of topic %s: %s",
                resource.name,
                e.args[0],
            )
    return result


def max_message_bytes(admin: AdminClient, topic: str, timeout: float = 15.0) -> int:
    """The largest record batch ``topic`` accepts: its ``max.message.bytes``, its own or the broker's default."""
    entry = describe_topic_configs(admin, [topic], timeout)[topic].get("max.message.bytes")
    if entry is None or entry.value is None:
        raise KafkaUnavailableError(f"{topic}: max.message.bytes not described by the cluster")
    return int(entry.value)


# (topic, partition) → (committed offset, metadata)
GroupOffsets = dict[tuple[str, int], tuple[int, str]]


def group_offsets(admin: AdminClient, group: str, timeout: float = 30.0) -> GroupOffsets:
    """A group's committed offsets (partitions without a committed offset are left out)."""
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group]
    result = future.result()
    return {
        (tp.topic, tp.partition): (tp.offset, tp.metadata or "")
        for tp in result.topic_partitions or []
        if tp.offset is not None and tp.offset >= 0
    }


def alter_group_offsets(
    admin: AdminClient, group: str, offsets: Mapping[tuple[str, int], int], timeout: float = 30.0
) -> dict[tuple[str, int], KafkaError]:
    """Commit ``offsets`` (per partition: the next record to read) to ``group``; the partitions whose commit failed,
    with their errors. The request can succeed while a partition's commit fails (a topic the group coordinator does
    not know yet): that error is the partition's only. A refused request raises :class:`KafkaException`."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())])
    answer = admin.alter_consumer_group_offsets([request], request_timeout=timeout)[group].result()
    return {(tp.topic, tp.partition): tp.error for tp in answer.topic_partitions or [] if tp.error is not None}


def end_offsets(admin: AdminClient, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The end offset of each (topic, partition), in one request; a partition without one is left out."""
    wanted = {TopicPartition(t, p): OffsetSpec.latest() for t, p in set(partitions)}
    if not wanted:
        return {}
    futures = admin.list_offsets(wanted, request_timeout=30)
    ends = {}
    for tp, future in futures.items():
        try:
            ends[(tp.topic, tp.partition)] = future.result().offset
        except KafkaException as e:  # a missing remote partition: nothing to commit there
            log.warning("no end offset for %s-%d: %s", tp.topic, tp.partition, e)
    return ends


_UNSUPPORTED = (KafkaError.UNSUPPORTED_VERSION, KafkaError._UNSUPPORTED_FEATURE)


def sync_topic_configs(
    source_admin: AdminClient,
    target_admin: AdminClient,
    remote_topics: Mapping[str, str],
    set_before: Mapping[str, Mapping[str, str]],
    exclude: PatternList,
    timeout: float = 30.0,
) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Bring the configs of the remote topics (source topic → remote topic) in line with their source topics.

    Returns, for every topic whose remote topic is in sync now, the configs srm holds on it — topics that could not
    be described or altered are left out (their previous record stands) and retried next time — and the remote
    topics whose configs were changed."""
    source_configs = describe_topic_configs(source_admin, remote_topics, timeout, skip_failed=True)
    target_configs = describe_topic_configs(target_admin, remote_topics.values(), timeout, skip_failed=True)
    held: dict[str, dict[str, str]] = {}
    resources: dict[str, ConfigResource] = {}
    said: dict[str, str] = {}  # remote topic → its changes, as the log says them once they hold
    for topic, remote in remote_topics.items():
        if topic not in source_configs or remote not in target_configs:
            continue
        wanted = replicable_configs(source_configs[topic], exclude)
        changes = config_changes(
            wanted, explicit_configs(target_configs[remote]), set(set_before.get(topic, {})), exclude
        )
        held[topic] = wanted
        if changes:
            entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in changes.set.items()]
            entries += [
                ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in sorted(changes.delete)
            ]
            resources[topic] = ConfigResource(ConfigResource.Type.TOPIC, remote, incremental_configs=entries)
            said[remote] = ", ".join(f"{k}={v}" for k, v in changes.set.items()) + (
                f" (reset: {', '.join(sorted(changes.delete))})" if changes.delete else ""
            )
    if resources:
        futures = target_admin.incremental_alter_configs(list(resources.values()), request_timeout=timeout)
        by_remote = {r.name: t for t, r in resources.items()}
        for resource, future in futures.items():
            try:
                future.result(timeout)
            except KafkaException as e:
                err = e.args[0]
                if isinstance(err, KafkaError) and err.code() in _UNSUPPORTED:
                    raise  # as MM2: a target without IncrementalAlterConfigs cannot have its configs synced
                # a target refusing a config refuses it at every sync: said when it starts or changes
                _said.say(
                    (resource.name, "alter"),
                    str(err),
                    log.warning,
                    "cannot alter the configs of topic %s: %s",
                    resource.name,
                    err,
                )
                held.pop(by_remote[resource.name], None)
            else:  # said once it holds: a refused change would be tried, and said, at every sync
                _said.ended((resource.name, "alter"))
                log.info("topic %s: config %s", resource.name, said[resource.name])
    return held, sorted(r.name for t, r in resources.items() if t in held)


class RemoteTopics:
    """Ensures remote topics exist with enough partitions; remembers what it has seen (per container).

    A remote topic is created with the source topic's partition count and its explicitly set configs (so, say,
    ``retention.ms`` or ``cleanup.policy=compact`` hold on the target from the first record)."""

    def __init__(
        self, source_admin: AdminClient, target_admin: AdminClient, replication_factor: int, config_exclude: PatternList
    ) -> None:
        self._source = source_admin
        self._target = target_admin
        self._replication_factor = replication_factor
        self._exclude = config_exclude
        self._known: dict[str, int] = {}
        self._seen: set[str] = set()  # remote topics seen on the target: one gone since was deleted there
        self._lock = threading.Lock()

    def forget(self, remote_topic: str) -> None:
        """The next :meth:`ensure` asks the target again (after a failed batch: the topic may have been deleted)."""
        with self._lock:
            self._known.pop(remote_topic, None)

    def ensure(self, source_topic: str, remote_topic: str, min_partitions: int) -> None:
        """The mirror's check before writing a batch: cheap when the remote topic is known to be big enough."""
        with self._lock:
            if self._known.get(remote_topic, 0) >= min_partitions:
                return
        source_partitions = list_topics(self._source).get(source_topic)
        wanted = max(min_partitions, source_partitions.partitions if source_partitions else 0)
        self.ensure_partitions(source_topic, remote_topic, wanted)

    def ensure_partitions(
        self,
        source_topic: str,
        remote_topic: str,
        partitions: int,
        target_topics: Mapping[str, TopicInfo] | None = None,
    ) -> dict[str, str] | None:
        """Create or grow the remote topic; when this call created it, the configs it was created with (srm holds
        them from then on), else None. ``target_topics`` (the target's topics, listed once by the caller) saves a
        metadata request per topic."""
        current = (target_topics if target_topics is not None else list_topics(self._target)).get(remote_topic)
        created = False
        configs: dict[str, str] = {}
        if current is None:
            configs = replicable_configs(
                describe_topic_configs(self._source, [source_topic]).get(source_topic, {}), self._exclude
            )
            created = ensure_topic(self._target, remote_topic, partitions, self._replication_factor, configs)
            if created and remote_topic in self._seen:
                # As MM2's topic sync: recreated rather than left to a broker's auto-creation (wrong partition
                # count); what it held is gone from the target and is not replicated again.
                log.error(
                    "remote topic %s was deleted on the target while replicated; recreated with %d partitions: the "
                    "records it held are gone from the target (replication continues from the committed offsets)",
                    remote_topic,
                    partitions,
                )
            elif created:
                log.info("created remote topic %s with %d partitions", remote_topic, partitions)
            current = list_topics(self._target).get(remote_topic) or TopicInfo(remote_topic, partitions)
        if current.partitions < partitions:
            create_partitions(self._target, remote_topic, partitions)
            log.info("grew remote topic %s from %d to %d partitions", remote_topic, current.partitions, partitions)
        elif current.partitions > partitions:
            log.warning(
                "remote topic %s has %d partitions, more than the source's %d; left as is (partitions never shrink)",
                remote_topic,
                current.partitions,
                partitions,
            )
        with self._lock:
            self._known[remote_topic] = max(partitions, current.partitions)
            self._seen.add(remote_topic)
        return configs if created else None
