"""srm.mm2.policy: MM2's naming rules (DefaultReplicationPolicy, IdentityReplicationPolicy), loading by class name."""

from __future__ import annotations

import pytest

from srm.mm2.policy import (
    DefaultReplicationPolicy,
    IdentityReplicationPolicy,
    PolicyError,
    ReplicationPolicy,
    load_policy,
)
from tests.unit.cases import by_outcome


class SuffixPolicy(DefaultReplicationPolicy):
    """A custom policy for load_policy: ``<topic>-from-<source>``; takes no constructor options."""

    def __init__(self) -> None:
        super().__init__(".")

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{topic}-from-{source_alias}"


class SeparatorOnlyPolicy(DefaultReplicationPolicy):
    def __init__(self, separator: str = ".") -> None:
        super().__init__(separator)


class NotAPolicy:
    pass


# ---------------------------------------------------------------------------------------------------------------
# DefaultReplicationPolicy
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("separator", "source", "topic", "remote"),
    [
        (".", "us-west", "orders", "us-west.orders"),
        (".", "us-east", "us-west.orders", "us-east.us-west.orders"),
        ("_", "us-west", "orders", "us-west_orders"),
        ("--", "a", "b--t", "a--b--t"),
    ],
)
def test_default_policy_format_remote_topic_prefixes_source_alias(separator, source, topic, remote):
    assert DefaultReplicationPolicy(separator).format_remote_topic(source, topic) == remote


@pytest.mark.parametrize(
    ("separator", "topic", "source", "upstream", "original", "hops"),
    [
        (".", "orders", None, None, "orders", []),
        (".", "us-west.orders", "us-west", "orders", "orders", ["us-west"]),
        (".", "us-east.us-west.orders", "us-east", "us-west.orders", "orders", ["us-east", "us-west"]),
        (".", "c.b.a.t", "c", "b.a.t", "t", ["c", "b", "a"]),
        (".", "a.", None, None, "a.", []),  # Java's split drops trailing empties: not remote
        ("_", "us-west.orders", None, None, "us-west.orders", []),
        ("_", "b_a_orders.v1", "b", "a_orders.v1", "orders.v1", ["b", "a"]),
        ("--", "b--a--t", "b", "a--t", "t", ["b", "a"]),
    ],
)
def test_default_policy_name_tells_source_upstream_original_and_hops(
    separator, topic, source, upstream, original, hops
):
    policy = DefaultReplicationPolicy(separator)

    assert policy.topic_source(topic) == source
    assert policy.upstream_topic(topic) == upstream
    assert policy.original_topic(topic) == original
    assert policy.upstream_clusters(topic) == hops


@pytest.mark.parametrize(
    ("topic", "target", "cycle"),
    [
        ("orders", "a", False),
        ("a.orders", "a", True),
        ("a.orders", "b", False),
        ("b.a.orders", "a", True),  # came from a via b: never back to a
        ("b.a.orders", "b", True),
        ("b.a.orders", "c", False),
        ("b.a.heartbeats", "a", True),
        ("ab.orders", "a", False),  # prefix match is by whole alias
    ],
)
def test_default_policy_is_cycle_when_target_is_upstream(topic, target, cycle):
    assert DefaultReplicationPolicy().is_cycle(topic, target) is cycle


@pytest.mark.parametrize(
    ("topic", "internal"),
    by_outcome(
        true=[
            "__consumer_offsets",
            "__transaction_state",
            ".hidden",
            "connect-offsets.internal",
            "connect-configs-internal",
            "a.checkpoints.internal",
            "mm2-offset-syncs.b.internal",
            "mm2-status",
            "srm-state",
        ],
        false=[
            "orders",
            "heartbeats",
            "a.heartbeats",
            "orders.internalized",
            "internal",
            "internal-orders",
            "orders_internal",
            "my-mm2-topic",
            "_single_underscore",
        ],
    ),
)
def test_default_policy_is_internal_topic_follows_mm2_rules(topic, internal):
    assert DefaultReplicationPolicy().is_internal_topic(topic) is internal


def test_default_policy_custom_separator_internal_suffix_uses_that_separator():
    policy = DefaultReplicationPolicy("_")

    assert policy.is_internal_topic("connect_internal")
    assert policy.is_internal_topic("x.internal")  # Connect's own names stay internal
    assert not DefaultReplicationPolicy().is_internal_topic("connect_internal")


@pytest.mark.parametrize(
    ("separator", "enabled", "heartbeats", "checkpoints", "offset_syncs"),
    [
        (".", True, "heartbeats", "a.checkpoints.internal", "mm2-offset-syncs.b.internal"),
        ("_", True, "heartbeats", "a_checkpoints_internal", "mm2-offset-syncs_b_internal"),
        ("_", False, "heartbeats", "a.checkpoints.internal", "mm2-offset-syncs.b.internal"),
    ],
)
def test_default_policy_bookkeeping_topic_names_are_mm2s(separator, enabled, heartbeats, checkpoints, offset_syncs):
    policy = DefaultReplicationPolicy(separator, internal_topic_separator_enabled=enabled)

    assert policy.heartbeats_topic() == heartbeats
    assert policy.checkpoints_topic("a") == checkpoints
    assert policy.offset_syncs_topic("b") == offset_syncs
    assert policy.is_checkpoints_topic(checkpoints)
    assert policy.is_internal_topic(checkpoints)
    assert policy.is_internal_topic(offset_syncs)
    assert not policy.is_checkpoints_topic("a" + separator + "orders")


@pytest.mark.parametrize(
    ("topic", "is_heartbeats"),
    by_outcome(
        true=["heartbeats", "a.heartbeats", "b.a.heartbeats"], false=["a.heartbeats2", "myheartbeats", "heartbeats.a"]
    ),
)
def test_default_policy_is_heartbeats_topic_by_original_name(topic, is_heartbeats):
    assert DefaultReplicationPolicy().is_heartbeats_topic(topic) is is_heartbeats


def test_default_policy_empty_separator_raises_policy_error():
    with pytest.raises(PolicyError, match="separator"):
        DefaultReplicationPolicy("")


# ---------------------------------------------------------------------------------------------------------------
# IdentityReplicationPolicy
# ---------------------------------------------------------------------------------------------------------------
def test_identity_policy_keeps_names_but_prefixes_heartbeats():
    policy = IdentityReplicationPolicy(source_alias="a")

    assert policy.format_remote_topic("a", "orders") == "orders"
    assert policy.format_remote_topic("a", "b.orders") == "b.orders"
    assert policy.format_remote_topic("a", "heartbeats") == "a.heartbeats"
    assert policy.format_remote_topic("a", "b.heartbeats") == "a.b.heartbeats"


def test_identity_policy_source_is_configured_alias_and_name_is_its_own_upstream():
    policy = IdentityReplicationPolicy(source_alias="a")

    assert policy.topic_source("b.orders") == "a"
    assert policy.upstream_topic("b.orders") == "b.orders"
    assert policy.original_topic("b.orders") == "b.orders"
    assert policy.upstream_clusters("b.orders") == ["a"]
    assert IdentityReplicationPolicy().topic_source("orders") is None


def test_identity_policy_heartbeats_names_still_carry_hops():
    policy = IdentityReplicationPolicy(source_alias="c")

    assert policy.topic_source("b.a.heartbeats") == "b"
    assert policy.upstream_topic("b.a.heartbeats") == "a.heartbeats"
    assert policy.original_topic("b.a.heartbeats") == "heartbeats"
    assert policy.upstream_clusters("b.a.heartbeats") == ["b", "a"]
    assert policy.is_heartbeats_topic("b.a.heartbeats")


def test_identity_policy_no_cycle_detection_by_name_except_heartbeats():
    # GIVEN a flow a->b with the identity policy
    policy = IdentityReplicationPolicy(source_alias="a")

    # THEN a prefix that looks like the target is not read as provenance (MM2: loops are the filters' job)
    assert not policy.is_cycle("b.orders", "b")
    assert not policy.is_cycle("orders", "b")
    # BUT heartbeats keep their prefixes, so their loops are still seen
    assert policy.is_cycle("b.heartbeats", "b")


def test_identity_policy_bookkeeping_names_and_internal_rules_same_as_default():
    identity, default = IdentityReplicationPolicy(source_alias="a"), DefaultReplicationPolicy()

    assert identity.checkpoints_topic("a") == default.checkpoints_topic("a")
    assert identity.offset_syncs_topic("b") == default.offset_syncs_topic("b")
    assert identity.heartbeats_topic() == "heartbeats"
    assert identity.is_internal_topic("__consumer_offsets")
    assert not identity.is_internal_topic("orders")


# ---------------------------------------------------------------------------------------------------------------
# load_policy
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("org.apache.kafka.connect.mirror.DefaultReplicationPolicy", DefaultReplicationPolicy),
        ("org.apache.kafka.connect.mirror.IdentityReplicationPolicy", IdentityReplicationPolicy),
        ("DefaultReplicationPolicy", DefaultReplicationPolicy),
        ("IdentityReplicationPolicy", IdentityReplicationPolicy),
        ("srm.policy.DefaultReplicationPolicy", DefaultReplicationPolicy),
        ("srm.policy.IdentityReplicationPolicy", IdentityReplicationPolicy),
    ],
)
def test_load_policy_mm2_java_names_and_ours_build_our_classes(name, cls):
    policy = load_policy(name, "_", source_alias="a")

    assert type(policy) is cls
    assert policy.separator == "_"


def test_load_policy_identity_receives_source_alias():
    policy = load_policy("org.apache.kafka.connect.mirror.IdentityReplicationPolicy", source_alias="us-west")

    assert policy.topic_source("orders") == "us-west"


def test_load_policy_custom_dotted_class_gets_only_options_it_accepts():
    custom = load_policy(f"{__name__}.SuffixPolicy", "_", source_alias="a")
    with_separator = load_policy(f"{__name__}.SeparatorOnlyPolicy", "_", source_alias="a")

    assert isinstance(custom, SuffixPolicy)
    assert custom.format_remote_topic("a", "orders") == "orders-from-a"
    assert isinstance(with_separator, SeparatorOnlyPolicy)
    assert with_separator.format_remote_topic("a", "orders") == "a_orders"


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("NoSuchPolicy", "expected a dotted path"),
        ("com.example.NoSuchPolicy", "cannot import"),
        ("srm.policy.NoSuchPolicy", "cannot import"),
        (f"{__name__}.NotAPolicy", "not a srm.policy.ReplicationPolicy subclass"),
        ("srm.policy.load_policy", "not a srm.policy.ReplicationPolicy subclass"),
    ],
)
def test_load_policy_bad_name_raises_policy_error_naming_it(name, fragment):
    with pytest.raises(PolicyError) as info:
        load_policy(name)

    assert repr(name) in str(info.value)
    assert fragment in str(info.value)


def test_replication_policy_base_naming_methods_are_abstract():
    with pytest.raises(NotImplementedError):
        ReplicationPolicy().format_remote_topic("a", "t")
