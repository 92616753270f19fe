"""The configuration's scopes, as the config table stores them: the global settings, one per cluster, one per flow.
A :class:`ConfigSnapshot` is every scope with its version, the base of a read-modify-write."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from srm.config.parsing import Properties
from srm.flow import Flow

__all__ = ["ConfigSnapshot", "Scope", "flatten_scopes", "scope_key", "split_scopes"]

_FLOW_KEY = re.compile(r"^(?P<flow>[^\s.,>]+?->[^\s.,>]+?)\.(?P<key>.+)$")


def scope_key(*, cluster: str | None = None, flow: Flow | None = None) -> str:
    """The sort key of a scope: the global settings, a cluster's, or a replication flow's."""
    if cluster is not None:
        return f"cluster#{cluster}"
    if flow is not None:
        return f"flow#{flow[0]}->{flow[1]}"
    return "global"


@dataclass(frozen=True)
class Scope:
    sk: str
    properties: dict[str, str]
    version: int = 0  # 0: not stored (yet)
    updated_at: str | None = None
    updated_by: str | None = None

    @property
    def label(self) -> str:
        kind, _, name = self.sk.partition("#")
        return {"global": "the global settings", "cluster": f"cluster {name}", "flow": f"flow {name}"}.get(
            kind, self.sk
        )


@dataclass(frozen=True)
class ConfigSnapshot:
    """Every scope of the table with its version, read consistently: the base of a read-modify-write."""

    table: str  # the store's name, as messages give it
    scopes: Mapping[str, Scope] = field(default_factory=dict)
    origin: str = ""  # where the properties come from, as their origins say it (default: the DynamoDB table)

    def scope(self, sk: str) -> Scope:
        return self.scopes.get(sk) or Scope(sk, {})

    def properties(self) -> Properties:
        origin = self.origin or f"dynamodb:{self.table}"
        return flatten_scopes(origin, {sk: s.properties for sk, s in self.scopes.items()})

    def __bool__(self) -> bool:
        return bool(self.scopes)


def split_scopes(props: Mapping[str, str], clusters: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Partition a flat property map into the table's scopes (the inverse of :meth:`ConfigSnapshot.properties`)."""
    scopes: dict[str, dict[str, str]] = {"global": {}}
    for key, value in props.items():
        m = _FLOW_KEY.match(key)
        head, _, rest = key.partition(".")
        if m:
            scopes.setdefault(f"flow#{m['flow']}", {})[m["key"]] = value
        elif head in clusters and rest:
            scopes.setdefault(f"cluster#{head}", {})[rest] = value
        else:
            scopes["global"][key] = value
    return scopes


def flatten_scopes(origin: str, scopes: Mapping[str, Mapping[str, str]]) -> Properties:
    """The flat property map of ``scopes``, each key's origin ``<origin>#<scope>``."""
    props = Properties(source=origin)
    for sk, values in sorted(scopes.items(), key=lambda kv: (kv[0] != "global", kv[0])):
        prefix = "" if sk == "global" else sk.split("#", 1)[1] + "."
        for key, value in values.items():
            props.set(prefix + key, value, f"{origin}#{sk}")
    return props
