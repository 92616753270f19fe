"""The exactly-once switch: MM2's (Kafka Connect's) key, at every level, validated on one line."""

from __future__ import annotations

import pytest

from tests.unit.config_files import BASE, config_error, load


def test_exactly_once_is_off_by_default():
    settings = load(BASE).settings("a", "b")

    assert settings.exactly_once_source_support == "disabled"
    assert not settings.exactly_once


@pytest.mark.parametrize(
    "key",
    ["exactly.once.source.support", "b.exactly.once.source.support", "a->b.exactly.once.source.support"],
    ids=["global", "target alias", "flow"],
)
def test_exactly_once_is_switched_on_at_every_level_and_any_case(key: str):
    settings = load({**BASE, key: "Enabled"}).settings("a", "b")

    assert settings.exactly_once_source_support == "enabled"
    assert settings.exactly_once


def test_the_flow_level_wins_and_preparing_writes_at_least_once():
    config = load({**BASE, "exactly.once.source.support": "enabled", "a->b.exactly.once.source.support": "preparing"})

    assert config.settings("a", "b").exactly_once_source_support == "preparing"
    assert not config.settings("a", "b").exactly_once


def test_a_bad_value_is_one_line_naming_key_value_and_line():
    error = config_error(BASE, "b.exactly.once.source.support = yes")

    message = str(error)
    assert "\n" not in message
    assert "b.exactly.once.source.support='yes'" in message
    assert "expected enabled, disabled or preparing" in message
    assert error.origin == "mm2.properties:5"


def test_exactly_once_refuses_a_source_read_uncommitted():
    error = config_error(
        {**BASE, "a->b.exactly.once.source.support": "enabled"}, "a.consumer.isolation.level = read_uncommitted"
    )

    assert "a.consumer.isolation.level=read_uncommitted" in str(error)
    assert "read_committed" in str(error)
