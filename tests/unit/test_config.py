"""srm.config: parsing both file formats, the property hierarchy, validation with origins, defaults, redaction."""

from __future__ import annotations

import textwrap

import pytest

from srm.config.parsing import Properties, parse_properties_text, parse_yaml_text
from srm.config.settings import SrmConfig, client_properties
from srm.config.settings import resolve as resolve_setting
from srm.core.filters import parse_list
from srm.errors import ConfigError

# The same two-cluster setup, in both formats: they must flatten to the same property map.
MM2_PROPERTIES = textwrap.dedent(
    """\
    # two clusters, one replication
    clusters = us-west, us-east
    us-west.bootstrap.servers = west-1:9092,west-2:9092
    us-east.bootstrap.servers = east-1:9092
    us-east.security.protocol = SASL_SSL
    us-east.producer.linger.ms = 5
    us-west->us-east.enabled = true
    us-west->us-east.topics = orders.*, payments
    us-west->us-east.emit.checkpoints.interval.seconds = 30
    replication.factor = 3
    """
)
YAML = textwrap.dedent(
    """\
    clusters:
      us-west:
        bootstrap.servers: west-1:9092,west-2:9092
      us-east:
        bootstrap:
          servers: east-1:9092
        security.protocol: SASL_SSL
        producer:
          linger.ms: 5
    flows:
      us-west->us-east:
        enabled: true
        topics: [orders.*, payments]
        emit.checkpoints.interval.seconds: 30
    replication.factor: 3
    """
)

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


# ---------------------------------------------------------------------------------------------------------------
# parse_properties_text
# ---------------------------------------------------------------------------------------------------------------
def test_parse_properties_separators_equals_colon_space_all_give_key_value():
    props = properties_file("a.x=1", "a.y: 2", "a.z   3", "a.w\t=\t 4 ", "  a.v = spaced value  ")

    assert dict(props) == {"a.x": "1", "a.y": "2", "a.z": "3", "a.w": "4", "a.v": "spaced value"}


def test_parse_properties_comments_and_blank_lines_are_skipped_and_origins_count_every_line():
    props = properties_file("# comment = 1", "! bang: 2", "", "   ", "   # indented comment", "k = v")

    assert dict(props) == {"k": "v"}
    assert props.origin("k") == "mm2.properties:6"


def test_parse_properties_line_continuation_joins_lines_and_keeps_first_line_origin():
    # GIVEN a value continued over three lines (leading whitespace of continuation lines is dropped)
    props = properties_file(
        "first = 1", "topics = orders.*, \\", "    payments, \\", "      # not a comment", "last = 2"
    )

    assert props["topics"] == "orders.*, payments, # not a comment"
    assert props.origin("topics") == "mm2.properties:2"
    assert props.origin("last") == "mm2.properties:5"


def test_parse_properties_even_backslashes_do_not_continue_the_line():
    props = properties_file(r"path = C:\\", "next = 1")

    assert props["path"] == "C:\\"
    assert props["next"] == "1"


def test_parse_properties_comment_ending_in_backslash_does_not_swallow_next_line():
    props = properties_file("# a comment \\", "k = v")

    assert dict(props) == {"k": "v"}


def test_parse_properties_escapes_in_keys_and_values_are_decoded():
    props = properties_file(r"key\ with\:colon\=eq = tab\there\u00e9 \\ end", r"nl = a\nb")

    assert props["key with:colon=eq"] == "tab\there\u00e9 \\ end"
    assert props["nl"] == "a\nb"


def test_parse_properties_incomplete_unicode_escape_is_not_decoded_as_a_character():
    # GIVEN a \u escape with only three hex digits at the end of the value
    props = properties_file(r"k = \u00e")

    # THEN it is not silently read as U+000E
    assert "\x0e" not in props["k"]
    assert props["k"] == "u00e"


def test_parse_properties_empty_value_and_key_only_line_give_empty_string():
    props = properties_file("empty =", "bare")

    assert dict(props) == {"empty": "", "bare": ""}


def test_parse_properties_repeated_key_last_definition_wins_with_its_origin():
    props = properties_file("k = 1", "k = 2")

    assert props["k"] == "2"
    assert props.origin("k") == "mm2.properties:2"


# ---------------------------------------------------------------------------------------------------------------
# parse_yaml_text
# ---------------------------------------------------------------------------------------------------------------
def test_parse_yaml_and_mm2_properties_of_the_same_setup_give_the_same_property_map():
    from_yaml = parse_yaml_text(YAML, "srm.yaml")
    from_properties = parse_properties_text(MM2_PROPERTIES, "mm2.properties")

    assert dict(from_yaml) == dict(from_properties)
    cfg_yaml, cfg_props = SrmConfig.from_properties(from_yaml), SrmConfig.from_properties(from_properties)
    assert cfg_yaml.settings("us-west", "us-east") == cfg_props.settings("us-west", "us-east")
    assert cfg_yaml.flows == cfg_props.flows == (("us-west", "us-east"),)


def test_parse_yaml_origins_name_file_and_line_of_each_value():
    props = parse_yaml_text(YAML, "srm.yaml")

    assert props.origin("us-west.bootstrap.servers") == "srm.yaml:3"
    assert props.origin("us-east.bootstrap.servers") == "srm.yaml:6"
    assert props.origin("us-east.producer.linger.ms") == "srm.yaml:9"
    assert props.origin("us-west->us-east.topics") == "srm.yaml:13"
    assert props.origin("replication.factor") == "srm.yaml:15"


def test_parse_yaml_clusters_as_list_and_global_nested_maps_flatten_with_dots():
    props = parse_yaml_text(
        textwrap.dedent(
            """\
            clusters: [a, b]
            a:
              bootstrap.servers: a:9092
            producer:
              acks: all
              compression: {type: zstd}
            """
        )
    )

    assert dict(props) == {
        "clusters": "a, b",
        "a.bootstrap.servers": "a:9092",
        "producer.acks": "all",
        "producer.compression.type": "zstd",
    }


def test_parse_yaml_scalars_bools_numbers_nulls_and_quoted_strings_become_mm2_strings():
    props = parse_yaml_text(
        textwrap.dedent(
            """\
            clusters: {a: , b: ~}
            flows:
              a->b:
                enabled: yes
                sync.group.offsets.enabled: false
                offset.lag.max: 10
                emit.checkpoints.interval.seconds: 0.5
                topics: ["t1", 't2', t3]
                groups: "true"
                metadata: null
            """
        )
    )

    assert dict(props) == {
        "clusters": "a, b",
        "a->b.enabled": "true",
        "a->b.sync.group.offsets.enabled": "false",
        "a->b.offset.lag.max": "10",
        "a->b.emit.checkpoints.interval.seconds": "0.5",
        "a->b.topics": "t1, t2, t3",
        "a->b.groups": "true",
        "a->b.metadata": "",
    }


@pytest.mark.parametrize(
    ("text", "origin", "fragment"),
    [
        ("- a\n- b\n", "f.yaml:1", "top level must be a mapping"),
        ("clusters: [a, b\n", "f.yaml:2", "not valid YAML"),
        ("clusters:\n  a: [x]\n", "f.yaml:2", "clusters.a must be a mapping"),
        ("flows:\n  a->b: true\n", "f.yaml:2", "flows.a->b must be a mapping"),
        ("x:\n  y: [1, {z: 2}]\n", "f.yaml:2", "expected a value or a list"),
    ],
)
def test_parse_yaml_invalid_shapes_raise_config_error_with_origin(text, origin, fragment):
    with pytest.raises(ConfigError) as info:
        parse_yaml_text(text, "f.yaml")

    assert info.value.origin == origin
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"{origin}: ")


def test_parse_yaml_empty_document_gives_empty_map():
    assert dict(parse_yaml_text("", "f.yaml")) == {}


# ---------------------------------------------------------------------------------------------------------------
# resolve and client_properties: the hierarchy, as one table
# ---------------------------------------------------------------------------------------------------------------
# role None: a replication setting through resolve() (cluster = the cluster level, i.e. the target alias);
# otherwise a Kafka client setting through client_properties(). Expected: (value, defining key) or None.
AB = ("a", "b")
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
    (
        {"security.protocol": "SSL", "producer.security.protocol": "SASL_SSL"},
        "a", "producer", None, "security.protocol", ("SASL_SSL", "producer.security.protocol"),
    ),
    (
        {"security.protocol": "SSL", "producer.security.protocol": "SASL_SSL"},
        "a", "consumer", None, "security.protocol", ("SSL", "security.protocol"),
    ),
    # 3. <source|target>.<role>. by the cluster's side in the flow
    (
        {"producer.linger.ms": "5", "target.producer.linger.ms": "10"},
        "b", "producer", AB, "linger.ms", ("10", "target.producer.linger.ms"),
    ),
    (
        {"producer.linger.ms": "5", "target.producer.linger.ms": "10"},
        "a", "producer", AB, "linger.ms", ("5", "producer.linger.ms"),
    ),
    (
        {"producer.linger.ms": "5", "target.producer.linger.ms": "10"},
        "b", "producer", None, "linger.ms", ("5", "producer.linger.ms"),
    ),
    (
        {"source.consumer.fetch.min.bytes": "2"},
        "a", "consumer", AB, "fetch.min.bytes", ("2", "source.consumer.fetch.min.bytes"),
    ),
    # 4. <alias>. (common keys only) beats every global layer
    (
        {"bootstrap.servers": "g:1", "a.bootstrap.servers": "a:1"},
        "a", "admin", None, "bootstrap.servers", ("a:1", "a.bootstrap.servers"),
    ),
    (
        {"bootstrap.servers": "g:1", "a.bootstrap.servers": "a:1"},
        "b", "admin", None, "bootstrap.servers", ("g:1", "bootstrap.servers"),
    ),
    (
        {"target.producer.bootstrap.servers": "t:1", "b.bootstrap.servers": "b:1"},
        "b", "producer", AB, "bootstrap.servers", ("b:1", "b.bootstrap.servers"),
    ),
    ({"a.linger.ms": "99"}, "a", "producer", None, "linger.ms", None),
    ({"ab.bootstrap.servers": "ab:1"}, "a", "admin", None, "bootstrap.servers", None),
    # 5. <alias>.<role>.
    (
        {"b.bootstrap.servers": "b:1", "b.producer.bootstrap.servers": "bp:1"},
        "b", "producer", None, "bootstrap.servers", ("bp:1", "b.producer.bootstrap.servers"),
    ),
    (
        {"b.bootstrap.servers": "b:1", "b.producer.bootstrap.servers": "bp:1"},
        "b", "consumer", None, "bootstrap.servers", ("b:1", "b.bootstrap.servers"),
    ),
    ({"a.producer.linger.ms": "20"}, "a", "consumer", None, "linger.ms", None),
    # 6. <a>-><b>.<role>. only for that flow
    (
        {"b.producer.linger.ms": "20", "a->b.producer.linger.ms": "30"},
        "b", "producer", AB, "linger.ms", ("30", "a->b.producer.linger.ms"),
    ),
    (
        {"b.producer.linger.ms": "20", "a->b.producer.linger.ms": "30"},
        "b", "producer", None, "linger.ms", ("20", "b.producer.linger.ms"),
    ),
    (
        {"b.producer.linger.ms": "20", "a->b.producer.linger.ms": "30"},
        "b", "producer", ("c", "b"), "linger.ms", ("20", "b.producer.linger.ms"),
    ),
    # 7. <a>-><b>.<side>.<role>. beats everything, for its side only
    (
        {"a->b.consumer.fetch.min.bytes": "1", "a->b.source.consumer.fetch.min.bytes": "2"},
        "a", "consumer", AB, "fetch.min.bytes", ("2", "a->b.source.consumer.fetch.min.bytes"),
    ),
    (
        {"a->b.consumer.fetch.min.bytes": "1", "a->b.target.consumer.fetch.min.bytes": "3"},
        "a", "consumer", AB, "fetch.min.bytes", ("1", "a->b.consumer.fetch.min.bytes"),
    ),
    (
        {
            "bootstrap.servers": "1",
            "admin.bootstrap.servers": "2",
            "target.admin.bootstrap.servers": "3",
            "b.bootstrap.servers": "4",
            "b.admin.bootstrap.servers": "5",
            "a->b.admin.bootstrap.servers": "6",
            "a->b.target.admin.bootstrap.servers": "7",
        },
        "b", "admin", AB, "bootstrap.servers", ("7", "a->b.target.admin.bootstrap.servers"),
    ),
]  # fmt: skip


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


# ---------------------------------------------------------------------------------------------------------------
# SrmConfig.from_properties: validation names key, value and origin
# ---------------------------------------------------------------------------------------------------------------
def test_config_valid_file_loads_clusters_flows_and_no_warnings():
    cfg = load(BASE, "b->a.enabled = false")

    assert cfg.clusters == ("a", "b")
    assert cfg.flows == (("a", "b"), ("b", "a"))
    assert cfg.enabled_flows() == [("a", "b")]
    assert cfg.bootstrap_servers("a") == "a:9092"
    assert cfg.warnings == ()


def test_config_unknown_alias_in_flow_key_names_key_alias_and_origin():
    error = config_error(BASE, "a->c.enabled = true")

    assert error.key == "a->c.enabled"
    assert error.origin == "mm2.properties:5"
    assert "'c'" in str(error)
    assert "clusters = a, b" in str(error)


def test_config_typo_in_alias_prefix_is_an_error_with_suggestion():
    props = {"clusters": "us-west, us-east", "us-west.bootstrap.servers": "w:1", "us-east.bootstrap.servers": "e:1"}

    error = config_error(props, "us-wst.bootstrap.servers = w:2")

    assert error.key == "us-wst.bootstrap.servers"
    assert error.origin == "mm2.properties:4"
    assert "'us-wst'" in str(error)
    assert "did you mean 'us-west'?" in str(error)


@pytest.mark.parametrize(
    "key",
    ["topics", "topics.exclude", "groups", "groups.exclude", "b.topics", "b.groups.exclude", "a->b.topics.exclude",
     "a->b.groups"],
)  # fmt: skip
def test_config_bad_regex_at_any_level_names_key_value_and_origin(key):
    error = config_error(BASE, f"{key} = ok.*, bad[")

    assert error.key == key
    assert error.origin == "mm2.properties:5"
    assert str(error).startswith(f"mm2.properties:5: {key}='ok.*, bad[': ")
    assert "'bad['" in str(error)


def test_config_same_cluster_on_both_sides_is_an_error():
    error = config_error(BASE, "a->a.enabled = true")

    assert error.key == "a->a.enabled"
    assert error.origin == "mm2.properties:5"
    assert "two different clusters" in str(error)


def test_config_enabled_flow_without_bootstrap_servers_names_the_missing_key():
    props = {"clusters": "a, b", "a.bootstrap.servers": "a:9092", "a->b.enabled": "true"}

    error = config_error(props)

    assert error.key == "b.bootstrap.servers"
    assert error.origin == "mm2.properties"


def test_config_disabled_flow_needs_no_bootstrap_servers():
    cfg = load({"clusters": "a, b", "a->b.enabled": "false"})

    assert cfg.enabled_flows() == []
    assert cfg.bootstrap_servers("b") is None


@pytest.mark.parametrize(
    ("line", "key", "value", "fragment"),
    [
        ("a->b.emit.checkpoints.interval.seconds = soon", "a->b.emit.checkpoints.interval.seconds", "soon", "number"),
        ("b.refresh.topics.interval.seconds = 0", "b.refresh.topics.interval.seconds", "0", "greater than 0"),
        ("event.source.batch.size = 10001", "event.source.batch.size", "10001", "less than or equal to 10000"),
        ("a->b.event.source.batch.size = 0", "a->b.event.source.batch.size", "0", "greater than or equal to 1"),
        ("offset.lag.max = lots", "offset.lag.max", "lots", "integer"),
        ("a->b.enabled = maybe", "a->b.enabled", "maybe", "boolean"),
    ],
)
def test_config_invalid_setting_value_names_key_value_and_origin(line, key, value, fragment):
    error = config_error(BASE, line)

    assert error.key == key
    assert error.origin == "mm2.properties:5"
    assert str(error).startswith(f"mm2.properties:5: {key}={value!r}: ")
    assert fragment in str(error)


def test_config_batch_size_at_the_limits_is_accepted():
    low = load(BASE, "event.source.batch.size = 1")
    high = load(BASE, "event.source.batch.size = 10000")

    assert low.settings("a", "b").event_source_batch_size == 1
    assert high.settings("a", "b").event_source_batch_size == 10_000


@pytest.mark.parametrize("aliases", ["a, us.west", "a, a->b", "a, -a", "a, b c", "a, a"])
def test_config_invalid_or_duplicate_alias_is_an_error_at_the_clusters_line(aliases):
    error = config_error({"clusters": aliases})

    assert error.key == "clusters"
    assert error.origin == "mm2.properties:1"


def test_config_missing_or_empty_clusters_is_an_error():
    missing = config_error({"a.bootstrap.servers": "x"})
    empty = config_error({"clusters": ""})

    assert missing.key == empty.key == "clusters"
    assert empty.origin == "mm2.properties:1"


def test_config_unknown_policy_class_names_the_defining_key():
    error = config_error(BASE, "b.replication.policy.class = com.example.Nope")

    assert error.key == "b.replication.policy.class"
    assert error.origin == "mm2.properties:5"


@pytest.mark.parametrize(
    ("line", "suggestion"),
    [
        ("emit.checkpoint.interval.seconds = 5", "did you mean 'emit.checkpoints.interval.seconds'?"),
        ("a->b.topic = orders", "did you mean 'topics'?"),
        ("b.sync.group.offset.enabled = true", "did you mean 'sync.group.offsets.enabled'?"),
        ("completely.unrelated.thing = 1", None),
    ],
)
def test_config_unknown_key_is_a_warning_with_suggestion_for_near_miss(line, suggestion):
    cfg = load(BASE, line)

    assert len(cfg.warnings) == 1
    warning = cfg.warnings[0]
    assert warning.startswith("mm2.properties:5: " + line.split(" = ")[0] + ": ")
    if suggestion:
        assert suggestion in warning
    else:
        assert "did you mean" not in warning


def test_config_mm2_and_connect_keys_are_accepted_silently():
    cfg = load(
        BASE,
        "tasks.max = 4",
        "key.converter = org.apache.kafka.connect.converters.ByteArrayConverter",
        "offset.storage.replication.factor = 1",
        "a.config.storage.replication.factor = 1",
        "a->b.tasks.max = 2",
        "b.consumer.max.poll.records = 500",
        "a->b.source.admin.request.timeout.ms = 1000",
        "replication.policy.separator = .",
    )

    assert cfg.warnings == ()


def test_config_settings_defaults_are_mm2_defaults():
    s = load(BASE).settings("a", "b")

    assert s.enabled is True
    assert s.offset_lag_max == 100
    assert s.emit_checkpoints_interval_seconds == 60
    assert s.sync_group_offsets_interval_seconds == 60
    assert s.refresh_topics_interval_seconds == 600
    assert s.refresh_groups_interval_seconds == 600
    assert s.sync_topic_configs_interval_seconds == 600
    assert s.sync_topic_acls_interval_seconds == 600
    assert s.emit_heartbeats_interval_seconds == 1
    assert s.replication_factor == 2
    assert s.sync_group_offsets_enabled is True  # DESIGN.md: true here (MM2's default is false)
    assert parse_list(s.topics_exclude) == (r".*[\-\.]internal", r".*\.replica", "__.*")
    assert parse_list(s.groups_exclude) == ("console-consumer-.*", "connect-.*", "__.*")
    excluded = [
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    ]
    exclude = s.config_exclude()
    assert all(exclude.matches(name) for name in excluded)
    assert len(exclude.patterns) == len(excluded)
    assert not exclude.matches("retention.ms")
    assert not exclude.matches("minXinsync.replicas")  # the dots are literal


def test_config_settings_flow_level_overrides_cluster_and_global():
    cfg = load(BASE, "offset.lag.max = 1", "b.offset.lag.max = 2", "a->b.offset.lag.max = 3", "b->a.enabled = false")

    assert cfg.settings("a", "b").offset_lag_max == 3
    assert cfg.settings("b", "a").offset_lag_max == 1  # cluster level is the target: a, which sets nothing


def test_config_settings_of_unknown_flow_raises():
    cfg = load(BASE)

    with pytest.raises(ConfigError, match="unknown cluster alias 'z'"):
        cfg.settings("a", "z")


def test_config_redacted_masks_secret_values_at_every_level():
    cfg = load(
        BASE,
        "sasl.jaas.config = org.apache.kafka.common.security.scram.ScramLoginModule required password=secret-1;",
        "a.ssl.truststore.password = secret-2",
        "b.producer.ssl.key.password = secret-3",
        "a->b.source.admin.sasl.password = secret-4",
        "b.ssl.keystore.key = -----BEGIN PRIVATE KEY-----secret-5",
        "b.sasl.mechanism = SCRAM-SHA-512",
    )

    shown = cfg.redacted()

    assert not any("secret" in v for v in shown.values())
    assert shown["a.ssl.truststore.password"] == "********"
    assert shown["b.sasl.mechanism"] == "SCRAM-SHA-512"
    assert shown["a.bootstrap.servers"] == "a:9092"
    assert set(shown) == set(cfg.properties)


def _with_metrics_interval(value: str | None) -> SrmConfig:
    values = {"clusters": "a, b", "a.bootstrap.servers": "x:1", "b.bootstrap.servers": "y:1", "a->b.enabled": "true"}
    if value is not None:
        values["metrics.aggregation.interval.seconds"] = value
    return SrmConfig.from_properties(Properties.of(values, source="srm.properties"))


def test_metrics_aggregation_interval_is_a_global_setting_of_60_seconds_by_default():
    assert _with_metrics_interval(None).metrics_aggregation_interval_seconds() == 60
    config = _with_metrics_interval("15")
    assert config.metrics_aggregation_interval_seconds() == 15
    assert not config.warnings


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan"])
def test_a_bad_metrics_aggregation_interval_stops_with_one_line(value: str):
    with pytest.raises(ConfigError, match=r"metrics\.aggregation\.interval\.seconds: expected a number of seconds > 0"):
        _with_metrics_interval(value)
