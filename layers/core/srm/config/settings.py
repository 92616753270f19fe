"""Configuration: one file (YAML or MM2's ``mm2.properties``) → one flat MM2 property map → validated settings.

Both formats flatten to the same ``key → value`` map with MM2's names (``clusters``, ``us-west.bootstrap.servers``,
``us-west->us-east.topics``…), remembering where each key came from, so errors can name file and line and the
config table can store exactly what MM2 would read.

Hierarchy (SRM's): global < ``<alias>.`` < ``<source>-><target>.``; how a key resolves across it, and which keys SRM
knows, is :mod:`srm.config.keys`; one replication's settings are :class:`~srm.config.flow_settings.FlowSettings`.
Both are importable from here too.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import ValidationError

from srm.config.clients import validate_client_values
from srm.config.flow_settings import SETTING_KEYS, FlowSettings
from srm.config.keys import (
    CLIENT_ROLES,
    GLOBAL_KEYS,
    METRICS_AGGREGATION_INTERVAL,
    METRICS_API_DEPLOYMENT_NAME,
    METRICS_API_GATEWAY,
    METRICS_API_PEERS,
    RESERVED_ALIASES,
    client_properties,
    ignored_because,
    is_known_key,
    resolve,
    transform_properties,
)
from srm.config.nodes import NodeSettings
from srm.config.parsing import Properties, parse_config_bytes
from srm.config.secrets import MASK, is_sensitive
from srm.core.filters import FilterError, ReplicateDecision, parse_list
from srm.core.loops import identity_loops
from srm.core.transforms import TransformChain, TransformConfigError, build_chain
from srm.errors import ConfigError
from srm.flow import Flow
from srm.mm2.policy import PolicyError, ReplicationPolicy, load_policy

__all__ = [
    "CLIENT_ROLES",
    "SETTING_KEYS",
    "FlowSettings",
    "SrmConfig",
    "client_properties",
    "load_file",
    "resolve",
]

_FLOW_RE = re.compile(r"^(?P<source>[^\s.,>]+?)->(?P<target>[^\s.,>]+?)\.(?P<key>.+)$")
_ALIAS_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")
_DEPLOYMENT_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:/\-]{0,199}$")


def load_file(path: str | Path) -> SrmConfig:
    """Read, parse and validate a configuration file; the format follows the extension."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file: {e.strerror}", origin=str(p)) from None
    return SrmConfig.from_properties(parse_config_bytes(data, str(p)))


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
    ignored: tuple[tuple[str, str], ...] = ()  # (key, why SRM ignores it): MM2 and Connect settings it has no use for

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
            if alias in RESERVED_ALIASES:
                raise ConfigError(
                    f"clusters: {alias!r} cannot be an alias: '{alias}.' already starts other settings",
                    key="clusters",
                    origin=props.origin("clusters"),
                )
        if len(set(clusters)) != len(clusters):
            raise ConfigError("clusters: an alias is listed twice", key="clusters", origin=props.origin("clusters"))

        flows: list[Flow] = []
        warnings: list[str] = []
        ignored: list[tuple[str, str]] = []

        def note(key: str, setting: str, origin: str) -> None:
            """An unknown setting is a warning; an MM2 or Connect one SRM has no use for is listed with the reason."""
            if not is_known_key(setting):
                warnings.append(_unknown_key_warning(key, setting, origin))
            elif reason := ignored_because(setting):
                ignored.append((key, reason))

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
                note(key, rest, origin)
                continue
            if key == "clusters" or key in GLOBAL_KEYS:
                continue
            if is_known_key(key):
                note(key, key, origin)
                continue
            head, _, rest = key.partition(".")
            if head in clusters:
                note(key, rest, origin)
                continue
            if "->" in key:
                raise ConfigError(
                    f"{key}: expected SOURCE->TARGET.setting with SOURCE and TARGET from clusters "
                    f"({', '.join(clusters)})",
                    key=key,
                    origin=origin,
                )
            if rest and is_known_key(rest):
                raise ConfigError(_unknown_alias(head, clusters, key), key=key, origin=origin)
            warnings.append(_unknown_key_warning(key, key, origin))

        config = cls(props, tuple(clusters), tuple(flows), tuple(warnings), tuple(ignored))
        for source, target in config.flows:
            config.settings(source, target)  # validates every replication's settings up front
            config.policy(source, target)
            config.transforms(source, target)
        for level in (None, *clusters):  # settings no replication reads yet are still checked
            config._validate_level(level)
        for alias in sorted({a for flow in config.enabled_flows() for a in flow}):
            if not config.bootstrap_servers(alias):
                raise ConfigError(
                    f"cluster {alias!r} has no bootstrap servers: set {alias}.bootstrap.servers",
                    key=f"{alias}.bootstrap.servers",
                    origin=props.source,
                )
        validate_client_values(props, clusters, config.flows)
        _refuse_identity_loops(config)
        _refuse_uncommitted_reads(config)
        for flow in config.flows:  # an auto.offset.reset a mapping cannot start from, refused before anything runs
            config.start_from(*flow)
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

    def transforms(self, source: str, target: str) -> TransformChain:
        """The flow's Single Message Transforms (:mod:`srm.core.transforms`), built once per configuration."""
        chain: TransformChain = self._per_flow("_transforms_cache", self._transforms, source, target)
        return chain

    def _transforms(self, source: str, target: str) -> TransformChain:
        self.check_flow(source, target)
        try:
            return build_chain(transform_properties(self.properties, source=source, target=target))
        except TransformConfigError as e:
            raise ConfigError(str(e), key=e.key, origin=self.properties.origin(e.key)) from None

    def client(
        self, alias: str, role: str, flow: Flow | None = None, purpose: str | None = None
    ) -> dict[str, tuple[str, str]]:
        self.check_alias(alias)
        return client_properties(self.properties, alias, role, flow=flow, purpose=purpose)

    def start_from(self, source: str, target: str) -> Literal["earliest", "latest"]:
        """Where replication of a source partition with no committed position starts (a new topic, a new
        partition): the source consumer's ``auto.offset.reset`` (``<source>.consumer.auto.offset.reset``,
        ``<source>-><target>.consumer.auto.offset.reset`` …), ``earliest`` by default as MirrorMaker 2's. An event
        source mapping has no "fail" choice, so ``none`` is refused."""
        found = self.client(source, "consumer", Flow(source, target)).get("auto.offset.reset")
        if found is None:
            return "earliest"
        value, key = found[0].strip().lower(), found[1]
        if value in ("earliest", "smallest", "beginning"):
            return "earliest"
        if value in ("latest", "largest", "end"):
            return "latest"
        raise ConfigError(
            f"{key}={found[0]!r}: {Flow(source, target)} starts a partition with no committed position at the "
            "'earliest' or the 'latest' record",
            key=key,
            origin=self.properties.origin(key),
        )

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
