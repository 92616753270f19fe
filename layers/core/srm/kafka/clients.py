"""Kafka adapter: each role's client config (producer, consumer, admin), client construction and the per-container
cache, and producing with delivery reports.

A role's config is its client settings translated for librdkafka (:func:`srm.kafka.librdkafka.librdkafka_config`,
which resolves secret references at the last moment), srm's defaults added and the settings that keep every record
(idempotence, ``acks=all``, manual commits) enforced.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
)

from srm.config.secrets import MASK, SecretResolver, default_secret_resolver, is_sensitive
from srm.config.settings import SrmConfig
from srm.errors import ConfigError
from srm.flow import Flow
from srm.kafka.librdkafka import librdkafka_config

__all__ = [
    "CLIENT_LOG",
    "Acks",
    "KafkaClients",
    "admin_config",
    "client_logging",
    "consumer_config",
    "produce",
    "produce_and_wait",
    "producer_config",
]

log = logging.getLogger(__name__)


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
    purpose: str | None = None,
) -> dict[str, Any]:
    """An idempotent, acks=all producer: every acknowledged record is durable and in order. ``purpose``: the
    producer's own settings layer (``heartbeats``), above the flow's."""
    base = librdkafka_config(config.client(alias, "producer", flow, purpose), config, resolver)
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
    return client_logging(_with(base, defaults, enforced, f"{alias} producer"))


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
    return client_logging(conf)


def admin_config(
    config: SrmConfig,
    alias: str,
    flow: Flow | None = None,
    resolver: SecretResolver = default_secret_resolver,
) -> dict[str, Any]:
    return client_logging(librdkafka_config(config.client(alias, "admin", flow), config, resolver))


class _ClientLogFilter(logging.Filter):
    """librdkafka's log lines as srm's: its ERR level a WARNING (a broker that does not answer is retried, not an
    error of srm's), and one line per facility and broker thread a minute — a refused connection is logged by every
    client several times a second — the next one saying how many were left out."""

    def __init__(self, seconds: float = 60.0) -> None:
        super().__init__()
        self.seconds = seconds
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # (facility, thread) → (shown at, left out since)
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        facility = str(args[0]) if args else ""
        text = str(args[2]) if len(args) > 2 else record.getMessage()
        thread = _THREAD.match(text)
        key = (facility, thread.group(1) if thread else re.sub(r"\d+", "#", text))
        now = time.monotonic()
        with self._lock:
            shown, left_out = self._last.get(key, (-self.seconds, 0))
            if now - shown < self.seconds:
                self._last[key] = (shown, left_out + 1)
                return False
            self._last[key] = (now, 0)
        if record.levelno > logging.WARNING:
            record.levelno, record.levelname = logging.WARNING, logging.getLevelName(logging.WARNING)
        if left_out:
            record.msg = f"{record.msg} ({left_out} more like it in the last {now - shown:.0f}s)"
        return True


_THREAD = re.compile(r"\[thrd:([^\]]*)\]")
# Where every client's librdkafka log lines go (instead of straight to stderr): :func:`client_logging`.
CLIENT_LOG = logging.getLogger("srm.kafka.client")
CLIENT_LOG.addFilter(_ClientLogFilter())


def client_logging(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with librdkafka's log lines routed to :data:`CLIENT_LOG`; they are served by the client's poll
    (flush, consume), so a client nobody polls keeps them queued: its owner polls it now and then, or sets
    ``log_level`` 0."""
    return {**conf, "logger": CLIENT_LOG}


def build(kind: type, conf: dict[str, Any], config: SrmConfig, alias: str, role: str) -> Any:
    """Construct a client, turning librdkafka's config complaints into a ConfigError naming the setting."""
    try:
        client = kind(client_logging(conf))
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

    def withdraw(self, count: int) -> None:
        """``count`` of the records were never handed to the producer: no report of theirs is awaited."""
        self.expected -= count

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
        with self._noting_fatal():
            return super().poll(timeout)

    def flush(self, timeout: float = -1) -> int:
        with self._noting_fatal():
            return super().flush(timeout)

    @contextlib.contextmanager
    def _noting_fatal(self) -> Iterator[None]:
        """Whatever the call raises is raised on, its fatal error noted first."""
        try:
            yield
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
                if isinstance(cached[1], AdminClient):
                    cached[1].poll(0)  # its log lines wait for a poll, and its users never poll it
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
        self,
        config: SrmConfig,
        alias: str,
        flow: Flow | None,
        *,
        delivery_timeout_ms: int,
        tag: str = "",
        purpose: str | None = None,
    ) -> Producer:
        """A cached producer of ``alias``, one per ``tag``; ``purpose``: its own settings layer (``heartbeats``)."""
        conf = producer_config(
            config, alias, flow, delivery_timeout_ms=delivery_timeout_ms, resolver=self.resolver, purpose=purpose
        )
        return self._get(_Producer, "producer", alias, conf, config, tag)

    def admin(self, config: SrmConfig, alias: str, flow: Flow | None = None) -> AdminClient:
        conf = admin_config(config, alias, flow, resolver=self.resolver)
        return self._get(AdminClient, "admin", alias, conf, config, "")

    def discard_producer(self, alias: str, tag: str = "") -> None:
        """Drop a producer after a fatal error so the next invocation starts a fresh idempotent session."""
        with self._lock:
            self._clients.pop((_Producer.__name__, alias, tag), None)
