"""Kafka adapter: client settings for librdkafka, client construction, and the admin calls srm needs.

Configuration arrives with MM2's Java client names; :func:`librdkafka_config` translates the ones librdkafka
spells differently (``sasl.jaas.config``, PEM truststores) and resolves secret references (``${env:NAME}``,
``${file:/path:key}``, ``${secretsmanager:id[:json-key]}``) at the last moment, so secrets never sit in the
config table or in logs.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
)

from srm.config import SrmConfig
from srm.filters import PatternList
from srm.formats import FormatError, Heartbeat
from srm.plans import TopicInfo, config_changes, explicit_configs, mapping_group_id, replicable_configs
from srm.properties import ConfigError
from srm.secrets import SecretResolver, default_secret_resolver, resolve_refs

__all__ = [
    "KafkaClients",
    "TopicInfo",
    "admin_config",
    "consumer_config",
    "create_partitions",
    "ensure_topic",
    "librdkafka_config",
    "list_topics",
    "producer_config",
]

log = logging.getLogger(__name__)

_JAAS_KV = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
# Java-client settings with no librdkafka meaning: dropped rather than rejected, so mm2.properties work as-is.
_JAVA_ONLY = frozenset(
    {
        "key.serializer",
        "value.serializer",
        "key.deserializer",
        "value.deserializer",
        "interceptor.classes",
        "client.dns.lookup",
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.truststore.type",
        "ssl.keystore.type",
        "ssl.keymanager.algorithm",
        "ssl.trustmanager.algorithm",
        "ssl.secure.random.implementation",
        "sasl.login.callback.handler.class",
        "sasl.client.callback.handler.class",
        "metric.reporters",
        "auto.include.jmx.reporter",
        "default.api.timeout.ms",
        "max.block.ms",
        "buffer.memory",
    }
)


def librdkafka_config(
    settings: Mapping[str, tuple[str, str]],
    config: SrmConfig,
    resolver: SecretResolver = default_secret_resolver,
) -> dict[str, str]:
    """Translate resolved client settings (``{key: (value, defining key)}``) into a librdkafka config."""
    out: dict[str, str] = {}
    jaas: tuple[str, str] | None = None
    truststore: tuple[str, str] | None = None
    for key, (raw, defined_by) in settings.items():
        try:
            value = resolve_refs(raw, resolver)
        except ConfigError as e:
            raise ConfigError(
                f"{defined_by}: {e}", key=defined_by, origin=config.properties.origin(defined_by)
            ) from None
        if key == "sasl.jaas.config":
            jaas = (value, defined_by)
        elif key == "ssl.truststore.location":
            truststore = (value, defined_by)
        elif key == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"
        elif key in ("ssl.truststore.password",):
            continue  # a PEM truststore has no password
        elif key in _JAVA_ONLY:
            continue
        else:
            out[key] = value
    if jaas is not None:
        value, defined_by = jaas
        if "IAMLoginModule" in value:
            raise ConfigError(
                f"{defined_by}: AWS MSK IAM authentication is not supported by this client yet; "
                "use SASL/SCRAM or mTLS for the cluster",
                key=defined_by,
                origin=config.properties.origin(defined_by),
            )
        creds = dict(_JAAS_KV.findall(value))
        if "username" not in creds or "password" not in creds:
            raise ConfigError(
                f'{defined_by}: expected username="…" password="…" in sasl.jaas.config',
                key=defined_by,
                origin=config.properties.origin(defined_by),
            )
        out.setdefault("sasl.username", creds["username"])
        out.setdefault("sasl.password", creds["password"])
    if truststore is not None:
        value, defined_by = truststore
        store_type = settings.get("ssl.truststore.type", ("PEM", ""))[0].upper()
        if store_type != "PEM" and not value.endswith((".pem", ".crt")):
            raise ConfigError(
                f"{defined_by}: librdkafka cannot read {store_type or 'JKS'} truststores; convert it to PEM and set "
                "ssl.ca.location (or ssl.truststore.location with ssl.truststore.type=PEM)",
                key=defined_by,
                origin=config.properties.origin(defined_by),
            )
        out.setdefault("ssl.ca.location", value)
    keystore_type = settings.get("ssl.keystore.type", ("PKCS12", ""))[0].upper()
    if "ssl.keystore.location" in out and keystore_type not in ("PKCS12", "P12"):
        key = settings["ssl.keystore.location"][1]
        raise ConfigError(
            f"{key}: librdkafka reads PKCS#12 keystores only; convert the {keystore_type} keystore to PKCS#12",
            key=key,
            origin=config.properties.origin(key),
        )
    return out


def _with(base: dict[str, str], defaults: Mapping[str, str], enforced: Mapping[str, str], where: str) -> dict[str, str]:
    conf = {**defaults, **base}
    for key, required in enforced.items():
        if key in base and base[key].lower() != required.lower():
            raise ConfigError(
                f"{where}: {key}={base[key]} is not allowed: serverless-srm needs {key}={required} so no record is lost"
            )
        conf[key] = required
    return conf


def producer_config(
    config: SrmConfig,
    alias: str,
    flow: tuple[str, str] | None,
    *,
    delivery_timeout_ms: int,
    resolver: SecretResolver = default_secret_resolver,
) -> dict[str, str]:
    """An idempotent, acks=all producer: every acknowledged record is durable and in order."""
    base = librdkafka_config(config.client(alias, "producer", flow), config, resolver)
    defaults = {
        "linger.ms": "5",
        "batch.num.messages": "10000",
        "batch.size": "1048576",
        "queue.buffering.max.messages": "1000000",
        "queue.buffering.max.kbytes": "1048576",
        "message.max.bytes": "10485760",
        "message.timeout.ms": str(delivery_timeout_ms),
    }
    enforced = {"enable.idempotence": "true", "acks": "all"}
    if base.get("acks") == "-1":
        base["acks"] = "all"
    return _with(base, defaults, enforced, f"{alias} producer")


def consumer_config(
    config: SrmConfig,
    alias: str,
    flow: tuple[str, str] | None,
    *,
    group_id: str,
    resolver: SecretResolver = default_secret_resolver,
) -> dict[str, str]:
    """A consumer that commits only what it is told to and skips aborted transactions."""
    base = librdkafka_config(config.client(alias, "consumer", flow), config, resolver)
    defaults = {
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.max.bytes": "52428800",
        # Kafka keeps a fetch response under fetch.max.bytes; some brokers (noida-db, far behind the log end) send
        # far more, which librdkafka refuses and fetches again forever. Accepting it costs nothing with Kafka.
        "receive.message.max.bytes": "1000000000",
    }
    conf = _with(base, defaults, {"enable.auto.commit": "false"}, f"{alias} consumer")
    conf["group.id"] = group_id
    conf.setdefault("enable.auto.offset.store", "false")
    return conf


def admin_config(
    config: SrmConfig,
    alias: str,
    flow: tuple[str, str] | None = None,
    resolver: SecretResolver = default_secret_resolver,
) -> dict[str, str]:
    return librdkafka_config(config.client(alias, "admin", flow), config, resolver)


class _OncePerMinute(logging.Filter):
    """librdkafka repeats the same complaint (a refused connection) several times a second; one a minute is news."""

    def __init__(self, seconds: float = 60.0) -> None:
        super().__init__()
        self.seconds = seconds
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -self.seconds) < self.seconds:
                return False
            self._last[key] = now
        return True


# Where librdkafka's own log lines go (instead of straight to stderr), deduplicated.
CLIENT_LOG = logging.getLogger("srm.kafka.client")
CLIENT_LOG.addFilter(_OncePerMinute())


def build(kind: type, conf: dict[str, str], config: SrmConfig, alias: str, role: str) -> Any:
    """Construct a client, turning librdkafka's config complaints into a ConfigError naming the setting; its log
    lines go to :data:`CLIENT_LOG`."""
    try:
        return kind({**conf, "logger": CLIENT_LOG})
    except (KafkaException, ValueError, TypeError) as e:
        message = str(e.args[0] if e.args else e)
        m = re.search(r'property[:\s]+"?([\w.\-]+)"?', message)
        bad = m.group(1) if m else None
        defined = config.client(alias, role).get(bad, (None, None))[1] if bad else None
        origin = config.properties.origin(defined) if defined else None
        raise ConfigError(f"{alias} {role}: {message}", key=defined, origin=origin) from None


# ---------------------------------------------------------------------------------------------------------------
# Admin helpers
# ---------------------------------------------------------------------------------------------------------------
def list_topics(admin: AdminClient, timeout: float = 15.0) -> dict[str, TopicInfo]:
    """Every topic of the cluster with its partition count (one metadata request)."""
    try:
        md = admin.list_topics(timeout=timeout)
    except KafkaException as e:
        raise KafkaUnavailableError(f"cannot list topics: {e.args[0]}") from e
    return {
        name: TopicInfo(name, len(t.partitions))
        for name, t in md.topics.items()
        if t.error is None or t.error.code() == KafkaError.NO_ERROR
    }


def broker_count(admin: AdminClient, timeout: float = 15.0) -> int:
    try:
        return len(admin.list_topics(timeout=timeout).brokers)
    except KafkaException as e:
        raise KafkaUnavailableError(f"cannot read cluster metadata: {e.args[0]}") from e


class KafkaUnavailableError(RuntimeError):
    """A cluster did not answer in time (retriable)."""


def ensure_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: Mapping[str, str] | None = None,
    timeout: float = 30.0,
) -> bool:
    """Create the topic if it does not exist; True when this call created it. The replication factor is capped
    at the number of brokers (a single-broker dev cluster cannot hold 3 replicas)."""
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
        if e.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
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
            log.warning("cannot describe the configs of topic %s: %s", resource.name, e.args[0])
    return result


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


def end_offsets(admin: AdminClient, partitions: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    if not partitions:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}, request_timeout=30)
    ends = {}
    for tp, future in futures.items():
        try:
            ends[(tp.topic, tp.partition)] = future.result().offset
        except Exception as e:  # a missing remote partition: nothing to commit there
            log.warning("no end offset for %s-%d: %s", tp.topic, tp.partition, e)
    return ends


def quiet_probe(consumer_config: dict[str, str], timeout: float = 5.0) -> Callable[[str, int, int, int], bool]:
    """Asks the source whether a partition holds no deliverable record in ``[start, end)`` — e.g. only a
    transaction marker — by reading it with the mirror's isolation level. Unsure means no."""

    def probe(topic: str, partition: int, start: int, end: int) -> bool:
        consumer = Consumer({**consumer_config, "enable.auto.commit": "false"})
        try:
            tp = TopicPartition(topic, partition, start)
            consumer.assign([tp])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for msg in consumer.consume(1, timeout=0.2):
                    if msg.error() is None:
                        return (msg.offset() or 0) >= end
                position = consumer.position([TopicPartition(topic, partition)])[0].offset
                if position >= end:
                    return True
            return False
        finally:
            consumer.close()

    return probe


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
            log.info(
                "topic %s: config %s%s",
                remote,
                ", ".join(f"{k}={v}" for k, v in changes.set.items()) or "",
                f" (reset: {', '.join(sorted(changes.delete))})" if changes.delete else "",
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
                log.warning("cannot alter the configs of topic %s: %s", resource.name, err)
                held.pop(by_remote[resource.name], None)
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
        self._lock = threading.Lock()

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
    ) -> bool:
        """Create or grow the remote topic; True when this call created it. ``target_topics`` (the target's topics,
        listed once by the caller) saves a metadata request per topic."""
        current = (target_topics if target_topics is not None else list_topics(self._target)).get(remote_topic)
        created = False
        if current is None:
            configs = replicable_configs(
                describe_topic_configs(self._source, [source_topic]).get(source_topic, {}), self._exclude
            )
            created = ensure_topic(self._target, remote_topic, partitions, self._replication_factor, configs)
            if created:
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
        return created


# ---------------------------------------------------------------------------------------------------------------
# The status probe on real clusters
# ---------------------------------------------------------------------------------------------------------------
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
        for topic, n in topics.items():
            try:
                done = {tp.partition: tp.offset for tp in committed[topic].result(self._timeout).topic_partitions}
                lag = 0
                for p in range(n):
                    tp = TopicPartition(topic, p)
                    low = earliest[tp].result(self._timeout).offset
                    high = latest[tp].result(self._timeout).offset
                    # Nothing committed yet: the mapping starts at the log start; records below it are gone anyway.
                    lag += max(0, high - max(done.get(p, -1), low))
                result[topic] = lag
            except (KafkaException, OSError) as e:
                log.info("lag of %s unknown: %s", topic, e)
                result[topic] = None
        return result

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
        conf = consumer_config(config, target, (source, target), group_id="srm-control-status", resolver=self._resolver)
        conf.update(self._QUIET)
        consumer = build(Consumer, conf, config, target, "consumer")
        out: list[tuple[bytes | None, bytes | None, int]] = []
        try:
            ends: dict[int, int] = {}
            assignment = []
            for p in range(info.partitions):
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=self._timeout)
                if high > low:
                    ends[p] = high
                    assignment.append(TopicPartition(topic, p, max(low, high - last)))
            if not assignment:
                return out
            consumer.assign(assignment)
            deadline = time.monotonic() + self._timeout
            while ends and time.monotonic() < deadline:
                for m in consumer.consume(500, timeout=0.5):
                    if m.error() is None:
                        out.append((m.key(), m.value(), m.timestamp()[1]))
                    if m.offset() is not None and m.offset() + 1 >= ends.get(m.partition(), 0):
                        ends.pop(m.partition(), None)
                positions = consumer.position([TopicPartition(topic, p) for p in ends])
                for tp in positions:
                    if tp.offset >= ends.get(tp.partition, 0):
                        ends.pop(tp.partition, None)
        finally:
            consumer.close()
        return out


# ---------------------------------------------------------------------------------------------------------------
# Per-container client cache
# ---------------------------------------------------------------------------------------------------------------
class KafkaClients:
    """Clients created once per container (per process) and reused across invocations; rebuilt only when their
    configuration changes or after a fatal error."""

    def __init__(self, resolver: SecretResolver = default_secret_resolver) -> None:
        self.resolver = resolver
        self._lock = threading.Lock()
        self._clients: dict[tuple[str, str, str], tuple[dict[str, str], Any]] = {}

    def _get(self, kind: type, role: str, alias: str, conf: dict[str, str], config: SrmConfig, tag: str) -> Any:
        key = (kind.__name__, alias, tag)
        with self._lock:
            cached = self._clients.get(key)
            if cached is not None and cached[0] == conf:
                return cached[1]
            client = build(kind, conf, config, alias, role)
            self._clients[key] = (conf, client)
            return client

    def producer(
        self, config: SrmConfig, alias: str, flow: tuple[str, str] | None, *, delivery_timeout_ms: int, tag: str = ""
    ) -> Producer:
        conf = producer_config(config, alias, flow, delivery_timeout_ms=delivery_timeout_ms, resolver=self.resolver)
        return self._get(Producer, "producer", alias, conf, config, tag)

    def admin(self, config: SrmConfig, alias: str, flow: tuple[str, str] | None = None) -> AdminClient:
        conf = admin_config(config, alias, flow, resolver=self.resolver)
        return self._get(AdminClient, "admin", alias, conf, config, "")

    def discard_producer(self, alias: str, tag: str = "") -> None:
        """Drop a producer after a fatal error so the next invocation starts a fresh idempotent session."""
        with self._lock:
            self._clients.pop((Producer.__name__, alias, tag), None)
