"""Where a Kafka Connect cluster keeps the source offsets of a flow's ``MirrorSourceConnector``: what ``srm takeover
--connectors`` reads to start each partition where the connector stood.

Connect keeps every source connector's offsets in one compacted topic, its workers' ``offset.storage.topic``, on the
cluster of their ``bootstrap.servers`` (Connect-based replication puts it on the flow's target). The worker config is
a ``connect-distributed.properties`` or a Strimzi / CSM Operator ``KafkaConnect`` resource (``spec.bootstrapServers``,
``spec.config``). Without one, the topic is looked for on the target under the documented defaults, in this order:
``connect-offsets`` (Apache Kafka's ``config/connect-distributed.properties``) and ``connect-cluster-offsets``
(Strimzi's, hence CSM Operator's, default for a ``KafkaConnect`` resource that names none). A Connect worker has no
default of its own: ``offset.storage.topic`` is required.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from srm.config.connectors import endpoints, source_connector_name
from srm.config.parsing import Properties, as_text, decode_text, parse_properties_text
from srm.config.settings import SrmConfig
from srm.core.source_offsets import CONNECTOR
from srm.errors import ConfigError
from srm.flow import Flow

__all__ = ["APACHE_KAFKA_OFFSETS_TOPIC", "STRIMZI_OFFSETS_TOPIC", "ConnectOffsets", "WorkerConfig", "connect_offsets"]

APACHE_KAFKA_OFFSETS_TOPIC = "connect-offsets"
STRIMZI_OFFSETS_TOPIC = "connect-cluster-offsets"
_OFFSETS_TOPIC = "offset.storage.topic"


@dataclass(frozen=True)
class WorkerConfig:
    """The two settings of a Connect worker config that say where its source offsets are."""

    offsets_topic: str
    bootstrap_servers: str | None  # None: not given (the flow's target is taken)
    origin: str

    @classmethod
    def read(cls, path: Path) -> WorkerConfig:
        try:
            text = decode_text(path.read_bytes(), str(path))
        except OSError as e:
            raise ConfigError(f"--worker-config {path}: {e.strerror}") from None
        if path.suffix in (".yaml", ".yml"):
            return cls._of_resource(text, str(path))
        props = parse_properties_text(text, str(path))
        return cls._of_properties(props, str(path))

    @classmethod
    def _of_properties(cls, props: Properties, origin: str) -> WorkerConfig:
        topic = props.get(_OFFSETS_TOPIC, "").strip()
        if not topic:
            raise ConfigError(
                f"{_OFFSETS_TOPIC} is missing: a Connect worker config names the topic its source offsets are in",
                key=_OFFSETS_TOPIC,
                origin=origin,
            )
        return cls(topic, props.get("bootstrap.servers", "").strip() or None, origin)

    @classmethod
    def _of_resource(cls, text: str, origin: str) -> WorkerConfig:
        try:
            document: Any = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"not valid YAML: {' '.join(str(e).split())}", origin=origin) from None
        if not isinstance(document, dict) or document.get("kind") != "KafkaConnect":
            raise ConfigError(
                "not a Connect worker config: expected a KafkaConnect resource (YAML) or a "
                "connect-distributed.properties",
                origin=origin,
            )
        spec = document.get("spec") or {}
        config = spec.get("config") or {}
        topic = as_text(config.get(_OFFSETS_TOPIC, STRIMZI_OFFSETS_TOPIC)).strip() or STRIMZI_OFFSETS_TOPIC
        servers = as_text(spec.get("bootstrapServers") or "").strip() or None
        return cls(topic, servers, origin)


@dataclass(frozen=True)
class ConnectOffsets:
    """Where to read a flow's source offsets as Connect keeps them."""

    topics: tuple[str, ...]  # the offsets topic; without a worker config, the defaults (the one that exists is read)
    cluster: str  # the alias of the cluster holding it
    connector: str  # the MirrorSourceConnector's name: each record's key starts with it


def connect_offsets(config: SrmConfig, flow: Flow, worker: WorkerConfig | None) -> ConnectOffsets:
    """Where ``flow``'s source offsets are: the worker config's topic on the cluster its ``bootstrap.servers`` name
    (one of the configuration's, whose client settings read it), else the defaults on the target."""
    connector = source_connector_name(config, flow) or CONNECTOR
    if worker is None:
        return ConnectOffsets((APACHE_KAFKA_OFFSETS_TOPIC, STRIMZI_OFFSETS_TOPIC), flow.target, connector)
    if worker.bootstrap_servers is None:
        return ConnectOffsets((worker.offsets_topic,), flow.target, connector)
    wanted = endpoints(worker.bootstrap_servers)
    # the flow's own clusters first: another alias may name the same brokers
    for alias in (flow.target, flow.source, *config.clusters):
        servers = config.bootstrap_servers(alias)
        if servers is not None and wanted & endpoints(servers):
            return ConnectOffsets((worker.offsets_topic,), alias, connector)
    raise ConfigError(
        f"bootstrap.servers {worker.bootstrap_servers} is none of the connectors' clusters "
        f"({', '.join(f'{a}: {config.bootstrap_servers(a)}' for a in config.clusters)}): srm reads the Connect "
        "offsets topic with the client settings of the cluster holding it",
        key="bootstrap.servers",
        origin=worker.origin,
    )
