"""Kafka adapter: client settings for librdkafka, client construction, and the admin calls srm needs.

Configuration arrives with MM2's Java client names; :func:`librdkafka_config` translates the ones librdkafka
spells differently (``sasl.jaas.config``, PEM truststores) and resolves secret references (``${env:NAME}``,
``${file:/path:key}``, ``${secretsmanager:id[:json-key]}``) at the last moment, so secrets never sit in the
config table or in logs.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
)

from srm.config.secrets import SecretResolver, default_secret_resolver, resolve_refs
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.flow import Flow

__all__ = [
    "Acks",
    "KafkaClients",
    "admin_config",
    "consumer_config",
    "librdkafka_config",
    "produce",
    "produce_and_wait",
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
    flow: Flow | None,
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
        # A bound on memory, not on throughput: an invocation holds one event (at most 6 MB of payload) in the
        # queue, and a full queue makes produce wait for acknowledgements (or for them to time out).
        "queue.buffering.max.messages": "200000",
        "queue.buffering.max.kbytes": "131072",
        "message.max.bytes": "10485760",
        "message.timeout.ms": str(delivery_timeout_ms),  # Java's delivery.timeout.ms
    }
    # A record for a deleted topic must not make a broker with auto.create.topics.enable create it (with its
    # default partition count): it times out, and the mirror recreates the topic as the source has it.
    enforced = {"enable.idempotence": "true", "acks": "all", "allow.auto.create.topics": "false"}
    if base.get("acks") == "-1":
        base["acks"] = "all"
    return _with(base, defaults, enforced, f"{alias} producer")


def consumer_config(
    config: SrmConfig,
    alias: str,
    flow: Flow | None,
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
    flow: Flow | None = None,
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
# Producing and waiting for the acknowledgements
# ---------------------------------------------------------------------------------------------------------------
class Acks:
    """Delivery reports of records produced together: settled when every record is acknowledged or failed. The
    first failure is kept, with how many records were acknowledged before it."""

    __slots__ = ("error", "error_offset", "expected", "offsets")

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.offsets: list[int] = []
        self.error: KafkaError | None = None
        self.error_offset = -1

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.offsets.append(msg.offset())
        elif self.error is None:
            self.error = err
            self.error_offset = len(self.offsets)
            self.expected -= 1  # a failed record is settled too
        else:
            self.expected -= 1

    @property
    def settled(self) -> bool:
        return len(self.offsets) >= self.expected

    @property
    def unsettled(self) -> int:
        return max(0, self.expected - len(self.offsets))

    def wait(self, producer: Producer, timeout_s: float) -> bool:
        """Flush until every record is settled or ``timeout_s`` has passed; True when all were acknowledged."""
        deadline = time.monotonic() + timeout_s
        while not self.settled and time.monotonic() < deadline:
            producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))  # sends at once, without linger.ms
        return self.settled and self.error is None


Record = tuple[bytes | None, bytes | None, int | None]  # key, value, timestamp (None: now)


def produce(producer: Producer, topic: str, records: Iterable[Record], *, partition: int = 0) -> Acks:
    """Produce records to one partition, waiting out a full local queue; their reports arrive in the result."""
    batch = list(records)
    acks = Acks(len(batch))
    for key, value, timestamp in batch:
        while True:
            try:
                producer.produce(
                    topic, value, key, partition=partition, timestamp=timestamp or 0, on_delivery=acks.on_delivery
                )
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
    return acks


def produce_and_wait(producer: Producer, topic: str, records: Iterable[Record], timeout_s: float) -> Acks:
    """:func:`produce`, then wait up to ``timeout_s`` for the reports; the caller reads ``error`` and ``settled``."""
    acks = produce(producer, topic, records)
    acks.wait(producer, timeout_s)
    return acks


# ---------------------------------------------------------------------------------------------------------------
# Per-container client cache
# ---------------------------------------------------------------------------------------------------------------
class _Producer(Producer):
    """A producer that remembers its fatal error. librdkafka raises it once, from whichever poll or flush serves it
    (a broker that lost the idempotent producer's state answers OUT_OF_ORDER_SEQUENCE_NUMBER, as one restarted
    without it does); from then on every produce fails with ``_FATAL``, so the cache must build a new one."""

    fatal_error: KafkaError | None = None

    def poll(self, timeout: float = -1) -> int:
        try:
            return super().poll(timeout)
        except Exception as e:
            self._note(e)
            raise

    def flush(self, timeout: float = -1) -> int:
        try:
            return super().flush(timeout)
        except Exception as e:
            self._note(e)
            raise

    def _note(self, e: BaseException | None) -> None:
        # Raised while a delivery callback runs, the error reaches the caller wrapped in a SystemError.
        for _ in range(3):
            if e is None:
                return
            err = e.args[0] if isinstance(e, KafkaException) and e.args else None
            if isinstance(err, KafkaError) and (err.fatal() or err.code() == KafkaError._FATAL):
                self.fatal_error = err
                return
            e = e.__cause__ or e.__context__

    def unusable(self) -> bool:
        """Whether a fatal error was raised, or is waiting to be served (a failed produce call served nothing)."""
        if self.fatal_error is None:
            with contextlib.suppress(Exception):  # noted by poll when fatal; the rest is for the next caller
                self.poll(0)
        return self.fatal_error is not None


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
                if not (isinstance(cached[1], _Producer) and cached[1].unusable()):
                    return cached[1]
                log.warning(
                    "producer to %s%s failed for good (%s); a new one takes over",
                    alias,
                    f" ({tag})" if tag else "",
                    cached[1].fatal_error.str() if cached[1].fatal_error else "fatal error",
                )
            client = build(kind, conf, config, alias, role)
            self._clients[key] = (conf, client)
            return client

    def producer(
        self, config: SrmConfig, alias: str, flow: Flow | None, *, delivery_timeout_ms: int, tag: str = ""
    ) -> Producer:
        conf = producer_config(config, alias, flow, delivery_timeout_ms=delivery_timeout_ms, resolver=self.resolver)
        return self._get(_Producer, "producer", alias, conf, config, tag)

    def admin(self, config: SrmConfig, alias: str, flow: Flow | None = None) -> AdminClient:
        conf = admin_config(config, alias, flow, resolver=self.resolver)
        return self._get(AdminClient, "admin", alias, conf, config, "")

    def discard_producer(self, alias: str, tag: str = "") -> None:
        """Drop a producer after a fatal error so the next invocation starts a fresh idempotent session."""
        with self._lock:
            self._clients.pop((_Producer.__name__, alias, tag), None)
