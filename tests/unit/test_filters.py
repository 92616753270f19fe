"""srm.core.filters: MM2 pattern lists, default filters, the decision (filter or heartbeats) ∧ ¬internal ∧ ¬cycle."""

from __future__ import annotations

import pytest

from srm.core.filters import (
    FilterError,
    GroupFilter,
    PatternList,
    TopicFilter,
    is_internal_group,
    parse_list,
    should_replicate_topic,
)
from srm.mm2.policy import DefaultReplicationPolicy, IdentityReplicationPolicy
from tests.unit.cases import by_outcome


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("a,b", ("a", "b")),
        ("  a ,b  ,\tc  ", ("a", "b", "c")),
        ("orders.*", ("orders.*",)),
        ("", ()),
        ("   ", ()),
        (None, ()),
        (["a ", " b", "", "  "], ("a", "b")),
        (r"x{1,2}", ("x{1", "2}")),  # MM2 splits on every comma, even inside a regex
    ],
)
def test_parse_list_splits_on_commas_with_whitespace(value, items):
    assert parse_list(value) == items


@pytest.mark.parametrize(
    ("patterns", "name", "matches"),
    [
        ("orders", "orders", True),
        ("orders", "orders2", False),  # whole name, not a prefix
        ("orders", "my-orders", False),  # nor a substring
        ("ord.*", "orders", True),
        ("orders, payments", "payments", True),
        ("orders, payments", "ordersp", False),
        ("foo|bar, baz", "bar", True),
        ("foo|bar, baz", "foobaz", False),
        ("a.*b", "a-x-b", True),
        ("", "anything", False),  # blank matches nothing
        ("", "", False),
    ],
)
def test_pattern_list_matches_whole_names_only(patterns, name, matches):
    assert PatternList.parse(patterns, "topics").matches(name) is matches


def test_pattern_list_bad_regex_raises_filter_error_naming_key_and_pattern():
    with pytest.raises(FilterError) as info:
        PatternList.parse("ok.*, bad(", "topics.exclude")

    assert info.value.key == "topics.exclude"
    assert info.value.pattern == "bad("
    assert str(info.value).startswith("topics.exclude: 'bad(' is not a valid regex")


# what the default filters replicate: MM2's default topics.exclude and groups.exclude, and srm's own groups
DEFAULT_TOPICS = by_outcome(
    true=["orders", "internal-orders", "orders_internal", "orders-replica", "_orders"],
    false=["orders.internal", "orders-internal", "orders.replica", "__consumer_offsets"],
)
DEFAULT_GROUPS = by_outcome(
    true=["app", "my-console-consumer-1", "connector-app"],
    # srm-mirror-a-b: one of our own event source groups
    false=["console-consumer-12345", "connect-my-sink", "__internal", "srm-mirror-a-b"],
)


@pytest.mark.parametrize(
    ("kind", "name", "replicated"),
    [("topic", *row) for row in DEFAULT_TOPICS] + [("group", *row) for row in DEFAULT_GROUPS],
)
def test_default_filters_exclude_mm2_default_patterns_and_our_groups(kind, name, replicated):
    replicates = TopicFilter.of().should_replicate_topic if kind == "topic" else GroupFilter.of().should_replicate_group
    assert replicates(name) is replicated


def test_topic_filter_include_and_explicit_exclude():
    f = TopicFilter.of("orders.*, payments", "orders\\.test.*")

    assert f.should_replicate_topic("orders.eu")
    assert f.should_replicate_topic("payments")
    assert not f.should_replicate_topic("orders.test.1")
    assert not f.should_replicate_topic("refunds")
    assert TopicFilter.of(".*", "").should_replicate_topic("x.internal")  # blank exclude excludes nothing
    assert not TopicFilter.of("", "").should_replicate_topic("orders")  # blank include includes nothing


def test_group_filter_include_list_and_internal_groups_never_pass():
    f = GroupFilter.of("app-.*, srm-.*", "")

    assert f.should_replicate_group("app-1")
    assert not f.should_replicate_group("other")
    assert not f.should_replicate_group("srm-anything")
    assert is_internal_group("srm-x") and is_internal_group("__x") and not is_internal_group("app")


DEFAULT = DefaultReplicationPolicy()
ONLY_PAYMENTS = TopicFilter.of("payments", "")
EVERYTHING = TopicFilter.of(".*", "")


@pytest.mark.parametrize(
    ("topic", "target", "policy", "topic_filter", "heartbeats", "replicated"),
    [
        # filter term
        ("orders", "b", DEFAULT, TopicFilter.of(), True, True),
        ("orders", "b", DEFAULT, ONLY_PAYMENTS, True, False),
        ("payments", "b", DEFAULT, ONLY_PAYMENTS, True, True),
        # heartbeats term: always, whatever the filter, unless heartbeats replication is off
        ("heartbeats", "b", DEFAULT, ONLY_PAYMENTS, True, True),
        ("c.heartbeats", "b", DEFAULT, ONLY_PAYMENTS, True, True),
        ("heartbeats", "b", DEFAULT, ONLY_PAYMENTS, False, False),
        ("heartbeats", "b", DEFAULT, TopicFilter.of("", "heartbeats"), True, True),
        # internal term: never, even when the filter lets everything through
        ("__consumer_offsets", "b", DEFAULT, EVERYTHING, True, False),
        ("connect-offsets.internal", "b", DEFAULT, EVERYTHING, True, False),
        ("mm2-offset-syncs.b.internal", "b", DEFAULT, EVERYTHING, True, False),
        ("a.checkpoints.internal", "b", DEFAULT, EVERYTHING, True, False),
        ("srm-state", "b", DEFAULT, EVERYTHING, True, False),
        # cycle term: never back to a cluster it came through, heartbeats included
        ("b.orders", "b", DEFAULT, EVERYTHING, True, False),
        ("c.b.orders", "b", DEFAULT, EVERYTHING, True, False),
        ("b.heartbeats", "b", DEFAULT, EVERYTHING, True, False),
        ("c.b.orders", "d", DEFAULT, EVERYTHING, True, True),
        # identity policy: names are not provenance
        ("b.orders", "b", IdentityReplicationPolicy(source_alias="a"), EVERYTHING, True, True),
        ("b.heartbeats", "b", IdentityReplicationPolicy(source_alias="a"), EVERYTHING, True, False),
    ],
)
def test_should_replicate_topic_is_filter_or_heartbeats_and_not_internal_and_not_cycle(
    topic, target, policy, topic_filter, heartbeats, replicated
):
    decision = should_replicate_topic(
        topic,
        target_alias=target,
        policy=policy,
        topic_filter=topic_filter,
        heartbeats_replication_enabled=heartbeats,
    )

    assert decision is replicated
