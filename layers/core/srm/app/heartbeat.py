"""The heartbeat function's wiring: its context for this container's flow, if the flow emits heartbeats."""

from __future__ import annotations

from srm.app.base import AppBase
from srm.config.keys import HEARTBEATS_CLIENT
from srm.flow import Flow
from srm.replication.heartbeat import HeartbeatContext

__all__ = ["HeartbeatWiring"]


class HeartbeatWiring(AppBase):
    def heartbeat_context(self) -> HeartbeatContext | None:
        """The heartbeat function's dependencies for this container's flow; None when the flow emits none (disabled,
        or ``emit.heartbeats.enabled=false``)."""
        flow, config, settings, policy = self._bind()
        source, target = flow
        if not settings.enabled or not settings.emit_heartbeats_enabled:
            return None
        topic = policy.heartbeats_topic()
        self.ensure_internal_topic(config, source, topic, settings.heartbeats_topic_replication_factor)
        producer = self.kafka.producer(
            config,
            source,
            Flow(source, target),
            delivery_timeout_ms=settings.mirror_delivery_timeout_ms,
            tag="heartbeats",
            purpose=HEARTBEATS_CLIENT,  # the heartbeat connector's client overrides, with connector definitions
        )
        return HeartbeatContext(source, target, topic, producer, settings.mirror_delivery_timeout_ms / 1000.0)
