"""The keys of a configuration: which ones SRM knows, and how a key resolves across the levels that may set it.

Hierarchy (SRM's): global < ``<alias>.`` < ``<source>-><target>.``. For a replication's settings the cluster
level is the *target* alias (where SRM runs a replication's workers). Kafka client settings resolve in
:func:`client_properties`; every other lookup goes through :func:`resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping

from srm.config.flow_settings import SETTING_KEYS
from srm.config.nodes import NODE_KEYS
from srm.core.transforms import is_transform_key
from srm.flow import Flow

__all__ = [
    "CLIENT_ROLES",
    "GLOBAL_KEYS",
    "HEARTBEATS_CLIENT",
    "METRICS_AGGREGATION_INTERVAL",
    "METRICS_API_DEPLOYMENT_NAME",
    "METRICS_API_GATEWAY",
    "METRICS_API_PEERS",
    "RESERVED_ALIASES",
    "client_properties",
    "ignored_because",
    "is_common_client_key",
    "is_known_key",
    "resolve",
    "transform_properties",
]

CLIENT_ROLES = ("producer", "consumer", "admin")
# The purpose of the one client with settings of its own: the producer writing a flow's heartbeats to its source.
HEARTBEATS_CLIENT = "heartbeats"
SIDES = ("source", "target")

# Kafka client settings that apply to every client of a cluster without a role prefix (MM2's CLIENT_CONFIG_DEF).
_COMMON_CLIENT_KEYS = frozenset({"bootstrap.servers", "security.protocol", "client.id", "client.rack"})
_COMMON_CLIENT_PREFIXES = ("ssl.", "sasl.")
# MM2 and Kafka Connect settings that have no meaning in a serverless runtime: accepted, so an mm2.properties works
# as-is, but not used; `srm check` lists them with the reason. Each group: (why, keys, key prefixes).
_IGNORED: tuple[tuple[str, frozenset[str], tuple[str, ...]], ...] = (
    (
        "Kafka Connect runtime settings: srm runs no Connect workers (Lambda functions, or srm run's nodes, do)",
        frozenset(
            {
                "tasks.max",
                "dedicated.mode.enable.internal.rest",
                "config.providers",
                "metric.reporters",
                "name",
                "connector.class",
            }
        ),
        (
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
            "offset.flush.",
            "scheduled.rebalance.",
        ),
    ),
    (
        "Kafka Connect error reporting: srm retries through the event source and dead-letters by errors.tolerance "
        "and event.source.on.failure",
        frozenset(
            {
                "errors.retry.timeout",
                "errors.retry.delay.max.ms",
                "errors.log.enable",
                "errors.log.include.messages",
            }
        ),
        ("errors.deadletterqueue.",),
    ),
    (
        "Java classes srm cannot load: topics, groups and config.properties.exclude filter instead",
        frozenset(
            {"topic.filter.class", "group.filter.class", "config.property.filter.class", "forwarding.admin.class"}
        ),
        (),
    ),
    (
        "MirrorMaker 2 driver settings srm has no use for (it takes aliases from the flow and sets its own timeouts)",
        frozenset(
            {
                "emit.heartbeats.enabled.for.disabled.flows",
                "sync.topic.acls.principal.mapping",
                "admin.timeout.ms",
                "consumer.poll.timeout.ms",
                "replication.policy.internal.topic.separator.enabled",
                "use.defaults.from",
                "copy.source.offset.in.header.enabled",
                "disable.source.topic.auto.creation",
                "source.cluster.alias",
                "target.cluster.alias",
            }
        ),
        (),
    ),
)

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
RESERVED_ALIASES = frozenset(
    {k.split(".")[0] for k in SETTING_KEYS | _COMMON_CLIENT_KEYS}
    | {k.split(".")[0] for _, keys, prefixes in _IGNORED for k in (*keys, *prefixes)}
    | {p.split(".")[0] for p in _COMMON_CLIENT_PREFIXES}
    | set(CLIENT_ROLES)
    | set(SIDES)
    | {"clusters", "transforms", "predicates"}
    | {k.split(".")[0] for k in GLOBAL_KEYS}
)


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


def transform_properties(
    props: Mapping[str, str], *, source: str | None = None, target: str | None = None
) -> dict[str, tuple[str, str]]:
    """The Single Message Transform keys of a replication (``transforms``, ``transforms.<name>.<param>``,
    ``predicates`` …) as ``{key: (value, defining key)}``, each from the most specific level that sets it, as
    :func:`resolve` finds any other setting."""
    prefixes = [""]
    if target:
        prefixes.append(f"{target}.")
    if source and target:
        prefixes.append(f"{source}->{target}.")
    found: dict[str, tuple[str, str]] = {}
    for prefix in prefixes:  # least specific first: a more specific level overwrites
        for full_key, value in props.items():
            if full_key.startswith(prefix) and is_transform_key(key := full_key[len(prefix) :]):
                found[key] = (value, full_key)
    return found


def client_properties(
    props: Mapping[str, str],
    cluster: str,
    role: str,
    *,
    flow: Flow | None = None,
    purpose: str | None = None,
) -> dict[str, tuple[str, str]]:
    """Kafka client settings for a ``role`` client (producer, consumer, admin) of ``cluster``, as
    ``{client key: (value, defining key)}``. Later layers win:

    1. global common keys (``bootstrap.servers``, ``security.protocol``, ``ssl.*``, ``sasl.*``…)
    2. ``<role>.k`` — global, every cluster
    3. ``<source|target>.<role>.k`` — global, by the cluster's side in the replication
    4. ``<cluster>.k`` (common keys only) and 5. ``<cluster>.<role>.k``
    6. ``<source>-><target>.<role>.k`` and 7. ``<source>-><target>.<source|target>.<role>.k``
    8. with a ``purpose`` (``heartbeats``): ``<source>-><target>.<purpose>.<role>.k``, that client's own (the heartbeat
       connector's client overrides, :mod:`srm.config.connectors`)
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
        if purpose:
            layers.append((f"{name}.{purpose}.{role}.", False))
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
# Which keys SRM knows
# ---------------------------------------------------------------------------------------------------------------
def is_known_key(key: str) -> bool:
    """A key that may follow an ``<alias>.`` or ``a->b.`` prefix, or stand globally."""
    return key in SETTING_KEYS or is_transform_key(key) or _is_client_key(key) or ignored_because(key) is not None


def is_common_client_key(key: str) -> bool:
    """A Kafka client setting of every client of a cluster (``bootstrap.servers``, ``security.protocol``, ``ssl.*``,
    ``sasl.*`` …), whatever its role."""
    return key in _COMMON_CLIENT_KEYS or key.startswith(_COMMON_CLIENT_PREFIXES)


_is_common_client_key = is_common_client_key


def ignored_because(key: str) -> str | None:
    """Why SRM ignores a key that may follow an ``<alias>.`` or ``a->b.`` prefix; None: it does not."""
    for reason, keys, prefixes in _IGNORED:
        if key in keys or key.startswith(prefixes):
            return reason
    return None


def _is_client_key(key: str) -> bool:
    if _is_common_client_key(key):
        return True
    head, _, rest = key.partition(".")
    if head in CLIENT_ROLES and rest:
        return True
    if head == HEARTBEATS_CLIENT:
        role, _, rest2 = rest.partition(".")
        return role == "producer" and bool(rest2)
    if head in SIDES:
        role, _, rest2 = rest.partition(".")
        return (role in CLIENT_ROLES and bool(rest2)) or rest.startswith("cluster.")
    return False
