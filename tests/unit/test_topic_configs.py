"""srm.core.plans: which topic configs are copied, the incremental alter-configs diff, the plan."""

from __future__ import annotations

from confluent_kafka.admin import ConfigEntry, ConfigSource

from srm.config.settings import FlowSettings
from srm.core.filters import PatternList
from srm.core.plans import TopicInfo, config_changes, explicit_configs, plan_topics, replicable_configs
from srm.mm2.policy import DefaultReplicationPolicy

EXCLUDE = FlowSettings().config_exclude()  # MM2's config.properties.exclude
TOPIC, DEFAULT, BROKER = (
    ConfigSource.DYNAMIC_TOPIC_CONFIG,
    ConfigSource.DEFAULT_CONFIG,
    ConfigSource.STATIC_BROKER_CONFIG,
)


def entries(*specs: tuple) -> dict[str, ConfigEntry]:
    """``(name, value, source[, flag…])`` with flags ``default``, ``sensitive``, ``read_only``."""
    out = {}
    for name, value, source, *flags in specs:
        out[name] = ConfigEntry(
            name,
            value,
            source=source,
            is_default="default" in flags,
            is_sensitive="sensitive" in flags,
            is_read_only="read_only" in flags,
        )
    return out


def test_replicable_configs_only_explicit_non_excluded_non_secret() -> None:
    source = entries(
        ("retention.ms", "3600000", TOPIC),
        ("cleanup.policy", "compact", TOPIC),
        ("min.insync.replicas", "2", TOPIC),  # excluded by MM2's default list
        ("unclean.leader.election.enable", "true", TOPIC),  # excluded
        ("segment.bytes", "1073741824", DEFAULT, "default"),  # a default: not copied
        ("max.message.bytes", "2000000", BROKER),  # broker-wide: not the topic's own
        ("some.secret", "x", TOPIC, "sensitive"),
        ("read.only", "x", TOPIC, "read_only"),
    )
    assert replicable_configs(source, EXCLUDE) == {"retention.ms": "3600000", "cleanup.policy": "compact"}


def test_explicit_configs_are_the_topic_overrides() -> None:
    target = entries(("retention.ms", "1", TOPIC), ("segment.bytes", "2", DEFAULT, "default"))
    assert explicit_configs(target) == {"retention.ms": "1"}


def test_config_changes_set_changed_and_missing_in_sorted_order() -> None:
    changes = config_changes(
        wanted={"retention.ms": "2", "cleanup.policy": "compact", "segment.ms": "9"},
        present={"retention.ms": "1", "segment.ms": "9"},
        set_before=set(),
        exclude=EXCLUDE,
    )
    assert dict(changes.set) == {"cleanup.policy": "compact", "retention.ms": "2"}
    assert list(changes.set) == ["cleanup.policy", "retention.ms"] and changes.delete == frozenset()


def test_config_changes_delete_only_what_srm_set_and_source_dropped() -> None:
    # GIVEN srm had set retention.ms and segment.ms; the source now sets neither; the target also has its own
    # max.message.bytes (never set by srm) and srm's segment.ms was already removed there
    changes = config_changes(
        wanted={},
        present={"retention.ms": "5", "max.message.bytes": "9"},
        set_before={"retention.ms", "segment.ms"},
        exclude=EXCLUDE,
    )
    assert dict(changes.set) == {} and changes.delete == {"retention.ms"}


def test_config_changes_newly_excluded_config_is_left_alone() -> None:
    # GIVEN srm had set min.insync.replicas (before it was excluded)
    changes = config_changes({}, {"min.insync.replicas": "2"}, {"min.insync.replicas"}, EXCLUDE)
    assert not changes


def test_config_changes_in_step_is_empty() -> None:
    assert not config_changes({"retention.ms": "1"}, {"retention.ms": "1"}, {"retention.ms"}, PatternList(()))


def test_plan_topics_records_source_topics_and_refusals() -> None:
    # GIVEN two topics, one refused by the loop guard, one internal
    topics = {n: TopicInfo(n, 2) for n in ("orders", "back", "__consumer_offsets")}
    plan = plan_topics(
        topics,
        source="a",
        policy=DefaultReplicationPolicy(),
        replicate=FlowSettings().replicate_decision("b", DefaultReplicationPolicy()),
        refuse={"back": "came from b", "elsewhere": "not a source topic"},
    )
    assert plan.replicated == {"orders": ("a.orders", 2)}
    assert plan.refused == {"back": "came from b"}
    assert plan.source_topics == {"orders", "back", "__consumer_offsets"}
