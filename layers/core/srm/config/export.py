"""Writing a property map back out: ``mm2.properties`` or YAML, grouped by scope, each parsing back to exactly the
same map (:mod:`srm.config.parsing`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from srm.config.parsing import as_text
from srm.config.scopes import scope_key, split_scopes

__all__ = ["format_properties", "format_yaml"]

_FIRST = ("clusters", "bootstrap.servers", "enabled", "topics", "topics.exclude", "groups", "groups.exclude")


def _ordered(values: Mapping[str, str]) -> list[tuple[str, str]]:
    return sorted(values.items(), key=lambda kv: (_FIRST.index(kv[0]) if kv[0] in _FIRST else len(_FIRST), kv[0]))


def _scopes_in_order(props: Mapping[str, str], clusters: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    scopes = split_scopes(props, tuple(clusters))
    order = ["global", *(scope_key(cluster=c) for c in clusters)]
    order += sorted(sk for sk in scopes if sk not in order)
    return [(sk, scopes[sk]) for sk in order if sk in scopes]


def _escape(text: str, *, key: bool) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[ch])
        elif (key and ch in " =:#!") or (i == 0 and ch in " #!"):
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)


def format_properties(props: Mapping[str, str], clusters: Sequence[str]) -> str:
    """An ``mm2.properties`` that parses back (:func:`srm.config.parsing.parse_properties_text`) to ``props``."""
    lines: list[str] = []
    for sk, values in _scopes_in_order(props, clusters):
        if not values:
            continue
        kind, _, name = sk.partition("#")
        prefix = "" if sk == "global" else name + "."
        lines.append(f"# {'global settings' if sk == 'global' else f'{kind} {name}'}")
        lines += [f"{_escape(prefix + k, key=True)} = {_escape(v, key=False)}" for k, v in _ordered(values)]
        lines.append("")
    return "\n".join(lines)


def _yaml_value(value: str) -> Any:
    """A native YAML scalar when it reads back as the same string (``true``, ``3``), else the string."""
    try:
        native = yaml.safe_load(value) if value else value
    except yaml.YAMLError:
        return value
    if isinstance(native, bool | int | float) and as_text(native) == value:
        return native
    return value


def format_yaml(props: Mapping[str, str], clusters: Sequence[str]) -> str:
    """The YAML form (``clusters:``, ``flows:``, global keys) that parses back to the same property map."""
    doc: dict[str, Any] = {"clusters": {c: {} for c in clusters}}
    flows: dict[str, dict[str, Any]] = {}
    for sk, values in _scopes_in_order(props, clusters):
        kind, _, name = sk.partition("#")
        converted = {k: _yaml_value(v) for k, v in _ordered(values)}
        if sk == "global":
            doc.update({k: v for k, v in converted.items() if k != "clusters"})
        elif kind == "cluster":
            doc["clusters"][name] = converted
        else:
            flows[name] = converted
    if flows:
        doc["flows"] = flows
    # Keep `clusters` and `flows` on top, the global settings after them.
    ordered = {"clusters": doc.pop("clusters"), **({"flows": doc.pop("flows")} if "flows" in doc else {}), **doc}
    return yaml.safe_dump(ordered, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000)
