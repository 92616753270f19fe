"""srm.config.settings' property hierarchy: resolve() and client_properties(), as one table from the least to the
most specific level."""

from __future__ import annotations

from typing import Any

import pytest

from srm.config.settings import client_properties
from srm.config.settings import resolve as resolve_setting

# role None: a replication setting through resolve() (cluster = the cluster level, i.e. the target alias);
# otherwise a Kafka client setting through client_properties(). Expected: (value, defining key) or None.
AB = ("a", "b")


def lookups(props: dict[str, str], *cases: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """One row per lookup, all in the same properties: (props, cluster, role, flow, key, expected)."""
    return [(props, *case) for case in cases]


HIERARCHY = [
    # -- resolve: global < <target>. < <source>-><target>.
    ({"topics": "g"}, "b", None, AB, "topics", ("g", "topics")),
    ({"topics": "g", "b.topics": "t"}, "b", None, AB, "topics", ("t", "b.topics")),
    ({"topics": "g", "a.topics": "s"}, "b", None, AB, "topics", ("g", "topics")),  # source alias is not a level
    ({"topics": "g", "b.topics": "t", "a->b.topics": "f"}, "b", None, AB, "topics", ("f", "a->b.topics")),
    ({"topics": "g", "b->a.topics": "r"}, "b", None, AB, "topics", ("g", "topics")),  # the reverse flow
    ({"b.topics": "t", "a->b.topics": "f"}, "b", None, None, "topics", ("t", "b.topics")),  # cluster only
    ({"a->b.topics": "f"}, "b", None, None, "topics", None),
    ({}, "b", None, AB, "topics", None),
    # -- client_properties: 1. global common keys only
    ({"security.protocol": "SSL"}, "a", "producer", None, "security.protocol", ("SSL", "security.protocol")),
    ({"ssl.cipher.suites": "X"}, "a", "admin", None, "ssl.cipher.suites", ("X", "ssl.cipher.suites")),
    ({"linger.ms": "5"}, "a", "producer", None, "linger.ms", None),
    # 2. <role>.
    *lookups(
        {"security.protocol": "SSL", "producer.security.protocol": "SASL_SSL"},
        ("a", "producer", None, "security.protocol", ("SASL_SSL", "producer.security.protocol")),
        ("a", "consumer", None, "security.protocol", ("SSL", "security.protocol")),
    ),
    # 3. <source|target>.<role>. by the cluster's side in the flow
    *lookups(
        {"producer.linger.ms": "5", "target.producer.linger.ms": "10"},
        ("b", "producer", AB, "linger.ms", ("10", "target.producer.linger.ms")),
        ("a", "producer", AB, "linger.ms", ("5", "producer.linger.ms")),
        ("b", "producer", None, "linger.ms", ("5", "producer.linger.ms")),
    ),
    *lookups(
        {"source.consumer.fetch.min.bytes": "2"},
        ("a", "consumer", AB, "fetch.min.bytes", ("2", "source.consumer.fetch.min.bytes")),
    ),
    # 4. <alias>. (common keys only) beats every global layer
    *lookups(
        {"bootstrap.servers": "g:1", "a.bootstrap.servers": "a:1"},
        ("a", "admin", None, "bootstrap.servers", ("a:1", "a.bootstrap.servers")),
        ("b", "admin", None, "bootstrap.servers", ("g:1", "bootstrap.servers")),
    ),
    *lookups(
        {"target.producer.bootstrap.servers": "t:1", "b.bootstrap.servers": "b:1"},
        ("b", "producer", AB, "bootstrap.servers", ("b:1", "b.bootstrap.servers")),
    ),
    ({"a.linger.ms": "99"}, "a", "producer", None, "linger.ms", None),
    ({"ab.bootstrap.servers": "ab:1"}, "a", "admin", None, "bootstrap.servers", None),
    # 5. <alias>.<role>.
    *lookups(
        {"b.bootstrap.servers": "b:1", "b.producer.bootstrap.servers": "bp:1"},
        ("b", "producer", None, "bootstrap.servers", ("bp:1", "b.producer.bootstrap.servers")),
        ("b", "consumer", None, "bootstrap.servers", ("b:1", "b.bootstrap.servers")),
    ),
    ({"a.producer.linger.ms": "20"}, "a", "consumer", None, "linger.ms", None),
    # 6. <a>-><b>.<role>. only for that flow
    *lookups(
        {"b.producer.linger.ms": "20", "a->b.producer.linger.ms": "30"},
        ("b", "producer", AB, "linger.ms", ("30", "a->b.producer.linger.ms")),
        ("b", "producer", None, "linger.ms", ("20", "b.producer.linger.ms")),
        ("b", "producer", ("c", "b"), "linger.ms", ("20", "b.producer.linger.ms")),
    ),
    # 7. <a>-><b>.<side>.<role>. beats everything, for its side only
    *lookups(
        {"a->b.consumer.fetch.min.bytes": "1", "a->b.source.consumer.fetch.min.bytes": "2"},
        ("a", "consumer", AB, "fetch.min.bytes", ("2", "a->b.source.consumer.fetch.min.bytes")),
    ),
    *lookups(
        {"a->b.consumer.fetch.min.bytes": "1", "a->b.target.consumer.fetch.min.bytes": "3"},
        ("a", "consumer", AB, "fetch.min.bytes", ("1", "a->b.consumer.fetch.min.bytes")),
    ),
    *lookups(
        {
            "bootstrap.servers": "1",
            "admin.bootstrap.servers": "2",
            "target.admin.bootstrap.servers": "3",
            "b.bootstrap.servers": "4",
            "b.admin.bootstrap.servers": "5",
            "a->b.admin.bootstrap.servers": "6",
            "a->b.target.admin.bootstrap.servers": "7",
        },
        ("b", "admin", AB, "bootstrap.servers", ("7", "a->b.target.admin.bootstrap.servers")),
    ),
]


@pytest.mark.parametrize(("props", "cluster", "role", "flow", "key", "expected"), HIERARCHY)
def test_hierarchy_setting_resolves_to_most_specific_level(props, cluster, role, flow, key, expected):
    # WHEN the setting is looked up for this cluster (and flow)
    if role is None:
        source = flow[0] if flow else None
        target = flow[1] if flow else cluster
        found = resolve_setting(props, key, source=source, target=target)
    else:
        found = client_properties(props, cluster, role, flow=flow).get(key)

    # THEN the value and the key that defined it are the most specific level's
    assert found == expected


def test_client_properties_unknown_role_raises():
    with pytest.raises(ValueError, match="unknown client role"):
        client_properties({}, "a", "streams")


def test_client_properties_strips_every_prefix_from_the_client_keys():
    props = {
        "bootstrap.servers": "g",
        "linger.ms": "1",
        "producer.acks": "all",
        "a.producer.linger.ms": "7",
        "a.sasl.mechanism": "SCRAM-SHA-512",
        "b.producer.acks": "1",
    }

    assert client_properties(props, "a", "producer") == {
        "bootstrap.servers": ("g", "bootstrap.servers"),
        "acks": ("all", "producer.acks"),
        "linger.ms": ("7", "a.producer.linger.ms"),
        "sasl.mechanism": ("SCRAM-SHA-512", "a.sasl.mechanism"),
    }
