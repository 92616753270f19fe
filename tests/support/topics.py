"""Topic config helpers: what is set on a topic itself, and incremental changes to it."""

from __future__ import annotations

from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

from tests.support.kafka import admin


def topic_overrides(bootstrap: str, topic: str) -> dict[str, str]:
    """The configs set on the topic itself (not defaults, not broker-wide)."""
    client = admin(bootstrap)  # the client must outlive its future
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = client.describe_configs([resource])[resource].result(30)
    return {n: e.value for n, e in entries.items() if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def alter_topic(bootstrap: str, topic: str, set_: dict[str, str], delete: tuple[str, ...] = ()) -> None:
    """Incremental alter-configs: SET ``set_``, DELETE ``delete``."""
    ops = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in set_.items()]
    ops += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in delete]
    client = admin(bootstrap)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=ops)
    client.incremental_alter_configs([resource])[resource].result(30)
