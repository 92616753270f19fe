"""The settings of one replication: every MM2 setting SRM honours, with its default and its bounds.

A field's MM2 key is its name with dots (``refresh_topics_enabled`` → ``refresh.topics.enabled``); only the keys
MM2 spells with a hyphen (``offset-syncs``) name theirs explicitly. Which level of the configuration a setting comes
from is :mod:`srm.config.settings`'s business: this model sees one resolved value per key.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from srm.config.parsing import as_text
from srm.core.filters import (
    DEFAULT_CONFIG_PROPERTIES_EXCLUDE,
    DEFAULT_GROUPS,
    DEFAULT_GROUPS_EXCLUDE,
    DEFAULT_TOPICS,
    DEFAULT_TOPICS_EXCLUDE,
    GroupFilter,
    PatternList,
    ReplicateDecision,
    TopicFilter,
)
from srm.mm2.policy import ReplicationPolicy

__all__ = ["SETTING_KEYS", "FlowSettings"]

_POLLERS_MIN = "event.source.provisioned.pollers.min"
_POLLERS_MAX = "event.source.provisioned.pollers.max"

# How often a periodic task runs.
Seconds = Annotated[float, Field(gt=0)]
# Kafka's replication factor of a topic SRM creates; -1: the broker's default.
ReplicationFactor = Annotated[int, Field(ge=-1)]


def _mm2_key(field_name: str) -> str:
    return field_name.replace("_", ".")


class _SettingError(ValueError):
    """A check across settings, failed: ``key`` is the setting the message is about (pydantic gives it no field)."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class FlowSettings(BaseModel):
    """Every replication setting we honour, by MM2 name, resolved for one ``source->target``."""

    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid", alias_generator=_mm2_key)

    enabled: bool = False
    topics: str = DEFAULT_TOPICS
    topics_exclude: str = DEFAULT_TOPICS_EXCLUDE
    groups: str = DEFAULT_GROUPS
    groups_exclude: str = DEFAULT_GROUPS_EXCLUDE
    replication_policy_class: str = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy"
    replication_policy_separator: str = Field(".", min_length=1)
    replication_factor: ReplicationFactor = 2
    heartbeats_topic_replication_factor: ReplicationFactor = 3
    checkpoints_topic_replication_factor: ReplicationFactor = 3
    offset_syncs_topic_replication_factor: ReplicationFactor = Field(3, alias="offset-syncs.topic.replication.factor")
    offset_syncs_topic_location: Literal["source", "target"] = Field("source", alias="offset-syncs.topic.location")
    emit_offset_syncs_enabled: bool = Field(True, alias="emit.offset-syncs.enabled")
    offset_lag_max: int = Field(100, ge=0)
    refresh_topics_enabled: bool = True
    refresh_topics_interval_seconds: Seconds = 600
    refresh_groups_enabled: bool = True
    refresh_groups_interval_seconds: Seconds = 600
    emit_checkpoints_enabled: bool = True
    emit_checkpoints_interval_seconds: Seconds = 60
    sync_group_offsets_enabled: bool = True
    sync_group_offsets_interval_seconds: Seconds = 60
    emit_heartbeats_enabled: bool = True
    emit_heartbeats_interval_seconds: Seconds = 1
    heartbeats_replication_enabled: bool = True
    sync_topic_configs_enabled: bool = True
    sync_topic_configs_interval_seconds: Seconds = 600
    sync_topic_acls_enabled: bool = True
    sync_topic_acls_interval_seconds: Seconds = 600
    config_properties_exclude: str = DEFAULT_CONFIG_PROPERTIES_EXCLUDE
    # The MSK event source mapping of each replicated topic (and its local emulation). Not Lambda's defaults (100
    # records, MSK's 500 ms window): a batch of at most 10,000 records (an invocation's fixed cost spread over more,
    # the 6 MB payload still bounding it) and no window of srm's own, so `srm run` hands records over as soon as they
    # are fetched and batches only what arrives while the previous batch is replicated; on AWS a window of 0 keeps
    # MSK's own 500 ms.
    event_source_batch_size: int = Field(10_000, ge=1, le=10_000)
    event_source_batching_window_ms: int = Field(0, ge=0, le=300_000)
    event_source_max_payload_bytes: int = Field(6 * 1024 * 1024, ge=64 * 1024, le=6 * 1024 * 1024)
    # What a mapping does with a batch the mirror keeps failing: ``retry`` retries it until it succeeds (the
    # partition waits, nothing is skipped); ``dead-letter`` hands it to the on-failure destination after
    # ``event.source.max.retries`` retries (-1: Lambda's bound with a destination, 10) and moves on.
    event_source_on_failure: Literal["retry", "dead-letter"] = "retry"
    event_source_max_retries: int = Field(-1, ge=-1, le=10_000)
    # Lambda's provisioned mode: each mapping keeps min..max event pollers of its own (Lambda's ranges for Kafka);
    # neither set: on-demand polling. Local mappings have no pollers and ignore both.
    event_source_provisioned_pollers_min: int | None = Field(None, ge=1, le=200)
    event_source_provisioned_pollers_max: int | None = Field(None, ge=1, le=2000)
    # How long the mirror waits for the target to acknowledge a batch before failing it (so it is retried).
    mirror_delivery_timeout_ms: int = Field(60_000, ge=1_000)
    # Kafka Connect's worker key, as MM2's dedicated mode reads it: "enabled" makes the mirror transactional
    # (srm.replication.exactly_once); "preparing" (Connect's rolling-upgrade step) writes as "disabled" does.
    exactly_once_source_support: Literal["disabled", "preparing", "enabled"] = "disabled"
    # Kafka Connect's key: ``none`` stops a partition on a record the target refuses (it is retried), ``all`` sends
    # such a record to the dead-letter destination and goes on (srm.replication.dead_letters).
    errors_tolerance: Literal["none", "all"] = "none"
    # Records purged on the source before they were replicated stop the partition (its batch fails and is retried)
    # instead of being reported and passed over. Named after Spark's Kafka source option: MM2 has no such key.
    fail_on_data_loss: bool = False
    # A topic one of whose partitions has lagged this long without its committed offset moving is stalled: the
    # checkpoint function, which samples it, records the stall naming the topic (srm status) and counts it in
    # ``StalledTopics``, the metric of the TopicStalled alarm. Five minutes: a flowing partition commits every batch.
    topic_stalled_threshold_seconds: Seconds = 300
    # Continuous verification: every this many seconds the scheduled function (srm run's scheduler) compares each
    # partition's newly replicated records with the source (srm-control verify, resumed where it stopped); 0: off.
    verify_interval_seconds: float = Field(0, ge=0)

    @field_validator("topics", "topics_exclude", "groups", "groups_exclude", "config_properties_exclude", mode="before")
    @classmethod
    def _patterns_valid(cls, value: Any, info: ValidationInfo) -> str:
        text = as_text(value)
        field_info = cls.model_fields[info.field_name or ""]
        PatternList.parse(text, field_info.alias or info.field_name or "pattern")  # FilterError names the regex
        return text

    @field_validator("exactly_once_source_support", mode="before")
    @classmethod
    def _eos_value(cls, value: Any) -> str:
        text = as_text(value).strip().lower()  # Connect accepts any case
        if text not in ("disabled", "preparing", "enabled"):
            raise ValueError("expected enabled, disabled or preparing (Kafka Connect's exactly.once.source.support)")
        return text

    @property
    def exactly_once(self) -> bool:
        return self.exactly_once_source_support == "enabled"

    @model_validator(mode="after")
    def _pollers_together(self, info: ValidationInfo) -> FlowSettings:
        low, high = self.event_source_provisioned_pollers_min, self.event_source_provisioned_pollers_max
        # One level may set one of the pair and a more specific level the other: only a flow's settings are whole.
        whole = not (info.context or {}).get("one_level")
        if whole and (low is None) != (high is None):
            given, missing = (_POLLERS_MIN, _POLLERS_MAX) if high is None else (_POLLERS_MAX, _POLLERS_MIN)
            raise _SettingError(given, f"provisioned mode needs {missing} too (set both, or neither for on-demand)")
        if low is not None and high is not None and low > high:
            raise _SettingError(_POLLERS_MIN, f"more than {_POLLERS_MAX} ({high})")
        return self

    @property
    def provisioned_pollers(self) -> tuple[int, int] | None:
        """(minimum, maximum) event pollers of each mapping in provisioned mode; None: on-demand."""
        low, high = self.event_source_provisioned_pollers_min, self.event_source_provisioned_pollers_max
        return None if low is None or high is None else (low, high)

    @field_validator("errors_tolerance", mode="before")
    @classmethod
    def _tolerance_any_case(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value  # as Connect reads it

    @classmethod
    def keys(cls) -> frozenset[str]:
        return frozenset(f.alias or name for name, f in cls.model_fields.items())

    def topic_filter(self) -> TopicFilter:
        return TopicFilter.of(self.topics, self.topics_exclude)

    def replicate_decision(self, target: str, policy: ReplicationPolicy) -> ReplicateDecision:
        return ReplicateDecision(target, policy, self.topic_filter(), self.heartbeats_replication_enabled)

    def group_filter(self) -> GroupFilter:
        return GroupFilter.of(self.groups, self.groups_exclude)

    def config_exclude(self) -> PatternList:
        return PatternList.parse(self.config_properties_exclude, "config.properties.exclude")


SETTING_KEYS = FlowSettings.keys()
