"""The checkpoint function's wiring: its context for this container's flow."""

from __future__ import annotations

from srm.app.base import AppBase
from srm.core.loops import mirror_skips
from srm.kafka.clients import consumer_config
from srm.kafka.readers import age_probe, quiet_probe
from srm.replication.checkpoint import CheckpointContext

__all__ = ["CheckpointWiring"]


class CheckpointWiring(AppBase):
    def checkpoint_context(self) -> CheckpointContext:
        """The checkpoint function's dependencies for this container's flow."""
        bound = self._bind()
        flow, config, settings, policy = bound
        source, target = flow
        self.ensure_internal_topic(
            config, target, policy.checkpoints_topic(source), settings.checkpoints_topic_replication_factor
        )
        probe_config = consumer_config(
            config, source, flow, group_id="srm-checkpoint-probe", resolver=self.kafka.resolver
        )
        back_probe_config = consumer_config(
            config, target, flow, group_id="srm-checkpoint-probe", resolver=self.kafka.resolver
        )
        opposite_skips = mirror_skips(target, source, config.policy(target, source))
        return CheckpointContext(
            **bound.context_fields(),
            source_admin=self.kafka.admin(config, source, flow),
            target_admin=self.kafka.admin(config, target, flow),
            producer=self.kafka.producer(
                config, target, flow, delivery_timeout_ms=settings.mirror_delivery_timeout_ms, tag="checkpoints"
            ),
            state=self.state,
            quiet=quiet_probe(probe_config, skips=mirror_skips(source, target, policy)),
            # a failback's upstream topic is on the target, replicated by the opposite flow, which skips its own
            quiet_back=quiet_probe(back_probe_config, skips=opposite_skips),
            first_timestamps=age_probe(probe_config),
            metrics=self.metrics,
            emitter=self.env.node_id or self.env.function_name or "",
        )
