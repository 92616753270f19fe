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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
)

from srm.config.secrets import MASK, SecretResolver, default_secret_resolver, is_sensitive, resolve_refs
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.msk_iam import is_iam_jaas, signer_from_jaas

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
# Read by the translation below rather than passed on.
_TRANSLATED = frozenset(
    {
        "sasl.jaas.config",
        "sasl.mechanism",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.type",
        "ssl.keystore.type",
    }
)
# The Java client's in-memory PEM settings and librdkafka's names for them (``${secretsmanager:…}`` values).
_JAVA_PEM = {
    "ssl.keystore.key": "ssl.key.pem",
    "ssl.keystore.certificate.chain": "ssl.certificate.pem",
    "ssl.truststore.certificates": "ssl.ca.pem",
}


def librdkafka_config(
    settings: Mapping[str, tuple[str, str]],
    config: SrmConfig,
    resolver: SecretResolver = default_secret_resolver,
) -> dict[str, Any]:
    """Translate resolved client settings (``{key: (value, defining key)}``) into a librdkafka config; MSK IAM
    settings become OAUTHBEARER with an ``oauth_cb`` (:class:`MskIamSigner`), the one value that is not a string."""
    out: dict[str, Any] = {}
    values: dict[str, str] = {}
    for key, (raw, defined_by) in settings.items():
        try:
            values[key] = resolve_refs(raw, resolver)
        except ConfigError as e:
            raise ConfigError(
                f"{defined_by}: {e}", key=defined_by, origin=config.properties.origin(defined_by)
            ) from None

    def error(key: str, message: str) -> ConfigError:
        defined_by = settings[key][1] if key in settings else key
        return ConfigError(f"{defined_by}: {message}", key=defined_by, origin=config.properties.origin(defined_by))

    for key, value in values.items():
        if key in _TRANSLATED:
            continue
        if key == "ssl.endpoint.identification.algorithm":
            out[key] = value or "none"
        elif key in _JAVA_PEM:
            out[_JAVA_PEM[key]] = value
        elif key not in _JAVA_ONLY:
            out[key] = value
    mechanism = values.get("sasl.mechanism", "").strip().upper()
    jaas = values.get("sasl.jaas.config")
    if jaas is not None and is_iam_jaas(jaas):
        if mechanism not in ("AWS_MSK_IAM", "OAUTHBEARER"):
            raise error("sasl.jaas.config", "the MSK IAM login module needs sasl.mechanism=AWS_MSK_IAM or OAUTHBEARER")
        if values.get("security.protocol", "").strip().upper() != "SASL_SSL":
            raise error("sasl.jaas.config", "MSK IAM authentication needs security.protocol=SASL_SSL")
        try:
            out["oauth_cb"] = signer_from_jaas(jaas, values.get("bootstrap.servers"), "")
        except ValueError as e:
            raise error("sasl.jaas.config", str(e).lstrip(": ")) from None
        out["sasl.mechanism"] = "OAUTHBEARER"
    elif mechanism == "AWS_MSK_IAM":
        raise error(
            "sasl.mechanism",
            "AWS_MSK_IAM needs sasl.jaas.config = software.amazon.msk.auth.iam.IAMLoginModule required;",
        )
    else:
        if "sasl.mechanism" in values:
            out["sasl.mechanism"] = values["sasl.mechanism"]
        if jaas is not None:
            _jaas_credentials(jaas, out, error)
    if "ssl.truststore.location" in values:
        _truststore(values, out, error)
    if "ssl.keystore.location" in values:
        _keystore(values, out, error)
    return out


def _jaas_credentials(jaas: str, out: dict[str, Any], error: Callable[[str, str], ConfigError]) -> None:
    """PLAIN/SCRAM credentials of a Java login module line."""
    creds = dict(_JAAS_KV.findall(jaas))
    if "username" not in creds or "password" not in creds:
        raise error("sasl.jaas.config", 'expected username="…" password="…" in sasl.jaas.config')
    out.setdefault("sasl.username", creds["username"])
    out.setdefault("sasl.password", creds["password"])


def _store_type(values: Mapping[str, str], kind: str, path: str) -> str:
    """A Java store's type: its ``ssl.<kind>.type``, else told by the file name (Java's default is JKS)."""
    declared = values.get(f"ssl.{kind}.type", "").strip().upper()
    if declared:
        return "PKCS12" if declared == "P12" else declared
    lower = path.lower()
    if lower.endswith((".pem", ".crt", ".cer")):
        return "PEM"
    if lower.endswith((".p12", ".pfx")):
        return "PKCS12"
    return "JKS"


def _truststore(values: Mapping[str, str], out: dict[str, Any], error: Callable[[str, str], ConfigError]) -> None:
    path = values["ssl.truststore.location"]
    kind = _store_type(values, "truststore", path)
    if kind == "PEM":
        out.setdefault("ssl.ca.location", path)
    elif kind == "PKCS12":
        password = values.get("ssl.truststore.password")
        try:
            out.setdefault("ssl.ca.pem", pkcs12_certificates_pem(path, password))
        except (OSError, ValueError) as e:
            reason = e.strerror if isinstance(e, OSError) else "wrong ssl.truststore.password or not a PKCS#12 file"
            raise error(
                "ssl.truststore.location",
                f"cannot read the PKCS#12 truststore {path} ({reason}); or convert it to PEM yourself: "
                f"openssl pkcs12 -in {path} -nokeys -out ca.pem, then set ssl.truststore.location=ca.pem",
            ) from None
    else:
        raise error(
            "ssl.truststore.location",
            f"librdkafka cannot read {kind} truststores; convert it to PEM: keytool -importkeystore -srckeystore "
            f"{path} -destkeystore truststore.p12 -deststoretype PKCS12 && openssl pkcs12 -in truststore.p12 -nokeys "
            "-out ca.pem, then set ssl.truststore.location=ca.pem",
        )


def _keystore(values: Mapping[str, str], out: dict[str, Any], error: Callable[[str, str], ConfigError]) -> None:
    path = values["ssl.keystore.location"]
    kind = _store_type(values, "keystore", path)
    if kind == "PEM":  # one file with the key and the certificate chain
        out.pop("ssl.keystore.location", None)
        out.setdefault("ssl.key.location", path)
        out.setdefault("ssl.certificate.location", path)
    elif kind != "PKCS12":  # librdkafka reads PKCS#12 keystores itself (ssl.keystore.location/.password)
        raise error(
            "ssl.keystore.location",
            f"librdkafka reads PKCS#12 or PEM keystores only; convert the {kind} keystore: keytool -importkeystore "
            f"-srckeystore {path} -destkeystore keystore.p12 -deststoretype PKCS12, then set "
            "ssl.keystore.location=keystore.p12",
        )


def pkcs12_certificates_pem(path: str, password: str | None) -> str:
    """The certificates of a PKCS#12 file as PEM (a Java truststore converted for ``ssl.ca.pem``)."""
    from cryptography.hazmat.primitives.serialization import Encoding, pkcs12

    with open(path, "rb") as f:
        data = f.read()
    store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    certs = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.insert(0, store.cert.certificate)
    if not certs:
        raise ValueError("no certificates")
    return "".join(c.public_bytes(Encoding.PEM).decode() for c in certs)


def _with(base: dict[str, Any], defaults: Mapping[str, str], enforced: Mapping[str, str], where: str) -> dict[str, Any]:
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
) -> dict[str, Any]:
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
) -> dict[str, Any]:
    """A consumer that commits only what it is told to and skips aborted transactions."""
    base = librdkafka_config(config.client(alias, "consumer", flow), config, resolver)
    defaults = {
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        "fetch.max.bytes": "52428800",
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
) -> dict[str, Any]:
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


def build(kind: type, conf: dict[str, Any], config: SrmConfig, alias: str, role: str) -> Any:
    """Construct a client, turning librdkafka's config complaints into a ConfigError naming the setting; its log
    lines go to :data:`CLIENT_LOG`."""
    try:
        client = kind({**conf, "logger": CLIENT_LOG})
        if "oauth_cb" in conf and hasattr(client, "poll"):
            client.poll(0)  # confluent-kafka before 2.13 signs the first token only from poll
        return client
    except (KafkaException, ValueError, TypeError) as e:
        message = str(e.args[0] if e.args else e)
        for key, value in conf.items():  # librdkafka quotes an invalid value: never a secret's
            if is_sensitive(key) and isinstance(value, str) and value:
                message = message.replace(value, MASK)
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


def produce(
    producer: Producer,
    topic: str,
    records: Iterable[Record],
    *,
    partition: int = 0,
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> Acks:
    """Produce records to one partition (each with ``headers``), waiting out a full local queue; their reports
    arrive in the result."""
    batch = list(records)
    acks = Acks(len(batch))
    for key, value, timestamp in batch:
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    key,
                    partition=partition,
                    timestamp=timestamp or 0,
                    on_delivery=acks.on_delivery,
                    headers=headers,
                )
                break
            except BufferError:
                producer.poll(0.05)  # local queue full: let deliveries drain
    return acks


def produce_and_wait(
    producer: Producer,
    topic: str,
    records: Iterable[Record],
    timeout_s: float,
    headers: list[tuple[str, str | bytes | None]] | None = None,
) -> Acks:
    """:func:`produce`, then wait up to ``timeout_s`` for the reports; the caller reads ``error`` and ``settled``."""
    acks = produce(producer, topic, records, headers=headers)
    acks.wait(producer, timeout_s)
    return acks


# ---------------------------------------------------------------------------------------------------------------
# Per-container client cache
# ---------------------------------------------------------------------------------------------------------------
class _Producer(Producer):
    """A producer that remembers its fatal error. librdkafka raises it once, from whichever poll or flush serves it
    (e.g. OUT_OF_ORDER_SEQUENCE_NUMBER from a broker that lost acknowledged data in an unclean leader election); from
    then on every produce fails with ``_FATAL``, so the cache must build a new one."""

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
        self._clients: dict[tuple[str, str, str], tuple[dict[str, Any], Any]] = {}

    def _get(self, kind: type, role: str, alias: str, conf: dict[str, Any], config: SrmConfig, tag: str) -> Any:
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
