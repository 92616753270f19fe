"""Configuration files for the srm.config tests: a properties file from lines (so origins have line numbers), and a
two-cluster base to load or to fail with."""

from __future__ import annotations

import pytest

from srm.config.parsing import Properties, parse_properties_text
from srm.config.settings import SrmConfig
from srm.errors import ConfigError

__all__ = ["BASE", "config_error", "load", "properties_file"]

BASE = {
    "clusters": "a, b",
    "a.bootstrap.servers": "a:9092",
    "b.bootstrap.servers": "b:9092",
    "a->b.enabled": "true",
}


def properties_file(*lines: str, source: str = "mm2.properties") -> Properties:
    return parse_properties_text("\n".join(lines) + "\n", source)


def load(props: dict[str, str], *extra_lines: str) -> SrmConfig:
    """A config from BASE plus ``extra_lines`` written after it in a properties file (so origins have lines)."""
    lines = [f"{k} = {v}" for k, v in props.items()]
    return SrmConfig.from_properties(properties_file(*lines, *extra_lines))


def config_error(props: dict[str, str], *extra_lines: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(props, *extra_lines)
    return info.value
