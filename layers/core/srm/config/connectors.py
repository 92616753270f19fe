"""Connector definitions as configuration: the MirrorMaker 2 connectors of Kafka Connect-based replication
(``MirrorSourceConnector``, ``MirrorCheckpointConnector``, ``MirrorHeartbeatConnector``), as Strimzi / CSM Operator
``KafkaConnector`` resources or Connect REST bodies (``{"name": …, "config": {…}}``), read from a folder and turned
into the flat MM2 property map every other configuration becomes (:mod:`srm.config.parsing`).

The connectors of one source→target pair become one flow. Their keys land where MM2's own levels put them:

* ``source.cluster.<key>`` / ``target.cluster.<key>`` → ``<source alias>.<key>`` / ``<target alias>.<key>``;
* ``producer.`` / ``consumer.`` / ``admin.<key>`` → ``<a>-><b>.<role>.<key>``, above the cluster level;
* ``source.`` / ``target.<role>.<key>`` → ``<a>-><b>.<source|target>.<role>.<key>``, above both;
* ``producer.override.<key>`` (the Connect worker's producer: the one writing the replicated records) →
  ``<a>-><b>.target.producer.<key>``;
* every other key → ``<a>-><b>.<key>`` (``topics``, ``groups``, ``replication.policy.class``,
  ``sync.group.offsets.enabled``, ``emit.checkpoints.interval.seconds``, ``offset-syncs.topic.location``,
  ``exactly.once.source.support`` …); the Connect keys srm has no use for (``tasks.max``, converters) stay, each
  connector's own (never a contradiction), and ``srm check`` lists them with why; ``connector.class`` and ``name``
  say which connector it is, and the source connector's ``name`` is kept as ``<a>-><b>.name``: Connect keys the
  flow's source offsets by it (``srm takeover``) and its offsets API answers to it.

The heartbeat connector's ``target.cluster.*``, ``target.producer.*`` and ``producer.override.*`` name where it writes
heartbeats and how, which the seed recommends be the source cluster: srm always writes the flow's heartbeats there,
so they are not the flow's target settings. Its client settings among them (that precedence, ``producer.override.*``
highest; ``target.cluster.*`` only the keys of every client: security, SASL, SSL, ``client.id`` …) become the
heartbeat producer's own, ``<a>-><b>.heartbeats.producer.<key>``, above the flow's producer settings for the source.
Where they name a cluster other than the source (``bootstrap.servers``), they are left out with a warning: srm writes
the heartbeats to the source whatever the connector says, and those settings are another cluster's.

The source connector's Single Message Transforms (``transforms``, ``transforms.*``, ``predicates``, ``predicates.*``)
become the flow's, which the mirror applies to the replicated records (:mod:`srm.core.transforms`); the checkpoint
and heartbeat connectors' apply, in Connect, to the checkpoints and heartbeats they write, which srm writes in MM2's
formats for MM2's tooling, so they are left out. A key two connectors of a pair set differently is an error naming
both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from srm.config.keys import HEARTBEATS_CLIENT, ignored_because, is_common_client_key
from srm.config.parsing import Properties, as_text, decode_text
from srm.config.settings import SrmConfig, load_file
from srm.core.transforms import is_transform_key
from srm.errors import ConfigError
from srm.flow import Flow

__all__ = [
    "CONNECTOR_KINDS",
    "Connector",
    "connector_properties",
    "endpoints",
    "heartbeat_overrides",
    "load_config",
    "load_connectors",
    "read_connectors",
    "source_connector_key",
    "source_connector_name",
    "source_connector_names",
]

CONNECTOR_KINDS = ("MirrorSourceConnector", "MirrorCheckpointConnector", "MirrorHeartbeatConnector")
_ROLES = ("producer", "consumer", "admin")
_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True)
class Connector:
    """One connector definition: its kind (short class name), its config and where it was read."""

    kind: str
    name: str
    config: Mapping[str, Any]
    origin: str  # the file, and the path in it of the config map

    @property
    def source(self) -> str:
        return str(self.config.get("source.cluster.alias", ""))

    @property
    def target(self) -> str:
        return str(self.config.get("target.cluster.alias", "target"))  # MirrorConnectorConfig's default


def read_connectors(folder: Path) -> list[Connector]:
    """Every connector definition of the ``*.yaml``, ``*.yml`` and ``*.json`` files in ``folder``, file by file."""
    if not folder.is_dir():
        raise ConfigError(f"--connectors {folder}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.suffix in _SUFFIXES and p.is_file())
    if not files:
        raise ConfigError(f"--connectors {folder}: no *.yaml, *.yml or *.json connector definitions there")
    return [connector for path in files for connector in _connectors_of(path)]


def _connectors_of(path: Path) -> Iterator[Connector]:
    try:
        text = decode_text(path.read_bytes(), str(path))
    except OSError as e:
        raise ConfigError(f"cannot read connector definition: {e.strerror}", origin=str(path)) from None
    try:
        documents = [json.loads(text)] if path.suffix == ".json" else list(yaml.safe_load_all(text))
    except (ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"not valid {path.suffix.lstrip('.').upper()}: {_one_line(e)}", origin=str(path)) from None
    for i, document in enumerate(d for d in documents if d is not None):
        where = f"{path}" if len(documents) == 1 else f"{path} (document {i + 1})"
        yield _connector(document, where)


def _connector(document: Any, where: str) -> Connector:
    """A Strimzi/CSM ``KafkaConnector`` resource or a Connect REST body."""
    if isinstance(document, dict) and document.get("kind") == "KafkaConnector":
        spec = document.get("spec") or {}
        config, cls = spec.get("config"), spec.get("class")
        name = str((document.get("metadata") or {}).get("name", ""))
        origin = f"{where}: spec.config"
    elif isinstance(document, dict) and isinstance(document.get("config"), dict):
        config = document["config"]
        cls, name, origin = config.get("connector.class"), str(document.get("name", "")), f"{where}: config"
    else:
        raise ConfigError(
            "not a connector definition: expected a KafkaConnector resource (kind, spec.class, spec.config) or a "
            'Connect REST body ({"name": …, "config": {…}})',
            origin=where,
        )
    if not isinstance(config, dict):
        raise ConfigError("the connector has no config map", origin=origin)
    kind = str(cls or "").rsplit(".", 1)[-1]
    if kind not in CONNECTOR_KINDS:
        raise ConfigError(
            f"connector class {cls!r} is not one srm runs: {', '.join(CONNECTOR_KINDS)} "
            "(org.apache.kafka.connect.mirror.*)",
            origin=origin,
        )
    if not str(config.get("source.cluster.alias") or ""):
        raise ConfigError(f"{' '.join(filter(None, (kind, name)))}: source.cluster.alias is missing", origin=origin)
    return Connector(kind, name, config, origin)


def connector_properties(connectors: list[Connector], source: str = "<connectors>") -> Properties:
    """The connectors as one MM2 property map: a flow per source→target pair (see the module's docstring)."""
    props = Properties(source=source)
    aliases: list[str] = []

    def put(key: str, value: Any, connector: Connector, connector_key: str) -> None:
        text = as_text(value)
        if key in props and ignored_because(connector_key) is not None:
            return  # each connector's own (tasks.max, converters): unused here, and listed once by srm check
        if key in props and props[key] != text:
            raise ConfigError(
                f"the connectors contradict each other: {props.origin(key)} = {props[key]!r}, "
                f"{connector.origin}: {connector_key} = {text!r}",
                key=connector_key,
                origin=connector.origin,
            )
        props.set(key, text, f"{connector.origin}: {connector_key}")

    for connector in connectors:
        a, b = connector.source, connector.target
        for alias in (a, b):
            if alias not in aliases:
                aliases.append(alias)
        flow = f"{a}->{b}"
        put(f"{flow}.enabled", "true", connector, "source.cluster.alias")
        heartbeats = connector.kind == "MirrorHeartbeatConnector"
        data = connector.kind == "MirrorSourceConnector"
        if data and connector.name:
            # the name Connect keys the flow's source offsets by (take-over) and its offsets API answers to
            put(source_connector_key(Flow(a, b)), connector.name, connector, "name")
        for key, value in connector.config.items():
            if not data and is_transform_key(str(key)):
                continue  # they transform the connector's own checkpoints or heartbeats (see the module's docstring)
            mapped = _mapped(str(key), a, b, flow, heartbeats)
            if mapped is not None:
                put(mapped, value, connector, str(key))
    # after every connector: the source cluster's bootstrap servers may come from any of them
    for connector in connectors:
        if connector.kind == "MirrorHeartbeatConnector" and _heartbeats_elsewhere(connector, props) is None:
            flow = f"{connector.source}->{connector.target}"
            for key, (value, connector_key) in heartbeat_overrides(connector).items():
                if key != "bootstrap.servers":  # srm writes to the source alias's, whatever the connector names
                    put(f"{flow}.{HEARTBEATS_CLIENT}.producer.{key}", value, connector, connector_key)
    props.set("clusters", ", ".join(aliases), source)
    return props


def heartbeat_overrides(connector: Connector) -> dict[str, tuple[Any, str]]:
    """The heartbeat connector's client settings for the producer writing heartbeats, ``{key: (value, connector
    key)}``: ``target.cluster.*`` (the keys of every client) < ``target.producer.*`` < ``producer.override.*``."""
    found: dict[str, tuple[Any, str]] = {}
    for prefix in ("target.cluster.", "target.producer.", "producer.override."):
        for connector_key, value in connector.config.items():
            key = str(connector_key).removeprefix(prefix)
            if (
                str(connector_key).startswith(prefix)
                and key
                and (prefix != "target.cluster." or is_common_client_key(key))
            ):
                found[key] = (value, str(connector_key))
    return found


def _heartbeats_elsewhere(connector: Connector, props: Properties) -> str | None:
    """A warning when the heartbeat connector writes to a cluster other than its flow's source; else None."""
    named = heartbeat_overrides(connector).get("bootstrap.servers")
    source = props.get(f"{connector.source}.bootstrap.servers")
    if named is None or source is None or endpoints(as_text(named[0])) & endpoints(source):
        return None
    return (
        f"{connector.origin}: {named[1]} = {as_text(named[0])} is not the source cluster {connector.source} "
        f"({source}): srm writes {connector.source}->{connector.target}'s heartbeats to the source's heartbeats "
        "topic, as Connect-based replication recommends, and replicates them to the target; the connector's client "
        "settings for another cluster are left out"
    )


def endpoints(servers: str) -> set[str]:
    """The ``host:port`` entries of a ``bootstrap.servers`` value, to tell whether two name the same cluster."""
    return {s.strip().lower().split("://")[-1] for s in servers.split(",") if s.strip()}


def source_connector_key(flow: Flow) -> str:
    """The key holding the name of ``flow``'s ``MirrorSourceConnector`` (connector definitions only)."""
    return f"{flow}.name"


def source_connector_name(config: SrmConfig, flow: Flow) -> str | None:
    """The name of ``flow``'s ``MirrorSourceConnector``; None when the configuration is no connector definitions."""
    return config.properties.get(source_connector_key(flow)) or None


def source_connector_names(config: SrmConfig) -> dict[Flow, str]:
    """Each flow's ``MirrorSourceConnector`` name, for the flows of connector definitions."""
    return {flow: name for flow in config.flows if (name := source_connector_name(config, flow))}


def _mapped(key: str, a: str, b: str, flow: str, heartbeats: bool) -> str | None:
    """Where a connector key lands in the property map (None: nowhere, see the module's docstring)."""
    if key in ("source.cluster.alias", "target.cluster.alias", "connector.class", "name"):
        return None
    if heartbeats and (key.startswith(("target.cluster.", "producer.override.")) or _side_role(key, "target")):
        return None  # where the heartbeat connector writes: srm writes the flow's heartbeats to the source cluster
    if key.startswith("producer.override."):
        return f"{flow}.target.producer.{key.removeprefix('producer.override.')}"
    for side, alias in (("source", a), ("target", b)):
        if key.startswith(f"{side}.cluster."):
            return f"{alias}.{key.removeprefix(f'{side}.cluster.')}"
        if _side_role(key, side):
            return f"{flow}.{key}"
    return f"{flow}.{key}"  # a flow setting, or a client setting: [client type].* and [cluster type].[client type].*


def _side_role(key: str, side: str) -> bool:
    return key.startswith(tuple(f"{side}.{role}." for role in _ROLES))


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def load_connectors(folder: Path) -> SrmConfig:
    """The configuration the connector definitions in ``folder`` make, validated as any configuration is."""
    connectors = read_connectors(folder)
    props = connector_properties(connectors, str(folder))
    config = SrmConfig.from_properties(props)
    elsewhere = [
        warning
        for c in connectors
        if c.kind == "MirrorHeartbeatConnector" and (warning := _heartbeats_elsewhere(c, props)) is not None
    ]
    # the source connector's name is used (take-over, the offsets API): not one of the Connect keys srm ignores
    names = {source_connector_key(flow) for flow in config.flows}
    ignored = tuple((key, why) for key, why in config.ignored if key not in names)
    return replace(config, warnings=(*config.warnings, *elsewhere), ignored=ignored)


def load_config(path: Path) -> SrmConfig:
    """A configuration file, or a folder of connector definitions."""
    return load_connectors(path) if path.is_dir() else load_file(path)
