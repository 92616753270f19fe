"""Parsing: a configuration file (YAML or MM2's ``mm2.properties``) → one flat MM2 property map that remembers where
each key came from (``file:line``), so errors can name file and line and the config table can store exactly what MM2
would read."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from srm.errors import ConfigError

__all__ = ["Properties", "as_text", "decode_text", "parse_config_bytes", "parse_properties_text", "parse_yaml_text"]

_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")


@dataclass
class Properties(Mapping[str, str]):
    """A flat MM2 property map that remembers where each key was defined (``file:line``)."""

    data: dict[str, str] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    source: str = "<memory>"

    def __getitem__(self, key: str) -> str:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def origin(self, key: str) -> str:
        return self.origins.get(key, self.source)

    def set(self, key: str, value: Any, origin: str | None = None) -> None:
        self.data[key] = as_text(value)
        self.origins[key] = origin or self.source

    def remove(self, key: str) -> None:
        self.data.pop(key, None)
        self.origins.pop(key, None)

    @classmethod
    def of(cls, values: Mapping[str, Any], source: str = "<memory>") -> Properties:
        props = cls(source=source)
        for k, v in values.items():
            props.set(k, v)
        return props


def as_text(value: Any) -> str:
    """A YAML or JSON value as the text an MM2 property holds (booleans lower case, lists comma-separated)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(as_text(v) for v in value)
    return "" if value is None else str(value)


# ---------------------------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------------------------
def decode_text(data: bytes, source: str) -> str:
    """A file's bytes as text: UTF-8 (a leading byte order mark dropped, as editors on Windows write one), or a
    :class:`ConfigError` naming the first offending byte, its offset and line."""
    if b"\x00" in data:  # no text editor writes NUL: a binary file, or UTF-16
        at = data.index(b"\x00")
        hint = "; it looks like UTF-16: save it as UTF-8" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else ""
        raise ConfigError(f"not a text file (a NUL byte at offset {at}){hint}", origin=_line_of(data, at, source))
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); save the file as UTF-8",
            origin=_line_of(data, e.start, source),
        ) from None


def _line_of(data: bytes, offset: int, source: str) -> str:
    line = data.count(b"\n", 0, offset) + 1
    return f"{source}:{line}"


def parse_config_bytes(data: bytes, source: str) -> Properties:
    """A configuration file's content, in the format its name's extension says (``.yaml``/``.yml`` or
    ``.properties``)."""
    if source.endswith((".yaml", ".yml")):
        return parse_yaml_text(decode_text(data, source), source)
    if source.endswith(".properties"):
        return parse_properties_text(decode_text(data, source), source)
    raise ConfigError("unknown config format: use .yaml/.yml or .properties (mm2.properties)", origin=source)


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and _HEX4.fullmatch(text, i + 2, i + 6):  # exactly four hex digits, as Java requires
                try:
                    out.append(chr(int(text[i + 2 : i + 6], 16)))
                    i += 6
                    continue
                except ValueError:
                    pass
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def parse_properties_text(text: str, source: str = "<properties>") -> Properties:
    """Java ``.properties`` syntax: ``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments;
    a trailing backslash continues the line."""
    props = Properties(source=source)
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        lineno, logical = i + 1, lines[i].lstrip()
        i += 1
        if not logical or logical[0] in "#!":
            continue
        while _ends_with_continuation(logical) and i < len(lines):
            logical = logical[:-1] + lines[i].lstrip()
            i += 1
        key_end, j = len(logical), 0
        while j < len(logical):
            if logical[j] == "\\":
                j += 2
                continue
            if logical[j] in "=: \t":
                key_end = j
                break
            j += 1
        key = _unescape(logical[:key_end])
        rest = logical[key_end:].lstrip(" \t")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t")
        props.set(key, _unescape(rest).strip(), f"{source}:{lineno}")
    return props


def _ends_with_continuation(line: str) -> bool:
    backslashes = len(line) - len(line.rstrip("\\"))
    return backslashes % 2 == 1


def parse_yaml_text(text: str, source: str = "<yaml>") -> Properties:
    """YAML: ``clusters:`` (a map of alias → settings, or a list), ``flows:`` (``a->b`` → settings) and any
    other key global; nested maps join with dots and lists join with commas, giving MM2 keys."""
    import yaml

    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.reader.ReaderError as e:  # a control character: its str() spans lines and has no mark
        line = text.count("\n", 0, e.position) + 1
        raise ConfigError(
            f"not valid YAML: control character 0x{e.character:02x} ({e.reason})", origin=f"{source}:{line}"
        ) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{source}:{mark.line + 1}" if mark else source
        raise ConfigError(f"not valid YAML: {getattr(e, 'problem', e)}", origin=where) from None
    props = Properties(source=source)
    if root is None:
        return props
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError("the top level must be a mapping of settings", origin=f"{source}:{root.start_mark.line + 1}")

    def origin(node: yaml.Node) -> str:
        return f"{source}:{node.start_mark.line + 1}"

    def scalar(node: yaml.Node) -> Any:
        if isinstance(node, yaml.ScalarNode):
            if node.tag == "tag:yaml.org,2002:str":
                return node.value
            try:
                return yaml.safe_load(yaml.serialize(node))
            except yaml.YAMLError as e:  # a node the composer took but cannot be read back alone
                raise ConfigError(
                    f"cannot read the value {node.value!r}: {getattr(e, 'problem', e)}", origin=origin(node)
                ) from None

        if isinstance(node, yaml.SequenceNode):
            return [scalar(n) for n in node.value]
        raise ConfigError("expected a value or a list", origin=origin(node))

    def flatten(prefix: str, node: yaml.Node) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                flatten(f"{prefix}{k.value}.", v)
        else:
            props.set(prefix[:-1], scalar(node), origin(node))

    for key_node, value_node in root.value:
        key = key_node.value
        if key == "clusters" and isinstance(value_node, yaml.MappingNode):
            props.set("clusters", [k.value for k, _ in value_node.value], origin(value_node))
            for alias_node, settings in value_node.value:
                if isinstance(settings, yaml.MappingNode):
                    flatten(f"{alias_node.value}.", settings)
                elif not (isinstance(settings, yaml.ScalarNode) and settings.value in ("", "~", "null")):
                    raise ConfigError(f"clusters.{alias_node.value} must be a mapping", origin=origin(settings))
        elif key == "flows" and isinstance(value_node, yaml.MappingNode):
            for flow_node, settings in value_node.value:
                if not isinstance(settings, yaml.MappingNode):
                    raise ConfigError(f"flows.{flow_node.value} must be a mapping", origin=origin(settings))
                flatten(f"{flow_node.value}.", settings)
        else:
            flatten(f"{key}.", value_node)
    return props
