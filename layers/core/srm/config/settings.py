"""Configuration: one file (YAML or MM2's ``mm2.properties``) → one flat MM2 property map → validated settings.

Both formats flatten to the same ``key → value`` map with MM2's names (``clusters``, ``us-west.bootstrap.servers``,
``us-west->us-east.topics``…), remembering where each key came from, so errors can name file and line and the
config table can store exactly what MM2 would read.

Hierarchy (SRM's): global < ``<alias>.`` < ``<source>-><target>.``. For a replication's settings the cluster
level is the *target* alias (where SRM runs a replication's workers). Kafka client settings resolve in
:func:`client_properties`; every other lookup goes through :func:`resolve`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from srm.config.nodes import NODE_KEYS, NodeSettings
from srm.config.parsing import Properties, _to_str, parse_properties_text, parse_yaml_text
from srm.config.secrets import MASK, is_sensitive
from srm.core.filters import (
    DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
    FilterError,
    GroupFilter,
    PatternList,
    ReplicateDecision,
    TopicFilter,
    parse_list,
)
from srm.core.loops import identity_loops
from srm.errors import ConfigError
from srm.flow import Flow
from srm.mm2.policy import PolicyError, ReplicationPolicy, load_policy

__all__ = [
    "CLIENT_ROLES",
    "FlowSettings",
    "SrmConfig",
    "client_properties",
    "load_file",
    "resolve",
]

CLIENT_ROLES = ("producer", "consumer", "admin")
SIDES = ("source", "target")
_POLLERS_MIN = "event.source.provisioned.pollers.min"
_POLLERS_MAX = "event.source.provisioned.pollers.max"
_FLOW_RE = re.compile(r"^(?P<source>[^\s.,>]+?)->(?P<target>[^\s.,>]+?)\.(?P<key>.+)$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")
_DEPLOYMENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/\-]{0,199}$")

# Kafka client settings that apply to every client of a cluster without a role prefix (MM2's CLIENT_CONFIG_DEF).
_COMMON_CLIENT_KEYS = frozenset({"bootstrap.servers", "security.protocol", "client.id", "client.rack"})
_COMMON_CLIENT_PREFIXES = ("ssl.", "sasl.")
# Kafka Connect / MM2 driver settings that have no meaning in a serverless runtime: accepted, not used.
_IGNORED_KEYS = frozenset(
    {
        "tasks.max",
        "dedicated.mode.enable.internal.rest",
        "emit.heartbeats.enabled.for.disabled.flows",
        "sync.topic.acls.principal.mapping",
        "admin.timeout.ms",
        "consumer.poll.timeout.ms",
        "topic.filter.class",
        "group.filter.class",
        "config.property.filter.class",
        "forwarding.admin.class",
        "config.providers",
        "replication.policy.internal.topic.separator.enabled",
        "use.defaults.from",
        "metric.reporters",
        "copy.source.offset.in.header.enabled",
        "disable.source.topic.auto.creation",
        "exactly.once.support",
        "name",
        "connector.class",
        "source.cluster.alias",
        "target.cluster.alias",
    }
)
_IGNORED_PREFIXES = (
    "offset.storage.",
    "config.storage.",
    "status.storage.",
    "key.converter",
    "value.converter",
    "header.converter",
    "workers.",
    "connectors.",
    "config.providers.",
    "listeners",
    "rest.",
    "mm.",
    "task.",
    "worker.",
    "errors.",
    "offset.flush.",
    "scheduled.rebalance.",
)


def load_file(path: str | Path) -> SrmConfig:
    """Read, parse and validate a configuration file; the format follows the extension."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"cannot read config file: {e.strerror}", origin=str(p)) from None
    if p.suffix in (".yaml", ".yml"):
        props = parse_yaml_text(text, str(p))
    elif p.suffix == ".properties":
        props = parse_properties_text(text, str(p))
    else:
        raise ConfigError("unknown config format: use .yaml/.yml or .properties (mm2.properties)", origin=str(p))
    return SrmConfig.from_properties(props)


# ---------------------------------------------------------------------------------------------------------------
# Resolution
# ---------------------------------------------------------------------------------------------------------------
def resolve(
    props: Mapping[str, str], key: str, *, source: str | None = None, target: str | None = None
) -> tuple[str, str] | None:
    """The value of a setting and the key it was found under: ``source->target.key``, then ``target.key``, then
    ``key``; None when no level sets it. (``source`` and ``target`` name the replication being resolved.)"""
    candidates = []
    if source and target:
        candidates.append(f"{source}->{target}.{key}")
    if target:
        candidates.append(f"{target}.{key}")
    candidates.append(key)
    for candidate in candidates:
        if candidate in props:
            return props[candidate], candidate
    return None


def _is_common_client_key(key: str) -> bool:
    return key in _COMMON_CLIENT_KEYS or key.startswith(_COMMON_CLIENT_PREFIXES)


def client_properties(
    props: Mapping[str, str],
    cluster: str,
    role: str,
    *,
    flow: Flow | None = None,
) -> dict[str, tuple[str, str]]:
    """Kafka client settings for a ``role`` client (producer, consumer, admin) of ``cluster``, as
    ``{client key: (value, defining key)}``. Later layers win:

    1. global common keys (``bootstrap.servers``, ``security.protocol``, ``ssl.*``, ``sasl.*``…)
    2. ``<role>.k`` — global, every cluster
    3. ``<source|target>.<role>.k`` — global, by the cluster's side in the replication
    4. ``<cluster>.k`` (common keys only) and 5. ``<cluster>.<role>.k``
    6. ``<source>-><target>.<role>.k`` and 7. ``<source>-><target>.<source|target>.<role>.k``
    """
    if role not in CLIENT_ROLES:
        raise ValueError(f"unknown client role {role!r}")
    side = None
    if flow is not None:
        side = "source" if cluster == flow[0] else "target"
    layers: list[tuple[str, bool]] = [("", True), (f"{role}.", False)]
    if side:
        layers.append((f"{side}.{role}.", False))
    layers += [(f"{cluster}.", True), (f"{cluster}.{role}.", False)]
    if flow is not None:
        name = str(Flow(*flow))
        layers += [(f"{name}.{role}.", False), (f"{name}.{side}.{role}.", False)]
    result: dict[str, tuple[str, str]] = {}
    for prefix, common_only in layers:
        for full_key, value in props.items():
            if not full_key.startswith(prefix):
                continue
            k = full_key[len(prefix) :]
            if not k or (common_only and not _is_common_client_key(k)):
                continue
            result[k] = (value, full_key)
    return result


# ---------------------------------------------------------------------------------------------------------------
# Validated settings of one replication
# ---------------------------------------------------------------------------------------------------------------
class _SettingError(ValueError):
    """A check across settings, failed: ``key`` is the setting the message is about (pydantic gives it no field)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class FlowSettings(BaseModel):
    """Every replication setting we honour, by MM2 name, resolved for one ``source->target``."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    enabled: bool = False
    topics: str = DEFAULT_TOPICS
    topics_exclude: str = Field(DEFAULT_TOPICS_EXCLUDE, alias="topics.exclude")
    groups: str = DEFAULT_GROUPS
    groups_exclude: str = Field(DEFAULT_GROUPS_EXCLUDE, alias="groups.exclude")
    replication_policy_class: str = Field(
        "org.apache.kafka.connect.mirror.DefaultReplicationPolicy", alias="replication.policy.class"
    )
    replication_policy_separator: str = Field(".", alias="replication.policy.separator", min_length=1)
    replication_factor: int = Field(2, alias="replication.factor", ge=-1)
    heartbeats_topic_replication_factor: int = Field(3, alias="heartbeats.topic.replication.factor", ge=-1)
    checkpoints_topic_replication_factor: int = Field(3, alias="checkpoints.topic.replication.factor", ge=-1)
    offset_syncs_topic_replication_factor: int = Field(3, alias="offset-syncs.topic.replication.factor", ge=-1)
    offset_syncs_topic_location: Literal["source", "target"] = Field("source", alias="offset-syncs.topic.location")
    emit_offset_syncs_enabled: bool = Field(True, alias="emit.offset-syncs.enabled")
    offset_lag_max: int = Field(100, alias="offset.lag.max", ge=0)
    refresh_topics_enabled: bool = Field(True, alias="refresh.topics.enabled")
    refresh_topics_interval_seconds: float = Field(600, alias="refresh.topics.interval.seconds", gt=0)
    refresh_groups_enabled: bool = Field(True, alias="refresh.groups.enabled")
    refresh_groups_interval_seconds: float = Field(600, alias="refresh.groups.interval.seconds", gt=0)
    emit_checkpoints_enabled: bool = Field(True, alias="emit.checkpoints.enabled")
    emit_checkpoints_interval_seconds: float = Field(60, alias="emit.checkpoints.interval.seconds", gt=0)
    sync_group_offsets_enabled: bool = Field(True, alias="sync.group.offsets.enabled")
    sync_group_offsets_interval_seconds: float = Field(60, alias="sync.group.offsets.interval.seconds", gt=0)
    emit_heartbeats_enabled: bool = Field(True, alias="emit.heartbeats.enabled")
    emit_heartbeats_interval_seconds: float = Field(1, alias="emit.heartbeats.interval.seconds", gt=0)
    heartbeats_replication_enabled: bool = Field(True, alias="heartbeats.replication.enabled")
    sync_topic_configs_enabled: bool = Field(True, alias="sync.topic.configs.enabled")
    sync_topic_configs_interval_seconds: float = Field(600, alias="sync.topic.configs.interval.seconds", gt=0)
    sync_topic_acls_enabled: bool = Field(True, alias="sync.topic.acls.enabled")
    sync_topic_acls_interval_seconds: float = Field(600, alias="sync.topic.acls.interval.seconds", gt=0)
    config_properties_exclude: str = Field(DEFAULT_CONFIG_PROPERTIES_EXCLUDE, alias="config.properties.exclude")
    # The MSK event source mapping of each replicated topic (and its local emulation).
    event_source_batch_size: int = Field(100, alias="event.source.batch.size", ge=1, le=10_000)
    event_source_batching_window_ms: int = Field(500, alias="event.source.batching.window.ms", ge=0, le=300_000)
    event_source_max_payload_bytes: int = Field(
        6 * 1024 * 1024, alias="event.source.max.payload.bytes", ge=64 * 1024, le=6 * 1024 * 1024
    )
    # What a mapping does with a batch the mirror keeps failing: ``retry`` retries it until it succeeds (the
    # partition waits, nothing is skipped); ``dead-letter`` hands it to the on-failure destination after
    # ``event.source.max.retries`` retries (-1: Lambda's bound with a destination, 10) and moves on.
    event_source_on_failure: Literal["retry", "dead-letter"] = Field("retry", alias="event.source.on.failure")
    event_source_max_retries: int = Field(-1, alias="event.source.max.retries", ge=-1, le=10_000)
    # Lambda's provisioned mode: each mapping keeps min..max event pollers of its own (Lambda's ranges for Kafka);
    # neither set: on-demand polling. Local mappings have no pollers and ignore both.
    event_source_provisioned_pollers_min: int | None = Field(
        None, alias="event.source.provisioned.pollers.min", ge=1, le=200
    )
    event_source_provisioned_pollers_max: int | None = Field(
        None, alias="event.source.provisioned.pollers.max", ge=1, le=2000
    )
    # How long the mirror waits for the target to acknowledge a batch before failing it (so it is retried).
    mirror_delivery_timeout_ms: int = Field(60_000, alias="mirror.delivery.timeout.ms", ge=1_000)
    # Kafka Connect's worker key, as MM2's dedicated mode reads it: "enabled" makes the mirror transactional
    # (srm.replication.exactly_once); "preparing" (Connect's rolling-upgrade step) writes as "disabled" does.
    exactly_once_source_support: Literal["disabled", "preparing", "enabled"] = Field(
        "disabled", alias="exactly.once.source.support"
    )
    # Kafka Connect's key: ``none`` stops a partition on a record the target refuses (it is retried), ``all`` sends
    # such a record to the dead-letter destination and goes on (srm.replication.dead_letters).
    errors_tolerance: Literal["none", "all"] = Field("none", alias="errors.tolerance")
    # Records purged on the source before they were replicated stop the partition (its batch fails and is retried)
    # instead of being reported and passed over. Named after Spark's Kafka source option: MM2 has no such key.
    fail_on_data_loss: bool = Field(False, alias="fail.on.data.loss")

    @field_validator("topics", "topics_exclude", "groups", "groups_exclude", "config_properties_exclude", mode="before")
    @classmethod
    def _patterns_valid(cls, value: Any, info: ValidationInfo) -> str:
        text = _to_str(value)
        field_info = cls.model_fields[info.field_name or ""]
        PatternList.parse(text, field_info.alias or info.field_name or "pattern")  # FilterError names the regex
        return text

    @field_validator("exactly_once_source_support", mode="before")
    @classmethod
    def _eos_value(cls, value: Any) -> str:
        text = _to_str(value).strip().lower()  # Connect accepts any case
        if text not in ("disabled", "preparing", "enabled"):
            raise ValueError("expected enabled, disabled or preparing (Kafka Connect's exactly.once.source.support)")
        return text

    @property
    def exactly_once(self) -> bool:
        return self.exactly_once_source_support == "enabled"

    @model_validator(mode="after")
    def _pollers_together(self, info: ValidationInfo) -> FlowSettings:
        low, high = self.event_source_provisioned_pollers_min, self.event_source_provisioned_pollers_max
        # One level may set one of the pair and a more specific level the other: only a flow's settings are whole.
        whole = not (info.context or {}).get("one_level")
        if whole and (low is None) != (high is None):
            given, missing = (_POLLERS_MIN, _POLLERS_MAX) if high is None else (_POLLERS_MAX, _POLLERS_MIN)
            raise _SettingError(given, f"provisioned mode needs {missing} too (set both, or neither for on-demand)")
        if low is not None and high is not None and low > high:
            raise _SettingError(_POLLERS_MIN, f"more than {_POLLERS_MAX} ({high})")
        return self

    @property
    def provisioned_pollers(self) -> tuple[int, int] | None:
        """(minimum, maximum) event pollers of each mapping in provisioned mode; None: on-demand."""
        low, high = self.event_source_provisioned_pollers_min, self.event_source_provisioned_pollers_max
        return None if low is None or high is None else (low, high)

    @field_validator("errors_tolerance", mode="before")
    @classmethod
    def _tolerance_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value  # as Connect reads it

    @classmethod
    def keys(cls) -> frozenset[str]:
        return frozenset(f.alias or name for name, f in cls.model_fields.items())

    def topic_filter(self) -> TopicFilter:
        return TopicFilter.of(self.topics, self.topics_exclude)

    def replicate_decision(self, target: str, policy: ReplicationPolicy) -> ReplicateDecision:
        return ReplicateDecision(target, policy, self.topic_filter(), self.heartbeats_replication_enabled)

    def group_filter(self) -> GroupFilter:
        return GroupFilter.of(self.groups, self.groups_exclude)

    def config_exclude(self) -> PatternList:
        return PatternList.parse(self.config_properties_exclude, "config.properties.exclude")


SETTING_KEYS = FlowSettings.keys()
# Settings of the whole runtime, never of one flow or cluster.
METRICS_AGGREGATION_INTERVAL = "metrics.aggregation.interval.seconds"
# Remote querying: the name this deployment advertises its metrics API under, whether its API acts as a gateway
# (discovers peers through the clusters), and peers' API base URLs it queries besides.
METRICS_API_DEPLOYMENT_NAME = "metrics.api.deployment.name"
METRICS_API_GATEWAY = "metrics.api.gateway.enabled"
METRICS_API_PEERS = "metrics.api.peers"
GLOBAL_KEYS = (
    frozenset({METRICS_AGGREGATION_INTERVAL, METRICS_API_DEPLOYMENT_NAME, METRICS_API_GATEWAY, METRICS_API_PEERS})
    | NODE_KEYS
)
# An alias prefixes its cluster's settings, so it cannot be the first word of another setting.
_RESERVED_ALIASES = frozenset(
    {k.split(".")[0] for k in SETTING_KEYS | _IGNORED_KEYS | _COMMON_CLIENT_KEYS}
    | {p.split(".")[0] for p in _IGNORED_PREFIXES + _COMMON_CLIENT_PREFIXES}
    | set(CLIENT_ROLES)
    | set(SIDES)
    | {"clusters"}
    | {k.split(".")[0] for k in GLOBAL_KEYS}
)


def _is_ignored(key: str) -> bool:
    return key in _IGNORED_KEYS or key.startswith(_IGNORED_PREFIXES)


def _is_client_key(key: str) -> bool:
    if _is_common_client_key(key):
        return True
    head, _, rest = key.partition(".")
    if head in CLIENT_ROLES and rest:
        return True
    if head in SIDES:
        role, _, rest2 = rest.partition(".")
        return (role in CLIENT_ROLES and bool(rest2)) or rest.startswith("cluster.")
    return False


def _known_scoped_key(key: str) -> bool:
    """A key that may follow an ``<alias>.`` or ``a->b.`` prefix, or stand globally."""
    return key in SETTING_KEYS or _is_client_key(key) or _is_ignored(key)


# ---------------------------------------------------------------------------------------------------------------
# The whole configuration
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SrmConfig:
    """A validated configuration: cluster aliases, replications and their settings, from one property map."""

    properties: Properties
    clusters: tuple[str, ...]
    flows: tuple[Flow, ...]  # every replication named in the config, enabled or not
    warnings: tuple[str, ...] = ()

    @classmethod
    def from_properties(cls, props: Properties) -> SrmConfig:
        if "clusters" not in props:
            raise ConfigError(
                "missing 'clusters': list the cluster aliases, e.g. clusters = us-west, us-east",
                key="clusters",
                origin=props.source,
            )
        clusters = parse_list(props["clusters"])
        if not clusters:
            raise ConfigError(
                "'clusters' is empty: list at least two cluster aliases",
                key="clusters",
                origin=props.origin("clusters"),
            )
        for alias in clusters:
            if not _ALIAS_RE.match(alias):
                raise ConfigError(
                    f"clusters: {alias!r} is not a valid alias (letters, digits, '-' and '_'; no '.' or '->')",
                    key="clusters",
                    origin=props.origin("clusters"),
                )
            if alias in _RESERVED_ALIASES:
                raise ConfigError(
                    f"clusters: {alias!r} cannot be an alias: '{alias}.' already starts other settings",
                    key="clusters",
                    origin=props.origin("clusters"),
                )
        if len(set(clusters)) != len(clusters):
            raise ConfigError("clusters: an alias is listed twice", key="clusters", origin=props.origin("clusters"))

        flows: list[Flow] = []
        warnings: list[str] = []
        for key in props:
            origin = props.origin(key)
            m = _FLOW_RE.match(key)
            if m:
                source, target, rest = m["source"], m["target"], m["key"]
                for alias in Flow(source, target):
                    if alias not in clusters:
                        raise ConfigError(_unknown_alias(alias, clusters, key), key=key, origin=origin)
                if source == target:
                    raise ConfigError(
                        f"{key}: a replication needs two different clusters ({source}->{target})",
                        key=key,
                        origin=origin,
                    )
                if Flow(source, target) not in flows:
                    flows.append(Flow(source, target))
                if not _known_scoped_key(rest):
                    warnings.append(_unknown_key_warning(key, rest, origin))
                continue
            if key == "clusters" or key in GLOBAL_KEYS or _known_scoped_key(key):
                continue
            head, _, rest = key.partition(".")
            if head in clusters:
                if not _known_scoped_key(rest):
                    warnings.append(_unknown_key_warning(key, rest, origin))
                continue
            if "->" in key:
                raise ConfigError(
                    f"{key}: expected SOURCE->TARGET.setting with SOURCE and TARGET from clusters "
                    f"({', '.join(clusters)})",
                    key=key,
                    origin=origin,
                )
            if rest and _known_scoped_key(rest):
                raise ConfigError(_unknown_alias(head, clusters, key), key=key, origin=origin)
            warnings.append(_unknown_key_warning(key, key, origin))

        config = cls(props, tuple(clusters), tuple(flows), tuple(warnings))
        for source, target in config.flows:
            config.settings(source, target)  # validates every replication's settings up front
            config.policy(source, target)
        for level in (None, *clusters):  # settings no replication reads yet are still checked
            config._validate_level(level)
        for alias in sorted({a for flow in config.enabled_flows() for a in flow}):
            if not config.bootstrap_servers(alias):
                raise ConfigError(
                    f"cluster {alias!r} has no bootstrap servers: set {alias}.bootstrap.servers",
                    key=f"{alias}.bootstrap.servers",
                    origin=props.source,
                )
        _refuse_identity_loops(config)
        _refuse_uncommitted_reads(config)
        config.metrics_aggregation_interval_seconds()
        config.metrics_api_peers()
        config.metrics_api_gateway()
        config.metrics_api_deployment_name()
        config.nodes()
        return config

    def nodes(self) -> NodeSettings:
        """How the nodes of an ``srm run`` cluster find each other and their state (``nodes.*``)."""
        return NodeSettings.of(self.properties, self.clusters)

    def metrics_aggregation_interval_seconds(self) -> float:
        """How often the local runtime aggregates raw metrics (``metrics.aggregation.interval.seconds``, 60)."""
        text = self.properties.get(METRICS_AGGREGATION_INTERVAL, "60")
        try:
            value = float(text)
        except ValueError:
            value = 0.0
        if not value > 0 or value != value:
            raise ConfigError(
                f"{METRICS_AGGREGATION_INTERVAL}: expected a number of seconds > 0, got {text!r}",
                key=METRICS_AGGREGATION_INTERVAL,
                origin=self.properties.origin(METRICS_AGGREGATION_INTERVAL),
            )
        return value

    def metrics_api_peers(self) -> tuple[str, ...]:
        """Base URLs of other deployments' metrics APIs (``metrics.api.peers``), without a trailing slash."""
        peers = []
        for url in parse_list(self.properties.get(METRICS_API_PEERS)):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
                raise ConfigError(
                    f"{METRICS_API_PEERS}: {url!r} is not an API base URL; expected http(s)://host[:port][/stage]",
                    key=METRICS_API_PEERS,
                    origin=self.properties.origin(METRICS_API_PEERS),
                )
            peers.append(url.rstrip("/"))
        return tuple(peers)

    def metrics_api_gateway(self) -> bool:
        """Whether the metrics API discovers peers through the clusters (``metrics.api.gateway.enabled``, false)."""
        text = self.properties.get(METRICS_API_GATEWAY, "false").strip().lower()
        if text not in ("true", "false"):
            raise ConfigError(
                f"{METRICS_API_GATEWAY}: expected true or false, got {text!r}",
                key=METRICS_API_GATEWAY,
                origin=self.properties.origin(METRICS_API_GATEWAY),
            )
        return text == "true"

    def metrics_api_deployment_name(self) -> str | None:
        """The name this deployment's API is advertised under (``metrics.api.deployment.name``; None: the
        runtime's default)."""
        name = self.properties.get(METRICS_API_DEPLOYMENT_NAME, "").strip()
        if name and not _DEPLOYMENT_RE.match(name):
            raise ConfigError(
                f"{METRICS_API_DEPLOYMENT_NAME}: {name!r} is not a valid name (letters, digits, '.', ':', '/', '_', "
                "'-'; at most 200)",
                key=METRICS_API_DEPLOYMENT_NAME,
                origin=self.properties.origin(METRICS_API_DEPLOYMENT_NAME),
            )
        return name or None

    # -- lookups ----------------------------------------------------------------------------------------------
    def check_alias(self, alias: str) -> str:
        if alias not in self.clusters:
            raise ConfigError(_unknown_alias(alias, self.clusters, alias))
        return alias

    def check_flow(self, source: str, target: str) -> Flow:
        self.check_alias(source)
        self.check_alias(target)
        if source == target:
            raise ConfigError(f"{Flow(source, target)}: a replication needs two different clusters")
        return Flow(source, target)

    def enabled_flows(self) -> list[Flow]:
        return [f for f in self.flows if self.settings(*f).enabled]

    def bootstrap_servers(self, alias: str) -> str | None:
        found = client_properties(self.properties, alias, "admin").get("bootstrap.servers")
        return found[0] if found and found[0].strip() else None

    def _per_flow(self, name: str, compute: Callable[[str, str], Any], source: str, target: str) -> Any:
        """Computed once per flow: the configuration never changes (a new one is loaded instead)."""
        cache: dict[Flow, Any] = self.__dict__.setdefault(name, {})
        if Flow(source, target) not in cache:
            cache[Flow(source, target)] = compute(source, target)
        return cache[Flow(source, target)]

    def settings(self, source: str, target: str) -> FlowSettings:
        """The validated settings of ``source->target``, each from the most specific level that sets it."""
        settings: FlowSettings = self._per_flow("_settings_cache", self._settings, source, target)
        return settings

    def _settings(self, source: str, target: str) -> FlowSettings:
        self.check_flow(source, target)
        return self._resolve_settings(source, target)

    def _validate_level(self, alias: str | None) -> None:
        """Validate the global (or one cluster's) settings as a replication targeting it would read them."""
        self._resolve_settings(None, alias)

    def _resolve_settings(self, source: str | None, target: str | None) -> FlowSettings:
        raw: dict[str, str] = {}
        defined_by: dict[str, str] = {}
        for name in SETTING_KEYS:
            found = resolve(self.properties, name, source=source, target=target)
            if found is not None:
                raw[name], defined_by[name] = found
        try:
            return FlowSettings.model_validate(raw, context={"one_level": source is None})
        except ValidationError as e:
            err = e.errors()[0]
            ctx_error = (err.get("ctx") or {}).get("error")
            name = str(err["loc"][0]) if err["loc"] else getattr(ctx_error, "key", "?")
            key = defined_by.get(name, name)
            if isinstance(ctx_error, FilterError):
                message = f"{ctx_error.pattern!r} is not a valid regex ({ctx_error.reason})"
            else:
                message = str(ctx_error) if ctx_error else err["msg"]
            raise ConfigError(
                f"{key}={raw.get(name)!r}: {message}", key=key, origin=self.properties.origin(key)
            ) from None

    def replicate(self, source: str, target: str) -> ReplicateDecision:
        """The flow's replicate decision, bound once from its settings and policy."""
        decision: ReplicateDecision = self._per_flow(
            "_replicate_cache",
            lambda s, t: self.settings(s, t).replicate_decision(t, self.policy(s, t)),
            source,
            target,
        )
        return decision

    def policy(self, source: str, target: str) -> ReplicationPolicy:
        policy: ReplicationPolicy = self._per_flow("_policy_cache", self._policy, source, target)
        return policy

    def _policy(self, source: str, target: str) -> ReplicationPolicy:
        s = self.settings(source, target)
        options: dict[str, Any] = {"source_alias": source}
        try:
            return load_policy(s.replication_policy_class, s.replication_policy_separator, **options)
        except PolicyError as e:
            found = resolve(self.properties, "replication.policy.class", source=source, target=target)
            key = found[1] if found else "replication.policy.class"
            raise ConfigError(str(e), key=key, origin=self.properties.origin(key)) from None

    def client(self, alias: str, role: str, flow: Flow | None = None) -> dict[str, tuple[str, str]]:
        self.check_alias(alias)
        return client_properties(self.properties, alias, role, flow=flow)

    def redacted(self) -> dict[str, str]:
        """The property map with secret values masked, for display."""
        return {k: (MASK if is_sensitive(k) else v) for k, v in self.properties.items()}


def _refuse_identity_loops(config: SrmConfig) -> None:
    """Enabled name-preserving flows that would replicate a literally named topic round a cycle are refused
    (:mod:`srm.core.loops`, level 1)."""
    flows: dict[tuple[str, str], ReplicateDecision] = {f: config.replicate(*f) for f in config.enabled_flows()}
    loops = identity_loops(flows)
    if loops:
        loop = loops[0]
        source, target = loop.cycle[0], loop.cycle[1]
        found = resolve(config.properties, "topics", source=source, target=target)
        key = found[1] if found else f"{source}->{target}.topics"
        raise ConfigError(
            f"{loop}: remote topics keep their names, so each flow would replicate it back to where it came from; "
            "keep the topic filters of "
            f"{' and '.join(f'{a}->{b}' for a, b in zip(loop.cycle, loop.cycle[1:], strict=False))} disjoint, "
            "e.g. with topics.exclude, or use DefaultReplicationPolicy",
            key=key,
            origin=config.properties.origin(key),
        )


def _refuse_uncommitted_reads(config: SrmConfig) -> None:
    """Exactly-once needs the source read ``read_committed``: records of aborted transactions must never be
    replicated."""
    for flow in config.flows:
        if not config.settings(*flow).exactly_once:
            continue
        found = config.client(flow[0], "consumer", flow).get("isolation.level")
        if found is not None and found[0].strip().lower() != "read_committed":
            raise ConfigError(
                f"{found[1]}={found[0]}: {flow} has exactly.once.source.support=enabled, which reads the source "
                "read_committed; remove the setting",
                key=found[1],
                origin=config.properties.origin(found[1]),
            )


def _unknown_alias(alias: str, clusters: Iterable[str], key: str) -> str:
    known = ", ".join(clusters)
    hint = difflib.get_close_matches(alias, list(clusters), n=1)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    return f"{key}: unknown cluster alias {alias!r} (clusters = {known}){suggestion}"


def _unknown_key_warning(full_key: str, setting: str, origin: str) -> str:
    hint = difflib.get_close_matches(setting, sorted(SETTING_KEYS), n=1, cutoff=0.8)
    suggestion = f"; did you mean {hint[0]!r}?" if hint else ""
    return f"{origin}: {full_key}: not a setting serverless-srm knows, ignored{suggestion}"
