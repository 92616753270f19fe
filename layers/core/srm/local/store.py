"""Where ``srm run`` keeps what it shares: the state directory (``.srm-local``) and the cluster holding the state.

The state, the configuration and the nodes of an ``srm run`` cluster live in its state topic, the aggregated metrics
in a topic beside it, on one of the configuration's clusters (:mod:`srm.local.nodes` finds it); every process reads
and writes them there itself (:mod:`srm.app.stores`). The directory notes which cluster that is
(``store.cluster``) and which configuration the node runs (``config.path``), so that ``srm-control --local`` reaches
the same state, running or not. Any DynamoDB (LocalStack, a DynamoDB Local run by the user) is used instead with
``srm run --endpoint-url``.

One ``srm run`` per state directory: a second one is refused (a lock file). A directory holding the tables of
DynamoDB Local, which older versions ran (``--store durable``, under ``.srm-local/dynamodb/``), is refused with how to
migrate it (:func:`check_state_dir`): its state is never silently left behind.
"""

from __future__ import annotations

import fcntl
import random
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from srm.config.nodes import legacy_store_topic, state_topic
from srm.errors import PermanentError, RetriableError

__all__ = [
    "STATE_DIR",
    "KafkaStoreSpec",
    "RetiredStoreError",
    "StoreError",
    "check_state_dir",
    "free_port",
    "known_store_cluster",
    "lock_state_dir",
    "note_store_cluster",
]

STATE_DIR = Path(".srm-local")
_RETIRED_DYNAMODB_DIR = "dynamodb"  # where --store durable (DynamoDB Local, SQLite) kept its tables, in STATE_DIR


class StoreError(RetriableError, RuntimeError):
    """The local runtime's store cannot be used; the message says what to do."""


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


def known_store_cluster(group_id: str, state_dir: Path = STATE_DIR) -> str | None:
    """The cluster this directory's node found the shared state of ``group_id`` on before, if any (noted with the
    state topic's name, or the store topic's of the layout before it)."""
    try:
        alias, _, known = (state_dir / "store.cluster").read_text().strip().partition(" ")
    except OSError:
        return None
    return alias if alias and known in (state_topic(group_id), legacy_store_topic(group_id)) else None


@dataclass(frozen=True)
class KafkaStoreSpec:
    """Where an ``srm run`` cluster keeps its state: the cluster, librdkafka settings for it, and the topics."""

    alias: str
    consumer: dict[str, Any]
    producer: dict[str, Any]
    state_topic: str
    metrics_topic: str | None = None  # the raw metric records of every node's workers, if metrics are on
    metrics_store_topic: str | None = None  # the aggregated metrics


def note_store_cluster(alias: str, topic: str, state_dir: Path = STATE_DIR) -> None:
    (state_dir / "store.cluster").write_text(f"{alias} {topic}\n")


def lock_state_dir(state_dir: Path = STATE_DIR) -> IO[str]:
    """Hold the directory for this ``srm run`` (until the returned file is closed); StoreError when another holds
    it."""
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = open(state_dir / "store.lock", "w")  # noqa: SIM115 - held until the run stops
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.close()
        raise StoreError(
            f"another srm run is using {state_dir.resolve()}: stop it, or start this one in another directory"
        ) from None
    return lock
