"""Settings of the nodes of an ``srm run`` cluster: which nodes belong together, where they keep their shared state,
how soon a dead one's work moves.

Nodes started with the same configuration form one cluster: they share the group id (``nodes.group.id``, by default
derived from the configuration's cluster aliases, as MirrorMaker 2's dedicated mode derives its Connect groups from
them), and keep the state in the compacted topic ``srm-state.<group id>.internal`` on one cluster of the
configuration (``nodes.store.cluster``; by default where that topic already is, else the target of the first
enabled flow in alphabetical order).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from srm.config.parsing import Properties
from srm.errors import ConfigError
from srm.flow import Flow

__all__ = [
    "NODES_GROUP_ID",
    "NODES_SESSION_TIMEOUT_MS",
    "NODES_STORE_CLUSTER",
    "NODE_KEYS",
    "NodeSettings",
    "legacy_store_topic",
    "member_id",
    "node_of",
    "state_topic",
]

NODES_GROUP_ID = "nodes.group.id"
NODES_STORE_CLUSTER = "nodes.store.cluster"
NODES_SESSION_TIMEOUT_MS = "nodes.session.timeout.ms"
NODE_KEYS = frozenset({NODES_GROUP_ID, NODES_STORE_CLUSTER, NODES_SESSION_TIMEOUT_MS})

_GROUP_RE = re.compile(r"^[A-Za-z0-9._\-]{1,200}$")
_SESSION_MS = (6_000, 300_000)  # Kafka's default group.min/max.session.timeout.ms


def _default_group(aliases: Iterable[str]) -> str:
    """``srm-<aliases, sorted>``; a digest of them where that would be too long for a topic name."""
    joined = "-".join(sorted(aliases))
    if len(joined) <= 120:
        return f"srm-{joined}"
    return f"srm-{hashlib.sha256(joined.encode()).hexdigest()[:16]}"


def state_topic(group_id: str) -> str:
    """The compacted topic of a cluster's shared state (``.internal``: never replicated)."""
    return f"srm-state.{group_id}.internal"


def legacy_store_topic(group_id: str) -> str:
    """Where versions before the state topic kept the state, the configuration and the nodes (DynamoDB items)."""
    return f"srm-store.{group_id}.internal"


@dataclass(frozen=True)
class NodeSettings:
    group_id: str
    store_cluster: str | None  # None: where the state topic is, else the first enabled flow's target
    session_timeout_ms: int  # a member that stops heartbeating this long loses its partitions and leaderships

    @classmethod
    def of(cls, props: Properties, clusters: Iterable[str]) -> NodeSettings:
        aliases = tuple(clusters)
        group = props.get(NODES_GROUP_ID, "").strip() or _default_group(aliases)
        if not _GROUP_RE.match(group):
            raise ConfigError(
                f"{NODES_GROUP_ID}: {group!r} is not a valid name (letters, digits, '.', '_', '-'; at most 200)",
                key=NODES_GROUP_ID,
                origin=props.origin(NODES_GROUP_ID),
            )
        store = props.get(NODES_STORE_CLUSTER, "").strip() or None
        if store is not None and store not in aliases:
            raise ConfigError(
                f"{NODES_STORE_CLUSTER}: {store!r} is not one of the clusters ({', '.join(aliases)})",
                key=NODES_STORE_CLUSTER,
                origin=props.origin(NODES_STORE_CLUSTER),
            )
        text = props.get(NODES_SESSION_TIMEOUT_MS, "10000").strip()
        try:
            session = int(text)
        except ValueError:
            session = -1
        if not _SESSION_MS[0] <= session <= _SESSION_MS[1]:
            raise ConfigError(
                f"{NODES_SESSION_TIMEOUT_MS}: expected milliseconds from {_SESSION_MS[0]} to {_SESSION_MS[1]} "
                f"(the brokers' group session bounds), got {text!r}",
                key=NODES_SESSION_TIMEOUT_MS,
                origin=props.origin(NODES_SESSION_TIMEOUT_MS),
            )
        return cls(group, store, session)

    def default_store_cluster(self, flows: Iterable[Flow]) -> str | None:
        """Where a new store goes: the pinned cluster, else the first enabled flow's target (alphabetically)."""
        if self.store_cluster is not None:
            return self.store_cluster
        targets = sorted(f.target for f in flows)
        return targets[0] if targets else None

    @property
    def topic(self) -> str:
        return state_topic(self.group_id)


_SIBLING = "#"  # a node id never holds it: what follows names one of the node's extra worker processes


def member_id(node_id: str, worker: int) -> str:
    """The group member a node's worker process is (its ``group.instance.id``): the node's id for its first worker,
    ``<node id>#<n>`` for the n-th (``srm run --workers``)."""
    return node_id if worker == 0 else f"{node_id}{_SIBLING}{worker + 1}"


def node_of(member: str) -> str:
    """The node a group member (:func:`member_id`) runs on."""
    return member.partition(_SIBLING)[0]
