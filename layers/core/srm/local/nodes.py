"""A node of an ``srm run`` cluster: its id, where the cluster's state is, and its presence in that state.

A node's id (``srm run --node-id``) is by default derived from the host and the run directory, so a restarted node
is the same node: it takes its partitions back at once (its id is its consumers' ``group.instance.id``). Two running
nodes cannot share an id: the second refuses to start, naming the first (:meth:`NodePresence.claim`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from srm.config.nodes import NODES_STORE_CLUSTER, legacy_store_topic
from srm.config.secrets import SecretResolver
from srm.config.settings import SrmConfig
from srm.errors import ConfigError, PermanentError
from srm.kafka.admin import ensure_topic, list_topics
from srm.kafka.clients import admin_config, build, consumer_config, producer_config
from srm.kafka.metrics_store import metrics_store_topic
from srm.local.store import KafkaStoreSpec
from srm.state import StateError
from srm.state.nodes import MemberRecord, NodeRecord, Nodes

__all__ = [
    "NodeFiles",
    "NodeIdInUseError",
    "NodePresence",
    "Noted",
    "check_node_id",
    "default_node_id",
    "ensure_store_topics",
    "kafka_store_spec",
    "locate_store",
    "metrics_topic",
]

log = logging.getLogger(__name__)

_NODE_ID_RE = re.compile(r"^[A-Za-z0-9._\-]{1,200}$")
HEARTBEAT_S = 2.0
# The state's topic: compacted, in segments small enough to be compacted within the hour.
_STORE_TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.ms": "3600000", "min.cleanable.dirty.ratio": "0.2"}
_UNREACHABLE = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
# Raw metric records: kept two days (the aggregation re-reads the hours that got new records), in hourly segments.
_METRICS_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": "172800000", "segment.ms": "3600000"}


class NodeIdInUseError(PermanentError, RuntimeError):
    """Another running node has this node's id."""


def default_node_id(state_dir: Path) -> str:
    """``<host>-<digest of the run directory>``: the same for every start in one directory of one host."""
    host = re.sub(r"[^A-Za-z0-9._\-]", "-", socket.gethostname())[:120].strip("-.") or "node"
    digest = hashlib.sha256(str(state_dir.resolve().parent).encode()).hexdigest()[:8]
    return f"{host}-{digest}"


def check_node_id(node_id: str) -> str:
    if not _NODE_ID_RE.match(node_id):
        raise ConfigError(
            f"--node-id: {node_id!r} is not a valid node id (letters, digits, '.', '_', '-'; at most 200)"
        )
    return node_id


def locate_store(
    topic: str, aliases: Iterable[str], topics_of: Callable[[str], Iterable[str]], *, legacy: str | None = None
) -> tuple[str | None, list[str]]:
    """The cluster holding ``topic`` (or, of an older layout, ``legacy``; None: none does), and the clusters that
    answered. A cluster that does not answer is passed over; the state on two clusters is an error (two states: which
    one is meant cannot be guessed)."""
    found, answered = [], []
    for alias in aliases:
        try:
            names = set(topics_of(alias))
        except Exception as e:  # the topic is looked for where it can be (the probe at start says who does not answer)
            log.debug("cannot look for the state (%s) on cluster %s: %s", topic, alias, e)
            continue
        answered.append(alias)
        if topic in names or (legacy is not None and legacy in names):
            found.append(alias)
    if len(found) > 1:
        raise ConfigError(
            f"the state topic {topic} exists on clusters {', '.join(found)}: set nodes.store.cluster to the one "
            "to use (or delete the other)"
        )
    return (found[0] if found else None), answered


def metrics_topic(group_id: str) -> str:
    """Where the nodes' workers send their raw metric records (beside the state)."""
    return f"srm-metrics.{group_id}.internal"


def kafka_store_spec(
    config: SrmConfig,
    resolver: SecretResolver,
    *,
    create: bool = True,
    metrics: bool = False,
    known: str | None = None,
    topics_of: Callable[[str], Iterable[str]] | None = None,
) -> KafkaStoreSpec:
    """Where the cluster's shared state is, its topics created there if missing (``create``; else a missing one is
    an error), the raw metrics' topic beside it with ``metrics``.

    The cluster: ``nodes.store.cluster``; else ``known`` (where this node found it before); else the one of the
    flows' clusters that holds the topic (:func:`locate_store`); else, for a new cluster of nodes, the first enabled
    flow's target — or, when that one does not answer, the first cluster that does (said in a warning). ``topics_of``
    gives a cluster's topics (raising when it does not answer) when they were just asked for: each is asked else."""
    nodes = config.nodes()
    topic = nodes.topic
    flows = config.enabled_flows() or list(config.flows)

    def admin(alias: str) -> AdminClient:
        conf = {**admin_config(config, alias, resolver=resolver), "log_level": "0"}
        return build(AdminClient, conf, config, alias, "admin")  # type: ignore[no-any-return]

    def topics(alias: str) -> Iterable[str]:
        return topics_of(alias) if topics_of else list_topics(admin(alias), timeout=10.0)

    default = nodes.default_store_cluster(flows) or sorted(config.clusters)[0]
    alias = nodes.store_cluster or (known if known in config.clusters else None)
    if alias is None:
        candidates = [default, *sorted({a for f in flows for a in f} - {default})]
        found, answered = locate_store(topic, candidates, topics, legacy=legacy_store_topic(nodes.group_id))
        alias = found or (default if default in answered or not answered else answered[0])
        if found is None and alias != default:
            log.warning(
                "the state of %s is kept on cluster %s: %s, the first flow's target, does not answer (set %s to "
                "choose)",
                nodes.group_id,
                alias,
                default,
                NODES_STORE_CLUSTER,
            )
    if create:
        ensure_store_topics(config, alias, admin, metrics=metrics)
    elif topic not in topics(alias):
        raise ConfigError(f"no state of {nodes.group_id} on cluster {alias} ({topic}): has srm run run there?")
    return KafkaStoreSpec(
        alias,
        consumer_config(config, alias, None, group_id="srm-state", resolver=resolver),
        producer_config(config, alias, None, delivery_timeout_ms=30_000, resolver=resolver),
        topic,
        metrics_topic(nodes.group_id) if metrics else None,
        metrics_store_topic(nodes.group_id),
    )


def ensure_store_topics(
    config: SrmConfig, alias: str, admin: Callable[[str], AdminClient], *, metrics: bool, warn: bool = True
) -> bool:
    """Create the state's topic and the aggregated metrics' (and the raw metrics') on ``alias`` if missing; False
    (warned, with ``warn``) when the cluster does not answer now."""
    nodes = config.nodes()
    flows = config.enabled_flows() or list(config.flows)
    rf = config.settings(*flows[0]).checkpoints_topic_replication_factor if flows else 3
    topics = {nodes.topic: _STORE_TOPIC_CONFIGS, metrics_store_topic(nodes.group_id): _STORE_TOPIC_CONFIGS}
    if metrics:
        topics[metrics_topic(nodes.group_id)] = _METRICS_TOPIC_CONFIGS
    level = logging.WARNING if warn else logging.DEBUG
    for name, configs in topics.items():
        try:
            if ensure_topic(admin(alias), name, 1, rf, configs, timeout=10.0):
                log.info("topic %s created on cluster %s", name, alias)
        except KafkaException as e:
            if e.args and getattr(e.args[0], "code", lambda: None)() in _UNREACHABLE:
                log.log(level, "cannot create %s on cluster %s now (it does not answer): %s", name, alias, e)
                return False
            raise ConfigError(f"cannot create the topic {name} on cluster {alias}: {e}") from None
        except Exception as e:
            log.log(level, "cannot create %s on cluster %s now: %s", name, alias, e)
            return False
    return True


class NodePresence:
    """This node's item in the shared state, claimed at start and refreshed every :data:`HEARTBEAT_S`."""

    def __init__(self, nodes: Nodes, node_id: str, run_dir: Path) -> None:
        now = _now_ms()
        self.nodes = nodes
        self.record = NodeRecord(
            node_id=node_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            run_dir=str(run_dir.resolve()),
            token=uuid.uuid4().hex,
            started_ms=now,
            seen_ms=now,
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def claim(self) -> None:
        """Write this node's item, unless another running node has its id. One in this directory on this host is
        a crashed earlier start of this node (a running one would hold the directory's lock)."""
        me = self.record
        other = self.nodes.nodes(consistent=True).get(me.node_id)
        if other is not None and other.alive(_now_ms()) and (other.host, other.run_dir) != (me.host, me.run_dir):
            seen = (_now_ms() - other.seen_ms) / 1000
            raise NodeIdInUseError(
                f"node id {me.node_id} is in use by a running node: pid {other.pid} on {other.host} in "
                f"{other.run_dir} (seen {seen:.0f}s ago); give this node another --node-id"
            )
        self.nodes.put_node(me)
        self._thread = threading.Thread(target=self._beat, name="node-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.record = NodeRecord(**{**self.record.__dict__, "seen_ms": _now_ms()})
                self.nodes.put_node(self.record)
            except StateError as e:
                log.warning("node %s: presence not refreshed (retried): %s", self.record.node_id, e)

    def leave(self) -> None:
        """A clean stop: the node's item goes (its members' expire with their consumers' sessions)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        try:
            self.nodes.delete_node(self.record.node_id)
        except StateError as e:
            log.warning("node %s: its item stays until it expires: %s", self.record.node_id, e)


class NodeFiles:
    """This node's own records, also kept as files in its state directory (``nodes/``): what ``srm-control --local
    status`` shows of the node while the cluster holding the shared state does not answer (a target region down,
    say). A file is replaced whole (written aside, then renamed): a reader never sees half of one."""

    def __init__(self, directory: Path, group: str) -> None:
        self.directory = directory
        self.group = group

    def _write(self, name: str, record: NodeRecord | MemberRecord) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        partial = self.directory / f".{name}.partial"
        partial.write_text(json.dumps(dataclasses.asdict(record)))
        partial.replace(self.directory / name)

    def _read(self, pattern: str) -> list[dict[str, object]]:
        found = []
        for path in sorted(self.directory.glob(pattern)):
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads(path.read_text()))
        return found

    def put_node(self, node: NodeRecord) -> None:
        self._write(f"node.{node.node_id}.json", node)

    def nodes(self, *, consistent: bool = False) -> dict[str, NodeRecord]:
        return {r["node_id"]: NodeRecord(**r) for r in self._read("node.*.json")}  # type: ignore[arg-type, misc]

    def delete_node(self, node_id: str) -> None:
        (self.directory / f"node.{node_id}.json").unlink(missing_ok=True)

    def put_member(self, member: MemberRecord) -> None:
        self._write(f"member.{member.source}->{member.target}.{member.node_id}.json", member)

    def members(self, source: str, target: str) -> dict[str, MemberRecord]:
        found = {}
        for r in self._read(f"member.{source}->{target}.*.json"):
            parts = {t: tuple(p) for t, p in r.pop("partitions").items()}  # type: ignore[attr-defined]
            found[str(r["node_id"])] = MemberRecord(**r, partitions=parts)  # type: ignore[arg-type]
        return found


class Noted:
    """The shared records (``shared``), each of this node's writes noted in its files (``files``) first."""

    def __init__(self, shared: Nodes, files: NodeFiles) -> None:
        self.shared = shared
        self.files = files
        self.group = shared.group

    def put_node(self, node: NodeRecord) -> None:
        self.files.put_node(node)
        self.shared.put_node(node)

    def nodes(self, *, consistent: bool = False) -> dict[str, NodeRecord]:
        return self.shared.nodes(consistent=consistent)

    def delete_node(self, node_id: str) -> None:
        self.files.delete_node(node_id)
        self.shared.delete_node(node_id)

    def put_member(self, member: MemberRecord) -> None:
        self.files.put_member(member)
        self.shared.put_member(member)

    def members(self, source: str, target: str) -> dict[str, MemberRecord]:
        return self.shared.members(source, target)


def _now_ms() -> int:
    return int(time.time() * 1000)
