"""The local DynamoDB of ``srm run``, shared by its worker processes and by ``srm-control --local`` (the URL is
written to ``.srm-local/store.url``).

The tables live in a compacted topic on one of the configuration's clusters (:mod:`srm.local.tables`), served by
this process on 127.0.0.1 only. Every node of an ``srm run`` cluster reads and writes the same tables, and they
survive any node, a restart, and a crash of a node's whole process group (SIGKILL): a write is acknowledged once the
cluster's in-sync replicas have it. Any other DynamoDB (LocalStack, a DynamoDB Local run by the user) is reached with
``srm run --endpoint-url`` instead: no store is started then.

One ``srm run`` per state directory: a second one is refused (a lock file). A directory holding the tables of
DynamoDB Local, which older versions ran (``--store durable``, under ``.srm-local/dynamodb/``), is refused with how to
migrate it (:func:`check_state_dir`): its state is never silently left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from srm.errors import PermanentError, RetriableError

__all__ = [
    "STATE_DIR",
    "KafkaStoreSpec",
    "LocalStore",
    "RetiredStoreError",
    "StoreError",
    "check_state_dir",
    "free_port",
    "known_store_cluster",
    "local_store_url",
]

STATE_DIR = Path(".srm-local")
_RETIRED_DYNAMODB_DIR = "dynamodb"  # where --store durable (DynamoDB Local, SQLite) kept its tables, in STATE_DIR


class StoreError(RetriableError, RuntimeError):
    """The local store cannot be started; the message says what to do."""


class RetiredStoreError(PermanentError, RuntimeError):
    """The state directory holds the tables of a store srm no longer runs; the message says how to migrate them."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


def check_state_dir(state_dir: Path = STATE_DIR) -> None:
    """Refuse a state directory whose state is in DynamoDB Local's files (``--store durable`` of older versions),
    saying in one line how to keep it (DynamoDB Local run by the user, given as ``--endpoint-url``) or drop it."""
    data = state_dir / _RETIRED_DYNAMODB_DIR
    try:
        kept = any(p.is_file() for p in data.rglob("*"))
    except OSError:
        kept = False
    if not kept:
        return
    where = data.resolve()
    raise RetiredStoreError(
        f"{where} holds the state of the DynamoDB Local store (--store durable), which srm no longer runs: to keep "
        f"it, run DynamoDB Local on it yourself (java -jar DynamoDBLocal.jar -sharedDb -dbPath {where} -port 8000) "
        f"and start srm run with --endpoint-url http://127.0.0.1:8000; to start afresh with the state in Kafka, "
        f"remove {where}",
        path=where,
    )


def free_port() -> int:
    """A loopback port free now, for a server about to start. Picked below the kernel's ephemeral range: an outgoing
    connection takes its local port from that range, and could take a port picked there before the server binds it
    (a broker then fails to start with "Address already in use")."""
    low = _ephemeral_ports_start()
    for _ in range(100):
        port = random.randrange(_LOWEST_PICKED_PORT, low) if low > _LOWEST_PICKED_PORT else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError(f"no free loopback port between {_LOWEST_PICKED_PORT} and {low}")


_LOWEST_PICKED_PORT = 10_000  # above the ports well-known services listen on


def _ephemeral_ports_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default (macOS starts at 49,152: a lower bound is safe there too)


def known_store_cluster(topic: str, state_dir: Path = STATE_DIR) -> str | None:
    """The cluster this directory's node found the shared state (``topic``) on before, if any."""
    try:
        alias, _, known = (state_dir / "store.cluster").read_text().strip().partition(" ")
    except OSError:
        return None
    return alias if alias and known == topic else None


def local_store_url(state_dir: Path = STATE_DIR) -> str | None:
    """The endpoint of a running ``srm run``'s store, if one is running from this directory."""
    try:
        return (state_dir / "store.url").read_text().strip() or None
    except OSError:
        return None


# ---------------------------------------------------------------------------------------------------------------
# The store
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KafkaStoreSpec:
    """Where the ``kafka`` store keeps its tables: the topic, and librdkafka settings for its cluster."""

    alias: str
    topic: str
    consumer: dict[str, Any]
    producer: dict[str, Any]
    metrics_topic: str | None = None  # the raw metrics' topic beside it, if any


class LocalStore:
    """A DynamoDB endpoint on 127.0.0.1 for one ``srm run``: the tables of a compacted topic (the module docstring)."""

    def __init__(self, kafka: KafkaStoreSpec, port: int = 0, state_dir: Path = STATE_DIR) -> None:
        self.kafka = kafka
        self.port = port or free_port()
        self.state_dir = state_dir
        self._tables: Any = None
        self._server: Any = None
        self._lock: IO[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> str:
        """Serve the tables (they answer once the topic was read: :meth:`wait_ready`); returns the endpoint."""
        from srm.local.tables.replicated import ReplicatedTables
        from srm.local.tables.server import TablesServer

        os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            self._tables = ReplicatedTables(self.kafka.topic, self.kafka.consumer, self.kafka.producer)
            self._tables.start(timeout=None)  # answers once it has read the topic (see wait_ready)
            self._server = TablesServer(self._tables, self.port)
            self._server.start()
            (self.state_dir / "store.cluster").write_text(f"{self.kafka.alias} {self.kafka.topic}\n")
        except BaseException:
            self.stop()
            raise
        (self.state_dir / "store.url").write_text(self.url + "\n")
        return self.url

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self._tables is not None:
            self._tables.stop()
            self._tables = None
        with contextlib.suppress(OSError):
            (self.state_dir / "store.url").unlink()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def _take_lock(self) -> None:
        lock = open(self.state_dir / "store.lock", "w")  # noqa: SIM115 - held until stop()
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise StoreError(
                f"another srm run is using {self.state_dir.resolve()}: stop it, or start this one in another directory"
            ) from None
        self._lock = lock

    def wait_ready(self, timeout: float) -> bool:
        """Whether the store answers (once it has read its topic) within ``timeout``."""
        if self._tables is None:
            return False
        return bool(self._tables.wait_ready(timeout))

    def tables_read(self) -> list[str]:
        """The tables the store holds."""
        return [] if self._tables is None else sorted(self._tables.tables.definitions())

    def problem(self) -> str:
        """Why the store does not answer yet, as far as known."""
        return str(getattr(self._tables, "_problem", "")) or "its topic is being read"
