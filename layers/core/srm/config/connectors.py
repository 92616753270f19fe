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
  say which connector it is.

The heartbeat connector's ``target.cluster.*`` and ``producer.override.*`` name where it writes heartbeats, which the
seed recommends be the source cluster: srm always writes the flow's heartbeats there, so they are not the flow's
target settings and are left out. The source connector's Single Message Transforms (``transforms``, ``transforms.*``,
``predicates``, ``predicates.*``) become the flow's, which the mirror applies to the replicated records
(:mod:`srm.core.transforms`); the checkpoint and heartbeat connectors' apply, in Connect, to the checkpoints and
heartbeats they write, which srm writes in MM2's formats for MM2's tooling, so they are left out. A key two
connectors of a pair set differently is an error naming both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from srm.config.keys import ignored_because
from srm.config.parsing import Properties, as_text, decode_text
from srm.config.settings import SrmConfig, load_file
from srm.core.transforms import is_transform_key
from srm.errors import ConfigError

__all__ = ["CONNECTOR_KINDS", "Connector", "connector_properties", "load_config", "load_connectors", "read_connectors"]

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
        for key, value in connector.config.items():
            if not data and is_transform_key(str(key)):
                continue  # they transform the connector's own checkpoints or heartbeats (see the module's docstring)
            mapped = _mapped(str(key), a, b, flow, heartbeats)
            if mapped is not None:
                put(mapped, value, connector, str(key))
    props.set("clusters", ", ".join(aliases), source)
    return props


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
    return SrmConfig.from_properties(connector_properties(read_connectors(folder), str(folder)))


def load_config(path: Path) -> SrmConfig:
    """A configuration file, or a folder of connector definitions."""
    return load_connectors(path) if path.is_dir() else load_file(path)
