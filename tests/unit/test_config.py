"""srm.config.settings.SrmConfig.from_properties: validation naming key, value and origin; defaults; redaction
(parsing: test_config_parsing.py; the property hierarchy: test_config_hierarchy.py)."""

from __future__ import annotations

import pytest

from srm.config.parsing import Properties
from srm.config.settings import SrmConfig
from srm.core.filters import parse_list
from srm.errors import ConfigError
from tests.unit.config_files import BASE, config_error, load


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


# a line with a bad value -> what its error says of the value
INVALID_VALUES = {
    "a->b.emit.checkpoints.interval.seconds = soon": "number",
    "b.refresh.topics.interval.seconds = 0": "greater than 0",
    "event.source.batch.size = 10001": "less than or equal to 10000",
    "a->b.event.source.batch.size = 0": "greater than or equal to 1",
    "offset.lag.max = lots": "integer",
    "a->b.enabled = maybe": "boolean",
}


@pytest.mark.parametrize(("line", "fragment"), INVALID_VALUES.items())
def test_config_invalid_setting_value_names_key_value_and_origin(line, fragment):
    key, value = line.split(" = ")

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


def test_config_mm2_and_connect_keys_are_accepted_and_listed_with_why():
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
        "errors.log.enable = true",
        "a.topic.filter.class = com.example.Filter",
    )

    assert cfg.warnings == ()
    ignored = dict(cfg.ignored)
    assert list(ignored) == [
        "tasks.max",
        "key.converter",
        "offset.storage.replication.factor",
        "a.config.storage.replication.factor",
        "a->b.tasks.max",
        "errors.log.enable",
        "a.topic.filter.class",
    ]
    assert "no Connect workers" in ignored["tasks.max"]
    assert "errors.tolerance" in ignored["errors.log.enable"]
    assert "topics, groups" in ignored["a.topic.filter.class"]


@pytest.mark.parametrize(
    ("line", "suggestion"),
    [
        ("errors.tolerence = all", "errors.tolerance"),
        ("a->b.errors.tolerence = all", "errors.tolerance"),
        ("exactly.once.support = required", "exactly.once.source.support"),
        ("b.exactly.once.support = required", "exactly.once.source.support"),
    ],
)
def test_config_near_misses_of_settings_under_connect_prefixes_are_warned_not_ignored(line, suggestion):
    cfg = load(BASE, line)

    assert cfg.ignored == ()
    assert len(cfg.warnings) == 1 and f"did you mean {suggestion!r}?" in cfg.warnings[0]


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
