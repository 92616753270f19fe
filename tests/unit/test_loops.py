"""srm.core.loops: the identity loop guard — refused configurations, "came from" over hops, the provenance header."""

from __future__ import annotations

import pytest

from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.core.filters import ReplicateDecision, TopicFilter
from srm.core.loops import came_from, identity_loops, literal_name, provenance, stamp_provenance
from srm.errors import ConfigError
from srm.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy

IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"


@pytest.mark.parametrize(
    ("pattern", "name"),
    [
        ("orders", "orders"),
        ("orders\\.v1", "orders.v1"),
        ("my-topic_2", "my-topic_2"),
        ("orders.*", None),
        ("a|b", None),
        ("\\d+", None),
        ("t.", None),
        ("", None),
    ],
)
def test_literal_name_plain_names_only(pattern: str, name: str | None) -> None:
    assert literal_name(pattern) == name


def flows(*specs: tuple[str, str, str, str]) -> dict:
    """(source, target, topics, topics.exclude) with the identity policy of each source."""
    return {
        (s, t): ReplicateDecision(t, IdentityReplicationPolicy(source_alias=s), TopicFilter.of(topics, exclude or None))
        for s, t, topics, exclude in specs
    }


@pytest.mark.parametrize(
    ("specs", "expected"),
    [
        pytest.param(
            [("a", "b", "orders", ""), ("b", "a", "orders", "")],
            ["topic 'orders' would loop a -> b -> a"],
            id="same-literal-both-ways",
        ),
        pytest.param(
            [("a", "b", "orders", ""), ("b", "a", "ord.*", "")],
            ["topic 'orders' would loop a -> b -> a"],
            id="literal-one-way-regex-back",
        ),
        pytest.param(
            [("a", "b", "orders", ""), ("b", "c", "orders", ""), ("c", "a", ".*", "")],
            ["topic 'orders' would loop a -> b -> c -> a"],
            id="three-hop-cycle",
        ),
        pytest.param([("a", "b", "orders", ""), ("b", "a", "payments", "")], [], id="disjoint"),
        pytest.param([("a", "b", "orders", ""), ("b", "a", ".*", "orders")], [], id="excluded-back"),
        pytest.param([("a", "b", "ord.*", ""), ("b", "a", "ord.*", "")], [], id="regexes-left-to-runtime"),
        pytest.param([("a", "b", "orders", ""), ("b", "c", "orders", "")], [], id="chain-no-cycle"),
    ],
)
def test_identity_loops_finds_cycles_of_literal_topics(specs, expected) -> None:
    assert [str(loop) for loop in identity_loops(flows(*specs))] == expected


def test_identity_loops_default_policy_renames_so_no_loop() -> None:
    default = DefaultReplicationPolicy()
    both = {
        ("a", "b"): ReplicateDecision("b", default, TopicFilter.of("orders")),
        ("b", "a"): ReplicateDecision("a", default, TopicFilter.of("orders")),
    }
    assert identity_loops(both) == []


def config(**flow_settings: str) -> Properties:
    return Properties.of(
        {
            "clusters": "a, b",
            "a.bootstrap.servers": "a:9092",
            "b.bootstrap.servers": "b:9092",
            "replication.policy.class": IDENTITY,
            **{k.replace("__", "->").replace("_", "."): v for k, v in flow_settings.items()},
        },
        source="srm.config.parsing",
    )


def test_config_with_identity_flows_both_ways_on_same_topic_is_refused_naming_topic_and_flows() -> None:
    props = config(a__b_enabled="true", b__a_enabled="true", a__b_topics="orders", b__a_topics="orders, x")
    with pytest.raises(ConfigError) as e:
        SrmConfig.from_properties(props)
    assert "topic 'orders' would loop a -> b -> a" in str(e.value)
    assert e.value.key == "a->b.topics"


def test_config_with_one_direction_disabled_is_accepted() -> None:
    props = config(a__b_enabled="true", b__a_enabled="false", a__b_topics="orders", b__a_topics="orders")
    assert SrmConfig.from_properties(props).enabled_flows() == [("a", "b")]


# -- came from -----------------------------------------------------------------------------------------------------
def test_came_from_direct_and_over_hops_but_not_elsewhere() -> None:
    # GIVEN orders created on a by b->a, and on c by a->c (so c's orders came from b through a)
    origins = {("a", "orders"): [("b", "orders")], ("c", "orders"): [("a", "orders")]}
    assert came_from("orders", "a", "b", origins)
    assert came_from("orders", "c", "b", origins)
    assert came_from("orders", "c", "a", origins)
    assert not came_from("orders", "b", "a", origins)  # b's orders is an origin
    assert not came_from("payments", "a", "b", origins)


def test_came_from_survives_a_cycle_in_the_records() -> None:
    origins = {("a", "t"): [("b", "t")], ("b", "t"): [("a", "t")]}
    assert not came_from("t", "a", "c", origins)


# -- provenance header ---------------------------------------------------------------------------------------------
def test_stamp_provenance_appends_header_keeping_others_in_order() -> None:
    headers = [("h", b"1"), ("h", b"2"), ("nil", None)]
    assert stamp_provenance(headers, "a", "b") == [*headers, ("srm-provenance", b"a")]


def test_stamp_provenance_extends_in_place() -> None:
    stamped = stamp_provenance([("srm-provenance", b"a"), ("h", b"1")], "b", "c")
    assert stamped == [("srm-provenance", b"a,b"), ("h", b"1")]
    assert provenance(stamped) == ["a", "b"]


@pytest.mark.parametrize("visited", [b"b", b"a,b", b"b,c"])
def test_stamp_provenance_record_that_visited_target_is_skipped(visited: bytes) -> None:
    assert stamp_provenance([("srm-provenance", visited)], "a", "b") is None


def test_stamp_provenance_no_headers() -> None:
    assert stamp_provenance(None, "a", "b") == [("srm-provenance", b"a")]
    assert provenance(None) == []
